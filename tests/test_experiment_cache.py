"""The experiments' run cache and censored medians: what makes a results table trustworthy."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from lab import cache
from lab.experiments import stats
from lab.experiments.protocol import Job


def test_a_missed_run_counts_as_the_cap_and_marks_the_median():
    # 3 of 5 seeds reached; dropping the misses would report a median of 500
    summary = stats.censored_range([400, 500, None, 600, None], 3000)
    assert summary["per_seed"] == [400, 500, 3000, 600, 3000]
    assert summary["median"] == 600 and summary["censored"] == 2
    assert summary["median_mark"] == ""  # the censored runs sit above the median: it is exact
    bound = stats.censored_range([None, None, 500], 3000)
    assert bound["median"] == 3000 and bound["median_mark"] == "≥"


def test_a_saving_against_a_censored_run_is_computed_and_marked():
    savings = stats.paired([500, 1000, None], [400, None, 800], 3000, 3000, stats.saving)
    assert savings["per_seed"] == pytest.approx([20.0, -200.0, 100 * (3000 - 800) / 3000])
    assert savings["per_seed_censored"] == [False, True, True]
    assert savings["median_mark"] == "~"


def test_cache_key_covers_every_parameter_and_the_code(tmp_path, monkeypatch):
    job = Job("ssgd", 0.2, 1, "none")
    cache.store(tmp_path, job, {"updates_to_80": 60})
    assert cache.load(tmp_path, job)["updates_to_80"] == 60
    assert cache.load(tmp_path, job)["code_version"] == cache.code_version()
    # the variant's parameters (here SSGD's round size) are part of the key, not only the label
    assert replace(job, ssgd_round=5).key() == job.key()
    assert cache.load(tmp_path, replace(job, ssgd_round=5)) is None
    assert cache.load(tmp_path, replace(job, batch_std=1.0)) is None
    # another code version is another key
    monkeypatch.setattr(cache, "code_version", lambda: "other")
    assert cache.load(tmp_path, job) is None


def test_fresh_ignores_what_earlier_invocations_cached(tmp_path, monkeypatch):
    job = Job("dynsgd", 0.1, 2, "D1")
    cache.store(tmp_path, job, {"updates_to_80": 1})
    old = time.time() - 10
    os.utime(cache.path_for(tmp_path, job), (old, old))
    monkeypatch.delenv(cache.FRESH_ENV, raising=False)
    assert cache.load(tmp_path, job) is not None
    cache.start_fresh()
    assert cache.load(tmp_path, job) is None
    cache.store(tmp_path, job, {"updates_to_80": 2})  # written by this invocation: reused
    assert cache.load(tmp_path, job)["updates_to_80"] == 2
    monkeypatch.delenv(cache.FRESH_ENV)


def test_a_job_without_dp_keeps_its_spec_and_label():
    # the dp field came later: jobs without it must hash as before, or every cached run would be lost
    job = Job("adasgd", 0.2, 1, "D2", "iid")
    assert "dp" not in job.spec()["job"] and job.key() == "adasgd_lr0.2_s1_D2_iid_c3000"
    private = replace(job, dp=(1.0, 2.5))
    assert private.spec()["job"]["dp"] == (1.0, 2.5) and private.key().endswith("_dp2.5")
    assert cache.path_for(Path("x"), private) != cache.path_for(Path("x"), job)


def test_the_code_version_covers_the_code_it_names(tmp_path, monkeypatch):
    """Every CODE path exists under the checkout, and a change to one changes the version (issue 28 found
    the key hashing nothing but the libraries: the root was one directory too high)."""
    from lab import cache

    assert all((cache.ROOT / top).exists() for top in cache.CODE)
    before = cache.code_version()
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "x.py").write_text("a = 1\n")
    monkeypatch.setattr(cache, "ROOT", tmp_path)
    monkeypatch.setattr(cache, "CODE", ("server",))
    cache.code_version.cache_clear()
    first = cache.code_version()
    (tmp_path / "server" / "x.py").write_text("a = 2\n")
    cache.code_version.cache_clear()
    assert cache.code_version() != first != before
    cache.code_version.cache_clear()
