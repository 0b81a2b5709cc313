"""The composition root: builds a coordinator from settings, for the API, sim/, bench/, experiments/, tests.

Nothing here imports FastAPI: a benchmark or a test that needs a core with real storage builds it
here without the HTTP layer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Engine

from models.manifest import builtin
from profiler import IProf
from profiler.dispatch import RoundRobinDispatcher, with_maui_baseline
from server.core.admission import AdmissionController
from server.core.attestation import AcceptAll, Attestation
from server.core.coordinator import Coordinator
from server.core.eval_file import EvalFile
from server.core.evaluation import Evaluator
from server.core.evaluation_loop import EvaluationLoop
from server.core.following import FollowStorage
from server.core.ports import ReferenceGradient
from server.core.privacy import PrivacyPolicy
from server.core.pushes import TRUSTED, Enqueue
from server.settings import Settings
from server.settings_rules import refusals
from server.store.database import make_engine, migrate, session_factory
from server.store.sql import SqlStore
from server.strategies import DEFAULT_STRATEGY, Strategy, dp_refusal, make_strategy, wrap
from server.strategies.label_check import class_templates

log = logging.getLogger("fleet.server")

__all__ = [
    "TrustedGradient",
    "apply_settings",
    "build_attestation",
    "build_coordinator",
    "build_evaluation_loop",
    "build_profiler",
    "build_store",
    "build_strategy",
    "check_dp_strategy",
    "role_parts",
    "strategy_params",
    "trusted_gradient",
    "wrap_strategy",
]


def strategy_params(settings: Settings) -> dict[str, object]:
    """The keyword arguments of the configured strategy: the fields of its own settings model that are set."""
    return settings.strategy.kwargs()


def wrap_strategy(strategy: Strategy, wrappers: Sequence[Any]) -> Strategy:
    """``strategy`` inside each configured wrapper (server/strategies WRAPPERS), the first one innermost."""
    return wrap(strategy, wrappers)


def check_dp_strategy(settings: Settings) -> None:
    """Refuse (ValueError) DP with a strategy, a wrapper or an admission rule that reads what a DP device
    does not send (the loss, the label counts): it would run blind, not private. Settings already refuse
    it when validated; this is the composition root's own check on the strategy it builds."""
    if settings.dp:
        problem = dp_refusal(build_strategy(settings), similarity_drop=settings.similarity_drop)
        if problem is not None:
            raise ValueError(problem)


def at_model_rate(settings: Settings) -> bool:
    """Whether the strategy steps at each model's own rate (its manifest's ``learning_rate``): the default
    strategy, its rate unset. The rate was chosen for it (docs/results/default-search.md); another
    strategy's γ means another step (a sum, not a mean), so it keeps its own."""
    return settings.strategy.name == DEFAULT_STRATEGY and settings.strategy.learning_rate is None


def at_model_cap(settings: Settings) -> bool:
    """Whether the strategy's steps are capped at each model's own ``max_step`` (its manifest's) when the
    settings set no cap: the default strategy, whatever its rate, without DP. The cap was chosen with it,
    and it is what keeps a rate set too high from diverging (docs/results/default-search.md: the rate
    curves, capped). Under DP a step is mostly noise, and capped relative to ‖θ‖ the demo ended lower at
    every ε (2 / 4 / 8: 0.13 / 0.36 / 0.56 against 0.43 / 0.63 / 0.66 uncapped, docs/strategies.md)."""
    return settings.strategy.name == DEFAULT_STRATEGY and not settings.dp


def build_strategy(settings: Settings, reference: ReferenceGradient | None = None) -> Strategy:
    """The configured strategy inside the configured wrappers (FLEET_STRATEGY, FLEET_WRAPPERS); ``reference``
    is the trusted gradient a trusted-score wrapper scores against (``trusted_gradient``)."""
    strategy = make_strategy(settings.strategy.name, **strategy_params(settings))
    return wrap(strategy, settings.wrappers, reference=reference)


