"""Issue 46 (1): recurring visits. A series booked by the agent (`book_appointment`'s
`rrule`, an RFC 5545 RRULE) places its visits within the horizon, counts one in the
per-customer limit, lists an occurrence colliding with a holiday or a block as needing a new
time (the customer's next booking of it joins the series), grows as the horizon moves (the
series pass), and is cancelled one visit or the rest at a time; staff do the same through
operations/agenda.py."""

import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from dateutil.relativedelta import relativedelta
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine
from sqlmodel import col, select

from agent.tools import series
from agent.tools.base import ToolContext
from agent.tools.registry import execute_tool
from cli.main import main
from core.recurrence import MAX_OCCURRENCES, RuleError, checked_rule, occurrences, total
from operations import agenda
from operations.errors import Invalid
from replay.runner import run_scenario_file
from storage.db import session_scope
from storage.models import Appointment, Contact, Conversation, Reminder, Tenant, VisitSeries
from storage.tenants import upsert_tenant
from tests.factories import TENANT

SP = ZoneInfo("America/Sao_Paulo")
NOW = datetime(2026, 4, 6, 12, 0, tzinfo=UTC)  # Mon 09:00 in São Paulo; Tue 21 Apr: Tiradentes
CLINIC: dict[str, Any] = {
    **TENANT,
    "holiday_calendar": "BR",
    "max_upcoming_bookings": 2,
    "booking_horizon_days": 30,
    "services": [{"code": "fisio", "name": "Fisioterapia", "duration_minutes": 60},
                 {"code": "pilates", "name": "Pilates", "duration_minutes": 30}],
    "professionals": [{"code": "julia", "name": "Júlia", "services": ["fisio", "pilates"]},
                      {"code": "marcos", "name": "Marcos", "services": ["fisio"]}],
    "hours": {day: ["08:00-21:00"] for day in ("mon", "tue", "wed", "thu", "fri")},
}


def _setup(engine: Engine, **changes: Any) -> tuple[int, int]:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, {**CLINIC, **changes}, now=NOW)
        contact = Contact(tenant_id=tenant.id, wa_id="5511999990001", profile_name="Ana",
                          created_at=NOW)
        session.add(contact)
        session.flush()
        conversation = Conversation(tenant_id=tenant.id, contact_id=contact.id,
                                    last_activity_at=NOW, due_at=NOW, opened_at=NOW)
        session.add(conversation)
        session.flush()
        return contact.id or 0, conversation.id or 0


def _agent(engine: Engine, pair: tuple[int, int], tool: str, args: dict[str, Any],
           tool_use_id: str, now: datetime = NOW) -> tuple[str, bool]:
    return execute_tool(ToolContext(engine=engine, tenant_id=1, contact_id=pair[0],
                                    conversation_id=pair[1], timezone=SP, now=now,
                                    tool_use_id=tool_use_id), tool, args)


def _booked(engine: Engine) -> list[tuple[str, int | None]]:
    with session_scope(engine) as session:
        rows = session.exec(select(Appointment).where(Appointment.status == "booked")
                            .order_by(col(Appointment.start_at))).all()
        return [(f"{r.start_at.astimezone(SP):%Y-%m-%dT%H:%M}", r.series_id) for r in rows]


