"""Reads the health checks' ``Signals`` off a running coordinator (server/core/health.py holds the checks).

Kept apart so the checks stay pure: this is the one place that touches the coordinator's memory, its
journal and storage for them. A storage read that fails becomes the storage reason instead of an error:
the health of a coordinator whose database is down must still be reported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.core.health import Signals

if TYPE_CHECKING:
    from server.core.coordinator import Coordinator


def _problem(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _privacy(c: Coordinator, now: float) -> tuple[int, int]:
    """(devices that could train, of them out of budget): those in the ledger, or more if more were seen
    lately (one enrolled a moment ago has spent nothing and may still train)."""
    assert c.privacy is not None
    views = c.privacy.overview()
    active = sum(recent for _, recent, _ in c.store.device_model_counts(now).values())
    return max(len(views["devices"]), active), int(views["exhausted"])


def gather(c: Coordinator) -> Signals:
    """The figures as of ``c.clock()``: memory under the coordinator's lock, storage after it."""
    with c._lock:  # the recent windows are appended to under this lock
        now, run = c.clock(), c.run
        outcomes = tuple(c.recent.outcomes)
        last_push, since = c.recent.last_push_at, c.recent.training_since
        storage_error = c.degraded
        model_id, status = (run.model_id, run.status) if run else (None, "no_model")
    pending, oldest = c.journal.backlog()
    privacy: tuple[int, int] | None = None
    devices, accuracies = 0, ()
    if storage_error is None:
        try:
            c.store.ping()
            devices = c.devices.count()
            if model_id is not None:
                window = c.health_policy.accuracy_window
                accuracies = tuple(e.accuracy for e in c.store.evaluations(model_id)[-window:])
            if c.privacy is not None:
                privacy = _privacy(c, now)
        except Exception as exc:  # a database down or hung: that is the finding, not a failure to report
            storage_error = _problem(exc)
    return Signals(
        now=now,
        storage_error=storage_error,
        model_loaded=model_id is not None,
        status=status,
        devices=devices,
        last_push_at=last_push,
        training_since=since,
        outcomes=outcomes,
        privacy=privacy,
        accuracies=accuracies,
        journal_pending=pending,
        journal_oldest_at=oldest,
    )
