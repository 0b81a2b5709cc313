"""Thesis Fig. 3.10 on the data available: IID MNIST under D2 (E-MNIST/CIFAR-100 need a local path).

The same protocol, tuning and table as `staleness`, on an IID split of the same 4,000 digits, under D2
only, as the thesis's Fig. 3.10.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments import staleness


def run(*, quick: bool, out_dir: Path, seed: int = 0) -> dict[str, Any]:
    return staleness.run(quick=quick, out_dir=out_dir, seed=seed, partition="iid", name="iid", dists=("D2",))
