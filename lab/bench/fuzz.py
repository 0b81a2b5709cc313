"""`python -m lab run fuzz`: schemathesis against a live coordinator, driven by its served /openapi.json.

The engine is the API fuzz test's (tests/support/fuzz.py: a real `fleet serve` process on loopback, a
device token and the admin token, every operation, schemathesis's phases and five checks), run here on
SQLite and, in the full plan, PostgreSQL with more examples and stateful runs. Writes
docs/results/fuzz.md and fuzz.json.
"""

from __future__ import annotations

import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from lab.bench import command, machine, own
from lab.bench.plans import FUZZ_FULL, FUZZ_QUICK, FuzzPlan
from lab.contract import Context, Result
from tests.support.fuzz import CHECKS, UNIT_PHASES, fuzz_live, postgres_database


def run(plan: FuzzPlan, ctx: Context) -> Result:
    """Fuzz on SQLite and, in the full plan, PostgreSQL (when reachable): fuzz.json and fuzz.md."""
    import schemathesis

    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fleet-fuzz-") as tmp, ctx.steps("fuzz scenarios") as steps:

        def on_scenario(phase: str, label: str) -> None:
            steps.advance()

        runs["sqlite"] = fuzz_live(
            Path(tmp) / "sqlite",
            database_url=f"sqlite:///{Path(tmp) / 'sqlite' / 'fleet.db'}",
            max_examples=plan.max_examples,
            stateful=plan.stateful,
            on_scenario=on_scenario,
        )
        with postgres_database() if plan.postgresql else nullcontext() as url:
            if url is not None:
                runs["postgresql"] = fuzz_live(
                    Path(tmp) / "postgresql",
                    database_url=url,
                    max_examples=plan.max_examples,
                    stateful=plan.stateful,
                    seed=1,  # other cases than the SQLite run's
                    on_scenario=on_scenario,
                )
    result = {
        "name": "fuzz",
        "command": command("fuzz", plan),
        "schemathesis": schemathesis.__version__,
        "checks": list(CHECKS),
        "phases": [*UNIT_PHASES, *(["stateful"] if plan.stateful else [])],
        "runs": runs,
        "machine": machine(),
    }
    return Result({"text": summary(result)}, records=result)


def summary(result: dict[str, Any]) -> str:
    parts = [
        f"{db}: {run['requests']} requests over {run['operations']} operations, "
        f"{run['server_errors']} 5xx, {len(run['failures'])} failures in {run['seconds']} s"
        for db, run in result["runs"].items()
    ]
    return f"fuzz (schemathesis {result['schemathesis']}): " + "; ".join(parts)


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    checks = ", ".join(f"`{c}`" for c in result["checks"])
    lines = [
        "# Fuzzing the live API (schemathesis)",
        "",
        f"Written by `{result['command']}` (bench/fuzz.py), schemathesis {result['schemathesis']}: a real",
        "`fleet serve` process on loopback, its served /openapi.json, a device token (enrolled first) and",
        f"the admin token, every operation. Phases: {', '.join(result['phases'])}. Checks: {checks}.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, load {m['load_average']}, {m['date']}.",
        "",
        "| database | operations | max examples | requests | 5xx | check failures | engine errors "
        "| server tracebacks | seconds | stop |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for db, run in result["runs"].items():
        cells = [
            db,
            run["operations"],
            run["max_examples"],
            run["requests"],
            run["server_errors"],
            len(run["failures"]),
            len(run["errors"]),
            run["server_tracebacks"],
            run["seconds"],
            run["stop_reason"],
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    for db, run in result["runs"].items():
        lines += ["", f"## {db}: requests per operation and status", "", *status_table(run)]
        if run["failures"]:
            lines += ["", "Failures:", ""]
            lines += [f"- `{f['operation']}` {f['check']}: {f['title']}" for f in run["failures"]]
        if run["errors"]:
            lines += ["", "Engine errors:", ""] + [f"- {e}" for e in run["errors"]]
    lines += [
        "",
        "405s answer the coverage phase's requests with a method the path does not have (a path-level",
        "answer, not one of the operation's); 400/413/415/422 malformed inputs; 401 requests without a",
        "token (the negative phases drop it); 410 on a push a task whose lease had expired (60 s) or whose",
        "model finished by the time the stateful phase answered it; 503/410 on a task request, training",
        "paused or finished by the fuzzer's own admin calls. `status_code_conformance` checks each answer",
        "against the operation's documented statuses.",
        "",
        "What random inputs do not reach: a push whose gradient has exactly the model's parameter count and",
        "whose meta sums right (random bodies: its pushes are refused as malformed, see the table);",
        "a 403 (the coverage phase sends no token rather than the other one); a valid enrollment key. Those",
        "answers are covered by hand-written tests (tests/test_api_*.py).",
        "",
    ]
    return "\n".join(lines)


def status_table(run: dict[str, Any]) -> list[str]:
    per_op = {
        op: {int(c): n for c, n in counts.items()} for op, counts in run["statuses_per_operation"].items()
    }
    codes = sorted({code for counts in per_op.values() for code in counts})
    lines = [
        "| operation | requests | " + " | ".join(map(str, codes)) + " |",
        "|---|---|" + "---|" * len(codes),
    ]
    for op, counts in per_op.items():
        cells = " | ".join(str(counts.get(c, "")) for c in codes)
        lines.append(f"| `{op}` | {run['cases_per_operation'][op]} | {cells} |")
    return lines


EXPERIMENT = own(
    "fuzz", "fuzz", FUZZ_QUICK, FUZZ_FULL, run, lambda result, plan: render(result.records),
    summary_in_json=True,
)  # fmt: skip
