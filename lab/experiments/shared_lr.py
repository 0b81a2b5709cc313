"""The shared learning rate the follow-up figures reuse: DynSGD's best from the `staleness` tuning."""

from __future__ import annotations

import json
from pathlib import Path

FALLBACK_LR = 0.1


def shared_lr(out_dir: Path) -> tuple[float, str]:
    """(rate, where it came from): staleness.json's tuned DynSGD rate if it exists, else the fallback."""
    path = out_dir / "staleness.json"
    if path.exists():
        summary = json.loads(path.read_text()).get("summary", {})
        if not summary.get("quick") and summary.get("shared_lr") is not None:
            return float(summary["shared_lr"]), "staleness.json (DynSGD's tuned rate)"
    return FALLBACK_LR, "fallback (no full staleness run found)"


def tuned_lrs(out_dir: Path) -> dict[str, float] | None:
    """Each strategy's own rate from the full `staleness` tuning (protocol (b)), None without one."""
    path = out_dir / "staleness.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text()).get("summary", {})
    return None if summary.get("quick") else summary.get("tuned_lr")