class TrustedGradient:
    """The core's ``ReferenceGradient`` port: the loss gradient on the server's trusted samples at the
    active model's current parameters, with the model's own ONNX training graph (the devices' graph and
    session, client/_onnx_session.py), one session per model. ``coordinator`` is bound once built."""

    def __init__(self, x: np.ndarray, y: np.ndarray, coordinator: Coordinator | None = None) -> None:
        x = np.asarray(x)
        self.x = x.astype(np.float32) / np.float32(255.0) if x.dtype == np.uint8 else x.astype(np.float32)
        self.y = np.asarray(y, dtype=np.int64)
        self.coordinator = coordinator
        self.sessions: dict[str, Any] = {}
        # the gradients at the version the model holds, by label (None: all samples): trusted-score and
        # label-check each ask for them once a version, so the second asks for what the first computed
        self._at: tuple[str, int] | None = None
        self._computed: dict[int | None, np.ndarray] = {}

    @classmethod
    def from_file(cls, path: str, samples: int) -> TrustedGradient:
        """The first ``samples`` examples of an .npz with x and y (uint8 0-255 or floats in [0, 1])."""
        with np.load(path) as data:
            return cls(data["x"][:samples], data["y"][:samples])

    def gradient(self, label: int | None = None) -> np.ndarray | None:
        run = None if self.coordinator is None else self.coordinator.run
        rows = slice(None) if label is None else self.y == label
        if run is None or not len(self.y[rows]):  # no model trains, or no trusted sample has that label
            return None
        session = self.session(run)
        if self._at != (run.model_id, run.version):
            self._at, self._computed = (run.model_id, run.version), {}
        if label not in self._computed:
            x = self.x[rows].reshape((-1, *run.manifest.input_shape))
            computed = session.loss_and_gradient(run.params, x, self.y[rows])[1]
            computed.setflags(write=False)  # shared by every caller at this version
            self._computed[label] = computed
        return self._computed[label]

    def head(self) -> tuple[slice, slice] | None:
        run = None if self.coordinator is None else self.coordinator.run
        return None if run is None else run.manifest.head()

    def templates(self) -> np.ndarray | None:
        run = None if self.coordinator is None else self.coordinator.run
        head = None if run is None else run.manifest.head()
        if run is None or head is None or not len(self.y):
            return None
        session, x = self.session(run), self.x.reshape((-1, *run.manifest.input_shape))
        return class_templates(
            lambda x1, y1: session.loss_and_gradient(run.params, x1, y1)[1], x, self.y, head
        )

    def session(self, run: Any) -> Any:
        """The model's gradient session, made once per model."""
        session = self.sessions.get(run.model_id)
        if session is None:
            from client import GradientSession  # only a deployment that scores against trusted data pays

            train_onnx = self.coordinator.catalog.graph(run.model_id, "train")  # type: ignore[union-attr]
            session = self.sessions[run.model_id] = GradientSession(run.manifest, train_onnx)
        return session


def trusted_gradient(settings: Settings, coordinator: Coordinator | None = None) -> TrustedGradient | None:
    """The trusted gradient port of the first trusted-score wrapper configured (its ``data`` and
    ``samples``), or None when none is; server/settings_rules.py refuses one without a readable ``data``."""
    for config in settings.wrappers:
        if config.name == "trusted-score" and getattr(config, "data", None):
            port = TrustedGradient.from_file(config.data, config.samples)
            port.coordinator = coordinator
            return port
    return None


def build_profiler(settings: Settings) -> IProf | RoundRobinDispatcher:
    """I-Prof cold-started from the bootstrap file (or its built-in prior), maybe alternating with MAUI."""
    profiler = IProf(
        time_slo_ms=settings.time_slo_ms,
        energy_slo=settings.energy_slo,
        min_batch=settings.min_batch,
        max_batch=settings.max_batch,
        **settings.profiler_params,
    )
    if settings.profiler_bootstrap is not None:
        profiler.load_bootstrap(settings.profiler_bootstrap)
    else:
        profiler.fit_prior()
    if settings.profiler_baseline == "maui":
        return with_maui_baseline(profiler, settings.profiler_bootstrap)
    return profiler


def build_store(settings: Settings, engine: Engine | None = None) -> SqlStore:
    """The SQL store on the configured database, migrated to the newest schema."""
    engine = engine or make_engine(settings.resolved_database_url())
    migrate(engine)
    return SqlStore(session_factory(engine), version_retention=settings.version_retention)


def role_parts(role: str, store: Any) -> dict[str, Any]:
    """What a process's role (docs/scale-out.md) injects into its ``Coordinator``: nothing for the single
    process (``all``: device checks, apply now, own state); an API worker checks each push, queues it for
    the aggregator and follows the aggregator's versions from storage; the aggregator applies what the
    workers checked (server/core/pushes.py, server/core/following.py)."""
    if role == "api":
        return {
            "sink": Enqueue(),
            "versions": FollowStorage(store),
            "recall_wait_s": 1.0,  # another worker's grant may commit a moment after its device pushed here
        }
    if role == "aggregator":
        return {"checks": TRUSTED}
    if role == "all":
        return {}
    raise ValueError(f"unknown role {role!r}: all, api or aggregator")


