"""Issue 38's review gaps: a note belongs to the visit; a reminder names the visit as it is
at send time, with each service's time when they are not one simple back-to-back run;
services the business runs at once; staff book several services; visit numbers."""

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Engine
from sqlmodel import col, select

from agent import history as history_repo
from agent.tools.base import ToolContext
from agent.tools.registry import execute_tool
from storage import reminders
from storage.db import session_scope
from storage.models import (
    Appointment,
    Contact,
    Conversation,
    Outbound,
    Professional,
    Reminder,
    ScheduleBlock,
    Service,
)
from storage.tenants import upsert_tenant
from tests.test_visits import NOW, SP, THREE, Customer
from workers.reminders import queue_reminder


def _notes(engine: Engine) -> list[str]:
    with session_scope(engine) as session:
        return [a.note for a in session.exec(select(Appointment).order_by(col(Appointment.id)))]


def test_a_note_belongs_to_every_service_of_the_visit(engine: Engine) -> None:
    ana = Customer(engine)
    assert not ana.call("book_appointment", {"services": THREE,
                                             "start": "2026-06-02T09:00"})[1]
    text, error = ana.call("add_appointment_note", {"appointment_id": 1,
                                                    "note": "barulho na roda dianteira"})
    assert not error, text
    assert "Troca de óleo with Pedro 09:00-09:30, Alinhamento" in text
    assert _notes(engine) == ["barulho na roda dianteira"] * 3
    # a service cancelled apart keeps its own line in the history; the visit's line shows it
    assert not ana.call("cancel_appointment", {"appointment_id": 1, "service": "oleo"})[1]
    with session_scope(engine) as session:
        history = history_repo.load(session, 1, ana.contact_id, NOW, SP)
    assert [b.note for b in history.upcoming] == ["barulho na roda dianteira"]


# -- the reminder: the visit as it is at send time, each service's time when split ----------

DUE = datetime(2026, 6, 2, 12, 0, tzinfo=UTC)  # 24 h before Wed 2026-06-03 09:00 local


def _runtime(engine: Engine) -> Any:
    return SimpleNamespace(engine=engine, settings=SimpleNamespace(
        button_key=lambda: "a-secret-for-the-buttons-of-tests"))


def _send_due(engine: Engine, contact_id: int, now: datetime = DUE) -> list[str]:
    """Queue every due reminder (the customer wrote an hour ago: the window is open);
    returns the bodies of the outbox parts still waiting to go out."""
    with session_scope(engine) as session:
        contact = session.get(Contact, contact_id)
        assert contact is not None
        contact.last_inbound_at = now - timedelta(hours=1)
        session.add(contact)
    with session_scope(engine) as session:
        due = reminders.due(session, now=now, limit=10)
    for row in due:
        queue_reminder(_runtime(engine), row, now=now)
    with session_scope(engine) as session:
        return [o.body for o in session.exec(select(Outbound).where(
            Outbound.status == "pending").order_by(col(Outbound.id)))]


def test_a_queued_reminder_never_names_a_service_cancelled_before_it_went_out(
        engine: Engine) -> None:
    ana = Customer(engine)
    assert not ana.call("book_appointment", {"services": THREE,
                                             "start": "2026-06-03T09:00"})[1]
    [body] = _send_due(engine, ana.contact_id)  # queued; the outbox is waiting (a rate limit)
    assert "Diagnóstico" in body
    text, error = ana.call("cancel_appointment", {"appointment_id": 1,
                                                  "service": "diagnostico"})
    assert not error, text
    [body] = _send_due(engine, ana.contact_id, DUE + timedelta(seconds=30))
    assert "Diagnóstico" not in body and "Troca de óleo e Alinhamento" in body
    assert "às 09:00." in body  # still one back-to-back run
    with session_scope(engine) as session:
        assert [r.status for r in session.exec(select(Reminder))] == ["queued"]


def test_a_split_visit_is_reminded_with_each_services_time(engine: Engine) -> None:
    ana = Customer(engine)
    assert not ana.call("book_appointment", {"services": THREE,
                                             "start": "2026-06-03T09:00"})[1]
    text, error = ana.call("reschedule_appointment", {"appointment_id": 1,
                                                      "service": "diagnostico",
                                                      "start": "2026-06-03T14:00"})
    assert not error, text
    [body] = _send_due(engine, ana.contact_id)
    assert ("Lembrete do seu horário: qua 03/06 às 09:00 (Troca de óleo e Alinhamento com "
            "Pedro) e 14:00 (Diagnóstico com Pedro). Podemos") in json.loads(body)["body"][
                "text"]


