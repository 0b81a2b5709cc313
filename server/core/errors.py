"""The core's exception tree; the HTTP layer maps each class to one status code.

CoordinatorError
├── NotFound        (unknown task, model or version)
├── Forbidden       (a task of another device)
├── Gone            (lease expired, version out of retention)
│   └── TrainingFinished  (the task's model finished or was replaced)
├── Conflict        (a different body for an answered task)
└── InvalidInput    (shape, finiteness, norm, label counts)
"""


class CoordinatorError(Exception):
    """Base of everything the core refuses."""


class NotFound(CoordinatorError):
    pass


class Forbidden(CoordinatorError):
    pass


class Gone(CoordinatorError):
    pass


class TrainingFinished(Gone):
    """Answers carry reason "training_finished" so devices stop asking."""


class Conflict(CoordinatorError):
    pass


class InvalidInput(CoordinatorError):
    pass
