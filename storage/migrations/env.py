"""Alembic environment of wagent: SQLite (default) and PostgreSQL.

The database URL is the Alembic config's `sqlalchemy.url` main option, set programmatically by
`storage.migrate` (or by `alembic.ini` / `-x url=...` for a developer's command line). The engine
comes from `storage.db.make_engine`, so SQLite gets the same busy timeout, WAL and
`BEGIN IMMEDIATE` transactions as the product; `postgresql://` is turned into
`postgresql+psycopg://` here first (`storage.migrate.sqlalchemy_url`, which keeps the password).
Concurrent upgrades of one PostgreSQL database queue on an advisory lock. Two differences on
SQLite, both for the "move and copy" batch migrations that SQLite needs for most ALTERs:

* `PRAGMA foreign_keys` is OFF while migrating (Alembic's batch docs: the pragma "must be
  disabled"): with it ON, dropping the old copy of a table deletes, through `ON DELETE
  CASCADE`, every row that references it. `PRAGMA foreign_key_check` runs before the commit
  instead, and any violation aborts the upgrade.
* The whole upgrade is one transaction (`transactional_ddl=True`): SQLite DDL is transactional
  and `make_engine` emits `BEGIN IMMEDIATE` itself, so a failing revision leaves the file as it
  was instead of half-migrated.
"""

from logging.config import fileConfig
from typing import Any

from alembic import context
from sqlalchemy import Connection, event, text
from sqlalchemy.engine import make_url
from sqlmodel import SQLModel

from storage import models  # noqa: F401  (registers every table on SQLModel.metadata)
from storage.db import make_engine
from storage.migrate import sqlalchemy_url

# Any constant shared by every wagent process: concurrent PostgreSQL upgrades queue on it.
ADVISORY_LOCK_KEY = 0x77A6E7  # "wagent"

config = context.config
if config.config_file_name is not None:  # a developer's `alembic -c .../alembic.ini` run
    fileConfig(config.config_file_name, disable_existing_loggers=False)
target_metadata = SQLModel.metadata


def _database_url() -> str:
    """The target URL, `postgresql://` turned into `postgresql+psycopg://` (password kept)."""
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL: set the Alembic option sqlalchemy.url "
                           "(storage.migrate does) or pass -x url=...")
    return sqlalchemy_url(url)


def _foreign_keys_off(dbapi_connection: Any, _: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=OFF")
    cursor.close()


def _check_foreign_keys(connection: Connection) -> None:
    violations = connection.execute(text("PRAGMA foreign_key_check")).fetchall()
    if violations:
        shown = ", ".join(f"{row[0]} rowid {row[1]} -> {row[2]}" for row in violations[:10])
        raise RuntimeError(f"migration left {len(violations)} foreign key violation(s): {shown}")


def run_migrations_offline() -> None:
    """Emit the SQL to stdout (`alembic upgrade head --sql`) without connecting."""
    url = _database_url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=make_url(url).get_backend_name() == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = _database_url()
    sqlite = make_url(url).get_backend_name() == "sqlite"
    engine = make_engine(url)
    if sqlite:
        # Registered after make_engine's own "connect" listener, so it runs after it.
        event.listen(engine, "connect", _foreign_keys_off)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=sqlite,
                transactional_ddl=True if sqlite else None,
            )
            with context.begin_transaction():
                if engine.dialect.name == "postgresql":  # SQLite: BEGIN IMMEDIATE serialises
                    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                       {"key": ADVISORY_LOCK_KEY})
                context.run_migrations()
                if sqlite:
                    _check_foreign_keys(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
