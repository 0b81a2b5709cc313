"""Results-table rows for scale-out (issue 18): the topology's throughput, the aggregator's apply rate,
and large simulations on Ray. Read from docs/results/scale-out.json and ray-sim.json."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lab.render import results_link as _link

Row = tuple[str, str, str, str]


def scale_out_rows(data: dict[str, Any]) -> Iterator[Row]:
    cnn = [r for r in data["throughput"] if r["model"] == "mnist_cnn" and r["devices"] == 200]
    if cnn:
        yield (
            "durable CNN pushes/s, 200 devices, PostgreSQL: one process / "
            + " / ".join(r["topology"].split(" API")[0] for r in cnn[1:])
            + " API workers + aggregator (2 cores)",
            " / ".join(str(r["pushes/s"]) for r in cnn),
            "grows with workers while cores are free",
            _link("scale-out.md"),
        )
    rate = next((r for r in data["aggregator"] if r["model"] == "mnist_cnn"), None)
    if rate is not None:
        yield (
            "the aggregator's apply rate, CNN updates/s from a full queue (its own CPU µs per update)",
            f"{rate['updates/s']:,} ({rate['aggregator CPU µs/update']})",
            f"≥ {rate['target']:,}",
            _link("scale-out.md"),
        )


def ray_rows(data: dict[str, Any]) -> Iterator[Row]:
    large = data["large"]
    yield (
        f"simulation of 100,000 devices on 2 Ray workers ({large['gradients']:,} CNN gradients): overhead "
        "beyond gradient computation; speed-up of 2 vs 1 workers",
        f"{large['overhead']:.1%}; ×{data['speedup']['mean']:.2f}",
        "≤ 20%",
        _link("ray-sim.md"),
    )


SCALE_SECTIONS: tuple[tuple[str, Callable[[dict[str, Any]], Iterator[Row]]], ...] = (
    ("scale-out", scale_out_rows),
    ("ray-sim", ray_rows),
)
