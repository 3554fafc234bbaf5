"""Slots and the scheduling tools: opening hours, timezone, the past, overlaps, authority."""

import threading
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine
from sqlmodel import select

from storage.db import session_scope
from storage.models import Appointment, Contact, Conversation
from storage.tenants import upsert_tenant
from tests.factories import TENANT
from workers.agent.tools.base import ToolContext
from workers.agent.tools.scheduling import execute_tool
from workers.agent.tools.slots import compute_slots, fits_opening_hours

SP = ZoneInfo("America/Sao_Paulo")
NOW = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)  # Mon 10:00 in São Paulo


def test_slots_fit_opening_hours_in_the_tenants_timezone_and_skip_busy_and_past() -> None:
    busy = {1: [(datetime(2026, 6, 2, 17, 0, tzinfo=UTC), datetime(2026, 6, 2, 18, 0, tzinfo=UTC))]}
    slots = compute_slots(days=[date(2026, 6, 1), date(2026, 6, 2)], tz=SP,
                          hours={0: [("09:00", "12:00")], 1: [("13:00", "16:00")]},
                          duration=timedelta(minutes=60), step=timedelta(minutes=30),
                          professional_ids=[1], busy=busy, now=NOW)
    local = [s.start.astimezone(SP).strftime("%a %H:%M") for s in slots]
    # Monday: 09:00 and 09:30 are past or now (10:00 is "now": never offered)
    assert local == ["Mon 10:30", "Mon 11:00", "Tue 13:00", "Tue 15:00"]


def test_a_booking_must_fit_one_opening_interval() -> None:
    hours = {1: [("09:00", "12:00"), ("13:00", "18:00")]}
    start = datetime(2026, 6, 2, 11, 30, tzinfo=SP).astimezone(UTC)
    assert not fits_opening_hours(start, timedelta(minutes=60), SP, hours)  # spans lunch
    assert fits_opening_hours(start, timedelta(minutes=30), SP, hours)


def _setup(engine: Engine, contacts: int = 2) -> list[tuple[int, int]]:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, TENANT, now=NOW)
        pairs = []
        for n in range(contacts):
            contact = Contact(tenant_id=tenant.id, wa_id=f"55119999900{n:02d}", created_at=NOW)
            session.add(contact)
            session.flush()
            conversation = Conversation(tenant_id=tenant.id, contact_id=contact.id,
                                        last_activity_at=NOW, due_at=NOW, opened_at=NOW)
            session.add(conversation)
            session.flush()
            pairs.append((contact.id, conversation.id))
    return pairs


def _ctx(engine: Engine, contact_id: int, conversation_id: int, tool_use_id: str) -> ToolContext:
    return ToolContext(engine=engine, tenant_id=1, contact_id=contact_id,
                       conversation_id=conversation_id, timezone=SP, now=NOW,
                       tool_use_id=tool_use_id)


