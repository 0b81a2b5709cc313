"""Soak: many devices for a long while against one coordinator, as users run it (SQLite file, default
rate limits). What must hold: no 5xx, the coordinator's memory flat, and every acknowledged gradient
stored and applied exactly once (bench/ledger.py).

`python -m lab run soak` (200 devices, 10 minutes) writes docs/results/reliability-soak.json and the RSS plot,
and rewrites reliability.md; `--quick` is 10 devices for 10 s.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from rich.progress import Progress

from fleet.process import ServerProcess
from lab.bench import machine, report
from tests.support.chaos import USER_LIMITS, Load
from tests.support.faults import rss_mib
from tests.support.ledger import audit

# RSS "start" is read once the bounded caches have filled: the answered-lease window (10,000 leases,
# ~2 min at ~90 pushes/s), recent parameter versions, rate-limit buckets
WARM_UP_S = 150.0


def plot(samples: list[tuple[float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot([t for t, _ in samples], [m for _, m in samples])
    ax.set_xlabel("seconds into the soak")
    ax.set_ylabel("coordinator RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def soak(workdir: Path, *, devices: int, seconds: float, warm_up: float) -> dict[str, Any]:
    server = ServerProcess(workdir, **USER_LIMITS).start()
    assert server.process is not None
    samples: list[tuple[float, float]] = []
    try:
        load = Load(server.url, devices, seconds, workdir / "soak-load.json")
        with Progress() as progress:
            bar = progress.add_task(f"soak: {devices} devices", total=seconds)
            while load.process.poll() is None:
                elapsed = time.monotonic() - load.started
                samples.append((round(elapsed, 1), rss_mib(server.process.pid)))
                progress.update(bar, completed=min(elapsed, seconds))
                time.sleep(min(5.0, seconds / 20))
        result = load.result(timeout=120)
        samples.append((round(time.monotonic() - load.started, 1), rss_mib(server.process.pid)))
    finally:
        server.stop()
    ledger = audit(f"sqlite:///{workdir / 'fleet.db'}", result["acknowledged"])
    after = [m for t, m in samples if t >= warm_up] or [samples[-1][1]]
    half = next((m for t, m in samples if t >= seconds / 2), samples[-1][1])
    statuses: dict[str, int] = result["statuses"]
    return {
        "devices": devices,
        "seconds": seconds,
        "database": "SQLite file",
        "warm_up_s": warm_up,
        "requests": sum(statuses.values()),
        "statuses": statuses,
        "answers_5xx": sum(n for k, n in statuses.items() if int(k.rsplit(" ", 1)[1]) >= 500),
        "not_2xx": sum(n for k, n in statuses.items() if not k.rsplit(" ", 1)[1].startswith("2")),
        "connection_errors": result["connection_errors"],
        "pushes_per_s": round(ledger["acknowledged"] / seconds, 1),
        "rss_mib": {"start": after[0], "half": half, "end": after[-1], "min": min(after), "max": max(after)},
        "rss_samples": samples,
        **{k: v for k, v in ledger.items() if k != "model_versions"},
    }


def main(*, quick: bool, out_dir: Path) -> dict[str, Any]:
    from lab.bench.reliability import render, save

    devices, seconds, warm_up = (10, 10.0, 2.0) if quick else (200, 600.0, WARM_UP_S)
    with tempfile.TemporaryDirectory(prefix="fleet-soak-") as tmp:
        result = soak(Path(tmp), devices=devices, seconds=seconds, warm_up=warm_up)
    m = machine()
    result.update(
        name="soak",
        quick=quick,
        command="python -m lab run soak" + (" --quick" if quick else ""),
        machine=f"{m['cpu']}, {m['cores']} cores, load {m['load_average']}, {m['date']}",
    )
    if not quick:
        result["plot"] = "reliability-soak.png"
        plot(result["rss_samples"], out_dir / "reliability-soak.png")
    rss = result["rss_mib"]
    result["summary"] = (
        f"{result['acknowledged']} acknowledged, {result['acknowledged_not_stored']} lost, "
        f"{result['answers_5xx']} 5xx, RSS {rss['start']:.0f} → {rss['end']:.0f} MiB, "
        f"exactly once: {result['exactly_once']}"
    )
    save(out_dir, "soak", result, quick=quick)
    render(out_dir, quick=quick)
    return result


EXPERIMENT = report("soak", __name__, "reliability-soak")
