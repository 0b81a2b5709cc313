"""docs/results/reliability.md: the soak and chaos results, rendered from their JSON files."""

from __future__ import annotations

import json
from typing import Any

from lab.contract import Context


def sibling(ctx: Context, name: str) -> dict[str, Any] | None:
    """The other reliability record (soak's or chaos's) of the same kind of run (quick or full), if any."""
    own = ctx.name.removesuffix("-quick")  # reliability-soak or reliability-chaos
    path = ctx.results / f"{ctx.name.replace(own, f'reliability-{name}', 1)}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _soak(soak: dict[str, Any]) -> list[str]:
    rss = soak["rss_mib"]
    return [
        "## Soak",
        "",
        f"`{soak['command']}`: {soak['devices']} devices on loopback for {soak['seconds']:.0f} s against one",
        f"coordinator ({soak['database']}, the default rate limits). Machine: {soak['machine']}.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| requests answered | {soak['requests']:,} |",
        f"| gradients acknowledged | {soak['acknowledged']:,} ({soak['pushes_per_s']} /s) |",
        f"| acknowledged but not stored | {soak['acknowledged_not_stored']} |",
        f"| stored with another answer than acknowledged | {soak['answer_changed']} |",
        f"| model versions made by two gradients | {soak['versions_made_twice']} |",
        f"| 5xx answers | {soak['answers_5xx']} |",
        f"| other answers than 2xx | {soak['not_2xx']} |",
        f"| coordinator RSS at {soak.get('warm_up_s', 150):.0f} s → half-time → end | {rss['start']:.0f} → "
        f"{rss.get('half', float('nan')):.0f} → {rss['end']:.0f} MiB |",
        "",
        "Memory grows while the bounded caches fill (the answered-lease window of 10,000 leases, kept",
        "for idempotent retries, fills in 10,000 / pushes-per-second seconds), then stays flat.",
        "",
        f"![RSS over the soak]({soak['plot']})" if soak.get("plot") else "",
        "",
    ]


def _chaos(chaos: dict[str, Any]) -> list[str]:
    lines = [
        "## Chaos",
        "",
        f"`{chaos['command']}`. Under load from devices that retry a push after a dropped connection or a",
        "503 (bench/devices.py), faults are injected at random moments; afterwards every acknowledged",
        "task is looked up in the database (bench/ledger.py). Restart times include the coordinator's",
        f"start-up on a loaded machine: {chaos.get('machine', 'not recorded')}.",
        "",
        "| phase | fault | devices × s | requests | 503 (all with Retry-After) | other 5xx | "
        "connection errors | acknowledged | lost | versions made twice | exactly once |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, p in chaos["phases"].items():
        if "kills" in p:
            restarts = ", ".join(f"{k['restart_s']:.1f}" for k in p["kills"])
            fault = f"{len(p['kills'])} × SIGKILL + restart ({restarts} s to ready)"
        else:
            ready = ", ".join(f"{o['ready_again_s']:.1f}" for o in p["outages"])
            fault = f"{len(p['outages'])} × {p['fault']} (ready again {ready} s after)"
        retry = "yes" if p["missing_retry_after"] == 0 else f"{p['missing_retry_after']} without"
        lines.append(
            f"| {name} | {fault} | {p['devices']} × {p['seconds']:.0f} | {p['requests']:,} | "
            f"{p['answers_503']:,} ({retry}) | {p['answers_5xx_not_503']} | {p['connection_errors']:,} | "
            f"{p['acknowledged']:,} | {p['acknowledged_not_stored']} | {p['versions_made_twice']} | "
            f"{'yes' if p['exactly_once'] else 'NO'} |"
        )
    return [*lines, ""]


def page(soak: dict[str, Any] | None, chaos: dict[str, Any] | None) -> str:
    """reliability.md (reliability-quick.md from the --quick runs): both records, or what is not run yet."""
    lines = [
        "# Reliability",
        "",
        "Written by `python -m lab run soak` and `python -m lab run chaos` from reliability-soak.json and",
        "reliability-chaos.json. Load only on loopback, bounded in devices and time.",
        "",
    ]
    lines += _soak(soak) if soak else ["## Soak", "", "Not run yet: `python -m lab run soak`.", ""]
    lines += _chaos(chaos) if chaos else ["## Chaos", "", "Not run yet: `python -m lab run chaos`.", ""]
    return "\n".join(lines)
