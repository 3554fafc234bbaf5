"""A tool round in one transaction and a booking's locks in one round trip (issue 43, round
trips), probed where they can break: two rounds placing twice never deadlock (one lock order,
the tenant first); a round with a failed call keeps each effect once; booking numbers stay
contiguous around a refused booking; the job's catalogue read in one round trip equals the
ORM's, hostile names and session time zones included."""

import json
import threading
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from replay.environment import ReplayEnvironment
from storage import job_catalogue
from storage.appointments import lock_for_booking
from storage.db import session_scope
from storage.models import Appointment, Professional, Service, Tenant, ToolCall
from storage.tenants import upsert_tenant
from tests.factories import TENANT, text_body

NOW = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)
SP = ZoneInfo("America/Sao_Paulo")


@pytest.mark.parametrize("engine", [pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
def test_two_rounds_each_placing_twice_never_deadlock(engine: Engine) -> None:
    # A tool round is one transaction: its booking locks are held until the round commits.
    # Round A moves one service of a visit onto julia (no new visit: professionals only),
    # then books a new visit with bia; round B books a new visit with julia meanwhile.
    # Every placement must take the locks in one order (tenant first), or A holds julia
    # waiting for the tenant while B holds the tenant waiting for julia: a deadlock, which
    # is an OperationalError, fatal to the turn (workers/turns.py `fatal`).
    tenant_keys = {**TENANT, "professionals": [
        {"code": "julia", "name": "Júlia", "services": ["corte"]},
        {"code": "bia", "name": "Bia", "services": ["corte"]}]}
    with Session(engine) as session:
        tenant = upsert_tenant(session, tenant_keys, now=NOW)
        session.commit()
        tenant_id = int(tenant.id or 0)
        ids = {p.code: int(p.id or 0) for p in session.exec(select(Professional).where(
            Professional.tenant_id == tenant_id))}
    b_locked, errors = threading.Event(), []

    def round_b() -> None:
        try:
            with Session(engine) as session:
                lock_for_booking(session, tenant_id, [ids["julia"]], new_visit=True)
                session.commit()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            b_locked.set()

    with Session(engine) as a:
        a.connection().exec_driver_sql("SET lock_timeout = '5s'")
        lock_for_booking(a, tenant_id, [ids["julia"]], new_visit=False)  # the move
        thread = threading.Thread(target=round_b)
        thread.start()
        b_locked.wait(0.5)  # B takes the tenant, then waits for julia (or is done)
        try:
            number, _ = lock_for_booking(a, tenant_id, [ids["bia"]], new_visit=True)
            a.commit()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            a.rollback()
        thread.join(10)
    assert not errors, [type(e).__name__ + ": " + str(e).splitlines()[0] for e in errors]
    assert number == 1


def _post(env: ReplayEnvironment, text: str, n: int) -> None:
    assert env.post_webhook(json.dumps(text_body(text, n)).encode()) == 200
    env.drain()


def _book(start: str) -> dict[str, Any]:
    return {"tool": "book_appointment", "input": {"service": "corte", "start": start}}


def _rows(env: ReplayEnvironment) -> list[tuple[str, str, int | None]]:
    with session_scope(env.engine) as session:
        return [(r.status, r.start_at.astimezone(SP).strftime("%H:%M"), r.booking_number)
                for r in session.exec(select(Appointment).order_by(col(Appointment.id)))]


def _calls(env: ReplayEnvironment) -> list[tuple[str, bool]]:
    with session_scope(env.engine) as session:
        return [(c.name, c.is_error) for c in session.exec(
            select(ToolCall).order_by(col(ToolCall.id)))]


def test_a_cancel_then_a_failing_reschedule_in_one_round_cancels_once(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"tools": [_book("2026-06-02T14:00")]},
                                     {"text": "Marcado."}])
    _post(env, "marca 14h", 1)
    env.messages_api.script("turn", [
        {"tools": [{"tool": "cancel_appointment", "input": {"appointment_id": 1}},
                   {"tool": "reschedule_appointment",
                    "input": {"appointment_id": 1, "start": "2026-06-02T15:00"}}]},
        {"text": "Cancelado."}])
    _post(env, "cancela", 2)
    assert _rows(env) == [("cancelled", "14:00", 1)]
    assert _calls(env) == [("book_appointment", False), ("cancel_appointment", False),
                           ("reschedule_appointment", True)]


