"""Device memory and size: a worker's resident memory after 100 tasks, and what the client installs."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from lab.bench.plans import MemoryPlan

CLIENT_DISTRIBUTIONS = ("numpy", "onnxruntime", "httpx", "psutil")
RSS_TARGET_MB = 150

WORKER_SCRIPT = """
import json, sys, psutil
from client import Worker, WorkerConfig
url, key, data, tasks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
worker = Worker(WorkerConfig(base_url=url, enrollment_key=key, data=data, max_tasks=tasks, seed=0))
summary = worker.run()
print(json.dumps({"tasks": summary.tasks, "rss_mb": psutil.Process().memory_info().rss / 2**20,
                  "torch_loaded": "torch" in sys.modules}))
"""


def installed_mb(names: tuple[str, ...] = CLIENT_DISTRIBUTIONS) -> dict[str, float]:
    """Size on disk of each distribution and everything it requires (transitively), in MB."""
    seen: dict[str, float] = {}

    def visit(name: str) -> None:
        key = name.lower().replace("_", "-")
        if key in seen:
            return
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return
        size = 0
        for file in dist.files or []:
            path = Path(dist.locate_file(file))
            if path.is_file():
                size += path.stat().st_size
        seen[key] = size / 2**20
        for requirement in dist.requires or []:
            if "extra ==" in requirement:
                continue
            visit(
                requirement.split(";")[0]
                .split("[")[0]
                .split(" ")[0]
                .split("<")[0]
                .split(">")[0]
                .split("=")[0]
                .split("~")[0]
                .split("!")[0]
                .strip()
            )

    for name in names:
        visit(name)
    return seen


def worker_rss(tasks: int) -> dict[str, Any]:
    from fleet.process import ENROLL, ServerProcess
    from sim.data import write_shards

    with tempfile.TemporaryDirectory() as tmp:
        shards, _ = write_shards(Path(tmp) / "data", devices=1)
        with ServerProcess(Path(tmp) / "server", max_batch=100) as server:
            done = subprocess.run(
                [sys.executable, "-c", WORKER_SCRIPT, server.url, ENROLL, str(shards[0]), str(tasks)],
                capture_output=True,
                text=True,
                timeout=600,
            )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(plan: MemoryPlan) -> dict[str, Any]:
    rss = worker_rss(plan.worker_tasks)
    sizes = installed_mb()
    total = sum(sizes.values())
    rows = [
        {
            "figure": f"worker RSS after {rss['tasks']} tasks (MNIST CNN)",
            "value": f"{rss['rss_mb']:.0f} MB",
            "target": f"≤ {RSS_TARGET_MB} MB",
            "met": rss["rss_mb"] <= RSS_TARGET_MB,
        },
        {
            "figure": "torch imported by the worker",
            "value": rss["torch_loaded"],
            "target": "False",
            "met": not rss["torch_loaded"],
        },
        {
            "figure": "client dependencies installed",
            "value": f"{total:.0f} MB",
            "target": "no torch",
            "met": "torch" not in sizes,
        },
    ]
    rows += [
        {"figure": f"  {name}", "value": f"{mb:.1f} MB", "target": "", "met": ""}
        for name, mb in sorted(sizes.items(), key=lambda kv: -kv[1])
    ]
    print(
        f"memory: worker RSS {rss['rss_mb']:.0f} MB after {rss['tasks']} tasks (target ≤ {RSS_TARGET_MB}); "
        f"client dependencies {total:.0f} MB: " + ", ".join(f"{k} {v:.0f}" for k, v in sizes.items())
    )
    return {
        "name": "memory",
        "title": "Device memory and installed size",
        "table": rows,
        "note": "RSS of a `client.Worker` process (psutil) right after its last task; sizes are the files "
        "each distribution installed, with its requirements followed transitively.",
    }