def build_coordinator(settings: Settings, store: Any | None = None) -> Coordinator:
    """A started coordinator for ``settings.role``: state loaded from storage; unless it is an API
    worker (which only follows what the aggregator writes), the initial model added and the stop rule set."""
    if problems := refusals(settings):  # validated already, unless built with model_construct
        raise ValueError("; ".join(problems))
    check_dp_strategy(settings)
    store = store or build_store(settings)
    reference = trusted_gradient(settings)  # bound to the coordinator below, before a strategy reads it
    coordinator = Coordinator(
        store=store,
        profiler=build_profiler(settings),
        strategy_factory=lambda: build_strategy(settings, reference),
        model_rate=at_model_rate(settings),
        model_cap=at_model_cap(settings),
        admission=AdmissionController(size_drop=settings.size_drop, similarity_drop=settings.similarity_drop),
        lease_seconds=settings.lease_seconds,
        max_gradient_norm=settings.max_gradient_norm,
        version_retention=settings.version_retention,
        privacy=privacy_policy(settings),
        health=settings.health_policy(),
        attestation=build_attestation(settings),
        enroll_quota=settings.enroll_quota_per_key,
        **role_parts(settings.role, store),
    )
    if reference is not None:
        reference.coordinator = coordinator
    coordinator.start()
    if settings.role == "api":
        return coordinator
    if settings.profiler_bootstrap is not None:
        coordinator.save_cold_profile()
    if coordinator.run is None and settings.initial_model:
        coordinator.add_model(builtin(settings.initial_model), actor="startup")
    if settings.target_accuracy is not None or settings.max_versions is not None:
        coordinator.set_stop(target_accuracy=settings.target_accuracy, max_versions=settings.max_versions)
    return coordinator


def build_attestation(settings: Settings) -> Attestation:
    """The device attestation verifier enrollments through a key must pass. There is none yet: every
    device is accepted, and the log says so once. Play Integrity's design: docs/attestation.md."""
    verifier = AcceptAll()
    log.info("device attestation: %s (every device is accepted; see docs/attestation.md)", verifier.name)
    return verifier


def build_evaluation_loop(settings: Settings, coordinator: Coordinator) -> EvaluationLoop | None:
    """A started loop evaluating new versions on FLEET_EVAL_DATA (None without it)."""
    if settings.eval_data is None:
        return None
    held_out = EvalFile(settings.eval_data)  # reread when it changes: a moving set (a drift scenario)

    def make_evaluator(model_id: str) -> Evaluator:
        infer_onnx = coordinator.catalog.graph(model_id, "infer")
        manifest = coordinator.catalog.manifest(model_id)
        return Evaluator(manifest, infer_onnx, held_out.x, held_out.y, metric=settings.eval_metric)

    loop = EvaluationLoop(
        coordinator,
        make_evaluator,
        every_versions=settings.eval_every_versions,
        interval_s=settings.eval_interval_s,
        eval_file=held_out,
        reference_age_s=settings.eval_reference_age_s,
    )
    coordinator.evaluate_params = loop.evaluate  # a promoted or restored head is evaluated at once
    loop.start()
    return loop


def privacy_policy(settings: Settings) -> PrivacyPolicy | None:
    """DP terms for every task, or None when DP is off."""
    if not settings.dp:
        return None
    return PrivacyPolicy(
        clip=settings.dp_clip,
        noise_multiplier=settings.dp_noise_multiplier,
        epsilon_budget=settings.dp_epsilon_budget,
        delta=settings.dp_delta,
        examples_tolerance=settings.dp_examples_tolerance,
    )


def apply_settings(coordinator: Coordinator, old: Settings, new: Settings) -> None:
    """Apply changed run-time settings (server/settings.py LIVE_SETTINGS) to a running coordinator.

    The strategy is rebuilt only when its settings or the wrappers changed; it keeps its state when its
    class stays the same. The API's rate limits are the API's own (server/api/app.py applies them)."""
    check_dp_strategy(new)
    factory = None
    if old.strategy != new.strategy or old.wrappers != new.wrappers:
        reference = trusted_gradient(new, coordinator)

        def factory() -> Strategy:
            return build_strategy(new, reference)

    coordinator.reconfigure(
        strategy_factory=factory,
        model_rate=at_model_rate(new),
        model_cap=at_model_cap(new),
        lease_seconds=new.lease_seconds,
        max_gradient_norm=new.max_gradient_norm,
    )
    coordinator.health_policy = new.health_policy()
    coordinator.devices.default_quota = new.enroll_quota_per_key
    coordinator.admission.size_drop = new.size_drop
    coordinator.admission.similarity_drop = new.similarity_drop
    profiler = coordinator.profiler
    for each in getattr(profiler, "profilers", [profiler]):  # the MAUI dispatcher holds two
        each.time_slo_ms, each.energy_slo = new.time_slo_ms, new.energy_slo
        each.min_batch, each.max_batch = new.min_batch, new.max_batch
