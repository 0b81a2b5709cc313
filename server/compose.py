"""The composition root: builds a coordinator from settings, for the API, sim/, bench/, experiments/, tests.

Nothing here imports FastAPI: a benchmark or a test that needs a core with real storage builds it
here without the HTTP layer.
"""

from __future__ import annotations

from sqlalchemy import Engine

from models.manifest import builtin
from profiler import IProf
from profiler.dispatch import RoundRobinDispatcher, with_maui_baseline
from server.core.admission import AdmissionController
from server.core.coordinator import Coordinator
from server.settings import Settings
from server.store.database import make_engine, migrate, session_factory
from server.store.sql import SqlStore
from server.strategies import STRATEGIES, make_strategy

__all__ = ["build_coordinator", "build_profiler", "build_store", "strategy_params"]


def strategy_params(settings: Settings) -> dict[str, object]:
    """The keyword arguments of the configured strategy: the fields of its own settings class."""
    return STRATEGIES[settings.strategy].settings.from_config(settings).kwargs()


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


def build_coordinator(settings: Settings) -> Coordinator:
    """A started coordinator: state loaded from storage, the initial model added, the stop rule set."""
    coordinator = Coordinator(
        store=build_store(settings),
        profiler=build_profiler(settings),
        strategy_factory=lambda: make_strategy(settings.strategy, **strategy_params(settings)),
        admission=AdmissionController(size_drop=settings.size_drop, similarity_drop=settings.similarity_drop),
        lease_seconds=settings.lease_seconds,
        max_gradient_norm=settings.max_gradient_norm,
        version_retention=settings.version_retention,
    )
    coordinator.start()
    if settings.profiler_bootstrap is not None:
        coordinator.save_cold_profile()
    if coordinator.run is None and settings.initial_model:
        coordinator.add_model(builtin(settings.initial_model), actor="startup")
    if settings.target_accuracy is not None or settings.max_versions is not None:
        coordinator.set_stop(target_accuracy=settings.target_accuracy, max_versions=settings.max_versions)
    return coordinator
