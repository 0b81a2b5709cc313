"""Results-table rows of the browser device (issue 32): what a phone downloads, whether its gradient is the
Python client's, how fast five browser phones train, and whether the page stays smooth while computing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lab.contract import Row
from lab.render import results_link


def browser_rows(data: dict[str, Any]) -> Iterator[Row]:
    weight, gradient, training, frames = data["weight"], data["gradient"], data["training"], data["frames"]
    app, model = weight["app_total"], weight["model_total"]
    link = results_link("browser.md")
    yield (
        "browser device: bytes a phone downloads on its first visit, WASM included (+ the model's files)",
        f"{app['sent'] / 1e6:.2f} MB sent ({app['raw'] / 1e6:.2f} MB raw) + {model['sent'] / 1e3:.0f} kB",
        "reported",
        link,
    )
    yield (
        f"browser gradient (ONNX Runtime Web, CNN, batch {gradient['batch']}) vs the Python client's: "
        "max |diff|",
        f"{gradient['max_abs_diff']:.1e}",
        "≤ 1e-5",
        link,
    )
    reached = training["seconds_to_target"]
    yield (
        f"{training['devices']} browser phones (Chromium, phone viewport) train the CNN to "
        f"{training['target']:.0%}: seconds",
        f"> {training['cap_s']:.0f} (censored)" if reached is None else f"{reached:.1f}",
        "reaches it",
        link,
    )
    busy = frames["busy"]
    yield (
        "the page's frame gaps while its worker computes at the SLO: p95 / max (ms)",
        "—" if busy["p95_ms"] is None else f"{busy['p95_ms']:.1f} / {busy['max_ms']:.1f}",
        f"p95 ≤ {frames['target_p95_ms']:.0f}",
        link,
    )


DEVICE_SECTIONS: tuple[tuple[str, Callable[[dict[str, Any]], Iterator[Row]]], ...] = (
    ("browser", browser_rows),
)
