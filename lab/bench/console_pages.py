"""`python -m lab run console`: how long each console page takes the server with 1,000 devices and
10,000 tasks.

The database is filled through the core itself (enrollments, task grants, pushes of small random
gradients to the default strategy and model), then every page, dataset and chart is requested by a
logged-in client in the same process, with no network in between: the time measured is the server's
(plus a fraction of a millisecond of in-process client). Writes docs/results/console-pages.md/.json.
"""

from __future__ import annotations

import hashlib
import re
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from lab import bench as lab_bench
from lab.bench import command, machine
from lab.bench.plans import CONSOLE_FULL, CONSOLE_QUICK, ConsolePlan
from lab.contract import Context, Result

TARGET_MS = 50.0
USER, PASSWORD = "bench", "bench-password-1"
FEATURES = {"available_memory": 1e9, "total_memory": 4e9, "temperature": 30.0, "cpu_freq_sum": 8000.0}
PHONES = ("Galaxy S6", "Galaxy S7", "Galaxy S8", "Galaxy S9", "Galaxy S10", "Pixel 6", "Pixel 7", "Pixel 8")


def fill(coordinator: Any, *, devices: int, tasks: int, seed: int = 0) -> None:
    """``devices`` enrolled devices and ``tasks`` answered tasks, through the core's own calls."""
    from server.core.types import TaskGrant, TaskRequest, TaskResult

    rng = np.random.default_rng(seed)
    ticket = None
    enrolled = [coordinator.enroll(PHONES[i % len(PHONES)])[0] for i in range(devices)]
    n = coordinator.run.manifest.num_params
    with Progress(transient=True) as progress:
        bar = progress.add_task(f"{tasks:,} tasks", total=tasks)
        for i in range(tasks):
            device = enrolled[i % devices]
            counts = rng.integers(0, 10, 10)
            grant = coordinator.request_task(
                TaskRequest(device=device, features=FEATURES, label_counts=counts)
            )
            if not isinstance(grant, TaskGrant):
                continue
            gradient = (rng.standard_normal(n) * 1e-3).astype(np.float32)
            result = TaskResult(
                label_counts=rng.multinomial(grant.batch_size, np.full(10, 0.1)),
                loss=2.0,
                compute_time_ms=float(rng.uniform(50, 900)),
                energy=None,
                batch_size=grant.batch_size,
                gradient=gradient,
                digest=hashlib.sha256(gradient).hexdigest(),
            )
            _, ticket = coordinator.submit_nowait(device, grant.task_id, result)
            progress.advance(bar)
    if ticket is not None:
        ticket.wait()  # group commit: once the last push is durable, every earlier one is
    # evaluation rows for the charts to draw (placeholder accuracies: only the page times are measured)
    for version in range(0, coordinator.run.version, 50):
        coordinator.record_evaluation(coordinator.run.model_id, version, 0.1 + 0.8 * version / 10_000, 1.0)


def time_pages(client: Any, paths: list[str], repeats: int) -> dict[str, dict[str, float]]:
    """p50 / p95 / max of each path's in-process round trip, in ms (one warm-up request first)."""
    figures = {}
    for path in paths:
        assert client.get(path).status_code == 200, path
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            response = client.get(path)
            samples.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, path
        samples.sort()
        figures[path] = {
            "p50_ms": round(statistics.median(samples), 2),
            "p95_ms": round(samples[int(0.95 * (len(samples) - 1))], 2),
            "max_ms": round(samples[-1], 2),
        }
    return figures


def run(plan: ConsolePlan, ctx: Context) -> Result:
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

    from server.api.app import create_app
    from server.console.charts import CHARTS
    from server.console.figures import DATASETS
    from server.settings import Settings

    devices, tasks, repeats = plan.devices, plan.tasks, plan.repeats
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=Path(tmp), console_user=USER, console_password=PASSWORD, eval_data=None,
            enrollment_key="bench-enroll", admin_token="bench-admin",
        )  # fmt: skip
        app = create_app(settings)
        with TestClient(app, base_url="http://127.0.0.1") as client:
            started = time.perf_counter()
            fill(app.state.coordinator, devices=devices, tasks=tasks)
            fill_s = time.perf_counter() - started
            form = client.get("/admin/login").text
            token = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
            client.post("/admin/login", data={"username": USER, "password": PASSWORD, "csrf_token": token})
            pages = ["/admin", "/admin/learning", "/admin/devices", "/admin/devices/models/Galaxy%20S7",
                     "/admin/models", "/admin/settings", "/admin/privacy", "/admin/audit"]  # fmt: skip
            data = ["/admin/data/overview.json"] + [
                f"/admin/data/{d}.json" for d in DATASETS if d != "measurements"
            ]
            data += [f"/admin/charts/{c}" for c in CHARTS if c != "measurements"]
            data += ["/admin/charts/measurements?device_model=Galaxy%20S7"]
            figures = time_pages(client, pages + data, repeats)
            stats = app.state.coordinator.store.task_counts(app.state.coordinator.run.model_id)
    worst_page = max(figures[p]["p50_ms"] for p in pages)
    result = {
        "command": command("console", plan),
        "devices": devices,
        "tasks": sum(stats.values()),
        "fill_s": round(fill_s, 1),
        "repeats": repeats,
        "target_ms": TARGET_MS,
        "pages": {p: figures[p] for p in pages},
        "data": {p: figures[p] for p in data},
        "worst_page_p50_ms": worst_page,
        "met": worst_page < TARGET_MS,
        "machine": machine(),
    }
    summary = f"console pages: worst p50 {worst_page:.1f} ms (target < {TARGET_MS:.0f} ms)"
    return Result({"text": summary}, records=result)


def report(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [
        "# Console page times",
        "",
        f"`{r['command']}`: {r['devices']:,} devices and {r['tasks']:,} tasks in a SQLite database",
        f"(filled through the core in {r['fill_s']} s), each path requested {r['repeats']} times by a",
        "logged-in client in the same process (no network: the time is the server's). Target: every page",
        f"under {r['target_ms']:.0f} ms. Worst page p50: **{r['worst_page_p50_ms']:.1f} ms** "
        f"({'met' if r['met'] else 'missed'}).",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, load {m['load_average']}, {m['date']}.",
        "",
        "| page | p50 ms | p95 ms | max ms |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{p}` | {f['p50_ms']} | {f['p95_ms']} | {f['max_ms']} |" for p, f in r["pages"].items()]
    lines += ["", "The data behind the charts (fetched by each page every 3 s):", "",
              "| path | p50 ms | p95 ms | max ms |", "|---|---|---|---|"]  # fmt: skip
    lines += [f"| `{p}` | {f['p50_ms']} | {f['p95_ms']} | {f['max_ms']} |" for p, f in r["data"].items()]
    return "\n".join(lines) + "\n"


EXPERIMENT = lab_bench.own(
    "console", "console-pages", CONSOLE_QUICK, CONSOLE_FULL, run, lambda result, plan: report(result.records)
)
