"""`python -m lab run scale-out`: the scale-out topology's throughput (issue 18).

For 1, 2 and 4 API workers plus the aggregator (PostgreSQL, a Redis of its own), and the single process
beside them on the same PostgreSQL: durable pushes/s and push p50/p99 from bench.loadgen in its own
process, for the CNN and the MLP at 50 and 200 devices; the CPU spent by every server process
(API workers, aggregator, Redis, PostgreSQL backends) per push; how far the aggregator kept up (its
applied pushes/s, the queue left at the end). Then the aggregator alone: a queue filled beforehand and
drained in batches, updates/s (target ≥ 5,000 for the CNN). Writes docs/results/scale-out.md/.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from fleet.process import ENROLL, ServerProcess
from fleet.topology import Topology, queue_length
from lab import bench as lab_bench
from lab.bench import machine
from lab.bench.plans import SCALE_OUT_FULL, SCALE_OUT_QUICK, ScaleOutPlan
from lab.contract import Context, Result
from tests.support.faults import scratch_postgres_database

POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
APPLY_TARGET = 5000  # CNN updates/s the aggregator must sustain in batches


def server_cpu_seconds(roots: list[int]) -> float:
    """User + system CPU of the given processes and their children, plus every PostgreSQL backend."""
    seen, total = set(), 0.0
    procs = []
    for pid in roots:
        try:
            root = psutil.Process(pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    procs += [p for p in psutil.process_iter(["name"]) if p.info["name"] in ("postgres", "postmaster")]
    for proc in procs:
        if proc.pid in seen:
            continue
        seen.add(proc.pid)
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def commits(database_url: str) -> int:
    """Transactions committed in the run's database so far (PostgreSQL's own count)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as connection:
            sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            return int(connection.execute(text(sql)).scalar_one())
    finally:
        engine.dispose()