def test_a_weekly_series_of_four_lists_the_holiday_for_a_new_time_and_counts_one(
        engine: Engine) -> None:
    pair = _setup(engine)
    said, is_error = _agent(engine, pair, "book_appointment", {
        "service": "fisio", "start": "2026-04-07T19:00", "professional": "julia",
        "rrule": "FREQ=WEEKLY;BYDAY=TU;COUNT=4"}, "s1")
    assert not is_error, said
    assert [start for start, _ in _booked(engine)] == [
        "2026-04-07T19:00", "2026-04-14T19:00", "2026-04-28T19:00"]
    assert "3 of 4 booked" in said and "Tue 2026-04-21 19:00 (holiday: Tiradentes)" in said
    with session_scope(engine) as session:
        made = session.exec(select(VisitSeries)).one()
        assert made.pending == [{"n": 3, "start": "2026-04-21T19:00",
                                 "reason": "holiday: Tiradentes"}]
        # every visit is a normal one: its own number and its reminder
        numbers = {r.booking_number for r in session.exec(select(Appointment)).all()}
        assert len(numbers) == 3
        assert len(session.exec(select(Reminder)).all()) == 3
    # the limit is 2: the series counts one, so one more single visit is allowed
    one, is_error = _agent(engine, pair, "book_appointment", {
        "service": "pilates", "start": "2026-04-08T10:00"}, "p1")
    assert not is_error, one
    refused, is_error = _agent(engine, pair, "book_appointment", {
        "service": "pilates", "start": "2026-04-09T10:00"}, "p2")
    assert is_error and "2 upcoming appointments" in refused
    # the customer takes another time for the holiday: it joins the series (no limit hit)
    joined, is_error = _agent(engine, pair, "book_appointment", {
        "service": "fisio", "start": "2026-04-22T19:00", "professional": "julia"}, "s2")
    assert not is_error and "replaces visit 3 of series 1" in joined
    listed, _ = _agent(engine, pair, "list_my_appointments", {}, "l1")
    assert "series 1 (FREQ=WEEKLY;BYDAY=TU;COUNT=4): 4 of 4 booked" in listed
    assert "needs a new time" not in listed


def test_cancelling_the_rest_from_the_second_keeps_the_first_and_ends_the_series(
        engine: Engine) -> None:
    pair = _setup(engine)
    said, is_error = _agent(engine, pair, "book_appointment", {
        "service": "fisio", "start": "2026-04-07T19:00",
        "rrule": "FREQ=WEEKLY;COUNT=4"}, "s1")
    assert not is_error, said
    cancelled, is_error = _agent(engine, pair, "cancel_appointment",
                                 {"appointment_id": 2, "series": True}, "c1")
    assert not is_error, cancelled
    assert "2026-04-14" in cancelled and "2026-04-28" in cancelled
    assert _booked(engine) == [("2026-04-07T19:00", 1)]
    with session_scope(engine) as session:
        made = session.exec(select(VisitSeries)).one()
        assert made.ended_at is not None and made.pending == []
        assert all(r.status == "cancelled" for r in session.exec(select(Reminder)).all()
                   if r.appointment_id != 1)
    # the ended series places nothing more, however far the horizon moves
    with session_scope(engine) as session:
        assert series.extend_all(session, now=NOW + timedelta(days=60)) == 0


def test_one_visit_of_a_series_is_cancelled_alone_and_rest_needs_a_series(
        engine: Engine) -> None:
    pair = _setup(engine)
    _agent(engine, pair, "book_appointment", {
        "service": "fisio", "start": "2026-04-07T19:00", "rrule": "FREQ=WEEKLY;COUNT=4"}, "s1")
    _, is_error = _agent(engine, pair, "cancel_appointment", {"appointment_id": 2}, "c1")
    assert not is_error
    assert [s for s, _ in _booked(engine)] == ["2026-04-07T19:00", "2026-04-28T19:00"]
    single, _ = _agent(engine, pair, "book_appointment", {
        "service": "pilates", "start": "2026-04-08T10:00"}, "p1")
    refused, is_error = _agent(engine, pair, "cancel_appointment",
                               {"appointment_id": 4, "series": True}, "c2")
    assert is_error and "no series" in refused and "nothing was cancelled" in refused


def test_a_moved_visit_of_a_series_stays_in_it(engine: Engine) -> None:
    pair = _setup(engine, max_upcoming_bookings=1)
    _agent(engine, pair, "book_appointment", {
        "service": "fisio", "start": "2026-04-07T19:00", "rrule": "FREQ=WEEKLY;COUNT=2"}, "s1")
    moved, is_error = _agent(engine, pair, "reschedule_appointment",
                             {"appointment_id": 2, "start": "2026-04-15T19:00"}, "m1")
    assert not is_error, moved  # at the limit of 1: the series still counts one
    assert _booked(engine) == [("2026-04-07T19:00", 1), ("2026-04-15T19:00", 1)]


