"""Alembic environment: runs on the connection handed in by server.store.database.migrate."""

from alembic import context
from sqlalchemy import create_engine

from server.store.tables import Base

config = context.config
target_metadata = Base.metadata

connection = config.attributes.get("connection")
if connection is None:  # plain `alembic` command line: FLEET_DATABASE_URL or sqlite default
    import os

    url = os.environ.get("FLEET_DATABASE_URL", "sqlite:///var/fleet.db")
    with create_engine(url).begin() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
