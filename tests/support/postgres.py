"""PostgreSQL for tests (and the lab's benchmarks): a scratch database per test or run, and an outage
of one database. The server is FLEET_TEST_DATABASE_URL, else the local one (DEFAULT_POSTGRES)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


def postgres_server_url() -> str:
    """The PostgreSQL server tests and benchmarks use (FLEET_TEST_DATABASE_URL or the local one)."""
    return os.environ.get("FLEET_TEST_DATABASE_URL", DEFAULT_POSTGRES)


@contextmanager
def scratch_postgres_database(server_url: str) -> Iterator[str]:
    """A new, empty database on the server, dropped afterwards.

    A database per test or run (not a shared schema that is reset) keeps tests, and test runs of other
    checkouts against the same server, from seeing or dropping each other's rows.
    """
    import psycopg

    name = f"fleet_test_{uuid.uuid4().hex[:16]}"
    dsn = make_url(server_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
