"""The simulator's gradients on Ray: a pool of long-lived actors computes them ahead of the virtual clock.

The virtual clock, the event queue and the coordinator core stay in the driver; only the ONNX training
graph runs on the actors. Each actor holds one onnxruntime session (1 intra-op thread: one actor per
CPU is the parallelism) and the training set, which is put into the object store once and read
zero-copy by every actor on the same node. A version's parameters travel inline with the first call
that needs them (a put costs more than the call, and with an update per gradient most versions serve
one task); a version a later call needs too is put once and passed by reference from then on.
Work is sent in chunks of the earliest-due granted tasks, and only a bounded window of them is in
flight: with 100,000 devices thousands of tasks are outstanding in virtual time, and computing all of
them at grant time would hold thousands of gradients and waste those the run never collects. A task
whose push comes before it was sent is sent at once (with the next earliest-due ones).

Only this module imports ray, lazily: the server, the client and the local simulator never do.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import numpy as np

from sim.backends import BackendStats, BackendUnavailable

INSTALL_HINT = "the Ray backend needs ray: pip install -e .[ray]"


def import_ray() -> Any:
    """``ray``, or ``BackendUnavailable`` with the install command when it is missing."""
    try:
        import ray
    except ImportError as exc:
        raise BackendUnavailable(INSTALL_HINT) from exc
    return ray


class GradientWorker:
    """One actor's state: the training graph's session and the training set (wrapped by ``ray.remote``)."""

    def __init__(self, manifest: Any, train_onnx: bytes, x: np.ndarray, y: np.ndarray) -> None:
        from client import GradientSession

        self.session = GradientSession(manifest, train_onnx, threads=1)
        self.x, self.y = x, y

    def ready(self) -> bool:
        """Answered once the actor is up (its start is setup time, not the run's)."""
        return True

    def compute(
        self, batches: list[np.ndarray], which: list[int], *params: np.ndarray
    ) -> tuple[list[float], np.ndarray, float]:
        """Each task's loss and gradient (stacked, one row per task) and the seconds spent computing;
        task k uses ``params[which[k]]`` (a chunk shares each version's parameters)."""
        t0 = time.perf_counter()
        losses: list[float] = []
        rows: list[np.ndarray] = []
        for batch, w in zip(batches, which, strict=True):
            loss, gradient = self.session.loss_and_gradient(params[w], self.x[batch], self.y[batch])
            losses.append(loss)
            rows.append(gradient)
        return losses, np.stack(rows), time.perf_counter() - t0


class RayBackend:
    """``GradientBackend`` on a Ray cluster: a local one of ``workers`` CPUs, or the one at ``address``."""

    def __init__(
        self,
        bench: Any,
        *,
        workers: int | None = None,
        address: str | None = None,
        chunk: int = 8,
        depth: int = 3,
        versions_kept: int = 256,
    ) -> None:
        """``chunk`` tasks per remote call (a CNN gradient is ~7 ms, a call ~0.5 ms of overhead);
        ``depth`` chunks in flight per actor; the ``versions_kept`` newest versions' object refs are
        cached so that a version is put at most once."""
        ray = import_ray()
        self.ray = ray
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            if address:
                ray.init(address=address, log_to_driver=False)  # the cluster's own settings stand
            else:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        n = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        actor = ray.remote(num_cpus=1)(GradientWorker)
        x_ref, y_ref = ray.put(bench.train.x), ray.put(bench.train.y)
        self.actors = [
            actor.remote(bench.bundle.manifest, bench.bundle.train_onnx, x_ref, y_ref) for _ in range(n)
        ]
        ray.get([a.ready.remote() for a in self.actors])
        self.chunk, self.window = max(1, chunk), n * max(1, chunk) * max(1, depth)
        self.low = n * self.chunk
        self.stats = BackendStats()
        self._versions: OrderedDict[int, Any] = OrderedDict()  # version → its ref in the object store
        self._inlined: OrderedDict[int, None] = OrderedDict()  # versions sent inline once
        self._versions_kept = versions_kept
        self._pending: dict[Hashable, tuple[int, np.ndarray, np.ndarray]] = {}
        self._due: list[tuple[float, int, Hashable]] = []  # heap over _pending (stale entries skipped)
        self._seq = 0
        self._chunks: dict[int, tuple[Any, list[Hashable], int]] = {}  # id → (ref, keys, actor)
        self._where: dict[Hashable, int] = {}  # submitted key → chunk id
        self._ready: dict[Hashable, tuple[float, np.ndarray]] = {}
        self._load = [0] * n  # chunks outstanding per actor
        self._in_flight = 0

    def __repr__(self) -> str:
        return f"RayBackend(actors={len(self.actors)}, chunk={self.chunk}, window={self.window})"

    def submit(self, key: Hashable, version: int, params: np.ndarray, batch: np.ndarray, due: float) -> None:
        self._pending[key] = (version, params, batch)
        heapq.heappush(self._due, (due, self._seq, key))
        self._seq += 1
        self._fill(partial=False)

    def collect(self, key: Hashable) -> tuple[float, np.ndarray]:
        if key not in self._ready:
            if key in self._pending:
                self._send([key, *self._earliest(self.chunk - 1, exclude=key)])
            self._fill(partial=True)
            self._receive(self._where[key])
        self.stats.collected += 1
        return self._ready.pop(key)

    def drain(self) -> int:
        dropped = len(self._pending) + len(self._where) + len(self._ready)
        # Calls already sent still run (at most one window): their results are dropped with the refs.
        self.stats.wasted += len(self._where) + len(self._ready)
        self._pending.clear()
        self._due.clear()
        self._chunks.clear()
        self._where.clear()
        self._ready.clear()
        self._load = [0] * len(self.actors)
        self._in_flight = 0
        return dropped

    def close(self) -> None:
        self.drain()
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []
        if self.owns_ray:
            self.ray.shutdown()

    def _earliest(self, n: int, exclude: Hashable = None) -> list[Hashable]:
        """Up to ``n`` not-yet-sent keys, earliest due first (taken off the heap)."""
        keys: list[Hashable] = []
        while self._due and len(keys) < n:
            _, _, key = heapq.heappop(self._due)
            if key in self._pending and key != exclude:
                keys.append(key)
        return keys

    def _fill(self, *, partial: bool) -> None:
        """Send full chunks of the earliest-due tasks while the window has room; at a collection, also
        partial ones while less than a chunk per actor is queued (else the actors would go idle)."""
        while self._in_flight + self.chunk <= self.window and len(self._pending) >= self.chunk:
            self._send(self._earliest(self.chunk))
        while partial and self._pending and self._in_flight < self.low:
            self._send(self._earliest(min(self.chunk, self.window - self._in_flight)))

    def _params_arg(self, version: int, params: np.ndarray) -> Any:
        """The parameters inline at a version's first call, its object ref from the second on."""
        ref = self._versions.get(version)
        if ref is not None:
            return ref
        if version not in self._inlined:
            self._inlined[version] = None
            if len(self._inlined) > self._versions_kept:
                self._inlined.popitem(last=False)
            return params
        ref = self._versions[version] = self.ray.put(params)
        if len(self._versions) > self._versions_kept:
            self._versions.popitem(last=False)  # calls already sent keep their ref alive
        return ref

    def _send(self, keys: list[Hashable]) -> None:
        if not keys:
            return
        refs: list[Any] = []
        index: dict[int, int] = {}
        batches: list[np.ndarray] = []
        which: list[int] = []
        for key in keys:
            version, params, batch = self._pending.pop(key)
            if version not in index:
                index[version] = len(refs)
                refs.append(self._params_arg(version, params))
            batches.append(batch)
            which.append(index[version])
        a = min(range(len(self.actors)), key=self._load.__getitem__)
        ref = self.actors[a].compute.remote(batches, which, *refs)
        cid = self.stats.calls
        self.stats.calls += 1
        self._chunks[cid] = (ref, keys, a)
        for key in keys:
            self._where[key] = cid
        self._load[a] += 1
        self._in_flight += len(keys)

    def _receive(self, cid: int) -> None:
        ref, keys, a = self._chunks.pop(cid)
        t0 = time.perf_counter()
        losses, stacked, seconds = self.ray.get(ref)
        self.stats.seconds_wait += time.perf_counter() - t0
        gradients = np.array(stacked)  # writable: the object store's copy is read-only
        self.stats.seconds_compute += seconds
        self.stats.computed += len(keys)
        for key, loss, gradient in zip(keys, losses, gradients, strict=True):
            self._ready[key] = (loss, gradient)
            del self._where[key]
        self._load[a] -= 1
        self._in_flight -= len(keys)
