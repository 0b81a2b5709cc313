"""Writing an experiment's three outputs: the JSON (with a top-level ``summary``), the PNG, the markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.contract import clean


def write_json(out_dir: Path, name: str, payload: dict[str, Any]) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = clean(payload)
    (out_dir / f"{name}.json").write_text(json.dumps(payload, indent=1))
    return payload


def write_markdown(out_dir: Path, name: str, text: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.md"
    path.write_text(text.rstrip() + "\n")
    return path


def figure(ncols: int = 1, width: float = 6.0, height: float = 4.0) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, axes[0]


def save_figure(fig: Any, out_dir: Path, name: str) -> Path:
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fmt(stats: dict[str, Any], digits: int = 0) -> str:
    """'median (min–max)' and how many seeds were censored at the cap (lab/experiments/stats.py): a median
    that censored runs make a lower bound reads '≥ …', a derived value with censored seeds '~ …'."""
    if stats.get("median") is None:
        return "—"
    mark = stats.get("median_mark", "")
    text = f"{mark + ' ' if mark else ''}{stats['median']:.{digits}f}"
    text += f" ({stats['min']:.{digits}f}–{stats['max']:.{digits}f})"
    if stats.get("censored"):
        text += f", {stats['censored']} of {len(stats['per_seed'])} censored"
    return text


def number(value: Any, digits: int = 3, unit: str = "") -> str:
    """A figure for a table, or '—' when the experiment did not produce it."""
    return "—" if value is None else f"{value:.{digits}f}{unit}"


def read_results(results: Path, name: str) -> dict[str, Any] | None:
    """An experiment's JSON under ``results``, or None when it has not been run."""
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def results_link(name: str) -> str:
    """A link from the results table (docs/results/README.md) to a file beside it in docs/results/."""
    return f"[{name}]({name})"