def test_the_series_pass_places_the_visits_the_horizon_reaches(engine: Engine) -> None:
    pair = _setup(engine)
    _agent(engine, pair, "book_appointment", {
        "service": "fisio", "start": "2026-04-07T19:00",
        "rrule": "FREQ=WEEKLY;INTERVAL=2;COUNT=5"}, "s1")
    assert len(_booked(engine)) == 2  # 7 Apr and 5 May (21 Apr, Tiradentes: pending) in 30 days
    later = NOW + timedelta(days=30)
    with session_scope(engine) as session:
        assert series.extend_all(session, now=later) == 2
        assert series.extend_all(session, now=later) == 0  # nothing twice
        made = session.exec(select(VisitSeries)).one()
        assert made.booked_through == date.max  # all placed or pending: the pass skips it
    assert [s for s, _ in _booked(engine)] == [
        "2026-04-07T19:00", "2026-05-05T19:00", "2026-05-19T19:00", "2026-06-02T19:00"]


def test_a_blocked_occurrence_is_pending_with_the_block_as_reason(engine: Engine) -> None:
    pair = _setup(engine)
    with session_scope(engine) as session:
        agenda.block(session, session.get(Tenant, 1), agenda.Block.model_validate({
            "professional": "julia", "start": "2026-04-14T18:00", "end": "2026-04-14T21:00"}),
            now=NOW)
    said, is_error = _agent(engine, pair, "book_appointment", {
        "service": "pilates", "start": "2026-04-07T19:00", "professional": "julia",
        "rrule": "FREQ=WEEKLY;COUNT=2"}, "s1")
    assert not is_error and "Tue 2026-04-14 19:00 (that time is no longer free" in said


@pytest.mark.parametrize(("rrule", "wanted"), [
    ("FREQ=HOURLY;COUNT=3", "DAILY, WEEKLY or MONTHLY"),
    ("FREQ=WEEKLY", "COUNT"),
    ("FREQ=WEEKLY;COUNT=500", f"COUNT must be from 2 to {MAX_OCCURRENCES}"),
    ("FREQ=WEEKLY;BYHOUR=9;COUNT=3", "BYHOUR"),
    ("FREQ=WEEKLY;UNTIL=20260601T000000Z", "no Z"),
    ("toda terça", "not an RFC 5545 RRULE"),
    ("FREQ=WEEKLY;BYDAY=WE;COUNT=3", "not a day of the rrule"),
    # rules no day matches: dateutil would walk every day to the year 9999 (seconds of CPU)
    ("FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30;COUNT=5", "not BYMONTH"),
    ("FREQ=DAILY;BYYEARDAY=366;COUNT=2", "not BYYEARDAY"),
    ("FREQ=DAILY;BYSETPOS=2;COUNT=3", "not BYSETPOS"),
    ("FREQ=MONTHLY;BYDAY=5TU;BYMONTHDAY=1;COUNT=2", "not both"),
])
def test_a_bad_repeat_is_refused_and_books_nothing(engine: Engine, rrule: str,
                                                   wanted: str) -> None:
    pair = _setup(engine)
    said, is_error = _agent(engine, pair, "book_appointment", {
        "service": "fisio", "start": "2026-04-07T19:00", "rrule": rrule}, "s1")
    assert is_error and wanted in said, said
    assert _booked(engine) == []


