"""The robust experiment's accounting (lab/experiments/robust.py), apart from its runs."""

from __future__ import annotations

from lab.experiments.robust import shrunk_pushes
from server.strategies.fedbuff import FedBuff
from server.strategies.label_check import LabelCheck


class Attack:
    def is_byzantine(self, i: int) -> bool:
        return i == 1


def test_the_ramps_pushes_are_split_by_sender():
    ramped = LabelCheck(FedBuff(learning_rate=0.1, k=5), threshold=0.0, settled=-0.2, ramp=0.3)
    ramped.shrunk_by_device.update({"d0": 2, "d1": 5, "d2": 1})
    ramped.removed_by_device.update({"d0": 0.5, "d1": 4.0, "d2": 0.25})
    split = shrunk_pushes(ramped, ["d0", "d1", "d2"], Attack())
    assert split == {"honest_shrunk": 3, "honest_shrunk_removed": 0.75, "byzantine_shrunk": 5,
                     "byzantine_shrunk_removed": 4.0}  # fmt: skip
    assert shrunk_pushes(ramped, ["d0", "d1", "d2"], None)["honest_shrunk"] == 8  # no attack: all honest
    assert shrunk_pushes(LabelCheck(FedBuff(learning_rate=0.1, k=5)), ["d0"], None) == {}  # no ramp: nothing


def test_an_honest_push_weighed_down_counts_toward_the_honest_drop_target():
    """6% of honest pushes at weight 0 and 5% of their weight taken off by the ramp: 11% lost, a miss."""
    from lab.experiments.robust import judge

    def run(dropped: int, removed: float | None) -> dict:
        pushes = {"honest": 1000, "honest_dropped": dropped}
        if removed is not None:
            pushes["honest_shrunk_removed"] = removed
        return {"final": 0.94, "pushes": pushes, "time_to_target": 10.0, "backdoor_success": None}

    clean = run(0, None)
    assert judge({"clean": run(0, None), "alie": run(60, 50.0)}, clean, 10.0)["misses"] == ["drop:alie"]
    assert judge({"clean": run(0, None), "alie": run(60, 30.0)}, clean, 10.0)["misses"] == []
    assert judge({"clean": run(0, None), "alie": run(60, None)}, clean, 10.0)["misses"] == []  # no ramp


def test_over_several_tuning_seeds_an_attack_lost_on_one_seed_ranks_a_defence_below_one_that_loses_none():
    """Label-flip passed the recommended defence on seed 1004 alone (docs/robustness-history.md, the
    fifteenth look): the choice sums the attacks lost over its seeds and takes the worst result on any."""
    from lab.experiments.robust import judge, overall, standing

    def run(final: float) -> dict:
        return {"final": final, "pushes": {"honest": 1000, "honest_dropped": 0},
                "time_to_target": 10.0, "backdoor_success": None}  # fmt: skip

    clean = run(0.95)
    holds = judge({"clean": run(0.945), "label-flip": run(0.94)}, clean, 10.0)
    falls = judge({"clean": run(0.945), "label-flip": run(0.774)}, clean, 10.0)
    steady, fragile = overall([standing(holds), standing(holds)]), overall([standing(holds), standing(falls)])
    assert standing(holds) == (0, 0.5, 0) and standing(falls) == (1, 8.8, 0)
    assert steady == (0, 0.5, 0) and fragile == (1, 8.8, 0) and steady < fragile
    assert overall([]) == (0, 0.0, 0)
