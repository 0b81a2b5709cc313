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
