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
from storage import reminders
from storage.db import session_scope
from storage.models import Appointment, Contact, Outbound, Reminder
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
    assert ("Troca de óleo, Alinhamento e Diagnóstico com Pedro, qua 03/06 às 09:00 "
            "(Troca de óleo e Alinhamento) e 14:00 (Diagnóstico)") in json.loads(body)["body"][
                "text"]
