"""Issue 22 (6): hours are wall-clock times in the tenant's zone. No slot starts in a
spring-forward gap; an ambiguous fall-back time means its first occurrence, for the offered
slots and for book_appointment's input alike. Property tests over transition days."""

from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from agent.tools.base import ToolContext
from agent.tools.registry import execute_tool
from agent.tools.slots import local_exists, local_to_utc, on_wall_grid, wall_starts
from storage.db import session_scope
from storage.models import Appointment, Contact, Conversation
from storage.tenants import upsert_tenant
from tests.factories import TENANT

TRANSITIONS = [  # (zone, day): spring forward, then fall back
    ("America/New_York", date(2026, 3, 8)), ("America/New_York", date(2026, 11, 1)),
    ("Europe/Lisbon", date(2026, 3, 29)), ("Europe/Lisbon", date(2026, 10, 25)),
]


@st.composite
def _hours(draw: Any) -> tuple[str, str, int, int]:
    opens = draw(st.integers(0, 23 * 60 - 5))
    closes = draw(st.integers(opens + 5, 23 * 60 + 59))
    step = draw(st.sampled_from([5, 10, 15, 20, 30, 45, 60, 90]))
    duration = draw(st.integers(5, 240))
    return f"{opens // 60:02d}:{opens % 60:02d}", f"{closes // 60:02d}:{closes % 60:02d}", \
        step, duration


@settings(max_examples=150, deadline=None)
@given(which=st.sampled_from(TRANSITIONS), hours=_hours())
def test_offered_starts_exist_once_on_the_grid_and_fit(which: tuple[str, date],
                                                        hours: tuple[str, str, int, int]) -> None:
    zone, day = which
    tz = ZoneInfo(zone)
    opens, closes, step_minutes, duration_minutes = hours
    step, duration = timedelta(minutes=step_minutes), timedelta(minutes=duration_minutes)
    starts = wall_starts(day, opens, closes, step, duration, tz)
    locals_ = [s.astimezone(tz) for s in starts]
    assert len({(t.hour, t.minute) for t in locals_}) == len(starts)  # each local time once
    limit = local_to_utc(day, closes, tz)
    for start, local in zip(starts, locals_, strict=True):
        assert local.date() == day and local_exists(day, local.time(), tz)
        assert local.fold == 0 or local_to_utc(day, local.time(), tz) == start
        assert start + duration <= limit
        assert on_wall_grid(start, opens, step, tz)  # book_appointment takes what is offered
    # and nothing on the grid that exists and fits is left out
    wall = datetime.combine(day, time.fromisoformat(opens))
    expected = 0
    while wall < datetime.combine(day, time.fromisoformat(closes)):
        if local_exists(day, wall.time(), tz) and \
                local_to_utc(day, wall.time(), tz) + duration <= limit:
            expected += 1
        wall += step
    assert expected == len(starts)


@settings(max_examples=60, deadline=None)
@given(which=st.sampled_from(TRANSITIONS[1::2]), minute=st.integers(0, 59))
def test_the_second_occurrence_of_a_fall_back_time_is_never_a_start(
        which: tuple[str, date], minute: int) -> None:
    zone, day = which  # both zones repeat 01:00-01:59 on their fall-back day
    tz = ZoneInfo(zone)
    at = time(1, minute)
    second = datetime.combine(day, at, tzinfo=tz).replace(fold=1).astimezone(UTC)
    first = local_to_utc(day, at, tz)
    assert second - first == timedelta(hours=1)
    assert not on_wall_grid(second, "00:00", timedelta(minutes=1), tz)
    assert on_wall_grid(first, "00:00", timedelta(minutes=1), tz)


NY = ZoneInfo("America/New_York")


def _tenant(engine: Engine) -> tuple[int, int]:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, {**TENANT, "timezone": "America/New_York",
                                         "hours": {"sun": ["00:00-04:00"]}},
                               now=datetime(2026, 3, 1, tzinfo=UTC))
        contact = Contact(tenant_id=tenant.id, wa_id="5511999990077",
                          created_at=datetime(2026, 3, 1, tzinfo=UTC))
        session.add(contact)
        session.flush()
        conversation = Conversation(tenant_id=tenant.id, contact_id=contact.id,
                                    last_activity_at=datetime(2026, 3, 1, tzinfo=UTC),
                                    due_at=datetime(2026, 3, 1, tzinfo=UTC),
                                    opened_at=datetime(2026, 3, 1, tzinfo=UTC))
        session.add(conversation)
        session.flush()
        return contact.id or 0, conversation.id or 0


def _call(engine: Engine, pair: tuple[int, int], tool: str, args: dict[str, Any],
          tool_use_id: str, now: datetime) -> tuple[str, bool]:
    return execute_tool(ToolContext(engine=engine, tenant_id=1, contact_id=pair[0],
                                    conversation_id=pair[1], timezone=NY, now=now,
                                    tool_use_id=tool_use_id), tool, args)


def test_book_appointment_refuses_a_gap_time_and_reads_fall_back_as_the_first(
        engine: Engine) -> None:
    pair = _tenant(engine)
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    offered, _ = _call(engine, pair, "find_available_slots",
                       {"service": "corte", "date": "2026-03-08"}, "f1", now)
    assert "02:00" not in offered and "02:30" not in offered and "03:00 julia" in offered
    gap, is_error = _call(engine, pair, "book_appointment",
                          {"service": "corte", "start": "2026-03-08T02:30"}, "b1", now)
    assert is_error and "does not exist in America/New_York" in gap
    fall_now = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)
    fall, _ = _call(engine, pair, "find_available_slots",
                    {"service": "corte", "date": "2026-11-01"}, "f2", fall_now)
    assert fall.count("2026-11-01 01:00 ") == 1, fall
    booked, is_error = _call(engine, pair, "book_appointment",
                             {"service": "corte", "start": "2026-11-01T01:00"}, "b2", fall_now)
    assert not is_error
    with session_scope(engine) as session:
        row = session.get(Appointment, 1)
        assert row is not None and row.start_at == datetime(2026, 11, 1, 5, 0, tzinfo=UTC)
    second, is_error = _call(engine, pair, "book_appointment",
                             {"service": "corte", "start": "2026-11-01T01:00-05:00"}, "b3",
                             fall_now)
    assert is_error and "not a start time" in second, second


@pytest.mark.parametrize("zone", ["America/New_York", "Europe/Lisbon"])
def test_a_gap_time_does_not_exist(zone: str) -> None:
    tz = ZoneInfo(zone)
    day = date(2026, 3, 8) if zone.startswith("America") else date(2026, 3, 29)
    gap = time(2, 30) if zone.startswith("America") else time(1, 30)
    assert not local_exists(day, gap, tz) and local_exists(day, time(4, 0), tz)
