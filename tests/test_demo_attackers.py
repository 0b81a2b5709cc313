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