# -- services the business runs at once (parallel_services) ---------------------------------

SALON: dict[str, Any] = {
    "phone_number_id": "109876543210988", "name": "Salão Exemplo",
    "timezone": "America/Sao_Paulo", "reminder_lead_minutes": [1440], "quiet_hours": "",
    "parallel_services": ["manicure"],
    "services": [{"code": "corte", "name": "Corte", "duration_minutes": 60},
                 {"code": "manicure", "name": "Manicure", "duration_minutes": 45}],
    "professionals": [{"code": "julia", "name": "Júlia", "services": ["corte"]},
                      {"code": "bia", "name": "Bia", "services": ["manicure"]}],
    "hours": {d: ["08:00-18:00"] for d in ("mon", "tue", "wed", "thu", "fri")},
}


def _salon_customer(engine: Engine, **changes: Any) -> Any:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, {**SALON, **changes}, now=NOW)
        contact = Contact(tenant_id=tenant.id or 0, wa_id="5511999990002", created_at=NOW)
        session.add(contact)
        session.flush()
        conversation = Conversation(tenant_id=tenant.id or 0, contact_id=contact.id or 0,
                                    last_activity_at=NOW, due_at=NOW, opened_at=NOW)
        session.add(conversation)
        session.flush()
        ids = (tenant.id or 0, contact.id or 0, conversation.id or 0)
    calls = iter(range(1000))

    def call(name: str, args: dict[str, Any]) -> tuple[str, bool]:
        return execute_tool(ToolContext(
            engine=engine, tenant_id=ids[0], contact_id=ids[1], conversation_id=ids[2],
            timezone=SP, now=NOW, tool_use_id=f"toolu_{next(calls)}"), name, args)
    return call, ids[1]


def _times(engine: Engine) -> list[tuple[str, str, str]]:
    with session_scope(engine) as session:
        return [(s.code, p.code, a.start_at.astimezone(SP).strftime("%H:%M"))
                for a, s, p in session.exec(select(Appointment, Service, Professional).join(
                    Service, col(Service.id) == col(Appointment.service_id)).join(
                    Professional, col(Professional.id) == col(Appointment.professional_id))
                    .where(Appointment.status == "booked").order_by(col(Appointment.id)))]


def test_a_service_the_business_runs_at_once_starts_with_the_one_before(
        engine: Engine) -> None:
    call, contact_id = _salon_customer(engine)
    text, error = call("find_available_slots", {"services": ["corte", "manicure"],
                                                "date": "2026-06-03"})
    assert not error, text
    assert "Wed 2026-06-03 09:00-10:00: corte julia, manicure bia 09:00" in text, text
    text, error = call("book_appointment", {"services": ["corte", "manicure"],
                                            "start": "2026-06-03T09:00"})
    assert not error, text
    assert _times(engine) == [("corte", "julia", "09:00"), ("manicure", "bia", "09:00")]
    [body] = _send_due(engine, contact_id)
    # newcomer trial item 2: who does what, each service named once
    assert ("Lembrete do seu horário: qua 03/06 às 09:00 (Corte com Júlia e Manicure com "
            "Bia). Podemos") in json.loads(body)["body"]["text"]
    # bia is busy at 10:00 on Thursday: the manicure follows the haircut instead
    with session_scope(engine) as session:
        bia = session.exec(select(Professional).where(Professional.code == "bia")).one()
        session.add(ScheduleBlock(tenant_id=bia.tenant_id, professional_id=bia.id or 0,
                                  start_at=datetime(2026, 6, 4, 13, 0, tzinfo=UTC),
                                  end_at=datetime(2026, 6, 4, 14, 0, tzinfo=UTC),
                                  created_at=NOW))
    text, error = call("book_appointment", {"services": ["corte", "manicure"],
                                            "start": "2026-06-04T10:00"})
    assert not error, text
    assert _times(engine)[-2:] == [("corte", "julia", "10:00"), ("manicure", "bia", "11:00")]


