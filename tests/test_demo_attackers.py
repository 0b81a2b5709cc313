"""`fleet demo --attackers N --attack NAME --kardam`: the first N phones attack, the coordinator filters."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.demo import DemoConfig, _server_env, worker_configs


def test_the_first_phones_attack_and_the_rest_are_honest(tmp_path):
    cfg = DemoConfig(devices=5, attackers=2, attack="gaussian", workdir=tmp_path)
    shards = [Path(f"device_{i}.npz") for i in range(5)]
    configs = worker_configs(cfg, shards, "http://127.0.0.1:1", "key")
    assert [c.attack for c in configs] == ["gaussian", "gaussian", None, None, None]
    assert [c.data for c in configs] == shards and len({c.seed for c in configs}) == 5
    assert all(c.attack is None for c in worker_configs(DemoConfig(devices=5), shards, "http://x", "key"))


def test_kardam_is_switched_on_only_when_asked(tmp_path):
    assert _server_env(DemoConfig(kardam=True, workdir=tmp_path), "k", "a", "p")["FLEET_KARDAM"] == "true"
    assert "FLEET_KARDAM" not in _server_env(DemoConfig(workdir=tmp_path), "k", "a", "p")


@pytest.mark.parametrize("changes", [{"attackers": 21}, {"attackers": -1}, {"attack": "bit-flip"}])
def test_a_demo_with_impossible_attackers_is_refused(changes):
    with pytest.raises(ValueError):
        DemoConfig(devices=20, **changes)


def test_robust_runs_the_recommended_defence_on_digits_no_phone_holds(tmp_path):
    import json

    import numpy as np

    from fleet.demo import ROBUST, TRUSTED_SAMPLES, trusted_path
    from server.settings import Settings
    from sim.data import write_shards

    cfg = DemoConfig(devices=5, attackers=1, robust=True, workdir=tmp_path)
    env = _server_env(cfg, "k", "a", "p")
    wrappers = json.loads(env["FLEET_WRAPPERS"])
    assert [w["name"] for w in wrappers] == [w["name"] for w in ROBUST]  # innermost first, as configured
    [wrapper] = [w for w in wrappers if w["name"] == "trusted-score"]
    [config] = [w for w in ROBUST if w["name"] == "trusted-score"]
    assert wrapper == {**config, "data": str(trusted_path(cfg))}
    assert "FLEET_WRAPPERS" not in _server_env(DemoConfig(workdir=tmp_path), "k", "a", "p")
    shards, test = write_shards(tmp_path / "data", devices=5, seed=0, trusted=TRUSTED_SAMPLES)
    with np.load(trusted_path(cfg)) as held:
        trusted = {row.tobytes() for row in held["x"]}
    assert len(trusted) == TRUSTED_SAMPLES  # distinct digits, on no phone and not among the test digits
    for path in [*shards, test]:
        with np.load(path) as data:
            assert not trusted & {row.tobytes() for row in data["x"]}
    settings = Settings(_env_file=None, wrappers=wrappers, eval_data=str(test))  # the coordinator takes it
    assert [w.name for w in settings.wrappers] == [w["name"] for w in ROBUST]
