"""Engine and session scope for SQLite (default) and PostgreSQL, safe across RQ's fork."""

import functools
import os
import sqlite3
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy import Engine, create_mock_engine, event, inspect
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlmodel import Session, SQLModel, create_engine

from storage import (
    fences,
    models,  # noqa: F401  (registers every table on SQLModel.metadata)
)


def make_engine(url: str) -> Engine:
    """Create the engine for `url` (`sqlite:///path` or `postgresql+psycopg://...`).

    SQLite gets foreign keys, WAL, a busy timeout and `BEGIN IMMEDIATE` transactions, so two
    writers serialise instead of interleaving (the booking check-then-insert relies on it).
    The pool is discarded in a forked child (RQ's work horse) without closing the parent's
    sockets (SQLAlchemy: "Using Connection Pools with Multiprocessing or os.fork()").

    An error's message names the statement but never its values: parameters are hidden
    (`hide_parameters`), and PostgreSQL's DETAIL, HINT and CONTEXT lines, which quote the
    row ("Key (wa_id)=(5511...)", "Failing row contains (...)"), are left out of it
    (`_primary_message_only`). Those messages reach logs and RQ's failed-job records (kept
    seven days), where customer data never goes (docs/OPERATE.md, Security).
    """
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    if parsed.get_backend_name() == "sqlite":
        engine = _sqlite_engine(url)
    else:  # fail fast when the server is down: the webhook answers 503 and Meta redelivers
        engine = create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 5},
                               hide_parameters=True)
        event.listen(engine, "handle_error", _primary_message_only)
    _ENGINES.add(engine)
    return engine


def _primary_message_only(context: ExceptionContext) -> None:
    """Cut a PostgreSQL error's message to its primary line (the driver's exception and
    SQLAlchemy's wrapper, whose message was built from it). The fields stay readable on
    `exc.orig.diag` (`sqlstate`, `constraint_name`, `message_detail`) for code that needs
    them; only what `str()` shows, and so what a traceback shows, changes."""
    orig = context.original_exception
    primary = getattr(getattr(orig, "diag", None), "message_primary", None)
    if not primary or not orig.args or orig.args[0] == primary:
        return
    orig.args = (primary,)
    wrapped = context.sqlalchemy_exception
    if wrapped is not None and wrapped.args:
        wrapped.args = (f"({type(orig).__module__}.{type(orig).__name__}) {primary}",)


_ENGINES: "weakref.WeakSet[Engine]" = weakref.WeakSet()


def _dispose_after_fork() -> None:
    for engine in list(_ENGINES):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_dispose_after_fork)


def _sqlite_engine(url: str) -> Engine:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                           hide_parameters=True)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def connect_redis(url: str) -> redis.Redis:
    """A Redis client that fails fast (2 s to connect, 5 s per command, one quick retry), so a
    Redis outage turns into a 503 at once instead of a hung request.
    """
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5,
                                retry=Retry(NoBackoff(), 1))


# The database or Redis could not be reached or dropped the connection: an outage to wait out,
# not a bug. (psycopg reports a refused or broken connection as OperationalError.)
OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    OperationalError, InterfaceError, redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError)


def is_outage(exc: BaseException) -> bool:
    """True for OUTAGE_ERRORS and for any driver error that invalidated its connection."""
    return isinstance(exc, OUTAGE_ERRORS) or (
        isinstance(exc, DBAPIError) and bool(exc.connection_invalidated))


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


def create_schema(engine: Engine) -> None:
    """Create every table (tests and replays); production uses `wagent db upgrade` (Alembic).

    An empty database (no `tenant` table) gets the whole schema as one script in one
    transaction (`_schema_script`): what `create_all` would emit, without its ~500 round trips
    and ~500 commits (each an fsync on SQLite). A ReplayEnvironment makes one per test: 0.45 s
    on SQLite and 1.5 s on PostgreSQL under the shared CI machine's load before, a few tens of
    ms after (issue 44 item 4; figures in bench/README.md). A database that has tables gets
    `create_all`, which adds only the missing ones."""
    if inspect(engine).has_table("tenant"):
        SQLModel.metadata.create_all(engine)
        return
    script = _schema_script(engine.dialect.name)
    raw = engine.raw_connection()
    try:
        if engine.dialect.name == "sqlite":  # autocommit connection (_sqlite_engine): BEGIN
            sqlite = cast(sqlite3.Connection, raw.driver_connection)
            sqlite.executescript(f"BEGIN IMMEDIATE;\n{script};\nCOMMIT;")
        else:
            cursor = raw.cursor()
            cursor.execute(script)  # no parameters: one simple-protocol round trip
            cursor.close()
            raw.commit()
    finally:
        raw.close()


@functools.cache
def _schema_script(dialect: str) -> str:
    """The DDL `SQLModel.metadata.create_all` emits on an empty database of `dialect`
    (tables, indexes, in dependency order), compiled once per process, ";"-joined."""
    statements: list[str] = []

    def record(sql: Any, *_: Any, **__: Any) -> None:
        statements.append(str(sql.compile(dialect=mock.dialect)).strip())

    mock = create_mock_engine(f"{dialect}://", record)
    SQLModel.metadata.create_all(mock, checkfirst=False)
    return ";\n".join(statements)


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any exception.

    Inside a running turn (`storage.fences.fenced`) it begins by checking the turn still holds
    its conversation's fence, and raises storage.errors.TurnFenced when it does not.
    """
    with Session(engine, expire_on_commit=False) as session:
        try:
            fences.check_current(session)
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


@contextmanager
def read_scope(engine: Engine) -> Iterator[Session]:
    """A session for a read that needs no transaction of its own: a look whose answer the
    caller acts on in later transactions, each of them checked as usual ("anything to do?").

    PostgreSQL runs each statement in autocommit: no BEGIN/COMMIT, no fence check, no
    transaction id (issue 43, round trips); each statement sees its own snapshot, so use it
    for one statement. SQLite gets an ordinary transaction (its `BEGIN IMMEDIATE`), without
    the fence check. Nothing written through it is kept: it never commits.
    """
    if is_postgres(engine):
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection, \
                Session(bind=connection, expire_on_commit=False) as session:
            yield session
        return
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
        finally:
            session.rollback()

