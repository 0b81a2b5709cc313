"""PostgreSQL for tests (and the lab's benchmarks): one migrated template per test session, a fresh
database copied from it per test, and an outage of one database.

Copying a template (``CREATE DATABASE … TEMPLATE``) takes a few tens of milliseconds; running the five
migrations on every fresh database took about a second each. Every database carries a random name and is
dropped afterwards, so test runs of other checkouts on the same server never see each other's rows.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from sqlalchemy.engine import make_url

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


def postgres_server_url() -> str:
    """The server tests and benchmarks use: FLEET_TEST_DATABASE_URL, else the local one."""
    return os.environ.get("FLEET_TEST_DATABASE_URL", DEFAULT_POSTGRES)


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _sqlalchemy(url: str, database: str) -> str:
    return (
        make_url(url)
        .set(drivername="postgresql+psycopg", database=database)
        .render_as_string(hide_password=False)
    )


@functools.cache
def problem(url: str) -> str | None:
    """Why PostgreSQL at ``url`` cannot be used (None if it can); asked once per run."""
    try:
        import psycopg

        with psycopg.connect(_libpq(url), connect_timeout=3):
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


_templates: dict[str, str] = {}


def migrated_template(url: str) -> str:
    """The name of this session's migrated template database on ``url``'s server (made on first use)."""
    if url in _templates:
        return _templates[url]
    import psycopg
    from sqlalchemy import create_engine

    from server.store.database import migrate

    name = f"fleet_template_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(url), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    engine = create_engine(_sqlalchemy(url, name))
    try:
        migrate(engine)
    finally:
        engine.dispose()  # a template must have no open connection while it is copied
    _templates[url] = name
    return name


def drop_templates() -> None:
    """Drop the templates this session made (pytest_sessionfinish)."""
    import psycopg

    for url, name in list(_templates.items()):
        with psycopg.connect(_libpq(url), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        del _templates[url]


@contextmanager
def scratch_database(url: str, *, migrated: bool = True) -> Iterator[str]:
    """A new database on ``url``'s server (a copy of the migrated template, or empty), dropped afterwards."""
    import psycopg

    name = f"fleet_test_{uuid.uuid4().hex[:16]}"
    template = f' TEMPLATE "{migrated_template(url)}"' if migrated else ""
    with psycopg.connect(_libpq(url), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"{template}')
    try:
        yield make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(_libpq(url), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def scratch_postgres_database(url: str) -> AbstractContextManager[str]:
    """A new, empty database (the benchmarks migrate it themselves), dropped afterwards."""
    return scratch_database(url, migrated=False)


def _admin_dsn(url: str) -> tuple[str, str]:
    """(libpq DSN of the server's `postgres` database, the name of ``url``'s database)."""
    parsed = make_url(url)
    admin = parsed.set(drivername="postgresql", database="postgres")
    return admin.render_as_string(hide_password=False), str(parsed.database)


@contextmanager
def postgres_outage(url: str) -> Iterator[None]:
    """While inside: ``url``'s database refuses new connections and its open ones are dropped — an
    outage of that one database, which leaves the server's other databases (other tests) alone."""
    import psycopg

    dsn, name = _admin_dsn(url)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )
    try:
        yield
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
