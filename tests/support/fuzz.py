"""schemathesis against a live coordinator, driven by its served /openapi.json (tests/test_fuzz_api.py,
and run longer by `python -m lab run fuzz`, lab/bench/fuzz.py).

A real `fleet serve` process on loopback (SQLite, and PostgreSQL when reachable), a device enrolled for a
device token and the process's admin token, every operation, schemathesis's phases (examples, coverage,
fuzzing, and stateful runs that follow the document's links), and five checks: no 5xx, and every status,
content type, header and body as documented.

The fuzzer may pause training, set a stop criterion or fill the rate limits: later answers are then
503/410/429, which the document lists, so it cannot knock itself out of the contract.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from fleet.process import ADMIN, ENROLL, ServerProcess

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
)
UNIT_PHASES = ("examples", "coverage", "fuzzing")
# No "max-time": with one, schemathesis 4 keeps cycling its fuzzing phase until the time is up; the run
# is bounded by max-examples per operation instead.
POSTGRES = os.environ.get("FLEET_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class Tally:
    """What the engine's events add up to: requests and statuses per operation, and unique failures."""

    cases: Counter[str] = field(default_factory=Counter)
    statuses: dict[str, Counter[int]] = field(default_factory=dict)
    failures: dict[tuple[str, str, str], dict[str, str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def record(self, recorder: Any) -> None:
        """One finished scenario: every request it sent, and every check that failed."""
        for case_id, node in recorder.cases.items():
            operation = node.value.operation.label
            interaction = recorder.interactions.get(case_id)
            if interaction is None:
                continue
            self.cases[operation] += 1
            code = interaction.response.status_code if interaction.response is not None else 0
            self.statuses.setdefault(operation, Counter())[code] += 1
        for case_id, checks in recorder.checks.items():
            operation = recorder.cases[case_id].value.operation.label if case_id in recorder.cases else "?"
            for check in checks:
                if check.failure_info is None:
                    continue
                failure = check.failure_info.failure
                key = (operation, check.name, failure.title)
                self.failures.setdefault(
                    key,
                    {
                        "operation": operation,
                        "check": check.name,
                        "title": failure.title,
                        "message": failure.message[:1000],
                        "reproduce": check.failure_info.code_sample,
                    },
                )

    def server_errors(self) -> int:
        return sum(n for counts in self.statuses.values() for code, n in counts.items() if code >= 500)


def config(
    url: str, *, device_token: str, admin_token: str, max_examples: int, stateful: bool, seed: int
) -> Any:
    """The run's schemathesis configuration (the schema of schemathesis.toml, as a dict)."""
    import schemathesis

    return schemathesis.Config.from_dict(
        {
            "base-url": url,
            "seed": seed,
            "cache": {"enabled": False},
            "generation": {"max-examples": max_examples, "mode": "all", "database": "none"},
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
            "phases": {"stateful": {"enabled": stateful, "max-steps": 20}},
            "auth": {
                "openapi": {"DeviceToken": {"bearer": device_token}, "AdminToken": {"bearer": admin_token}}
            },
            "request-timeout": 30,
        }
    )


def fuzz(
    url: str,
    *,
    device_token: str,
    admin_token: str,
    max_examples: int,
    stateful: bool = False,
    seed: int = 0,
    on_scenario: Callable[[str, str], None] | None = None,
) -> dict[str, Any]:
    """Run schemathesis's engine against the server at ``url``; its figures as one dict."""
    import schemathesis
    from schemathesis.engine import events, from_schema

    settings = config(
        url,
        device_token=device_token,
        admin_token=admin_token,
        max_examples=max_examples,
        stateful=stateful,
        seed=seed,
    )
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=settings)
    tally, started, stop_reason = Tally(), time.perf_counter(), None
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            tally.record(event.recorder)
            if on_scenario is not None:
                on_scenario(event.phase.value, event.recorder.label)
        elif isinstance(event, events.NonFatalError | events.FatalError):
            tally.errors.append(
                str(getattr(event, "value", None) or getattr(event, "exception", event))[:500]
            )
        elif isinstance(event, events.EngineFinished):
            stop_reason = event.stop_reason.value
    return {
        "operations": len(list(schema.get_all_operations())),
        "max_examples": max_examples,
        "stateful": stateful,
        "seed": seed,
        "requests": sum(tally.cases.values()),
        "cases_per_operation": dict(sorted(tally.cases.items())),
        "statuses_per_operation": {op: dict(sorted(c.items())) for op, c in sorted(tally.statuses.items())},
        "status_counts": dict(sorted(sum(tally.statuses.values(), Counter()).items())),
        "server_errors": tally.server_errors(),
        "failures": list(tally.failures.values()),
        "errors": tally.errors,
        "stop_reason": stop_reason,
        "seconds": round(time.perf_counter() - started, 1),
    }


def enroll(url: str) -> str:
    response = httpx.post(
        f"{url}/v1/devices", json={"enrollment_key": ENROLL, "device_model": "Galaxy S7"}, timeout=10
    )
    response.raise_for_status()
    return str(response.json()["token"])


def fuzz_live(
    workdir: Path,
    *,
    database_url: str,
    max_examples: int,
    stateful: bool = False,
    seed: int = 0,
    server_cls: type[ServerProcess] = ServerProcess,
    on_scenario: Callable[[str, str], None] | None = None,
) -> dict[str, Any]:
    """Start a coordinator on ``database_url``, fuzz it with a device's and the admin's tokens, stop it."""
    server = server_cls(workdir, database_url=database_url, enroll_rate_per_second=1000, enroll_burst=1000)
    with server:
        result = fuzz(
            server.url,
            device_token=enroll(server.url),
            admin_token=ADMIN,
            max_examples=max_examples,
            stateful=stateful,
            seed=seed,
            on_scenario=on_scenario,
        )
    log = server.log.read_text(errors="replace")
    result["server_tracebacks"] = log.count("Traceback (most recent call last)")
    return result


@contextmanager
def postgres_database(server_url: str = POSTGRES) -> Iterator[str | None]:
    """A fresh database on the PostgreSQL server (dropped afterwards), or None if it is unreachable."""
    try:
        import psycopg
        from sqlalchemy.engine import make_url

        admin = psycopg.connect(server_url, autocommit=True, connect_timeout=3)
    except Exception:
        yield None
        return
    name = f"fleet_fuzz_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