def test_two_turns_booking_the_same_slot_at_once_give_one_booking(engine: Engine) -> None:
    pairs = _setup(engine, contacts=6)
    barrier = threading.Barrier(len(pairs))
    results: list[tuple[str, bool]] = []

    def book(i: int) -> None:
        contact_id, conversation_id = pairs[i]
        barrier.wait()
        results.append(execute_tool(_ctx(engine, contact_id, conversation_id, f"toolu_{i}"),
                                    "book_appointment",
                                    {"service": "corte", "start": "2026-06-02T14:30"}))

    threads = [threading.Thread(target=book, args=(i,)) for i in range(len(pairs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(is_error for _, is_error in results) == [False] + [True] * (len(pairs) - 1)
    with session_scope(engine) as session:
        assert len(session.exec(select(Appointment)).all()) == 1


def test_overlapping_but_not_equal_times_are_refused(engine: Engine) -> None:
    (a, ca), (b, cb) = _setup(engine)
    ok = execute_tool(_ctx(engine, a, ca, "t1"), "book_appointment",
                      {"service": "corte", "start": "2026-06-02T14:00"})
    clash = execute_tool(_ctx(engine, b, cb, "t2"), "book_appointment",
                         {"service": "corte", "start": "2026-06-02T14:30"})
    after = execute_tool(_ctx(engine, b, cb, "t3"), "book_appointment",
                         {"service": "corte", "start": "2026-06-02T15:00"})
    assert not ok[1] and clash[1] and not after[1]
    assert "no longer free" in clash[0]


@pytest.mark.parametrize("start, reason", [
    ("2026-06-01T09:00", "past"), ("2026-06-02T19:00", "opening hours"),
    ("2026-06-03T10:00", "opening hours"), ("amanhã", "YYYY-MM-DDTHH:MM"),
])
def test_invalid_booking_times_are_tool_errors(engine: Engine, start: str, reason: str) -> None:
    (a, ca), _ = _setup(engine)
    text, is_error = execute_tool(_ctx(engine, a, ca, "t1"), "book_appointment",
                                  {"service": "corte", "start": start})
    assert is_error and reason in text


def test_a_customer_sees_and_changes_only_their_own_appointments(engine: Engine) -> None:
    (a, ca), (b, cb) = _setup(engine)
    execute_tool(_ctx(engine, a, ca, "t1"), "book_appointment",
                 {"service": "corte", "start": "2026-06-02T14:00"})
    listing, _ = execute_tool(_ctx(engine, b, cb, "t2"), "list_my_appointments", {})
    assert "no upcoming" in listing
    for name, args in (("cancel_appointment", {"appointment_id": 1}),
                       ("reschedule_appointment", {"appointment_id": 1,
                                                   "start": "2026-06-02T16:00"})):
        text, is_error = execute_tool(_ctx(engine, b, cb, f"x-{name}"), name, args)
        assert is_error and "no appointment #1 for this customer" in text
    with session_scope(engine) as session:
        assert session.exec(select(Appointment)).one().status == "booked"


def test_reschedule_keeps_one_booking_and_frees_the_old_slot(engine: Engine) -> None:
    (a, ca), _ = _setup(engine)
    execute_tool(_ctx(engine, a, ca, "t1"), "book_appointment",
                 {"service": "corte", "start": "2026-06-02T14:00"})
    text, is_error = execute_tool(_ctx(engine, a, ca, "t2"), "reschedule_appointment",
                                  {"appointment_id": 1, "start": "2026-06-02T14:30"})
    assert not is_error, text
    with session_scope(engine) as session:
        rows = session.exec(select(Appointment).order_by(Appointment.id)).all()
        assert [(r.status, r.start_at.astimezone(SP).strftime("%H:%M")) for r in rows] == [
            ("cancelled", "14:00"), ("booked", "14:30")]


def test_a_rejected_reschedule_leaves_the_original_booking(engine: Engine) -> None:
    (a, ca), _ = _setup(engine)
    execute_tool(_ctx(engine, a, ca, "t1"), "book_appointment",
                 {"service": "corte", "start": "2026-06-02T14:00"})
    _, is_error = execute_tool(_ctx(engine, a, ca, "t2"), "reschedule_appointment",
                               {"appointment_id": 1, "start": "2026-06-02T22:00"})
    assert is_error
    with session_scope(engine) as session:
        assert session.exec(select(Appointment)).one().status == "booked"


def test_malformed_inputs_are_errors_not_crashes(engine: Engine) -> None:
    (a, ca), _ = _setup(engine)
    for i, (name, args) in enumerate([
        ("find_available_slots", {}), ("find_available_slots", {"service": "corte",
                                                                "date": "2026-13-01"}),
        ("find_available_slots", {"service": "corte", "date": "2026-06-01",
                                  "date_to": "2026-07-30"}),
        ("cancel_appointment", {"appointment_id": "1"}), ("book_appointment", "not an object"),
        ("book_appointment", {"service": "corte", "start": "2026-06-02T14:00",
                              "professional": "nobody"}),
    ]):
        text, is_error = execute_tool(_ctx(engine, a, ca, f"m{i}"), name, args)
        assert is_error and text