def test_staff_book_a_series_and_cancel_its_rest(engine: Engine) -> None:
    pair = _setup(engine)
    with session_scope(engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        view = agenda.book(session, tenant, agenda.StaffBooking.model_validate({
            "service": "fisio", "start": "2026-04-07T19:00", "contact": str(pair[0]),
            "repeat": "FREQ=WEEKLY;BYDAY=TU;COUNT=4"}), now=NOW)
        assert view["series"]["pending"] == [{"n": 3, "start": "2026-04-21T19:00",
                                              "reason": "holiday: Tiradentes"}]
        assert len(view["series"]["visits"]) == 3
        with pytest.raises(Invalid):
            agenda.book(session, tenant, agenda.StaffBooking.model_validate({
                "service": "fisio", "start": "2026-04-08T19:00", "contact": str(pair[0]),
                "repeat": "FREQ=WEEKLY;BYDAY=TU;COUNT=4"}), now=NOW)
    with session_scope(engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        second = view["series"]["visits"][1]["id"]
        ended = agenda.cancel_series(session, tenant, second, now=NOW)
        assert [v["start"] for v in ended["cancelled"]] == ["2026-04-14T19:00",
                                                            "2026-04-28T19:00"]
    assert _booked(engine) == [("2026-04-07T19:00", 1)]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["DAILY", "WEEKLY", "MONTHLY"]), st.integers(1, 4),
       st.integers(2, MAX_OCCURRENCES), st.dates(date(2026, 1, 1), date(2030, 12, 31)),
       st.integers(0, 23))
def test_the_occurrences_are_the_rules_count_in_order_at_the_first_time(
        freq: str, interval: int, count: int, day: date, hour: int) -> None:
    """However the rule and the first visit, the expansion has COUNT visits, ascending, each
    at the first visit's wall-clock time, the first one the first visit; and a window of the
    days after any day holds exactly the visits after it."""
    count = min(count, 730 // (interval * {"DAILY": 1, "WEEKLY": 7, "MONTHLY": 31}[freq]) + 1)
    rule = checked_rule(f"FREQ={freq};INTERVAL={interval};COUNT={count}")
    first = datetime(day.year, day.month, day.day, hour, 0)
    found = occurrences(rule, first, through=date.max)
    assert total(rule, first) == count == len(found)
    assert found[0] == (1, first)
    assert all(a[1] < b[1] for a, b in zip(found, found[1:], strict=False))
    assert {start.time() for _, start in found} == {first.time()}
    middle = found[len(found) // 2][1].date()
    assert occurrences(rule, first, after=middle, through=date.max) == [
        o for o in found if o[1].date() > middle]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(["BYMONTH=2", "BYMONTHDAY=30", "BYMONTHDAY=31", "BYDAY=5MO",
                                 "BYSETPOS=9", "BYYEARDAY=366", "BYWEEKNO=53", "INTERVAL=12",
                                 "BYDAY=TU", "WKST=SU"]), max_size=4),
       st.sampled_from(["DAILY", "WEEKLY", "MONTHLY"]))
def test_an_accepted_rule_finds_its_visits_without_walking_the_calendar(
        parts: list[str], freq: str) -> None:
    """Any rule checked_rule accepts expands in well under a second (a rule no day matches
    made dateutil walk every day to the year 9999: about 9 seconds); at worst a monthly
    walk (BYMONTHDAY=31 every 12 months from June: about 0.1 second)."""
    try:
        rule = checked_rule(";".join([f"FREQ={freq}", *parts, "COUNT=3"]))
    except RuleError:
        return
    began = time.monotonic()
    total(rule, datetime(2026, 6, 2, 19, 0))
    assert time.monotonic() - began < 2.0, rule


@pytest.mark.parametrize(("rule", "problem"), [
    ("FREQ=DAILY;INTERVAL=91;COUNT=2", "INTERVAL must be from 1 to 90 for FREQ=DAILY"),
    ("FREQ=WEEKLY;INTERVAL=13;COUNT=2", "INTERVAL must be from 1 to 12 for FREQ=WEEKLY"),
    ("FREQ=MONTHLY;INTERVAL=100000;COUNT=2", "INTERVAL must be from 1 to 12 for FREQ=MONTHLY"),
    ("FREQ=WEEKLY;INTERVAL=0;COUNT=2", "INTERVAL must be from 1"),
    ("FREQ=MONTHLY;COUNT=26", "a series spans at most 2 years"),
    ("FREQ=WEEKLY;INTERVAL=12;COUNT=10", "a series spans at most 2 years"),
    ("FREQ=DAILY;INTERVAL=90;COUNT=10", "a series spans at most 2 years")])
