"""Devices an experiment schedules itself, on the coordinator core that `fleet serve` runs.

``run_controlled`` (sim/controlled.py) draws the next device at random and ``FleetSimulator``
(sim/fleet.py) lets simulated timing decide; some experiments fix the serving order instead: MAPA's K
edges round-robin (τ = K − 1), WKAFL's K of P devices per iteration, Kardam's shuffled round-robin of
equally fast workers, van Dijk's devices by their finishing times. ``ScriptedFleet`` gives such an
experiment a device's two calls and nothing more:

* ``ask``: ``Coordinator.request_task``; the grant and the parameters it names are kept on the device,
  fetched as the HTTP route serves them (float32, or rounded to float16 with ``encoding="float16"``);
* ``push``: the device's gradient, encoded as the worker encodes it (``fleet_protocol.encode_push``),
  decoded and digested as the push route does, then ``Coordinator.submit``.

What the device computes in between (a plain gradient, a DP step from the grant's terms, an attacker's
gradient) is the experiment's, with the client's own functions. The strategy is built as the composition
root builds it (``strategy_factory``: server.compose.build_strategy over Settings). Everything the core
does on the way (admission, leases, version retention, validation, ``ready()`` after every push) applies.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleet_protocol import Bundle
from fleet_protocol.wire import META_HEADER, decode_tensor, encode_push, push_digest
from server.core.types import Device, PushOutcome, Rejection, TaskGrant, TaskRequest, TaskResult
from server.strategies import Strategy
from sim.controlled import FEATURES
from sim.harness import BatchSizer, VirtualClock, build_core


def strategy_factory(**fields: Any) -> Callable[[], Strategy]:
    """The strategy `fleet serve` would run with these settings (server/compose.py: ``build_strategy``
    over ``Settings(**fields)``, e.g. ``strategy="mapa", tau_max=10`` or ``kardam=True``). Fields not given
    take Settings' defaults (FLEET_* variables apply as they would to the server; no .env file is read)."""
    from server.compose import build_strategy
    from server.settings import Settings

    settings = Settings(_env_file=None, **fields)  # validated once, as the server validates its settings
    return lambda: build_strategy(settings)


@dataclass
class ScriptedDevice:
    device: Device
    label_counts: np.ndarray  # of its local data: what the task request reports
    local_examples: int | None = None
    grant: TaskGrant | None = None
    params: np.ndarray | None = None  # the granted version's parameters, as downloaded


class ScriptedFleet:
    """``devices`` enrolled devices on a fresh core (in-memory SQLite, virtual clock: sim/harness.py)."""

    def __init__(
        self,
        bundle: Bundle,
        strategy: Callable[[], Strategy],
        *,
        label_counts: list[np.ndarray],
        local_examples: list[int] | None = None,
        batch: int = 100,
        encoding: str = "float32",
        version_policy: Callable[[TaskRequest, int], int] | None = None,
        version_retention: int = 200,
    ) -> None:
        self.clock = VirtualClock()
        self.encoding = encoding
        self.core = build_core(
            bundle,
            strategy,
            clock=self.clock,
            sizer=BatchSizer(mean=batch),
            version_policy=version_policy,
            version_retention=version_retention,
        )
        self.devices = [
            ScriptedDevice(
                self.core.enroll(f"sim-{i % 7}")[0],
                np.asarray(counts),
                None if local_examples is None else int(local_examples[i]),
            )
            for i, counts in enumerate(label_counts)
        ]
        self.rejections: dict[str, int] = {}

    @property
    def strategy(self) -> Strategy:
        assert self.core.run is not None
        return self.core.run.strategy

    @property
    def params(self) -> np.ndarray:
        assert self.core.run is not None
        return self.core.run.params

    @property
    def version(self) -> int:
        assert self.core.run is not None
        return self.core.run.version

    def device_id(self, i: int) -> str:
        return self.devices[i].device.device_id

    def ask(self, i: int) -> TaskGrant | Rejection:
        """Device ``i`` asks for a task; on a grant it downloads the version's parameters."""
        d = self.devices[i]
        answer = self.core.request_task(TaskRequest(d.device, FEATURES, d.label_counts, d.local_examples))
        if not isinstance(answer, TaskGrant):
            self.rejections[answer.reason] = self.rejections.get(answer.reason, 0) + 1
            return answer
        d.grant, d.params = answer, self.pull(answer)
        return answer

    def pull(self, grant: TaskGrant) -> np.ndarray:
        """The granted parameters as GET …/versions/{v}/params serves them in ``self.encoding``."""
        stored = self.core.catalog.params_bytes(grant.model_id, grant.version)
        if self.encoding == "float16":
            stored = np.frombuffer(stored, dtype="<f4").astype("<f2").tobytes()
        return decode_tensor(stored, self.encoding)

    def push(
        self,
        i: int,
        gradient: np.ndarray,
        *,
        loss: float,
        label_counts: np.ndarray | list[int],
        batch_size: int | None = None,
        compute_time_ms: float = 0.0,
    ) -> PushOutcome:
        """Device ``i`` pushes ``gradient`` for its task (raises what the core raises: InvalidInput…)."""
        d = self.devices[i]
        if d.grant is None:
            raise ValueError(f"device {i} holds no task")
        grant = d.grant
        meta = {
            "label_counts": [int(c) for c in label_counts],
            "loss": float(loss),
            "compute_time_ms": float(compute_time_ms),
            "energy": None,
            "batch_size": int(grant.batch_size if batch_size is None else batch_size),
        }
        headers, body = encode_push(meta, gradient, self.encoding)
        meta_bytes = headers[META_HEADER].encode()
        received = json.loads(meta_bytes)
        result = TaskResult(
            label_counts=np.asarray(received["label_counts"], dtype=np.int64),
            loss=received["loss"],
            compute_time_ms=received["compute_time_ms"],
            energy=received["energy"],
            batch_size=received["batch_size"],
            gradient=decode_tensor(body, received.get("encoding", "float32")),
            digest=push_digest(meta_bytes, body),
        )
        d.grant, d.params = None, None
        return self.core.submit(d.device, grant.task_id, result)
