"""The privacy audit (issue 27, lab/experiments/privacy_audit.py): its quick plan runs in seconds and every
target points the right way: each shipped mechanism's ε lower bound at or below its claim, each broken
variant's above, and the Gaussian step's bound a useful share of its claim."""

from __future__ import annotations

import math

import numpy as np

from lab.experiments.privacy_audit_stats import epsilon_lower_bound, log_ratio_cap
from lab.runner import run


def test_the_quick_audit_keeps_every_sound_mechanism_below_its_claim_and_catches_every_broken_one(tmp_path):
    result = run("privacy-audit", quick=True, out_dir=tmp_path, progress=False)
    rows = {r["mechanism"]: r for r in result.summary["rows"]}
    assert {r["kind"] for r in rows.values()} == {"sound", "broken"} and len(rows) == 8
    for name, r in rows.items():
        if r["kind"] == "sound":
            assert r["epsilon_lower"] <= r["claimed"], name
        else:
            assert r["epsilon_lower"] > r["claimed"], name
    assert result.summary["all_hold"] and result.summary["gaussian_fraction_of_claim"] > 0.4
    assert {"Gaussian DP-SGD step", "Gaussian step, noise halved (charged at σ)"} <= set(rows)
    page = (tmp_path / "privacy-audit-quick.md").read_text()
    assert "✗" not in page and (tmp_path / "privacy-audit-quick.png").stat().st_size > 0
    assert len(result.claims) == 9  # the results-table rows: one a mechanism, and the power


def test_the_bound_is_valid_and_tight_where_it_can_be():
    """A Gaussian shift μ = 1 is 1-GDP: the bound stays below its ε at δ (≈ 6 at 1e-8) but shows several
    units; a perfect test reaches exactly the cap its runs allow; identical arms give 0."""
    rng = np.random.default_rng(0)
    shifted = epsilon_lower_bound(rng.normal(1, 1, 200_000), rng.normal(0, 1, 200_000), delta=1e-8)
    assert 2.0 < shifted["epsilon_lower"] < 6.0
    perfect = epsilon_lower_bound(np.ones(500), np.zeros(500), delta=0.0)
    assert math.isclose(perfect["epsilon_lower"], log_ratio_cap(400), rel_tol=1e-9)
    same = epsilon_lower_bound(rng.normal(0, 1, 20_000), rng.normal(0, 1, 20_000), delta=1e-8)
    assert same["epsilon_lower"] < 0.3
