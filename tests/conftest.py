"""Test services: real Redis and PostgreSQL when reachable, stand-ins otherwise.

`WAGENT_REQUIRE_SERVICES=1` (set by .ci/run) makes a missing service an error and any skipped
test a failure. Without it, Redis falls back to the in-process fakeredis and PostgreSQL tests are
skipped; the summary at the end says which ran without the real service.

In parallel (`pytest -n 4`, pytest-xdist: the README's test command) each worker has services of
its own, so that one worker's `flushdb` or advisory lock never meets another's: worker gwK uses
the Redis database D - K, D the one TEST_REDIS_URL names (15 by default: gw0 15, gw1 14), and
the PostgreSQL database `<name>_gwK` next to the one TEST_POSTGRES_URL names (created when
missing, kept for the next run); `worker_urls` below. TEST_REDIS_URL and TEST_POSTGRES_URL are
set to the worker's own in its environment, for the modules and processes that read them
(bench/faults.py, tests/test_migrations.py, `wagent` subprocesses).
"""

import functools
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import fakeredis
import httpcore2
import pytest
import redis
from hypothesis import HealthCheck, settings
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url

from core import clock
from replay.environment import ReplayEnvironment, no_fsync
from replay.schemas import SCHEMAS
from storage.db import create_schema, make_engine
from tests.factories import TENANT

# Property tests run on a shared 2-core CI machine: a slow example is the machine's load, not
# a finding, so no per-example deadline and no "generation is slow" health check; each test's
# own @settings (max_examples and the like) still applies on top of this profile.
settings.register_profile("wagent", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("wagent")

# Every ReplayEnvironment builds the product's HTTP clients (the Anthropic SDK's, GraphClient's),
# and each read the system's CA bundle into an SSL context of its own, for doubles on loopback
# that speak plain HTTP: a third of an environment's CPU (0.14 CPU-s a ReplayEnvironment on
# SQLite, 0.09 with this). A test process reads it once; the contexts are the library's own
# (verifying), only shared. The product's processes build their clients once (issue 44 item 4).
httpcore2.default_ssl_context = functools.cache(httpcore2.default_ssl_context)

# A PostgreSQL schema a test is done with is emptied and handed to the next test of this
# process instead of being dropped and made again: 10-40 ms instead of 1.2-2 s under load
# (replay/schemas.py; the `engine` fixture below and every ReplayEnvironment).
SCHEMAS.reuse = True

REQUIRE = os.environ.get("WAGENT_REQUIRE_SERVICES") == "1"
BASE_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
BASE_POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL",
                                   "postgresql://postgres@127.0.0.1:5432/test")
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1"... under `pytest -n`; else None


def worker_urls(redis_url: str, postgres_url: str, worker: str | None) -> tuple[str, str]:
    """The (Redis URL, PostgreSQL URL) of pytest-xdist worker `worker` ("gwK"): Redis database
    D - K of the server `redis_url` names (D its database, 0 when it names none) and the
    PostgreSQL database "<name>_gwK" on the server of `postgres_url`; both unchanged for None
    (no xdist). ValueError when D - K is below 0 (name a higher D in TEST_REDIS_URL)."""
    if worker is None:
        return redis_url, postgres_url
    index = int(worker.removeprefix("gw"))
    redis_parts = urlsplit(redis_url)
    database = int(redis_parts.path.strip("/") or 0) - index
    if database < 0:
        raise ValueError(f"pytest-xdist worker {worker} would use Redis database {database}: "
                         f"TEST_REDIS_URL ({redis_url}) must name a database of at least {index}")
    postgres = make_url(postgres_url)
    return (urlunsplit(redis_parts._replace(path=f"/{database}")),
            postgres.set(database=f"{postgres.database}_{worker}")
            .render_as_string(hide_password=False))


REDIS_URL, POSTGRES_URL = worker_urls(BASE_REDIS_URL, BASE_POSTGRES_URL, WORKER)
os.environ["TEST_REDIS_URL"], os.environ["TEST_POSTGRES_URL"] = REDIS_URL, POSTGRES_URL
FIXTURES = Path(__file__).parent / "fixtures"
WHATSAPP = FIXTURES / "whatsapp"
START = datetime(2026, 6, 1, 13, 0, 30, tzinfo=UTC)


