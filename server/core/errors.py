"""The core's exception tree; the HTTP layer maps each class to one status code.

CoordinatorError
├── NotFound        (unknown task, model or version)
├── Unauthorized
│   └── EnrollmentCodeExpired  (a join code past its end: HTTP 401 with a reason)
├── Forbidden       (a task of another device)
│   └── EnrollmentRefused  (a key's quota is full, attestation refused, a revoked install)
├── Gone            (lease expired, version out of retention)
│   └── TrainingFinished  (the task's model finished or was replaced)
├── Conflict        (a different body for an answered task)
└── InvalidInput    (shape, finiteness, norm, label counts)

StorageUnavailable  (the database is down or a commit failed: retry later)
"""


class CoordinatorError(Exception):
    """Base of everything the core refuses."""


class NotFound(CoordinatorError):
    pass


class Forbidden(CoordinatorError):
    pass


class EnrollmentRefused(Forbidden):
    """An enrollment the coordinator will not take, with a ``reason`` the device reads to stop rather
    than retry: enrollment_quota (the key enrolled its quota of devices), attestation_refused,
    install_revoked. HTTP 403 with ``reason``."""

    def __init__(self, detail: str, *, reason: str) -> None:
        super().__init__(detail)
        self.reason = reason


class Unauthorized(CoordinatorError):
    """A credential that does not (or no longer) let its holder in: HTTP 401."""


class EnrollmentCodeExpired(Unauthorized):
    """An enrollment key past its ``expires_at`` (a join code): 401 with reason enrollment_code_expired,
    which a device stops on like the 403 refusals (asking again with the same code cannot succeed)."""

    reason = "enrollment_code_expired"


class Gone(CoordinatorError):
    pass


class TrainingFinished(Gone):
    """Answers carry reason "training_finished" so devices stop asking."""


class Conflict(CoordinatorError):
    pass


class InvalidInput(CoordinatorError):
    pass


class StorageUnavailable(Exception):
    """Storage could not be reached or did not commit: nothing of the request is durable and the same
    request may be retried later (HTTP 503 with Retry-After). Not a ``CoordinatorError``: the request
    was not refused, the service is (briefly) unable to answer it."""

    retry_after: float = 2.0


class StateBehind(Exception):
    """A push answers a version this process never made: another process advanced the model meanwhile
    (scale-out: another aggregator held the lease). Not a ``CoordinatorError``: the push is valid, this
    process's state is what is stale, and nothing of the push is applied."""


class LeaseLost(Exception):
    """Scale-out: this aggregator's fencing token is no longer the lease's (another aggregator took it
    over): its transaction rolled back and it must stop applying."""
