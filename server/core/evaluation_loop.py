"""Server-side evaluation off the push path: a thread that scores new versions every N versions or T s.

With an :class:`~server.core.eval_file.EvalFile` the held-out set may move (a drift scenario rewrites
it): when it changes, every evaluator switches to the new set and the newest version is scored again at
once, so the recorded metric follows the data over time even between versions.

With ``reference_age_s`` each evaluation also scores the model as it was that long before, on the same
data (``ReferenceModels``): on data that moves, the gap between the two is what updating the model
since then bought, and the reference is what a model updated that rarely would serve (a day: Standard
FL's nightly round)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from server.core.coordinator import Coordinator
from server.core.eval_file import EvalFile
from server.core.evaluation import Evaluator

log = logging.getLogger("fleet.server")


class ReferenceModels:
    """The parameters the model had ``age_s`` ago: snapshots kept at most every ``age_s / keep`` seconds,
    so memory stays at about ``keep`` copies of the model whatever the evaluation rate."""

    def __init__(self, age_s: float, keep: int = 24) -> None:
        self.age_s, self.spacing = age_s, age_s / keep
        self.snapshots: deque[tuple[float, str, np.ndarray]] = deque()

    def add(self, now: float, model_id: str, params: np.ndarray) -> None:
        if not self.snapshots or now - self.snapshots[-1][0] >= self.spacing:
            self.snapshots.append((now, model_id, params.copy()))

    def at(self, now: float, model_id: str) -> np.ndarray | None:
        """The newest snapshot of ``model_id`` at least ``age_s`` old (None before there is one); older
        snapshots are let go."""
        while len(self.snapshots) > 1 and now - self.snapshots[1][0] >= self.age_s:
            self.snapshots.popleft()
        if self.snapshots and now - self.snapshots[0][0] >= self.age_s and self.snapshots[0][1] == model_id:
            return self.snapshots[0][2]
        return None


class EvaluationLoop(threading.Thread):
    """Evaluates the newest version when ``every_versions`` passed or ``interval_s`` elapsed with progress."""

    def __init__(
        self,
        coordinator: Coordinator,
        make_evaluator: Callable[[str], Evaluator],
        *,
        every_versions: int,
        interval_s: float,
        poll_s: float = 0.2,
        eval_file: EvalFile | None = None,
        reference_age_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name="fleet-evaluation", daemon=True)
        self.coordinator = coordinator
        self.make_evaluator = make_evaluator
        self.every_versions = every_versions
        self.interval_s = interval_s
        self.poll_s = poll_s
        self.eval_file = eval_file
        self.references = None if reference_age_s is None else ReferenceModels(reference_age_s)
        self.clock = clock
        self.stopped = threading.Event()
        self._evaluators: dict[str, Evaluator] = {}

    def run(self) -> None:
        last: dict[str, int] = {}
        waited = 0.0
        while not self.stopped.wait(self.poll_s):
            waited += self.poll_s
            snapshot = self.coordinator.snapshot()
            if snapshot is None:
                continue
            previous = last.get(snapshot.model_id)
            due = (
                self._moved()
                or previous is None
                or snapshot.version - previous >= self.every_versions
                or (waited >= self.interval_s and snapshot.version != previous)
            )
            if not due:
                continue
            try:
                accuracy, loss = self.evaluate(snapshot.model_id, snapshot.params)
                reference = self.reference(snapshot.model_id, snapshot.params)
                self.coordinator.record_evaluation(
                    snapshot.model_id,
                    snapshot.version,
                    accuracy,
                    loss,
                    reference=reference,
                    served=snapshot.params if snapshot.averaged else None,
                )
            except Exception:  # an evaluation failure must never stop training
                log.exception("evaluation of %s v%d failed", snapshot.model_id, snapshot.version)
            last[snapshot.model_id] = snapshot.version
            waited = 0.0

    def reference(self, model_id: str, params: np.ndarray) -> float | None:
        """The metric of the model as it was ``reference_age_s`` ago, on the current data (None: no
        reference asked for, or not that old yet); ``params`` are kept as a later reference."""
        if self.references is None:
            return None
        now = self.clock()
        old = self.references.at(now, model_id)
        self.references.add(now, model_id, params)
        return None if old is None else self.evaluate(model_id, old)[0]

    def _moved(self) -> bool:
        """The held-out set changed: hand it to every evaluator (True: score the newest version again)."""
        if self.eval_file is None or not self.eval_file.refresh():
            return False
        for evaluator in list(self._evaluators.values()):
            evaluator.use(self.eval_file.x, self.eval_file.y)
        return True

    def evaluate(self, model_id: str, params: np.ndarray) -> tuple[float, float]:
        """(accuracy, loss) of ``params``: also the coordinator's ``evaluate_params``, so that a promoted
        or restored head is scored at once (server/compose.py); one evaluator per model, shared."""
        evaluator = self._evaluators.get(model_id)
        if evaluator is None:
            evaluator = self._evaluators[model_id] = self.make_evaluator(model_id)
        return evaluator.evaluate(params)

    def stop(self) -> None:
        self.stopped.set()