def _redis_up() -> bool:
    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def _create_worker_database() -> None:
    """CREATE DATABASE for this xdist worker's POSTGRES_URL when missing (on the server of
    BASE_POSTGRES_URL, connected to its database); nothing without xdist."""
    if WORKER is None:
        return
    name = make_url(POSTGRES_URL).database
    admin = create_engine(make_url(BASE_POSTGRES_URL).set(drivername="postgresql+psycopg"),
                          isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        with admin.connect() as connection:
            if connection.execute(text("SELECT 1 FROM pg_database WHERE datname = :name"),
                                  {"name": name}).first() is None:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()


def _postgres_up() -> bool:
    try:
        _create_worker_database()
        engine = make_engine(POSTGRES_URL)
        with engine.connect() as connection:
            connection.execute(text("select 1"))
        engine.dispose()
        return True
    except Exception:
        return False


REDIS_UP = _redis_up()
POSTGRES_UP = _postgres_up()


def pytest_sessionstart(session: pytest.Session) -> None:
    missing = [name for name, up in (("Redis", REDIS_UP), ("PostgreSQL", POSTGRES_UP)) if not up]
    if REQUIRE and missing:
        raise pytest.UsageError(f"WAGENT_REQUIRE_SERVICES=1 but not reachable: {missing} "
                                f"(Redis {REDIS_URL}, PostgreSQL {POSTGRES_URL})")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if REQUIRE and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped under WAGENT_REQUIRE_SERVICES=1: {report.longrepr}"


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    terminalreporter.write_sep("-", "services")
    terminalreporter.write_line(
        f"Redis: real server at {REDIS_URL}" if REDIS_UP else
        f"Redis: not reachable at {REDIS_URL}; Redis tests ran on the in-process fakeredis")
    terminalreporter.write_line(
        f"PostgreSQL: real server at {POSTGRES_URL}" if POSTGRES_UP else
        f"PostgreSQL: not reachable at {POSTGRES_URL}; PostgreSQL tests skipped")
    workers = getattr(terminalreporter.config.option, "numprocesses", None)
    if workers:
        terminalreporter.write_line(
            f"in parallel (pytest-xdist, {workers} workers): worker gwK on Redis database D - K "
            f"and PostgreSQL database <name>_gwK (tests/conftest.py: worker_urls)")


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """Real Redis (TEST_REDIS_URL's database, 15 by default, or this xdist worker's: flushed)
    when reachable, else an in-process stand-in."""
    if REDIS_UP:
        client = redis.Redis.from_url(REDIS_URL)
        client.flushdb()
        yield client
        client.flushdb()
        client.close()
    else:
        yield fakeredis.FakeRedis(server=fakeredis.FakeServer())


@pytest.fixture
def redis_url() -> str | None:
    """The URL of the real Redis, or None (the replay environment then uses the stand-in)."""
    if not REDIS_UP:
        return None
    return REDIS_URL


def require_postgres() -> str:
    if not POSTGRES_UP:
        pytest.skip(f"PostgreSQL not reachable at {POSTGRES_URL}")
    return POSTGRES_URL


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str | None:
    """None → the replay environment makes a fresh SQLite file; else the PostgreSQL URL."""
    if request.param == "postgres":
        return require_postgres()
    return None


@pytest.fixture
def frozen_clock() -> Iterator[clock.FrozenClock]:
    """The product clock stopped at START (core/clock.set_clock), the previous one back after."""
    frozen = clock.FrozenClock(START)
    previous = clock.set_clock(frozen)
    yield frozen
    clock.set_clock(previous)


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    """The whole product on loopback with tests.factories.TENANT, at START, on both databases
    (a test module may define its own `env`, which then wins)."""
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    environment.add_tenant(TENANT)
    yield environment
    environment.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A fresh, empty schema on SQLite or PostgreSQL (a PostgreSQL schema of this process's
    own, emptied after and handed to a later test: replay/schemas.py)."""
    if request.param == "sqlite":
        eng = make_engine(f"sqlite:///{tmp_path}/test.db")
        event.listen(eng, "connect", no_fsync)  # a temporary file: no fsync per commit
        create_schema(eng)
        yield eng
        eng.dispose()
        return
    url = require_postgres()
    eng, schema = SCHEMAS.take(url, "wagent_test")
    yield eng
    SCHEMAS.give_back(eng, url, schema)
