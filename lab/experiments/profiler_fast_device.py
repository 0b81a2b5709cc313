"""Live check: a plain `fleet worker` (no emulated slowness) against a default `fleet serve`.

This is what a new user runs first, and the case that once stayed at L = 500 for 110 tasks: the
worker runs on a server CPU, 10-200x faster per sample than the built-in prior's phone (20 ms), and
must reach its SLO-sized batch, or ``max_batch``, within a few tasks. Both are real processes
(`python -m fleet.cli serve` with only the credentials set, `python -m fleet.cli worker`); the batch
sizes and compute times are the ones the worker prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fleet.process import ENROLL, ServerProcess
from profiler import IProf
from server.settings import Settings

__all__ = ["run_fast_device_check"]

_TASK_LINE = re.compile(r"task v\d+ L=(\d+) .* t=(\d+)ms")


def run_fast_device_check(*, tasks: int = 12, workdir: Path | None = None) -> dict[str, Any]:
    """Run ``tasks`` tasks; the sizes, times and the first task whose size reached the target."""
    from sim.data import write_shards

    defaults = Settings()
    slo_ms, max_batch = defaults.time_slo_ms, defaults.max_batch
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        work = Path(tmp)
        shards, _ = write_shards(work / "data", devices=1, partition="iid", seed=0)
        load_before = os.getloadavg()
        with ServerProcess(work / "server") as server:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "fleet.cli",
                    "worker",
                    "--data",
                    str(shards[0]),
                    "--server",
                    server.url,
                    "--enrollment-key",
                    ENROLL,
                    "--max-tasks",
                    str(tasks),
                ],
                capture_output=True,
                text=True,
                timeout=120 + 10 * tasks,
                check=True,
            ).stdout
        load_after = os.getloadavg()
    runs = [(int(m[1]), float(m[2])) for m in _TASK_LINE.finditer(out)]
    sizes = [size for size, _ in runs]
    slopes = sorted(t / size for size, t in runs[len(runs) // 2 :])  # the settled half
    slope = slopes[len(slopes) // 2] if slopes else float("nan")
    target = min(max_batch, int(slo_ms / slope)) if slope > 0 else max_batch
    reached = next((i + 1 for i, size in enumerate(sizes) if size >= 0.9 * target), None)
    return {
        "slo_ms": slo_ms,
        "max_batch": max_batch,
        "batch_sizes": sizes,
        "compute_times_ms": [t for _, t in runs],
        "median_ms_per_sample": slope,
        "prior_ms_per_sample": IProf().prior_time_slope_ms,
        "target_batch": target,
        "tasks_to_target": reached,
        "loadavg_before_after": [load_before, load_after],
        "at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
