"""Soak: many devices for a long while against one coordinator, as users run it (SQLite file, default
rate limits). What must hold: no 5xx, the coordinator's memory flat, and every acknowledged gradient
stored and applied exactly once (tests/support/ledger.py).

`python -m lab run soak` (200 devices, 10 minutes) writes docs/results/reliability-soak.json and the RSS plot,
and rewrites reliability.md; `--quick` is 10 devices for 10 s.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from fleet.process import ServerProcess
from lab.bench import command, machine, own
from lab.bench.plans import SOAK_FULL, SOAK_QUICK, SoakPlan
from lab.bench.reliability import page, sibling
from lab.contract import Context, Result
from tests.support.chaos import USER_LIMITS, Load
from tests.support.faults import rss_mib
from tests.support.ledger import audit


def plot(result: Result) -> Any:
    """The coordinator's RSS over the soak (reliability-soak.png), when the plan asks for it."""
    if not result.records.get("plot"):
        return None
    from lab.render import figure

    samples = result.records["rss_samples"]
    fig, (ax,) = figure(width=6.0, height=3.0)
    ax.plot([t for t, _ in samples], [m for _, m in samples])
    ax.set_xlabel("seconds into the soak")
    ax.set_ylabel("coordinator RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    return fig


def soak(workdir: Path, *, devices: int, seconds: float, warm_up: float, ctx: Context) -> dict[str, Any]:
    server = ServerProcess(workdir, **USER_LIMITS).start()
    assert server.process is not None
    samples: list[tuple[float, float]] = []
    try:
        load = Load(server.url, devices, seconds, workdir / "soak-load.json")
        with ctx.steps(f"soak: {devices} devices (s)", round(seconds)) as steps:
            done = 0
            while load.process.poll() is None:
                elapsed = time.monotonic() - load.started
                samples.append((round(elapsed, 1), rss_mib(server.process.pid)))
                steps.advance(min(round(elapsed), round(seconds)) - done)
                done = min(round(elapsed), round(seconds))
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


def run(plan: SoakPlan, ctx: Context) -> Result:
    """Soak: reliability-soak.json (and its RSS plot in the full plan); reliability.md shows it beside
    the chaos record."""
    with tempfile.TemporaryDirectory(prefix="fleet-soak-") as tmp:
        result = soak(Path(tmp), devices=plan.devices, seconds=plan.seconds, warm_up=plan.warm_up_s, ctx=ctx)
    m = machine()
    result.update(
        name="soak",
        quick=plan.quick,
        command=command("soak", plan),
        machine=f"{m['cpu']}, {m['cores']} cores, load {m['load_average']}, {m['date']}",
    )
    if plan.plot:
        result["plot"] = "reliability-soak.png"
    rss = result["rss_mib"]
    summary = (
        f"{result['acknowledged']} acknowledged, {result['acknowledged_not_stored']} lost, "
        f"{result['answers_5xx']} 5xx, RSS {rss['start']:.0f} → {rss['end']:.0f} MiB, "
        f"exactly once: {result['exactly_once']}"
    )
    return Result({"text": summary}, records=result, view={"chaos": sibling(ctx, "chaos")})


EXPERIMENT = own(
    "soak", "reliability-soak", SOAK_QUICK, SOAK_FULL, run,
    lambda result, plan: page(soak=result.records, chaos=result.view.get("chaos")),
    summary_in_json=True, plot=plot, page="reliability",
)  # fmt: skip
