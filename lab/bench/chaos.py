"""Chaos: a coordinator SIGKILLed under load and restarted; a PostgreSQL database that goes away under
load (its connections dropped and refused, or the whole server restarted). What must hold: no answer is
a 5xx other than 503, every 503 carries Retry-After, the service recovers by itself, and every
acknowledged gradient is stored, applied exactly once (tests/support/ledger.py). The load and the
phases are the reliability tests' (tests/support/chaos.py), run longer.

`python -m lab run chaos` writes docs/results/reliability-chaos.json and rewrites reliability.md.
Set FLEET_CHAOS_RESTART_POSTGRES=1 to also restart the local PostgreSQL server (it drops every
database's connections: only where nothing else uses that server).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from lab.bench import command, machine, own
from lab.bench.plans import CHAOS_FULL, CHAOS_QUICK, ChaosPlan
from lab.bench.reliability import page, sibling
from lab.contract import Context, Result
from tests.support.chaos import kill_phase, outage_phase
from tests.support.faults import postgres_server_url, scratch_postgres_database


def run(plan: ChaosPlan, ctx: Context) -> Result:
    """Kills on SQLite and PostgreSQL, then database outages: reliability-chaos.json; reliability.md
    shows it beside the soak record."""
    devices, seconds = plan.devices, plan.seconds
    phases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fleet-chaos-") as tmp, ctx.steps("chaos phases") as steps:
        base = Path(tmp)
        phases["kill_sqlite"] = kill_phase(
            base / "k1", database_url=None, devices=devices, seconds=seconds, kills=plan.kills
        )
        steps.advance()
        with scratch_postgres_database(postgres_server_url()) as url:
            phases["kill_postgres"] = kill_phase(
                base / "k2", database_url=url, devices=devices, seconds=seconds, kills=plan.kills
            )
        steps.advance()
        with scratch_postgres_database(postgres_server_url()) as url:
            phases["postgres_outage"] = outage_phase(
                base / "o1", database_url=url, devices=devices, seconds=seconds, outages=plan.outages,
                outage_s=plan.outage_s,
            )  # fmt: skip
        steps.advance()
        if os.environ.get("FLEET_CHAOS_RESTART_POSTGRES") == "1":
            with scratch_postgres_database(postgres_server_url()) as url:
                phases["postgres_restart"] = outage_phase(
                    base / "o2",
                    database_url=url,
                    devices=devices,
                    seconds=seconds,
                    outages=2,
                    outage_s=0.0,
                    restart_server=True,
                )
    result = {
        "name": "chaos",
        "quick": plan.quick,
        "command": command("chaos", plan),
        "phases": phases,
        "machine": "{cpu}, {cores} cores, load {load_average}, {date}".format(**machine()),
    }
    summary = {
        name: f"{p['acknowledged']} acknowledged, {p['acknowledged_not_stored']} lost, "
        f"{p['answers_5xx_not_503']} 5xx (not 503), exactly once: {p['exactly_once']}"
        for name, p in phases.items()
    }
    return Result(summary, records=result, view={"soak": sibling(ctx, "soak")})


EXPERIMENT = own(
    "chaos", "reliability-chaos", CHAOS_QUICK, CHAOS_FULL, run,
    lambda result, plan: page(soak=result.view.get("soak"), chaos=result.records),
    summary_in_json=True, page="reliability",
)  # fmt: skip
