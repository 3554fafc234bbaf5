"""A job a database or Redis outage stopped is enqueued again after a short backoff on the
product's clock (workers/jobs.retry_after_outage), not retried at once by RQ and then failed.
Real worker, real Redis when reachable, SQLite and PostgreSQL."""

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from rq.job import Job
from sqlalchemy.exc import OperationalError
from sqlmodel import select

from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import ToolCall
from tests import database_faults
from tests.conftest import START
from tests.factories import text_body
from workers import jobs


def _outage() -> OperationalError:
    return OperationalError("SELECT ...", {}, Exception("server closed the connection"))


def _scheduled(env: ReplayEnvironment) -> list[tuple[datetime, dict[str, Any]]]:
    registry = env.queue.scheduled_job_registry
    return [(registry.get_scheduled_time(job_id), Job.fetch(job_id, connection=env.redis).kwargs)
            for job_id in registry.get_job_ids()]


def test_a_turn_the_database_stopped_runs_again_after_1_2_then_4_seconds(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"text": "Oi! Como posso ajudar?"}])
    assert env.post_webhook(json.dumps(text_body("oi", 1)).encode()) == 200
    with database_faults.failing(env.engine, database_faults.sql_contains("FROM message"),
                                 times=3) as failed:
        env.drain()
        for outage, delay in ((1, 1), (2, 2), (3, 4)):
            assert env.graph_api.sends == []
            assert _scheduled(env) == [(env.clock.now() + timedelta(seconds=delay), {
                "conversation_id": 1, "attempt": 1, "outage": outage})]
            env.clock.advance(timedelta(seconds=delay))
            env.drain()
    assert len(failed) == 3
    assert [s.body["text"]["body"] for s in env.graph_api.sends] == ["Oi! Como posso ajudar?"]
    assert _scheduled(env) == []


def test_a_database_error_inside_a_tool_retries_the_turn_instead_of_telling_the_model(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [
        {"tool": "book_appointment", "input": {"service": "corte",
                                               "start": "2026-06-02T14:00"}},
        {"text": "Marcado: terça 14:00."}])
    assert env.post_webhook(json.dumps(text_body("marca amanhã 14h", 1)).encode()) == 200
    booking = database_faults.sql_contains("INSERT INTO appointment")
    with database_faults.failing(env.engine, booking, times=1) as failed:
        env.drain()
    assert len(failed) == 1
    env.clock.advance(timedelta(seconds=1))
    env.drain()
    assert [s.body["text"]["body"] for s in env.graph_api.sends] == ["Marcado: terça 14:00."]
    with session_scope(env.engine) as session:
        (call,) = session.exec(select(ToolCall)).all()
        assert call.is_error is False


@pytest.mark.usefixtures("frozen_clock")
def test_outage_retries_back_off_to_15_seconds_and_stop_at_the_cap() -> None:
    made: list[tuple[datetime, int, int]] = []
    runtime: Any = None

    def reenqueue(_rt: Any, _cid: int, at: datetime, attempt: int, outage: int) -> None:
        made.append((at, attempt, outage))

    for outage in range(7):
        assert jobs.retry_after_outage(runtime, "turn", 1, attempt=2, outage=outage,
                                       exc=_outage(), reenqueue=reenqueue) == \
            "outage_retry_scheduled"
    assert [(at - START).total_seconds() for at, _, _ in made] == [1, 2, 4, 8, 15, 15, 15]
    assert [(a, o) for _, a, o in made] == [(2, n) for n in range(1, 8)]
    assert jobs.retry_after_outage(runtime, "turn", 1, attempt=2,
                                   outage=jobs.OUTAGE_MAX_RETRIES, exc=_outage(),
                                   reenqueue=reenqueue) == "outage_gave_up"

    def redis_down(*_: Any) -> None:
        raise RedisConnectionError("Connection refused")

    assert jobs.retry_after_outage(runtime, "turn", 1, attempt=1, outage=0,
                                   exc=RedisConnectionError(), reenqueue=redis_down) == "outage"
