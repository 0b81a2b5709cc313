"""The peer benchmark on issue 28's sharper split: each device holds two adjacent label-sorted shards, so
11 of the 20 hold a single digit and the slowest hold the last digits. The old default plateaued below
90% there; the same real processes and Flower's FedAvg, fewer arms (`python -m lab run peer-adjacent`)."""

from __future__ import annotations

from dataclasses import replace

from lab.bench import own
from lab.bench.peer import FLOWER_ARMS, QUICK, Plan, _markdown, _plot, run

ARMS = (FLOWER_ARMS[0], "fleet", "fleet:dynsgd-clip:0.5", "fleet:fedbuff:0.4:k10", "fleet:dynsgd:0.2",
        "fleet:x0.25", "fleet:x4")  # fmt: skip
FULL = Plan(split="adjacent", arms=ARMS, flower_twice=False)
EXPERIMENT = own(
    "peer-adjacent", "peer-adjacent", replace(QUICK, split="adjacent"), FULL, run, _markdown,
    summary_in_json=True, plot=_plot,
)  # fmt: skip
