"""Thesis Fig. 3.10 on the data available: IID MNIST under D2 (E-MNIST/CIFAR-100 need a local path).

The same protocol, tuning and table as `staleness`, on an IID split of the same 4,000 digits, under D2
only, as the thesis's Fig. 3.10.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lab.contract import Experiment, Result
from lab.experiments import staleness


def markdown(result: Result, plan: Any) -> str:
    return staleness.markdown(result, plan, "iid")


EXPERIMENT = Experiment(
    "iid",
    replace(staleness.QUICK, partition="iid", dists=("D2",)),
    replace(staleness.FULL, partition="iid", dists=("D2",)),
    staleness.run,
    markdown,
    staleness.plot,
    title="Thesis Fig. 3.10",
)
