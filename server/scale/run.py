"""`fleet serve --role aggregator`: take the lease, load the state, drain the queue until SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading

from sqlalchemy import event

from server.compose import build_coordinator, build_evaluation_loop, build_store
from server.core.errors import LeaseLost
from server.scale.aggregator import AggregatorStore, drain, holder_name, take_lease
from server.scale.announce import VersionAnnouncer
from server.settings import Settings
from server.store.sql import SqlStore

log = logging.getLogger("fleet.server")


def end_stalled_transactions(store: SqlStore, ttl: float) -> None:
    """PostgreSQL ends this aggregator's transactions that sit idle longer than its lease: one paused
    mid-transaction (SIGSTOP, a frozen VM) would otherwise hold row locks its successor needs."""
    engine = store.sessions.kw["bind"]

    @event.listens_for(engine, "connect")
    def _timeout(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        with dbapi_connection.cursor() as cursor:
            cursor.execute(f"SET idle_in_transaction_session_timeout = {int(ttl * 1000)}")
        dbapi_connection.commit()

    engine.dispose()  # connections made before (the migration's) do not have it


def run_aggregator(settings: Settings, stop: threading.Event | None = None) -> int:
    """Run until ``stop`` (or SIGTERM/SIGINT in the main thread); the exit code: 0, or 3 if the lease
    was lost to another aggregator."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    store = build_store(settings)
    holder, ttl = holder_name(), settings.aggregator_lease_seconds
    end_stalled_transactions(store, ttl)
    token = take_lease(store, holder, ttl, stop)
    if token is None:
        return 0
    announcer = VersionAnnouncer(settings.redis_url)
    fenced = AggregatorStore(store, holder=holder, token=token, ttl=ttl, announcer=announcer)
    aggregator = build_coordinator(settings, store=fenced)
    loop = build_evaluation_loop(settings, aggregator)
    log.info("aggregator %s applying the queue in batches of %d", holder, settings.aggregator_batch)
    code = 0
    try:
        applied = drain(aggregator, fenced, batch=settings.aggregator_batch, stop=stop)
        log.info("aggregator %s stopping after %d pushes", holder, applied)
    except LeaseLost as exc:
        log.error("aggregator %s lost its lease (%s): exiting without applying anything more", holder, exc)
        code = 3
    finally:
        if loop is not None:
            loop.stop()
            loop.join(timeout=10)
        if code == 0:
            aggregator.close()
        announcer.close()
    return code
