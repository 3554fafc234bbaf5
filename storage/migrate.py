"""Schema migrations (Alembic) run from code: `wagent db upgrade` calls `upgrade(url)`.

The Alembic script directory is `storage/migrations/` inside the package, so it ships with the
wheel; the config is built here and no `alembic.ini` is read at run time. Revisions live in
`storage/migrations/versions/`, named `<rev-id>_<slug>.py` with rev-ids 0001, 0002, ...

Adding a revision (developers; `storage/migrations/alembic.ini` exists for this). Autogenerate
compares the models with a database *at head*, so bring a scratch database there first, then
review the generated file by hand (partial indexes' `sqlite_where`/`postgresql_where` and
`JSON().with_variant(JSONB(), "postgresql")` columns are not rendered faithfully)::

    .venv/bin/alembic -c storage/migrations/alembic.ini -x url=sqlite:////tmp/wagent-dev.db \\
        upgrade head
    .venv/bin/alembic -c storage/migrations/alembic.ini -x url=sqlite:////tmp/wagent-dev.db \\
        revision --autogenerate --rev-id 0002 -m "add something"

Use a SQLite scratch database (the product default) and run `tests/test_migrations.py`, which
upgrades fresh SQLite and PostgreSQL databases and checks that nothing differs from the models.
"""

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import make_url

from storage.db import make_engine

MIGRATIONS = Path(__file__).parent / "migrations"


def sqlalchemy_url(database_url: str) -> str:
    """`database_url` with `postgresql://` turned into `postgresql+psycopg://`, password intact.

    Other URLs (`sqlite:///path`, `postgresql+psycopg://...`) come back unchanged in meaning.
    Raises `sqlalchemy.exc.ArgumentError` for a string that is not a database URL.
    """
    parsed = make_url(database_url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_config(database_url: str) -> Config:
    """An Alembic `Config` for `database_url` and the packaged script directory.

    For other `alembic.command` functions (`downgrade`, `history`, `check`, ...). The URL is
    stored as the `sqlalchemy.url` main option with `%` escaped (ConfigParser interpolation),
    so percent-encoded URLs (`?options=-csearch_path%3Dx`, passwords) survive.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("path_separator", "os")
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate the database at `database_url` up to `revision` (default: the newest).

    `database_url`: `sqlite:///relative/path.db`, `sqlite:////absolute/path.db` (the file and
    its directory are created when missing) or `postgresql://user:pw@host:port/db` (psycopg 3;
    tables go to the first schema of the connection's `search_path`). An empty database gets
    every table; one already at `revision` is left untouched. On SQLite the whole upgrade is
    one transaction; on PostgreSQL too (transactional DDL), and concurrent upgrades of the same
    database wait for each other.

    Errors: `alembic.util.CommandError` for an unknown revision; `sqlalchemy.exc.
    OperationalError` when the database cannot be reached or is locked for too long;
    `sqlalchemy.exc.ArgumentError` for a malformed URL; `RuntimeError` when a SQLite migration
    would leave foreign key violations (nothing is committed then).
    """
    command.upgrade(make_config(database_url), revision)


def current(database_url: str) -> str | None:
    """The revision the database is at (e.g. `"0001"`), or None for an unmigrated database.

    A SQLite file that does not exist yet counts as unmigrated and is not created.
    Errors: `alembic.util.CommandError` if the version table holds several heads;
    `sqlalchemy.exc.OperationalError` / `ArgumentError` as for `upgrade`.
    """
    url = sqlalchemy_url(database_url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not Path(database).exists():
            return None
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
