"""Server-side evaluation off the push path: a thread that scores new versions every N versions or T s.

With an :class:`~server.core.eval_file.EvalFile` the held-out set may move (a drift scenario rewrites
it): when it changes, every evaluator switches to the new set and the newest version is scored again at
once, so the recorded metric follows the data over time even between versions."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np

from server.core.coordinator import Coordinator
from server.core.eval_file import EvalFile
from server.core.evaluation import Evaluator

log = logging.getLogger("fleet.server")


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
    ) -> None:
        super().__init__(name="fleet-evaluation", daemon=True)
        self.coordinator = coordinator
        self.make_evaluator = make_evaluator
        self.every_versions = every_versions
        self.interval_s = interval_s
        self.poll_s = poll_s
        self.eval_file = eval_file
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
                self.coordinator.record_evaluation(snapshot.model_id, snapshot.version, accuracy, loss)
            except Exception:  # an evaluation failure must never stop training
                log.exception("evaluation of %s v%d failed", snapshot.model_id, snapshot.version)
            last[snapshot.model_id] = snapshot.version
            waited = 0.0

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
