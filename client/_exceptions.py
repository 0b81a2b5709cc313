"""The worker's exception tree; callers catch the level they care about.

WorkerError                 any failure the worker reports (4xx with the server's detail, bad data)
 +-- EnrollmentRefused      the coordinator will not enroll this device (quota, attestation, revoked,
 |                          an expired join code): stop
 +-- Rejected               the server declined a task now; retry after ``retry_after`` seconds
 |    +-- TrainingFinished  the model is done training; stop asking
 +-- TransportError         network failure, timeout or a real server fault (5xx)
 +-- TaskDeclined           the device cannot run a grant's terms: it gives the task back and asks later
      +-- PrivacyRefused    the device itself refused a DP task (its policy, its own budget): nothing sent
"""

from __future__ import annotations

__all__ = [
    "EnrollmentRefused",
    "PrivacyRefused",
    "Rejected",
    "TaskDeclined",
    "TrainingFinished",
    "TransportError",
    "WorkerError",
]


class WorkerError(Exception):
    """Base of every error the worker raises; ``status_code`` is set when the server answered."""

    def __init__(self, detail: str, *, status_code: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status_code = status_code


class EnrollmentRefused(WorkerError):
    """The coordinator refused to enroll this device for good (HTTP 403 with a ``reason``): the key has
    enrolled its quota of devices (``enrollment_quota``), the attestation was refused
    (``attestation_refused``) or this install was revoked (``install_revoked``); or (HTTP 401) the join
    code has expired (``enrollment_code_expired``). Asking again would get the same answer, so the worker
    stops and says why."""

    def __init__(self, detail: str, *, reason: str, status_code: int | None = None) -> None:
        super().__init__(detail, status_code=status_code)
        self.reason = reason

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reason={self.reason!r})"


class Rejected(WorkerError):
    """The server declined to hand out a task now (paused, small batch, too similar, rate limit...)."""

    def __init__(
        self, detail: str, *, reason: str, retry_after: float, status_code: int | None = None
    ) -> None:
        super().__init__(detail, status_code=status_code)
        self.reason = reason
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reason={self.reason!r}, retry_after={self.retry_after!r})"


class TrainingFinished(Rejected):
    """Training of the active model has finished: the worker should stop."""


class TransportError(WorkerError):
    """The request did not get a usable answer: network error, timeout or 5xx."""


class TaskDeclined(WorkerError):
    """The device cannot run a grant's terms (a mechanism it does not know, terms missing fields): nothing
    was computed or pushed, the task is given back with ``reason`` (``POST /v1/tasks/{id}/decline``), and
    the worker backs off and asks again (the terms may change). ``stop``: it stops instead."""

    def __init__(self, detail: str, *, reason: str, stop: bool = False) -> None:
        super().__init__(detail)
        self.reason = reason
        self.stop = stop


class PrivacyRefused(TaskDeclined):
    """The device refused a task on privacy grounds (client/_ledger.py); nothing was computed or pushed.

    ``stop``: its own budget has no room, or it cannot account ε (the worker stops, ``reason`` says why);
    otherwise the terms break its policy and the worker backs off and asks again (terms may change)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reason={self.reason!r}, stop={self.stop!r})"
