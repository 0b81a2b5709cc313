"""Stores and started coordinators on one storage, for tests that restart on memory, SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest

from models.manifest import builtin
from server.core.coordinator import Coordinator
from server.core.ports import Store
from server.store.database import make_engine, migrate, session_factory
from server.store.sql import SqlStore
from tests.conftest import fresh_postgres_database, postgres_url
from tests.memory_store import MemoryStore

BACKENDS = ["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@contextmanager
def store_factory(
    backend: str, tmp_path: Path, *, version_retention: int = 200
) -> Iterator[Callable[[], Store]]:
    """Stores on one storage: calling the factory again is a restart (memory keeps its one object)."""
    if backend == "memory":
        memory = MemoryStore(version_retention=version_retention)
        yield lambda: memory
        return
    sqlite = f"sqlite:///{tmp_path / 'fleet.db'}"
    with fresh_postgres_database(postgres_url()) if backend == "postgresql" else nullcontext(sqlite) as url:
        engine = make_engine(url)
        migrate(engine)
        yield lambda: SqlStore(session_factory(engine), version_retention=version_retention)
        engine.dispose()


@contextmanager
def started_cores(make_store: Callable[[], Store]) -> Iterator[Callable[..., Coordinator]]:
    """Factory of started coordinators (an mlp added if the store has no run), all closed on exit."""
    cores: list[Coordinator] = []

    def make(*, with_model: bool = True, **options: Any) -> Coordinator:
        core = Coordinator(store=make_store(), **options)
        core.start()
        if with_model and core.run is None:
            core.add_model(builtin("mlp"), actor="test")
        cores.append(core)
        return core

    yield make
    for core in cores:
        core.close()


@contextmanager
def plain_cores(backend: str, tmp_path: Path, **defaults: Any) -> Iterator[Callable[..., Coordinator]]:
    """Started coordinators on one storage (a second call is a restart) with a fixed batch of 10 and plain
    async FedAvg: for tests of enrollment, keys and devices, not of learning. ``defaults`` are the
    coordinator options every call gets unless it passes its own."""
    from server.strategies import make_strategy
    from sim.harness import BatchSizer

    with store_factory(backend, tmp_path) as make_store, started_cores(make_store) as make:

        def core(**options: Any) -> Coordinator:
            return make(
                profiler=BatchSizer(mean=10),
                strategy_factory=lambda: make_strategy("fedavg-async", learning_rate=0.1, k=1),
                **{**defaults, **options},
            )

        yield core
