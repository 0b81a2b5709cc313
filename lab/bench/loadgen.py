"""Load generator: many simulated devices in one asyncio process, loopback only, bounded in time.

Each device enrolls, then loops request → pull → push with a synthetic gradient (the server's cost is
what is measured, not the device's). Run as ``python -m bench.loadgen URL KEY DEVICES SECONDS`` from a
separate process; prints one JSON line with counts and latency percentiles.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np

from client._transport import META_HEADER, encode_push


class Barrier:
    """asyncio.Barrier with an action run once when the last party arrives."""

    def __init__(self, parties: int, *, action) -> None:  # type: ignore[no-untyped-def]
        self._barrier = asyncio.Barrier(parties)
        self._action = action

    async def wait(self) -> None:
        if await self._barrier.wait() == 0:
            self._action()
        await asyncio.sleep(0)


LOOPBACK = {"127.0.0.1", "localhost", "::1"}


async def device(url: str, key: str, index: int, clock: dict[str, Any], out: dict[str, list]) -> None:
    """One phone: its own client and connection (a pool shared by hundreds of coroutines serialises on
    its lock and measured the load generator instead of the server: 159 vs 567 req/s on a trivial app)."""
    # plain HTTP on loopback: no TLS context to build (it cost ~50 ms of CPU per device at start-up)
    async with httpx.AsyncClient(base_url=url, timeout=60, verify=url.startswith("https")) as client:
        await device_loop(client, key, index, clock, out)


async def device_loop(
    client: httpx.AsyncClient, key: str, index: int, clock: dict[str, Any], out: dict[str, list]
) -> None:
    enrolled = await client.post(
        "/v1/devices", json={"enrollment_key": key, "device_model": f"Bench {index % 5}"}
    )
    headers = {"Authorization": f"Bearer {enrolled.json()['token']}"}
    active = (await client.get("/v1/models/active")).json()
    classes, n = active["num_classes"], active["num_params"]
    rng = np.random.default_rng(index)
    gradient = (rng.standard_normal(n) * 1e-4).astype("<f4").tobytes()
    counts = [0] * classes
    counts[index % classes] = 10
    meta = {"label_counts": counts, "loss": 1.0, "compute_time_ms": 50.0, "energy": 0.001, "batch_size": 10}
    # encoded once with the device client's own encoder (a raw body, the meta in a header)
    push_headers, push_body = encode_push(meta, np.frombuffer(gradient, "<f4"))
    body = {"label_counts": counts, "features": {"total_memory": 4e9, "available_memory": 1e9}}
    await clock["barrier"].wait()  # enrollment is not timed: every device starts together
    while "deadline" not in clock:  # the barrier's action sets it
        await asyncio.sleep(0)
    deadline = clock["deadline"]
    while time.monotonic() < deadline:
        started = time.perf_counter()
        response = await client.post("/v1/tasks", json=body, headers=headers)
        out["task_ms"].append((time.perf_counter() - started) * 1e3)
        if response.status_code != 201:
            out["rejected"].append(response.status_code)
            await asyncio.sleep(0.05)
            continue
        task = response.json()
        started = time.perf_counter()
        params = await client.get(task["params_url"])
        out["pull_ms"].append((time.perf_counter() - started) * 1e3)
        out["pull_bytes"].append(len(params.content))
        started = time.perf_counter()
        pushed = await client.post(
            f"/v1/tasks/{task['task_id']}/result",
            content=push_body,
            headers={**headers, **push_headers},
        )
        out["push_ms"].append((time.perf_counter() - started) * 1e3)
        if pushed.status_code == 200:
            out["push_bytes"].append(len(push_body) + len(push_headers[META_HEADER]))
        else:
            out["failed"].append(pushed.status_code)


async def main(url: str, key: str, devices: int, seconds: float) -> dict[str, object]:
    if urlparse(url).hostname not in LOOPBACK:
        raise SystemExit("load tests only target loopback")
    out: dict[str, list] = {
        k: [] for k in ("task_ms", "pull_ms", "push_ms", "pull_bytes", "push_bytes", "rejected", "failed")
    }
    clock: dict[str, Any] = {}

    def start() -> None:
        clock["started"] = time.monotonic()
        clock["deadline"] = clock["started"] + seconds

    clock["barrier"] = Barrier(devices, action=start)
    await asyncio.gather(*(device(url, key, i, clock, out) for i in range(devices)))
    elapsed = time.monotonic() - clock["started"]

    def pct(values: list[float], q: float) -> float | None:
        return round(float(np.percentile(values, q)), 2) if values else None

    return {
        "devices": devices,
        "seconds": round(elapsed, 2),
        "pushes": len(out["push_bytes"]),
        "pushes_per_s": round(len(out["push_bytes"]) / elapsed, 1),
        "task_p50_ms": pct(out["task_ms"], 50),
        "task_p99_ms": pct(out["task_ms"], 99),
        "pull_p50_ms": pct(out["pull_ms"], 50),
        "push_p50_ms": pct(out["push_ms"], 50),
        "push_p99_ms": pct(out["push_ms"], 99),
        "rejected": len(out["rejected"]),
        "failed": len(out["failed"]),
        "pull_bytes": int(np.mean(out["pull_bytes"])) if out["pull_bytes"] else 0,
        "push_bytes": int(np.mean(out["push_bytes"])) if out["push_bytes"] else 0,
    }


if __name__ == "__main__":
    url, key, devices, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    print(json.dumps(asyncio.run(main(url, key, devices, seconds))))
