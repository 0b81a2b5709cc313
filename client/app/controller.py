"""The app's engine, without any Kivy: drives the worker library in a thread and keeps what the screens show.

The worker stays the one implementation of the protocol; this class only feeds it settings, local
data and a ``hold`` rule (pause, rest, battery, metered network), turns its events into a ``Status`` the UI
polls, and saves the device token the coordinator gave. Nothing here runs on the UI thread for
long, and nothing escapes the worker thread: a fault becomes a message and a back-off.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import numpy as np

from client._data import DeviceData
from client._features import Conditions
from client._loop import WorkerEvent
from client._platform import Backends, backends
from client._transport import ApiClient
from client._worker import TaskReport, Worker, WorkerConfig

from .drawing import Drawings
from .model import Guess, ServedModel
from .settings import AppSettings, load_settings, save_settings, url_problem

__all__ = ["AppController", "Status", "TaskRow"]

logger = logging.getLogger("fleet.app")

REASONS = {
    "paused": "Training is paused by the coordinator's operator.",
    "small_batch": "This device is too slow for the time SLO at the moment.",
    "too_similar": "The coordinator has enough updates like this device's data for now.",
    "no_model": "No model is training on the coordinator.",
    "rate_limited": "Asking too often; the coordinator asked to slow down.",
    "storage_unavailable": "The coordinator's database is unavailable.",
}
HISTORY = 20
# the first run is not a problem: what to do next, in the calm "setup" state
FIRST_RUN = ("Welcome! To train, draw a digit in Try the model and tap the digit it is: the drawing stays on"
             " this phone as training data. Training starts with the first drawing.")  # fmt: skip
# a task that used every local example rests this long before the next on the same data (new drawings end
# the rest): a phone with 2 drawings otherwise recomputes the same tiny gradient back to back on battery
REST_SECONDS = 30.0
# the install secret and the privacy ledger, in the app's folder (Android: app storage, wiped on uninstall)
STATE_DIR = "device-state"


@dataclass(frozen=True)
class TaskRow:
    """One finished task as the status screen lists and charts it."""

    at: float
    version: int
    batch_size: int
    time_ms: float
    slo_time_ms: float | None
    energy: float | None
    slo_energy: float | None
    energy_source: str
    staleness: int
    applied: bool
    duplicate: bool

    @classmethod
    def of(cls, r: TaskReport) -> TaskRow:
        return cls(time.time(), r.version, r.batch_size, r.compute_time_ms, r.slo_time_ms, r.energy,
                   r.slo_energy, r.energy_source, r.staleness, r.applied, r.duplicate)  # fmt: skip


@dataclass(frozen=True)
class Status:
    """What the status screen shows; ``state`` is one of setup (first run: what to do), stopped,
    connecting, connected, training, paused, resting, waiting, error (a real problem), finished."""

    state: str = "stopped"
    message: str = ""
    retry_at: float | None = None
    task: str = ""
    device_id: str = ""
    tasks: tuple[TaskRow, ...] = field(default_factory=tuple)
    done: int = 0


class AppController:
    """Settings, local data, the worker thread and *Try the model*, for one app folder."""

    def __init__(
        self,
        folder: Path,
        *,
        platform: Backends | None = None,
        transport: httpx.BaseTransport | None = None,
        backoff_max: float = 60.0,
        rest_seconds: float = REST_SECONDS,
    ) -> None:
        self.folder = Path(folder)
        self.rest_seconds = rest_seconds
        self.platform = platform if platform is not None else backends()
        self.transport = transport
        self.backoff_max = backoff_max
        self.settings = load_settings(self.folder)
        self.drawings = Drawings(self.folder)
        self.model = ServedModel(self.folder, self.platform.inference_factory)
        self._status = Status(device_id=self.settings.device_id)
        self._rows: deque[TaskRow] = deque(maxlen=HISTORY)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._restart = threading.Event()
        self._thread: threading.Thread | None = None
        self._worker: Worker | None = None
        self._conditions: tuple[float, Conditions] = (0.0, Conditions())
        self._generation = 0  # bumped by each new drawing: the local data changed
        self._task_generation = 0  # the data generation the running task trains on
        self._rest: tuple[int, float, int] | None = None  # (data generation, time.time() it ends, examples)
        self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleet-app")

    def __repr__(self) -> str:
        return f"AppController(folder={str(self.folder)!r}, platform={self.platform.name!r})"

    # --- what the UI calls (all quick) -----------------------------------------------------------

    def status(self) -> Status:
        with self._lock:
            return replace(self._status, tasks=tuple(self._rows))

    def start(self) -> None:
        """Run the worker (the app is in the foreground); a no-op when it already runs."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive() and not self._stop.is_set():
                return
            previous, self._stop, self._restart = self._thread, threading.Event(), threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(previous, self._stop, self._restart), name="fleet-worker", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop asking for tasks (the app went to the background); a task in flight still finishes."""
        with self._lock:
            self._stop.set()
            self._restart.set()
            self._set(state="stopped", message="Stopped while the app is in the background.", task="")

    def close(self, timeout: float = 5.0) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout)
        self._background.shutdown(wait=False, cancel_futures=True)

    def update_settings(self, new: AppSettings) -> None:
        """Save (atomically) and apply: the worker restarts with the new coordinator or rules."""
        with self._lock:
            old, self.settings = self.settings, new
            save_settings(self.folder, new)
            if (old.server_url, old.enrollment_key, old.data_path) != (new.server_url, new.enrollment_key,
                                                                       new.data_path):  # fmt: skip
                self._restart.set()
            self._conditions = (0.0, Conditions())

    def set_paused(self, paused: bool) -> None:
        self.update_settings(replace(self.settings, paused=paused))

    def add_drawing(self, image: np.ndarray, label: int) -> int:
        """Keep a labelled drawing as training data; the running worker trains on it from its next task."""
        with self._lock:
            self.drawings.add(image, label)
            self._generation += 1  # new data: no rest, the next task trains on it
            worker, data = self._worker, self._data()
        if worker is not None and data is not None:
            worker.data = data
        elif worker is None or self._status.state in ("error", "setup"):
            self._restart.set()
        return len(self.drawings)

    def classify(self, image: np.ndarray, done: Callable[[Guess | None, str], None]) -> Future[None]:
        """Refresh the served model if a newer one exists, classify off the UI thread, then ``done``."""

        def work() -> None:
            try:
                self.refresh_model()
                guess = self.model.classify(image)
                done(
                    guess,
                    self.model.problem or ("" if guess else "No model yet: is the coordinator reachable?"),
                )
            except Exception as exc:  # never let a classification take the app down
                logger.warning("classification failed: %s", exc)
                done(None, f"Classification failed: {exc}")

        return self._background.submit(work)

    def refresh_model(self, force: bool = False) -> bool:
        if url_problem(self.settings.server_url):
            self.model.problem = url_problem(self.settings.server_url) or ""
            return False
        with ApiClient(self.settings.server_url, transport=self.transport, timeout=15.0) as api:
            return self.model.refresh(api, force=force)

    # --- the worker thread -----------------------------------------------------------------------

    def _run(
        self, previous: threading.Thread | None, stop: threading.Event, restart: threading.Event
    ) -> None:
        if previous is not None:
            previous.join()  # one worker at a time: let the old one finish its task
        while not stop.is_set():
            restart.clear()
            try:
                finished = self._session(stop, restart)
            except Exception as exc:  # a bug or an unforeseen fault: say so, back off, go on
                logger.exception("worker session failed")
                problem = f"Unexpected problem: {exc}"
                self._worker_set(state="error", message=problem, retry_at=time.time() + 5)
                restart.wait(5.0)
                continue
            if finished and not stop.is_set():
                restart.wait(60.0)

    def _session(self, stop: threading.Event, restart: threading.Event) -> bool:
        """One worker over the current settings until they change; True when training finished."""
        settings, data = self.settings, self._data()
        if (why := _not_ready(settings, data)) is not None:
            self._worker_set(state=why[0], message=why[1], retry_at=None, task="")
            restart.wait(1.0)
            return False
        config = WorkerConfig(
            base_url=settings.server_url, enrollment_key=settings.enrollment_key, data=data,
            device_model=self.platform.device_model, max_consecutive_errors=None, backoff_initial=1.0,
            backoff_max=self.backoff_max, max_retry_after=self.backoff_max, timeout=30.0,
            state_dir=self.folder / STATE_DIR,
        )  # fmt: skip
        self._worker_set(state="connecting", message=f"Connecting to {settings.server_url}", retry_at=None)
        with Worker(
            config,
            transport=self.transport,
            features=self.platform.features,
            energy=self.platform.energy,
            session_factory=self.platform.session_factory,
            on_report=self._on_report,
            on_event=self._on_event,
            hold=lambda: self._hold(stop),
        ) as worker:
            token = settings.token_for(settings.server_url)
            if token:
                worker.api.token, worker.device_id = token, settings.device_id
            with self._lock:
                self._worker = worker
            try:
                summary = worker.run(restart)
            finally:
                with self._lock:
                    self._worker = None
        if summary.finished:
            self._worker_set(state="finished", message="Training finished; looking for a new model.")
        elif summary.stop_reason.startswith("privacy_") and not restart.is_set():
            restart.wait(3600.0)  # its own budget is spent: ask nothing until the settings change
        return summary.finished

    def _data(self) -> DeviceData | None:
        shard = None
        if self.settings.data_path:
            try:
                shard = DeviceData.from_npz(self.settings.data_path)
            except (OSError, ValueError) as exc:
                logger.warning("demo shard %s unusable: %s", self.settings.data_path, exc)
        return self.drawings.data(shard)

    def _hold(self, stop: threading.Event) -> str | None:
        """Why not to ask for a task now (None: ask): paused, resting on unchanged data, battery, metered
        network. Polled by the worker between tasks (``Worker.hold``): the one place the app paces them."""
        settings = self.settings
        if stop.is_set():
            return "stopped"
        if settings.paused:
            return "Paused (tap Resume to take tasks)."
        if (rest := self._resting()) is not None:
            return f"The last task used all {rest[1]} local examples: resting (a new drawing ends it)."
        seen, now = self._conditions, time.monotonic()
        if now - seen[0] > 5.0:
            try:
                self._conditions = seen = (now, self.platform.conditions.read())
            except Exception as exc:
                logger.debug("conditions unreadable: %r", exc)
                self._conditions = seen = (now, Conditions())
        state = seen[1]
        low = state.battery_percent is not None and state.battery_percent < settings.min_battery_percent
        if low and not state.charging:
            level = f"{state.battery_percent:.0f} %"
            return f"Waiting for battery >= {settings.min_battery_percent} % or a charger (now {level})."
        if settings.unmetered_only and state.metered:
            return "Waiting for an unmetered network (Wi-Fi)."
        return None

    # --- the worker's callbacks (worker thread) ---------------------------------------------------

    def _resting(self) -> tuple[float, int] | None:
        """(when it ends, local examples) of the rest after a task that used all the local data; None: no
        rest now. A new drawing ends it early (the data changed); see REST_SECONDS."""
        rest = self._rest
        if rest is None or rest[0] != self._generation or time.time() >= rest[1]:
            return None
        return rest[1], rest[2]

    def _on_report(self, report: TaskReport) -> None:
        with self._lock:
            self._rows.append(TaskRow.of(report))
            done = self._status.done + 1
            worker, self._rest = self._worker, None
            if worker is not None and report.batch_size >= len(worker.data):  # it used every local example
                self._rest = (self._task_generation, time.time() + self.rest_seconds, len(worker.data))
        note = " (already counted: resent)" if report.duplicate else ""
        message = f"Task done: v{report.version}, {report.compute_time_ms:.0f} ms{note}"
        self._worker_set(state="connected", message=message, retry_at=None, task="", done=done)

    def _on_event(self, event: WorkerEvent) -> None:
        if event.kind == "enrolled":
            self._remember_token(event.detail)
        elif event.kind == "held":
            rest = None if self.settings.paused else self._resting()
            state = "paused" if rest is None else "resting"
            self._worker_set(state=state, message=event.detail, retry_at=rest and rest[0], task="")
        elif event.kind in ("task", "pushing") and event.grant is not None:
            g = event.grant
            if event.kind == "task":
                with self._lock:
                    self._task_generation = self._generation
            slo = f", time SLO {g.slo_time_ms:.0f} ms" if g.slo_time_ms else ""
            doing = "sending the gradient" if event.kind == "pushing" else "computing"
            self._worker_set(state="training", message="", retry_at=None,
                      task=f"Task v{g.version}: {g.batch_size} examples{slo}: {doing}")  # fmt: skip
        elif event.kind == "waiting":
            reason = REASONS.get(event.detail, event.detail)
            self._worker_set(state="waiting", message=reason, retry_at=event.retry_at, task="")
        elif event.kind == "error":
            self._worker_set(state="error", message=self._explain(event), retry_at=event.retry_at)
        elif event.kind == "finished":
            self._worker_set(state="finished", message="Training finished.", retry_at=None, task="")
        elif event.kind == "privacy":  # the device refused the terms (retry_at) or its budget is spent
            state = "waiting" if event.retry_at is not None else "finished"
            self._worker_set(state=state, message=event.detail, retry_at=event.retry_at, task="")

    def _remember_token(self, device_id: str) -> None:
        with self._lock:
            worker = self._worker
            if worker is None or worker.api.token is None:
                return
            url = worker.config.base_url
            self.settings = replace(self.settings, device_id=device_id, device_token=worker.api.token,
                                    token_server=url)  # fmt: skip
            save_settings(self.folder, self.settings)
        self._worker_set(state="connected", message="Enrolled with the coordinator.", device_id=device_id)

    def _explain(self, event: WorkerEvent) -> str:
        url, detail, code = self.settings.server_url, event.detail, event.status_code
        if "enrollment_code_expired" in detail:
            return "The join code has expired: ask the operator for a new one."
        if code == 401 and "/v1/devices" in detail:
            return "The enrollment key was refused: check it in Settings."
        if code == 401:
            return "The coordinator refused this device's token (revoked?); enrolling again."
        if code == 404:
            return f"{url} does not answer like a Fleet coordinator (404): check the URL in Settings."
        if code == 410:
            return "The task's lease ran out; its gradient was dropped."
        if code is not None and code >= 500:
            return f"The coordinator answered {code}; retrying."
        if code is None and ("ConnectError" in detail or "ConnectTimeout" in detail):
            return f"Cannot reach the coordinator at {url}."
        if code is None and "push failed" in detail:
            return "The network dropped while sending the gradient; resending the same result."
        if code is None and "timed out" in detail:
            return "The coordinator did not answer in time."
        return detail

    def _worker_set(self, **changes: object) -> None:
        """A status change from the worker thread; once stopped, only the counts and rows move on."""
        with self._lock:
            if self._stop.is_set():
                kept = ("done", "device_id")
                changes = {k: v for k, v in changes.items() if k in kept}
            self._status = replace(self._status, **changes)  # type: ignore[arg-type]

    def _set(self, **changes: object) -> None:
        with self._lock:
            self._status = replace(self._status, **changes)  # type: ignore[arg-type]


def _not_ready(settings: AppSettings, data: DeviceData | None) -> tuple[str, str] | None:
    """Why the worker cannot start yet, as (state, message): "setup" for the normal first run (nothing
    set, no drawings yet: what to do next, calmly), "error" only for a real problem (a malformed URL)."""
    if not settings.server_url.strip():
        return "setup", "Welcome! Set the coordinator URL (or paste an enrollment link) in Settings."
    if problem := url_problem(settings.server_url):
        return "error", problem
    if not (settings.enrollment_key or settings.token_for(settings.server_url)):
        return "setup", "Welcome! Set the enrollment key (or paste an enrollment link) in Settings."
    if data is None:
        return "setup", FIRST_RUN
    return None