def test_a_move_then_a_failing_booking_in_one_round_moves_once(env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"tools": [_book("2026-06-02T14:00")]},
                                     {"text": "Marcado."}])
    _post(env, "marca 14h", 1)
    env.messages_api.script("turn", [
        {"tools": [{"tool": "reschedule_appointment",
                    "input": {"appointment_id": 1, "start": "2026-06-02T15:00"}},
                   _book("2026-06-02T15:00")]},
        {"text": "Mudado."}])
    _post(env, "muda pra 15h", 2)
    assert [r[:2] for r in _rows(env)] == [("cancelled", "14:00"), ("booked", "15:00")]
    assert _calls(env) == [
        ("book_appointment", False), ("reschedule_appointment", False),
        ("book_appointment", True)]


def test_numbers_stay_contiguous_around_a_refused_booking_in_one_round(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [
        {"tools": [_book("2026-06-02T14:00"), _book("2026-06-02T14:00"),
                   _book("2026-06-02T16:00")]},
        {"text": "Marcados."}])
    _post(env, "marca 14h e 16h", 1)
    env.messages_api.script("turn", [{"tools": [_book("2026-06-02T10:00")]},
                                     {"text": "Marcado."}])
    _post(env, "e 10h", 2)
    assert _rows(env) == [("booked", "14:00", 1), ("booked", "16:00", 2),
                          ("booked", "10:00", 3)]
    with session_scope(env.engine) as session:
        assert all(r.visit_id == r.id for r in session.exec(select(Appointment)))


HOSTILE = "Ju'lia \"; DROP TABLE tenant; -- \\ 🎉 ção \u200b"


@pytest.mark.parametrize("engine", [pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
def test_the_job_catalogue_read_in_one_round_trip_equals_the_orm_read_for_hostile_rows(
        engine: Engine) -> None:
    # storage/job_catalogue._fill builds rows from the raw result sets on PostgreSQL: names
    # and JSON fields with quotes, backslashes, emoji and SQL must come back as stored
    keys = {**TENANT, "name": HOSTILE, "services": [
        {"code": "corte", "name": HOSTILE, "duration_minutes": 60}],
        "professionals": [{"code": "julia", "name": HOSTILE, "services": ["corte"],
                           "durations": {"corte": 45}}]}
    with session_scope(engine) as session:
        tenant_id = int(upsert_tenant(session, keys, now=NOW).id or 0)
    with session_scope(engine) as session, job_catalogue.job_scope():
        tenant = job_catalogue.tenant(session, tenant_id)
        services = job_catalogue.services(session, tenant_id)
        pros = job_catalogue.professionals(session, tenant_id)
        hours = job_catalogue.hours(session, tenant_id)
    with session_scope(engine) as session:
        assert tenant is not None and tenant.model_dump() == session.get(
            Tenant, tenant_id).model_dump()
        assert [s.model_dump() for s in services] == [s.model_dump() for s in session.exec(
            select(Service).where(Service.tenant_id == tenant_id).order_by(Service.code))]
        assert [p.model_dump() for p in pros] == [p.model_dump() for p in session.exec(
            select(Professional).where(Professional.tenant_id == tenant_id)
            .order_by(Professional.code))]
        assert len(hours) == 3  # mon, tue, sat
    assert tenant.name == services[0].name == pros[0].name == HOSTILE


@pytest.mark.parametrize("engine", [pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
def test_the_job_catalogue_rows_keep_utc_times_whatever_the_session_time_zone(
        engine: Engine) -> None:
    # storage/models.py: datetimes are aware UTC (UTCDateTime's result processing); the rows
    # job_catalogue._fill builds from raw result sets skipped it: a server or role whose
    # TimeZone is not UTC gave the job's tenant row times in that zone
    with session_scope(engine) as session:
        tenant_id = int(upsert_tenant(session, TENANT, now=NOW).id or 0)
    with session_scope(engine) as session, job_catalogue.job_scope():
        session.connection().exec_driver_sql("SET TIME ZONE 'America/Sao_Paulo'")
        tenant = job_catalogue.tenant(session, tenant_id)
    assert tenant is not None and tenant.created_at == NOW
    assert tenant.created_at.tzinfo is UTC
