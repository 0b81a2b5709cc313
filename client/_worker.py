"""The device worker: ask for a task, compute one gradient on local data, push it, repeat."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np

from fleet_protocol import Manifest

from ._attacks import make_attack
from ._attacks.live import attacked
from ._data import DeviceData, fit_input, label_counts
from ._dp_wire import ask_fields, is_private, push_meta, scaled_counts
from ._energy import EnergyMeter, default_energy_meter
from ._exceptions import (
    EnrollmentRefused,
    Rejected,
    TaskDeclined,
    TrainingFinished,
    TransportError,
    WorkerError,
)
from ._features import FeatureSource, PsutilFeatures
from ._ledger import DeviceLedger
from ._loop import Loop, RunSummary, WorkerEvent
from ._onnx_session import GradientComputer, GradientSession
from ._privacy import DPGradientSession, private_step
from ._state import install_secret
from ._transport import ApiClient, PushResult, TaskGrant, encode_push
from ._worker_config import TaskReport, WorkerConfig

__all__ = ["RunSummary", "TaskReport", "Worker", "WorkerConfig", "WorkerEvent", "run_worker", "scaled_counts"]

logger = logging.getLogger("fleet.client")
UNRUNNABLE = "terms_unrunnable"  # a task's terms this device reads but cannot compute: given back

SessionFactory = Callable[[Manifest, bytes, int], GradientComputer]


class Worker:
    """One device's training loop over the REST protocol.

    ``transport`` (e.g. ``httpx.MockTransport``/``ASGITransport``) or ``client`` (an ``httpx.Client``)
    replace the network; ``features``, ``energy`` and ``session_factory`` replace the desktop
    implementations (psutil, battery/model, onnxruntime), e.g. with Android ones. An app drives the
    loop through ``hold`` (returns why not to ask for a task now, polled every ``hold_poll`` s) and
    watches it through ``on_event``.
    """

    def __init__(
        self,
        config: WorkerConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        client: httpx.Client | None = None,
        features: FeatureSource | None = None,
        energy: EnergyMeter | None = None,
        session_factory: SessionFactory = GradientSession,
        on_report: Callable[[TaskReport], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        on_event: Callable[[WorkerEvent], None] | None = None,
        hold: Callable[[], str | None] | None = None,
        hold_poll: float = 0.25,
    ) -> None:
        self.config = config
        self.data = config.data if isinstance(config.data, DeviceData) else DeviceData.from_npz(config.data)
        self.api = ApiClient(
            config.base_url,
            client=client,
            transport=transport,
            timeout=httpx.Timeout(config.timeout, connect=min(10.0, config.timeout)),
            verify=config.verify,
            cert=config.cert,
        )
        self.energy = energy if energy is not None else default_energy_meter(config.energy_model)
        self.features = features if features is not None else PsutilFeatures(self.energy.energy_per_cpu_time)
        self.session_factory = session_factory
        self.on_report = on_report
        self.sleep = sleep
        self.on_event = on_event
        self.hold = hold
        self.hold_poll = hold_poll
        # spawn(3)'s first two children are spawn(2)'s: an honest worker draws exactly as before
        data_seed, jitter_seed, attack_seed = np.random.SeedSequence(config.seed).spawn(3)
        self._rng = np.random.default_rng(data_seed)
        self._jitter = np.random.default_rng(jitter_seed)
        self._active: tuple[str, int] | None = None  # (model_id, num_classes) the labels are counted for
        self._server_dp = False  # the coordinator runs DP (its active model says so): ask as a DP device
        self._private_asks = False  # a grant had DP terms: ask as a DP device from now on
        self._sessions: dict[str, GradientComputer] = {}
        self._dp_sessions: dict[str, DPGradientSession] = {}
        self.device_id: str | None = None
        self._attack_rng = np.random.default_rng(attack_seed)  # the attack's noise, triggers, own estimates
        self._attack = None
        if config.attack is not None:
            self._attack = make_attack(config.attack, self._attack_rng, **dict(config.attack_params))
        self.ledger = DeviceLedger.open(config.state_dir, config.privacy)  # the budget of this data
        self.install_secret = install_secret(config.state_dir)  # enrolling again keeps the device id

    def __repr__(self) -> str:
        return f"Worker(base_url={self.config.base_url!r}, device_model={self.config.device_model!r})"

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the HTTP client (if the worker built it)."""
        self.api.close()

    def enroll(self) -> str:
        """Register with the enrollment key; returns the device id."""
        enrollment = self.api.enroll(
            self.config.enrollment_key, self.config.device_model, self.install_secret
        )
        self.device_id = enrollment.device_id
        logger.info("enrolled as device %s (%s)", enrollment.device_id, self.config.device_model)
        self.emit(WorkerEvent("enrolled", enrollment.device_id))
        return enrollment.device_id

    def emit(self, event: WorkerEvent) -> None:
        """Tell ``on_event`` (a failing listener is logged, never stops the loop)."""
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception:
            logger.exception("on_event listener failed on %s", event.kind)

    # --- one task ------------------------------------------------------------------------------

    def run_one(self) -> TaskReport:
        """Request a task, compute its gradient on local data and push it (raises on rejection)."""
        if self.api.token is None:
            self.enroll()
        grant = self._request_task()
        self.emit(WorkerEvent("task", grant=grant))
        manifest, session = self._model(grant)
        params = self.api.params(
            grant.model_id,
            grant.version,
            url=grant.params_url,
            num_params=manifest.num_params,
            encoding=self.config.wire_encoding,
        )
        try:  # policy and own budget, charged durably; unreadable terms are declined, never a crash
            dp = self.ledger.admit(grant.dp, self.data, grant.task_id)
        except TaskDeclined as exc:
            raise self._decline(grant, exc) from exc
        private = is_private(dp)  # a DP task: its push says nothing of the data but the noised gradient
        self._private_asks = self._private_asks or private
        clean = None  # an attack that keeps the output layer honest: the clean batch (Backdoor.honest_head)
        if dp is None:  # at most the N examples held, without replacement: the push says how many
            x, y = self.data.batch(grant.batch_size, self._rng)
            clean = self._clean_batch(x, y, manifest)
            x, y = (x, y) if self._attack is None else self._attack.batch(x, y, manifest.num_classes)
            x = fit_input(x, manifest.input_shape)
            batch_counts = label_counts(y if clean is None else clean[1], manifest.num_classes)
        else:  # plain local SGD (a strategy's terms, no DP) reports the local label mix scaled to B
            dp_session = self._dp_session(grant, manifest)
            local = self.data.label_counts(manifest.num_classes)
            batch_counts = None if private else scaled_counts(local, dp.expected_batch)

        mark = self.energy.begin()
        cpu_start = time.process_time()
        start = time.perf_counter()
        examples = grant.batch_size
        if dp is None:
            loss, gradient = session.loss_and_gradient(params, x, y)
            examples = len(y)  # <= the grant: a device with 2 drawings computes 2 examples, not 1,000
        else:
            x_all = fit_input(self.data.x, manifest.input_shape)
            try:
                step = private_step(dp, dp_session, params, x_all, self.data.y)
            except (ValueError, TypeError, KeyError, ArithmeticError, AssertionError) as exc:
                detail = f"cannot run the task's {dp.mechanism} terms: {exc}"
                raise self._decline(grant, TaskDeclined(detail, reason=UNRUNNABLE)) from exc
            loss, gradient, examples = (
                step.loss if np.isfinite(step.loss) else 0.0,
                step.gradient,
                step.examples,
            )
        cpu_seconds = time.process_time() - cpu_start
        busy = cpu_seconds
        # the examples an emulated phone computed (a local SGD round's terms: the granted batch)
        work = max(examples, 1) if private or dp is None else grant.batch_size
        batch_size = examples if dp is None else grant.batch_size  # what the push and the report say
        if self.config.min_ms_per_sample:
            floor = work * self.config.min_ms_per_sample / 1000.0
            remaining = floor - (time.perf_counter() - start)
            if remaining > 0:
                time.sleep(remaining)
            # the emulated slower phone computes for the whole stretched time: charge at least the floor
            # as CPU time (also when a loaded machine already took longer than the floor in wall time)
            busy = max(cpu_seconds + max(remaining, 0.0), floor)
        if self.config.delay_ms_per_sample:
            pause = work * self.config.delay_ms_per_sample / 1000.0
            time.sleep(pause)
            busy += pause  # charged as compute, like the floor above
        compute_time_ms = (time.perf_counter() - start) * 1000.0
        reading = self.energy.end(mark, busy)
        gradient = self._attacked(gradient, session, params, grant, manifest, clean)  # untimed (I-Prof)

        if gradient.shape != (manifest.num_params,):
            raise WorkerError(f"gradient has shape {gradient.shape}, expected ({manifest.num_params},)")
        if not (np.isfinite(loss) and np.isfinite(gradient).all()):
            raise WorkerError(f"task {grant.task_id}: non-finite loss or gradient, not pushed")
        meta = push_meta(
            dp, label_counts=batch_counts, loss=loss, batch_size=batch_size, examples=examples,
            compute_time_ms=compute_time_ms, energy=reading.value,
        )  # fmt: skip
        self.emit(WorkerEvent("pushing", grant=grant))
        result = self._push(grant, meta, gradient)
        report = TaskReport(
            task_id=grant.task_id,
            model_id=grant.model_id,
            version=grant.version,
            staleness=result.staleness,
            weight=result.weight,
            batch_size=batch_size,
            loss=loss,  # local only under DP: never sent
            compute_time_ms=meta["compute_time_ms"],
            predicted_time_ms=grant.predicted_time_ms,
            slo_time_ms=grant.slo_time_ms,
            energy=meta["energy"],
            energy_source=reading.source,
            current_version=result.version,
            applied=result.applied,
            duplicate=result.duplicate,
            slo_energy=grant.slo_energy,
        )
        logger.info(
            "task %s: v%d L=%d loss=%.4f %.0f ms (predicted %s) energy=%s [%s] staleness=%d weight=%.3g",
            report.task_id, report.version, report.batch_size, report.loss, report.compute_time_ms,
            report.predicted_time_ms, report.energy, report.energy_source, report.staleness, report.weight,
        )  # fmt: skip
        return report

    def _attacked(
        self, gradient: np.ndarray, session: GradientComputer, params: np.ndarray, grant: TaskGrant,
        manifest: Manifest, clean: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:  # fmt: skip
        """What an attacker pushes instead of ``gradient`` (measured as any phone's: the attack is untimed;
        _attacks/live.py). Honest: ``gradient``."""
        if self._attack is None:
            return gradient
        return attacked(
            self._attack, gradient, session=session, params=params, data=self.data,
            batch_size=grant.batch_size, rng=self._attack_rng,
            fit=lambda x: fit_input(x, manifest.input_shape), clean=clean, head=manifest.head(),
        )  # fmt: skip

    def _clean_batch(
        self, x: np.ndarray, y: np.ndarray, manifest: Manifest
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The batch before an attack that keeps the output layer honest changes it; None for any other."""
        if not getattr(self._attack, "honest_head", False):
            return None
        if manifest.head() is None:
            raise WorkerError(f"{manifest.name} has no output layer (classes × features) to keep honest")
        return fit_input(x, manifest.input_shape), y

    def _decline(self, grant: TaskGrant, exc: TaskDeclined) -> TaskDeclined:
        """Give ``grant`` back with ``exc``'s reason, so the coordinator ends its lease and records why; a
        failure to tell it is only logged (the lease lapses anyway). Returns ``exc`` for the loop."""
        try:
            self.api.decline(grant.task_id, exc.reason, exc.detail)
        except WorkerError as failed:
            logger.warning("could not give task %s back: %s", grant.task_id, failed)
        return exc

    def _request_task(self) -> TaskGrant:
        if self._active is None:
            info = self.api.active_model()
            self._active = (str(info["model_id"]), int(info["num_classes"]))
            self._server_dp = bool(info.get("dp", False))
        model_id, num_classes = self._active
        try:
            counts = self.data.label_counts(num_classes)  # checks the labels fit, even when not sent
        except ValueError as exc:
            raise WorkerError(f"local data does not fit model {model_id}: {exc}") from exc
        private = self._server_dp or self._private_asks
        try:
            return self.api.request_task(
                device_model=self.config.device_model,
                features=self.features.read(),
                **ask_fields(counts, len(self.data), private=private),
            )
        except Rejected as exc:
            if exc.reason == "no_model":
                self._active = None
            raise
        except WorkerError as exc:
            if exc.status_code == 422:  # perhaps the active model changed: count labels afresh
                self._active = None
            raise

    def _model(self, grant: TaskGrant) -> tuple[Manifest, GradientComputer]:
        manifest, graph = self.api.model(
            grant.model_id, manifest_url=grant.manifest_url, train_graph_url=grant.train_graph_url
        )
        self._active = (grant.model_id, manifest.num_classes)
        session = self._sessions.get(grant.model_id)
        if session is None:
            self._sessions.clear()  # one model trains at a time; drop the old session
            try:
                session = self.session_factory(manifest, graph, self.config.threads)
            except Exception as exc:  # onnxruntime (Python or Java) refusing the graph: back off, retry
                raise WorkerError(f"this device cannot load model {grant.model_id}: {exc}") from exc
            self._sessions[grant.model_id] = session
        return manifest, session

    def _dp_session(self, grant: TaskGrant, manifest: Manifest) -> DPGradientSession:
        """The model's per-example-clipped gradient graph, loaded once per model."""
        session = self._dp_sessions.get(grant.model_id)
        if session is None:
            graph = self.api.dp_graph(grant.model_id, url=(grant.dp or {}).get("graph_url"))
            try:
                session = DPGradientSession(manifest, graph, self.config.threads)
            except Exception as exc:
                raise WorkerError(f"this device cannot load the DP graph of {grant.model_id}: {exc}") from exc
            self._dp_sessions.clear()  # one model trains at a time
            self._dp_sessions[grant.model_id] = session
        return session

    def _push(self, grant: TaskGrant, meta: dict[str, Any], gradient: np.ndarray) -> PushResult:
        headers, body = encode_push(meta, gradient, self.config.wire_encoding)
        for attempt in range(1, max(1, self.config.push_attempts) + 1):
            try:
                return self.api.push_encoded(grant.task_id, headers, body)
            except TransportError as exc:
                expired = grant.lease_deadline is not None and time.time() >= grant.lease_deadline
                if attempt >= self.config.push_attempts or expired:
                    raise
                delay = self._backoff(attempt)
                logger.warning("push of task %s failed; retry %d in %.1f s", grant.task_id, attempt, delay)
                self.emit(WorkerEvent("error", f"push failed, resending: {exc}", time.time() + delay, grant))
                self.sleep(delay)
        raise AssertionError("unreachable")

    # --- the loop ------------------------------------------------------------------------------

    def run(self, stop_event: threading.Event | None = None) -> RunSummary:
        """Loop over tasks until training finishes, a limit is hit or ``stop_event`` is set."""
        loop = Loop(self, stop_event)
        while (reason := loop.limit_reached()) is None:
            if self.hold is not None and (why := self.hold()) is not None:
                self.emit(WorkerEvent("held", why))
                if loop.wait(self.hold_poll):
                    reason = "stopped"
                    break
                continue
            try:
                report = self.run_one()
            except TrainingFinished as exc:
                logger.info("training finished: %s", exc.detail)
                self.emit(WorkerEvent("finished", exc.detail, status_code=exc.status_code))
                loop.summary.finished, reason = True, "training_finished"
                break
            except EnrollmentRefused as exc:  # the same answer every time: stop, and say why
                logger.error("%s; stopping", exc.detail)
                self.emit(WorkerEvent("error", exc.detail, status_code=exc.status_code))
                loop.summary.errors, loop.summary.stop_detail = loop.summary.errors + 1, exc.detail
                reason = exc.reason
                break
            except WorkerError as exc:
                delay = loop.on_error(exc)
                if delay is not None and loop.wait(delay):
                    reason = "stopped"
                    break
                continue
            loop.on_task(report)
        return loop.finish(reason)

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter: uniform in [d/2, d], d = initial * 2^(attempt-1), capped."""
        doublings = min(max(0, attempt - 1), 60)  # bounded: 2.0 ** 1024 overflowed after 1025 declines
        delay = min(self.config.backoff_max, self.config.backoff_initial * 2.0**doublings)
        return float(self._jitter.uniform(delay / 2.0, delay))


def run_worker(
    config: WorkerConfig,
    *,
    on_report: Callable[[TaskReport], None] | None = None,
    stop_event: threading.Event | None = None,
    transport: httpx.BaseTransport | None = None,
) -> RunSummary:
    """Run a worker until done (what ``fleet worker`` calls); SIGINT/SIGTERM stop it between steps."""
    stop_event = stop_event if stop_event is not None else threading.Event()
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop_event.set())
    try:
        with Worker(config, transport=transport, on_report=on_report) as worker:
            return worker.run(stop_event)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
