"""A fresh held-back half for issue 28's default search, drawn by a seeded draw before any run on it.

Since the eleventh search a held-back half is drawn, not picked: three CNN, three MLP and two
logistic-regression slots in a shuffled order, each slot's split, batch (100, 32 or I-Prof), fleet size
(the CNN 20 devices; the MLP 20, 100 or 1,000; logistic regression 20 or 100), speed spread (7x, even or
30x) and speed order drawn in turn, drawing again where it repeats a workload of the suite or the split
cannot deal the digits to that many devices. The eleventh's draw was made by a script that was not kept;
this is the procedure it describes, from the twelfth on. ``python -m sim.workload_draw 12 98`` prints the
draw as sim/workloads.py entries.
"""

from __future__ import annotations

import functools
import random
import sys
from collections.abc import Callable, Set

from sim.data import Dataset, load_mnist
from sim.workload import Workload

SPLITS = ("labels-1", "labels-2", "labels-4", "adjacent", "dirichlet-0.1", "dirichlet-0.5", "dirichlet-10")
FLEETS = {"mnist_cnn": (20,), "mlp": (20, 100, 1000), "logreg": (20, 100)}
TAGS = {"mnist_cnn": "cnn", "mlp": "mlp", "logreg": "logreg"}


def named(split: str, model: str, devices: int, batch: int | None, spread: float, order: str) -> str:
    """The suite's naming: split, model, fleet, batch, spread, order (the defaults left out)."""
    parts = [split.replace("-", ""), TAGS[model]]
    parts += [f"{devices}dev"] if devices != 20 else []
    parts += ["iprof"] if batch is None else ["batch32"] if batch == 32 else []
    parts += ["even"] if spread == 1.0 else ["30x"] if spread == 30.0 else []
    parts += ["shuffled"] if order == "shuffled" else []
    return "-".join(parts)


def length(devices: int, batch: int | None) -> int:
    """A run's gradients as the suite sets them: more for a larger fleet or a smaller batch."""
    return 10000 if devices == 100 else 8000 if devices == 1000 else 6000 if batch == 32 else 3000


@functools.cache
def _train(data_seed: int) -> Dataset:
    """One shuffle's training digits, loaded once however often the draw tries a split of it."""
    return load_mnist(seed=data_seed)[0]


def splittable(w: Workload) -> bool:
    """Whether ``w``'s split deals every device some digits of its shuffle."""
    try:
        return all(len(shard) for shard in w.shards(_train(w.data_seed)))
    except ValueError:
        return False


# a workload's split, model, devices, batch (None: I-Prof), speed spread and speed order
Pick = tuple[str, str, int, int | None, float, str]


def _drawn(
    picks: Callable[[int], Pick], count: int, first_data_seed: int, taken: Set[str], prefix: str = ""
) -> list[Workload]:
    """``count`` workloads, the i-th picked by ``picks(i)`` until none of ``taken`` (left as it is) and its
    split deals every device some digits; data and split seeds from ``first_data_seed`` on."""
    taken = set(taken)  # the drawn names join it, so a draw never repeats itself; the caller's set is theirs
    drawn: list[Workload] = []
    for i in range(count):
        while True:
            split, model, devices, batch, spread, order = picks(i)
            name = named(split, model, devices, batch, spread, order)
            seed_i = first_data_seed + i
            w = Workload(prefix + name, split, devices=devices, model=model, batch=batch, speed_spread=spread,
                         speed_order=order, data_seed=seed_i, split_seed=seed_i,
                         gradients=length(devices, batch))  # fmt: skip
            if name not in taken and splittable(w):
                break
        taken.add(name)
        drawn.append(w)
    return drawn


def draw(seed: int, first_data_seed: int, taken: Set[str]) -> list[Workload]:
    """A held-back half: eight workloads, none of ``taken``, seeded from ``first_data_seed`` on."""
    rng = random.Random(seed)
    slots = ["mnist_cnn"] * 3 + ["mlp"] * 3 + ["logreg"] * 2
    rng.shuffle(slots)

    def pick(i: int) -> Pick:
        split, batch = rng.choice(SPLITS), rng.choice((100, 32, None))
        devices, spread = rng.choice(FLEETS[slots[i]]), rng.choice((7.0, 1.0, 30.0))
        order = rng.choice(("split", "shuffled")) if spread != 1.0 else "split"
        return split, slots[i], devices, batch, spread, order

    return _drawn(pick, len(slots), first_data_seed, taken)


def draw_spread_kind(seed: int, first_data_seed: int, taken: Set[str], count: int = 8) -> list[Workload]:
    """``count`` fleets of the kind the spread rule acts on (an MLP of 100 or 1,000 devices or a logistic
    regression of 100, a fixed batch, a 30x speed spread), none of them a workload of ``taken``, named
    "fresh-" and the suite's name: for a probe that wants fleets of one kind no half has held (issue 28's
    twenty-third)."""
    rng = random.Random(seed)

    def pick(i: int) -> Pick:
        model = rng.choice(("mlp", "mlp", "logreg"))
        split, batch = rng.choice(SPLITS), rng.choice((100, 32))
        devices = rng.choice((100, 1000) if model == "mlp" else (100,))
        return split, model, devices, batch, 30.0, rng.choice(("split", "shuffled"))

    return _drawn(pick, count, first_data_seed, taken, prefix="fresh-")


def entry(w: Workload) -> str:
    """``w`` as a sim/workloads.py line, the defaults left out."""
    defaults = Workload(w.name, w.split)
    fields = [f"{k}={v!r}" for k, v in vars(w).items()
              if k not in ("name", "split") and v != getattr(defaults, k)]  # fmt: skip
    return f"Workload({w.name!r}, {w.split!r}, {', '.join(fields)}),"


if __name__ == "__main__":  # pragma: no cover - `python -m sim.workload_draw SEED FIRST_DATA_SEED [spread]`
    from sim.workloads import SUITE

    kind = draw_spread_kind if sys.argv[3:] == ["spread"] else draw
    for w in kind(int(sys.argv[1]), int(sys.argv[2]), {w.name for w in SUITE}):
        print(entry(w))