def test_a_reminder_tells_a_parallel_visit_part_by_part_and_who_it_is_for(
        engine: Engine) -> None:
    """Newcomer trial item 2: escova (Júlia) and manicure (Bia) at 14:00, then the corte
    (Júlia) at 14:45: each time with what it holds and who does it, each service named once,
    and the visit's `for_name` said."""
    salon = {**SALON, "services": [*SALON["services"], {"code": "escova", "name": "Escova",
                                                         "duration_minutes": 45}],
             "professionals": [{"code": "julia", "name": "Júlia",
                                "services": ["corte", "escova"]}, SALON["professionals"][1]]}
    call, contact_id = _salon_customer(engine, **salon)
    text, error = call("book_appointment", {"services": ["escova", "manicure", "corte"],
                                            "start": "2026-06-03T14:00",
                                            "for_name": "filha: Ana"})
    assert not error, text
    assert _times(engine) == [("escova", "julia", "14:00"), ("manicure", "bia", "14:00"),
                              ("corte", "julia", "14:45")]
    [body] = _send_due(engine, contact_id, datetime(2026, 6, 2, 17, 0, tzinfo=UTC))
    assert json.loads(body)["body"]["text"] == (
        "Olá! Lembrete do seu horário (para filha: Ana): qua 03/06 às 14:00 (Escova com Júlia e "
        "Manicure com Bia) e 14:45 (Corte com Júlia). Podemos confirmar?")


def test_a_simple_reminder_names_who_the_visit_is_for(engine: Engine) -> None:
    call, contact_id = _salon_customer(engine)
    text, error = call("book_appointment", {"service": "corte", "start": "2026-06-03T09:00",
                                            "for_name": "filha: Ana"})
    assert not error, text
    [body] = _send_due(engine, contact_id)
    assert json.loads(body)["body"]["text"] == (
        "Olá! Lembrete do seu horário: Corte (para filha: Ana) com Júlia, qua 03/06 às 09:00. "
        "Podemos confirmar?")


def test_without_the_setting_every_service_follows_the_one_before(engine: Engine) -> None:
    call, _ = _salon_customer(engine, parallel_services=[])
    text, error = call("book_appointment", {"services": ["corte", "manicure"],
                                            "start": "2026-06-03T09:00"})
    assert not error, text
    assert _times(engine) == [("corte", "julia", "09:00"), ("manicure", "bia", "10:00")]


# -- booking numbers: consecutive per tenant ---------------------------------------------------

def test_booking_numbers_are_consecutive_per_tenant_whatever_the_rows(engine: Engine) -> None:
    """A visit of three services takes three row ids, and another tenant's bookings take
    more: the customer still hears #1, #2, #3, and acts on them by those numbers."""
    ana = Customer(engine)  # the garage's
    salon_call, _ = _salon_customer(engine)
    assert "Appointment #1 on" in salon_call("book_appointment", {
        "services": ["corte", "manicure"], "start": "2026-06-03T09:00"})[0]
    text, _ = ana.call("book_appointment", {"services": THREE, "start": "2026-06-02T09:00"})
    assert text.startswith("Booked. Appointment #1 on Tue"), text
    ana.call("book_appointment", {"service": "oleo", "start": "2026-06-03T09:00"})
    text, _ = ana.call("list_my_appointments", {})
    assert "Appointment #1 on Tue" in text and "Appointment #2: Troca de óleo" in text, text
    text, error = ana.call("cancel_appointment", {"appointment_id": 2})
    assert not error and text.startswith("Cancelled. Appointment #2: Troca de óleo"), text
    assert salon_call("book_appointment", {"service": "corte",
                                           "start": "2026-06-05T09:00"})[0].startswith(
        "Booked. Appointment #2: Corte")


def test_staff_book_a_service_the_business_runs_at_once_as_the_agent_does(
        engine: Engine) -> None:
    from operations import agenda
    from storage.models import Tenant
    _salon_customer(engine)
    with session_scope(engine) as session:
        tenant = session.exec(select(Tenant)).one()
        booked = agenda.book(session, tenant, agenda.StaffBooking(
            service="corte", then=["manicure"], start="2026-06-03T09:00",
            phone="5511988880001"), now=NOW)
    assert [(r["service"], r["professional"], r["start"][11:]) for r in booked["visit"]] == [
        ("corte", "julia", "09:00"), ("manicure", "bia", "09:00")]
