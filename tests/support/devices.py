"""Devices that ride out faults: the load of the soak and chaos benchmarks (loopback only, bounded).

Each device enrolls, then loops request → pull → push, answering the granted batch size with label
counts that sum to it. A push is retried with the same body after a dropped connection or a 503 until
it is answered (a retry of a push that was stored is told ``duplicate``), so every task the coordinator
acknowledges is known here. Run ``python -m tests.support.devices URL KEY DEVICES SECONDS OUT.json`` as
its own process (a coordinator killed under it must not take the load down too); it writes what it saw to
OUT.json: acknowledged tasks, answers by status code, 503s without Retry-After, connection errors.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np

from client._transport import encode_push

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
RETRYABLE = {429, 503}


@dataclass
class Tally:
    """What the devices saw, merged over all of them."""

    statuses: Counter[str] = field(default_factory=Counter)  # "POST /v1/tasks 201" → count
    acknowledged: dict[str, dict[str, Any]] = field(default_factory=dict)  # task id → its first answer
    connection_errors: int = 0
    missing_retry_after: int = 0
    server_errors: list[str] = field(default_factory=list)  # "route status body" of every 5xx but 503
    gave_up: int = 0  # pushes still unanswered at the deadline's grace end

    def saw(self, route: str, response: httpx.Response) -> None:
        self.statuses[f"{route} {response.status_code}"] += 1
        if response.status_code == 503 and "retry-after" not in response.headers:
            self.missing_retry_after += 1
        if response.status_code >= 500 and response.status_code != 503:
            self.server_errors.append(f"{route} {response.status_code} {response.text[:200]}")


class Device:
    def __init__(self, client: httpx.AsyncClient, key: str, index: int, tally: Tally) -> None:
        self.client, self.key, self.index, self.tally = client, key, index, tally
        self.rng = np.random.default_rng(index)

    async def call(self, method: str, url: str, route: str, **kwargs: Any) -> httpx.Response | None:
        """One request; None after a connection error (the coordinator may be restarting)."""
        try:
            response = await self.client.request(method, url, **kwargs)
        except httpx.TransportError:
            self.tally.connection_errors += 1
            return None
        self.tally.saw(route, response)
        return response

    async def pause(self, response: httpx.Response | None) -> None:
        retry_after = 0.5 if response is None else float(response.headers.get("retry-after", 0.5))
        await asyncio.sleep(min(retry_after, 2.0) * (0.5 + self.rng.random()))

    async def enroll(self, deadline: float) -> dict[str, str] | None:
        body = {"enrollment_key": self.key, "device_model": f"Soak {self.index % 5}"}
        while time.monotonic() < deadline:
            response = await self.call("POST", "/v1/devices", "POST /v1/devices", json=body)
            if response is not None and response.status_code == 201:
                return {"Authorization": f"Bearer {response.json()['token']}"}
            await self.pause(response)
        return None

    async def run(self, deadline: float, grace: float) -> None:
        auth = await self.enroll(deadline)
        if auth is None:
            return
        active = await self.call("GET", "/v1/models/active", "GET active")
        classes = active.json()["num_classes"] if active is not None and active.status_code == 200 else 10
        while time.monotonic() < deadline:
            body = {"label_counts": [1] * classes, "features": {"total_memory": 4e9, "available_memory": 1e9}}
            response = await self.call("POST", "/v1/tasks", "POST /v1/tasks", json=body, headers=auth)
            if response is None or response.status_code != 201:
                await self.pause(response)
                continue
            task = response.json()
            pulled = await self.call("GET", task["params_url"], "GET params", headers=auth)
            if pulled is None or pulled.status_code != 200:
                continue
            n = len(pulled.content) // 4
            await self.push(task, n, classes, auth, deadline + grace)

    async def push(
        self, task: dict[str, Any], n: int, classes: int, auth: dict[str, str], until: float
    ) -> None:
        """Push one gradient, the same bytes again after each fault, until it is answered."""
        size = int(task["batch_size"])
        counts = np.bincount(self.rng.integers(0, classes, size), minlength=classes).tolist()
        meta = {
            "label_counts": counts,
            "loss": 1.0,
            "compute_time_ms": 50.0,
            "energy": 0.001,
            "batch_size": size,
        }
        gradient = (self.rng.standard_normal(n) * 1e-4).astype("<f4")
        headers, content = encode_push(meta, gradient)
        url = f"/v1/tasks/{task['task_id']}/result"
        while time.monotonic() < until:
            response = await self.call(
                "POST", url, "POST result", content=content, headers={**auth, **headers}
            )
            if response is None or response.status_code in RETRYABLE:
                await self.pause(response)
                continue
            if response.status_code == 200:
                outcome = response.json()
                self.tally.acknowledged.setdefault(task["task_id"], outcome)
            return  # 4xx: the lease expired or the task is unknown after a crash; ask for a new one
        self.tally.gave_up += 1


async def run_devices(url: str, key: str, devices: int, seconds: float, grace: float = 30.0) -> Tally:
    if urlparse(url).hostname not in LOOPBACK:
        raise SystemExit("load tests only target loopback")
    tally = Tally()
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)

    async def one(index: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
            await Device(client, key, index, tally).run(deadline, grace)

    await asyncio.gather(*(one(i) for i in range(devices)))
    return tally


def main(argv: list[str]) -> None:
    url, key, devices, seconds, out = argv[0], argv[1], int(argv[2]), float(argv[3]), Path(argv[4])
    tally = asyncio.run(run_devices(url, key, devices, seconds))
    out.write_text(
        json.dumps(
            {
                "statuses": dict(tally.statuses),
                "acknowledged": tally.acknowledged,
                "connection_errors": tally.connection_errors,
                "missing_retry_after": tally.missing_retry_after,
                "server_errors": tally.server_errors,
                "gave_up": tally.gave_up,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