def test_an_interval_or_count_beyond_two_years_is_refused_saying_what_to_lower(
        rule: str, problem: str) -> None:
    with pytest.raises(RuleError, match=problem):
        checked_rule(rule)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["DAILY", "WEEKLY", "MONTHLY"]), st.integers(1, 100),
       st.integers(2, MAX_OCCURRENCES), st.dates(date(2026, 1, 1), date(2030, 12, 31)))
def test_an_accepted_series_ends_within_two_years_of_its_first_visit(
        freq: str, interval: int, count: int, day: date) -> None:
    first = datetime(day.year, day.month, day.day, 19, 0)
    for ending in (f"COUNT={count}", f"UNTIL={day.year + 9}1231"):
        try:
            rule = checked_rule(f"FREQ={freq};INTERVAL={interval};{ending}", first)
        except RuleError as exc:
            assert "INTERVAL must be" in str(exc) or "at most 2 years" in str(exc)
            continue
        last = occurrences(rule, first, through=date.max)[-1][1]
        assert last <= first + relativedelta(years=2), rule


def test_the_longest_series_accepted() -> None:
    assert checked_rule("FREQ=MONTHLY;COUNT=25") == "FREQ=MONTHLY;COUNT=25"
    assert checked_rule("FREQ=WEEKLY;INTERVAL=12;COUNT=9") == "FREQ=WEEKLY;INTERVAL=12;COUNT=9"
    assert checked_rule("FREQ=DAILY;INTERVAL=90;COUNT=9") == "FREQ=DAILY;INTERVAL=90;COUNT=9"
    # measured from the series' own first visit: a 31st skips the shorter months, and UNTIL
    with pytest.raises(RuleError, match="at most 2 years"):
        checked_rule("FREQ=MONTHLY;COUNT=25", datetime(2026, 1, 31, 19, 0))
    with pytest.raises(RuleError, match="at most 2 years"):
        checked_rule("FREQ=MONTHLY;INTERVAL=6;UNTIL=20300101", datetime(2026, 1, 5, 19, 0))
    assert checked_rule("FREQ=MONTHLY;UNTIL=20280105", datetime(2026, 1, 5, 19, 0))


def test_a_rule_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(RuleError):
        checked_rule(["FREQ=WEEKLY"])


def test_the_series_scenario(database_url: str | None, redis_url: str | None) -> None:
    """tests/scenarios/series/holiday_and_rest.json (issue 46, "How to show it"): the series
    of four with the holiday listed for a new time, the limit counting it once, the rest
    cancelled from the second, and staff's series through `wagent` steps."""
    result = run_scenario_file(Path(__file__).parent / "scenarios" / "series" /
                               "holiday_and_rest.json", database_url=database_url,
                               redis_url=redis_url, cli=main)
    assert result.passed, result.failures
    assert result.api_errors == 0 and result.unscripted_calls == 0


def test_the_package_scenario(database_url: str | None, redis_url: str | None) -> None:
    """tests/scenarios/series/package_sessions.json (issue 46, "How to show it"): a package
    of 10 with 2 completed and 1 no-show (not counted by the clinic's rule) shows "2 de 10
    usadas" in the model's context; a second mark counts nothing."""
    result = run_scenario_file(Path(__file__).parent / "scenarios" / "series" /
                               "package_sessions.json", database_url=database_url,
                               redis_url=redis_url, cli=main)
    assert result.passed, result.failures
    assert result.api_errors == 0 and result.unscripted_calls == 0
