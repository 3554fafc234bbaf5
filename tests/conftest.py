"""Test services: real Redis and PostgreSQL when reachable, stand-ins otherwise.

`WAGENT_REQUIRE_SERVICES=1` (set by .ci/run) makes a missing service an error and any skipped
test a failure. Without it, Redis falls back to the in-process fakeredis and PostgreSQL tests are
skipped; the summary at the end says which ran without the real service.
"""

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import fakeredis
import pytest
import redis
from hypothesis import HealthCheck, settings
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from core import clock
from replay.environment import ReplayEnvironment
from storage.db import create_schema, make_engine
from tests.factories import TENANT

# Property tests run on a shared 2-core CI machine: a slow example is the machine's load, not
# a finding, so no per-example deadline and no "generation is slow" health check; each test's
# own @settings (max_examples and the like) still applies on top of this profile.
settings.register_profile("wagent", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("wagent")

REQUIRE = os.environ.get("WAGENT_REQUIRE_SERVICES") == "1"
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
FIXTURES = Path(__file__).parent / "fixtures"
WHATSAPP = FIXTURES / "whatsapp"
START = datetime(2026, 6, 1, 13, 0, 30, tzinfo=UTC)


def _redis_up() -> bool:
    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def _postgres_up() -> bool:
    try:
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


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """Real Redis (db 15, flushed) when reachable, else an in-process stand-in."""
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
    """A fresh, empty schema on SQLite or PostgreSQL (its own PostgreSQL schema, dropped after)."""
    if request.param == "sqlite":
        eng = make_engine(f"sqlite:///{tmp_path}/test.db")
        create_schema(eng)
        yield eng
        eng.dispose()
        return
    url = require_postgres()
    schema = f"wagent_test_{uuid.uuid4().hex[:10]}"
    admin = make_engine(url)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    eng = make_engine(make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
                      .render_as_string(hide_password=False))
    create_schema(eng)
    yield eng
    eng.dispose()
    with admin.begin() as connection:
        connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()