def current_version(database_url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT max(current_version) FROM models")).scalar_one() or 0)
    finally:
        engine.dispose()


def loadgen(url: str, devices: int, seconds: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "lab.bench.loadgen", url, ENROLL, str(devices), str(seconds)],
        capture_output=True,
        text=True,
        timeout=seconds + 180,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(url: str, roots: list[int], database_url: str, devices: int, seconds: float) -> dict[str, Any]:
    cpu0, version0, t0 = server_cpu_seconds(roots), current_version(database_url), time.monotonic()
    commits0 = commits(database_url)
    load = loadgen(url, devices, seconds)
    elapsed = time.monotonic() - t0
    cpu = server_cpu_seconds(roots) - cpu0
    transactions = commits(database_url) - commits0
    applied = current_version(database_url) - version0
    pushes = load["pushes"]
    return {
        "pushes/s": load["pushes_per_s"],
        "push p50 ms": load["push_p50_ms"],
        "push p99 ms": load["push_p99_ms"],
        "task p99 ms": load["task_p99_ms"],
        "server CPU µs/push": round(cpu / pushes * 1e6) if pushes else None,
        # PostgreSQL transactions per push: group commit's batching (statistics lag a little)
        "commits/push": round(transactions / pushes, 2) if pushes else None,
        "applied/s": round(applied / elapsed, 1),  # includes enrollment and start-up: a lower bound
        "queue left": queue_length(database_url),  # acknowledged, not applied yet when the load ended
    }


def topology_row(model: str, workers: int, devices: int, seconds: float, workdir: Path) -> dict[str, Any]:
    with (
        scratch_postgres_database(POSTGRES) as url,
        Topology(workdir, url, workers=workers, initial_model=model) as t,
    ):
        parts = (t.api, t.aggregator, t.redis)
        roots = [part.process.pid for part in parts if part is not None and part.process is not None]
        row = measure(t.url, roots, url, devices, seconds)
    return {
        "model": model,
        "topology": f"{workers} API worker{'s' * (workers > 1)} + aggregator",
        "devices": devices,
        **row,
    }


def single_row(model: str, devices: int, seconds: float, workdir: Path) -> dict[str, Any]:
    with (
        scratch_postgres_database(POSTGRES) as url,
        ServerProcess(workdir, database_url=url, initial_model=model) as s,
    ):
        row = measure(s.url, [s.process.pid], url, devices, seconds)  # type: ignore[union-attr]
    return {"model": model, "topology": "single process", "devices": devices, **row}


def aggregator_rate(model: str, pushes: int, batch: int = 256) -> dict[str, Any]:
    """Fill the queue with ``pushes`` through an API worker core, then time one aggregator draining it."""
    from server.compose import build_coordinator, build_store
    from server.core.types import TaskRequest, TaskResult
    from server.scale.aggregator import AggregatorStore, drain, take_lease
    from server.settings import Settings

    with tempfile.TemporaryDirectory() as tmp, scratch_postgres_database(POSTGRES) as url:
        base = dict(
            data_dir=Path(tmp), enrollment_key="k", admin_token="a", initial_model=model, eval_data=None
        )
        store = build_store(Settings(**base, database_url=url))
        token = take_lease(store, "bench", 60.0, threading.Event())
        assert token is not None
        fenced = AggregatorStore(store, holder="bench", token=token, ttl=60.0, announcer=None)
        aggregator = build_coordinator(
            Settings(**base, database_url=url, role="aggregator", aggregator_batch=batch), store=fenced
        )
        worker = build_coordinator(Settings(**base, database_url=url, role="api"))
        manifest = worker.run.manifest  # type: ignore[union-attr]
        rng = np.random.default_rng(0)
        body = (rng.standard_normal(manifest.num_params) * 1e-4).astype("<f4")
        counts = np.zeros(manifest.num_classes, np.int64)
        counts[0] = 10
        features = {"total_memory": 4e9, "available_memory": 1e9}
        devices = [worker.enroll(f"Bench {i % 5}")[0] for i in range(50)]
        tickets = []
        for i in range(pushes):
            device = devices[i % len(devices)]
            grant = worker.request_task(TaskRequest(device, features, counts))
            result = TaskResult(counts, 1.0, 50.0, None, 10, body, f"{i:064x}")
            tickets.append(worker.submit_nowait(device, grant.task_id, result)[1])  # type: ignore[union-attr]
        for ticket in tickets:
            ticket.wait()
        worker.close()
        stop = threading.Event()
        cpu0, t0 = time.process_time(), time.perf_counter()
        thread = threading.Thread(target=lambda: drain(aggregator, fenced, batch=batch, stop=stop))
        thread.start()
        while queue_length(url):
            time.sleep(0.02)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        stop.set()
        thread.join()
        version = aggregator.run.version  # type: ignore[union-attr]
        aggregator.close()
    return {
        "model": model,
        "pushes": pushes,
        "batch": batch,
        "updates/s": round(pushes / elapsed),
        "aggregator CPU µs/update": round(cpu / pushes * 1e6),
        "versions made": version,
        "target": APPLY_TARGET if model == "mnist_cnn" else None,
    }


def table(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += [
        "| " + " | ".join("" if row.get(k) is None else str(row.get(k)) for k in keys) + " |" for row in rows
    ]
    return "\n".join(lines)


def run(plan: ScaleOutPlan, ctx: Context) -> Result:
    """The topology curve (1, 2, 4 workers) beside the single process, then the aggregator alone."""
    seconds = plan.seconds
    rows, before = [], machine()
    with tempfile.TemporaryDirectory() as tmp, ctx.steps("throughput runs") as steps:
        for model in plan.models:
            for devices in plan.device_counts:
                rows.append(single_row(model, devices, seconds, Path(tmp) / f"single-{model}-{devices}"))
                print(rows[-1], flush=True)
                steps.advance()
                for workers in plan.worker_counts:
                    work = Path(tmp) / f"w{workers}-{model}-{devices}"
                    rows.append(topology_row(model, workers, devices, seconds, work))
                    print(rows[-1], flush=True)
                    steps.advance()
    rates = [aggregator_rate(model, plan.aggregator_updates, batch=512) for model in plan.models]
    for rate in rates:
        print(rate, flush=True)
    result = {
        "name": "scale-out",
        "machine": before,
        "machine_after": machine(),
        "throughput": rows,
        "aggregator": rates,
    }
    cnn = next(r for r in rates if r["model"] == "mnist_cnn")
    summary = (
        f"scale-out: {len(rows)} throughput runs; aggregator {cnn['updates/s']} CNN updates/s "
        f"(target {APPLY_TARGET}) → docs/results/{ctx.name}.md"
    )
    return Result({"text": summary}, records=result)


def report(result: dict[str, Any]) -> str:
    m, after = result["machine"], result["machine_after"]
    return f"""# Scale-out: API workers + one aggregator (issue 18)

Written by `python -m lab run scale-out` (bench/scale_out.py), {m["date"]}.
Machine: {m["cpu"]}, {m["cores"]} cores, load average {m["load_average"]} before and
{after["load_average"]} after; Python {m["python"]}.

## Throughput by topology

Each row: a fresh PostgreSQL database; `bench.loadgen` (its own process, one HTTP client per device, a
request → pull → push loop with a synthetic gradient) for the run's length over loopback. *single
process*: `fleet serve` on PostgreSQL. *N API workers + aggregator*: `fleet serve --role api --workers
N`, `fleet serve --role aggregator`, a Redis of its own (docs/scale-out.md). A push is acknowledged once
durable: applied (single) or queued (workers). *server CPU µs/push*: user + system CPU of every server
process (uvicorn master and workers, the aggregator, Redis, every PostgreSQL backend on the machine)
during the run, divided by the pushes acknowledged; *commits/push*: PostgreSQL transactions committed in
the run's database per push (group commit's batching). *applied/s*: versions the aggregator made during
the run (start-up included); *queue left*: acknowledged and not applied yet when the load stopped
(the aggregator falling behind). Everything, load generator included, shares the machine's
{m["cores"]} cores.

{table(result["throughput"])}

## The aggregator alone

A queue filled beforehand through an API worker's core (same database), then drained by one aggregator
in batches of 512 (read, apply in order with the default strategy, commit with the queue rows' deletion
and the fence): updates per second of wall time, and the aggregator process's CPU per update (its
journal's writer thread included; PostgreSQL's own CPU not).

{table(result["aggregator"])}
"""


EXPERIMENT = lab_bench.own(
    "scale-out", "scale-out", SCALE_OUT_QUICK, SCALE_OUT_FULL, run,
    lambda result, plan: report(result.records),
)  # fmt: skip
