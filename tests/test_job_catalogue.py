"""The catalogue rows a job reads once (storage/job_catalogue.py; issue 43, round trips): the
turn's request building and its tools share them, they never outlive the job, a write in the
job is read back, and a rolled-back tool transaction does not spoil them for the next tool.
"""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlmodel import col, select, update

from replay.environment import ReplayEnvironment
from storage import job_catalogue
from storage.catalogue import change_service
from storage.db import session_scope
from storage.models import Service, Tenant
from storage.tenants import upsert_tenant
from tests.factories import TENANT, text_body

NOW = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)


@contextmanager
def catalogue_reads(engine: Engine) -> Iterator[list[str]]:
    """The SELECTs of the `service` table sent on `engine` while the body runs."""
    sent: list[str] = []

    def record(_: Any, __: Any, statement: str, *___: Any) -> None:
        if statement.lstrip().startswith("SELECT") and "FROM service" in statement:
            sent.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _tenant_id(engine: Engine) -> int:
    with session_scope(engine) as session:
        tenant = session.exec(select(Tenant)).first()
        if tenant is None:
            tenant = upsert_tenant(session, TENANT, now=NOW)
        assert tenant.id is not None
        return tenant.id


def _console_sets_duration(engine: Engine, minutes: int) -> None:
    """Another process (the console) changes corte's duration: a plain UPDATE, nothing of
    this process's job state touched."""
    with session_scope(engine) as session:
        session.exec(update(Service).where(col(Service.code) == "corte")
                     .values(duration_minutes=minutes))


def _search(env: ReplayEnvironment, n: int) -> str:
    """One turn that calls find_available_slots for corte on Tuesday; its tool result."""
    env.messages_api.script("turn", [
        {"tool": "find_available_slots", "input": {"service": "corte", "date": "2026-06-02"}},
        {"text": "Tenho horários."}])
    body = text_body("tem horário amanhã?", n, sent_at=env.clock.now())
    assert env.post_webhook(json.dumps(body).encode()) == 200
    env.drain()
    request = env.messages_api.calls[-1].request
    (result,) = [b for b in request["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert result.get("is_error") is None, result
    return str(result["content"])


def test_a_turns_tools_reuse_the_catalogue_its_request_read_and_the_next_job_reads_it_again(
        env: ReplayEnvironment) -> None:
    with catalogue_reads(env.engine) as reads:
        first = _search(env, 1)
    assert first.startswith("Free slots for corte (60 min)"), first
    assert len(reads) == 1, "the request's read; the tool used the job's rows"
    _console_sets_duration(env.engine, 90)  # between the two jobs
    env.clock.advance(timedelta(minutes=1))
    second = _search(env, 2)
    assert second.startswith("Free slots for corte (90 min)"), "the next job read it again"
    system = json.dumps(env.messages_api.calls[-1].request["system"])
    assert "corte: Corte feminino, 90 min" in system


def test_outside_a_job_every_read_goes_to_the_database(engine: Engine) -> None:
    tenant_id = _tenant_id(engine)
    with catalogue_reads(engine) as reads, session_scope(engine) as session:
        job_catalogue.services(session, tenant_id)
        job_catalogue.services(session, tenant_id)
    assert len(reads) == 2
    assert not job_catalogue.active()


def test_rows_read_in_a_job_are_dropped_when_it_ends(engine: Engine) -> None:
    tenant_id = _tenant_id(engine)
    with job_catalogue.job_scope():
        with catalogue_reads(engine) as reads, session_scope(engine) as session:
            (before,) = job_catalogue.services(session, tenant_id)
            job_catalogue.services(session, tenant_id)
        assert len(reads) == 1, "read once in the job"
    assert not job_catalogue.active()
    _console_sets_duration(engine, 45)
    with job_catalogue.job_scope(), session_scope(engine) as session:
        (after,) = job_catalogue.services(session, tenant_id)
    assert (before.duration_minutes, after.duration_minutes) == (60, 45)


def test_a_write_in_the_job_is_read_back_by_the_job(engine: Engine) -> None:
    tenant_id = _tenant_id(engine)
    with job_catalogue.job_scope():
        with session_scope(engine) as session:
            assert [s.duration_minutes for s in job_catalogue.services(session, tenant_id)] \
                == [60]
            change_service(session, tenant_id, "corte", duration_minutes=30)
        with session_scope(engine) as session:
            assert [s.duration_minutes for s in job_catalogue.services(session, tenant_id)] \
                == [30]


def test_a_rolled_back_transaction_leaves_the_rows_readable_for_the_next(
        engine: Engine) -> None:
    tenant_id = _tenant_id(engine)
    with job_catalogue.job_scope():
        with pytest.raises(ValueError), session_scope(engine) as session:
            job_catalogue.services(session, tenant_id)
            job_catalogue.professionals(session, tenant_id)
            raise ValueError("a tool's error: the transaction rolls back")
        with catalogue_reads(engine) as reads, session_scope(engine) as session:
            (service,) = job_catalogue.services(session, tenant_id)
            (pro,) = job_catalogue.professionals(session, tenant_id)
            assert (service.code, service.duration_minutes, pro.service_codes) == (
                "corte", 60, ["corte"])
            assert session.get(Tenant, tenant_id) is not None  # not in this session's map
        assert reads == []
