"""The worker's run loop: its summary, the events a user interface watches, what follows each error."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from fleet_protocol import TaskGrant

from ._exceptions import PrivacyRefused, Rejected, TaskDeclined, TransportError, WorkerError
from ._ledger import EXHAUSTED

if TYPE_CHECKING:
    from ._worker import TaskReport, Worker

__all__ = ["EventKind", "Loop", "RunSummary", "WorkerEvent"]

logger = logging.getLogger("fleet.client")

EventKind = Literal["enrolled", "held", "task", "pushing", "waiting", "error", "finished", "privacy"]


@dataclass(frozen=True)
class WorkerEvent:
    """What the loop does now, for a user interface (the app's status screen); ``fleet worker`` ignores it.

    ``held``: ``hold()`` said why not to ask (e.g. paused); ``waiting``: the coordinator declined
    (``detail`` is its reason); ``error``: a failure the loop backs off from; ``privacy``: the device itself
    refused a DP task (``detail`` says why; ``retry_at`` None: it stops, its own budget is spent).
    ``retry_at`` is the wall clock (``time.time()``) of the next attempt.
    """

    kind: EventKind
    detail: str = ""
    retry_at: float | None = None
    grant: TaskGrant | None = None
    status_code: int | None = None


@dataclass
class RunSummary:
    """Totals of one ``Worker.run``."""

    tasks: int = 0
    rejections: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    finished: bool = False
    stop_reason: str = ""
    elapsed_s: float = 0.0
    stop_detail: str = ""  # the coordinator's sentence when it refused the device for good (enrollment)


class Loop:
    """One ``Worker.run``: its summary, its clock and what it does after each kind of error."""

    def __init__(self, worker: Worker, stop_event: threading.Event | None) -> None:
        self.worker, self.config, self.stop_event = worker, worker.config, stop_event
        self.summary = RunSummary()
        self.start = time.monotonic()
        self.errors_in_row = 0
        self.reenrolled = False
        self.declined_in_row = 0  # tasks the device gave back (terms it cannot run or refuses), in a row
        self.stopped: str | None = None  # why the device itself stops (its privacy budget is spent)
        if (spent := worker.ledger.exhausted) is not None:  # a restart asks nothing: the ledger says why
            self._stop_for_privacy(EXHAUSTED, spent)

    def remaining(self) -> float:
        if self.config.max_seconds is None:
            return float("inf")
        return self.config.max_seconds - (time.monotonic() - self.start)

    def limit_reached(self) -> str | None:
        """Why the loop stops before the next task, or None to go on."""
        if self.stop_event is not None and self.stop_event.is_set():
            return "stopped"
        if self.stopped is not None:
            return self.stopped
        if self.config.max_tasks is not None and self.summary.tasks >= self.config.max_tasks:
            return "max_tasks"
        if self.remaining() <= 0:
            return "max_seconds"
        return None

    def wait(self, seconds: float) -> bool:
        """Sleep (bounded by max_seconds); True if the loop should stop."""
        seconds = min(seconds, max(0.0, self.remaining()))
        if self.stop_event is not None:
            return self.stop_event.wait(seconds)
        self.worker.sleep(seconds)
        return False

    def _stop_for_privacy(self, reason: str, detail: str) -> None:
        logger.warning("stopping: %s", detail)
        self.stopped = reason
        self.worker.emit(WorkerEvent("privacy", detail))

    def on_error(self, exc: WorkerError) -> float | None:
        """The delay before trying again (None: at once), or re-raise when errors keep coming."""
        if isinstance(exc, TaskDeclined):  # given back unrun, nothing pushed: not counted as an error
            self.summary.rejections[exc.reason] += 1
            if exc.stop:
                self._stop_for_privacy(exc.reason, exc.detail)
                return None
            self.declined_in_row += 1
            delay = min(self.worker._backoff(self.declined_in_row), self.config.max_retry_after)
            logger.warning("declined a task: %s; asking again in %.1f s", exc.detail, delay)
            kind: EventKind = "privacy" if isinstance(exc, PrivacyRefused) else "error"
            self.worker.emit(WorkerEvent(kind, exc.detail, time.time() + delay))
            return delay
        if isinstance(exc, Rejected):
            self.summary.rejections[exc.reason] += 1
            self.errors_in_row = 0
            delay = min(max(exc.retry_after, self.config.min_retry_after), self.config.max_retry_after)
            logger.info("rejected (%s); retrying in %.1f s", exc.reason, delay)
            self.worker.emit(
                WorkerEvent("waiting", exc.reason, time.time() + delay, status_code=exc.status_code)
            )
            return delay
        self.summary.errors += 1
        self.errors_in_row += 1
        if not isinstance(exc, TransportError):
            if exc.status_code == 401 and not self.reenrolled:
                logger.warning("token refused; enrolling again")
                self.worker.api.token, self.reenrolled = None, True
                self.worker.emit(WorkerEvent("error", "token refused; enrolling again", status_code=401))
                return None
            limit = self.config.max_consecutive_errors
            if limit is not None and self.errors_in_row >= limit:
                raise exc
        delay = self.worker._backoff(self.errors_in_row)
        logger.warning("%s; retrying in %.1f s", exc, delay)
        self.worker.emit(WorkerEvent("error", str(exc), time.time() + delay, status_code=exc.status_code))
        return delay

    def on_task(self, report: TaskReport) -> None:
        self.errors_in_row, self.reenrolled, self.declined_in_row = 0, False, 0
        self.summary.tasks += 1
        if self.worker.on_report is not None:
            self.worker.on_report(report)

    def finish(self, reason: str | None) -> RunSummary:
        self.summary.stop_reason = reason or self.summary.stop_reason
        self.summary.elapsed_s = time.monotonic() - self.start
        return self.summary
