"""Issue 22: each professional's week (hours, time off, own exceptions, durations), buffers,
"any professional", the grouped slot list and its time-of-day filter, bad input named."""

import re
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine
from sqlmodel import select

from agent.catalogue import EXCEPTIONS_SHOWN, catalogue_text, load
from agent.tools.base import ToolContext
from agent.tools.registry import execute_tool
from storage.catalogue import change_professional
from storage.db import session_scope
from storage.errors import TenantConfigError
from storage.models import Appointment, Contact, Conversation, Tenant
from storage.tenants import upsert_tenant
from tests.factories import TENANT

SP = ZoneInfo("America/Sao_Paulo")
NOW = datetime(2026, 6, 1, 11, 0, tzinfo=UTC)  # Mon 08:00 in São Paulo

SALON: dict[str, Any] = {
    **TENANT,
    "services": [{"code": "corte", "name": "Corte", "duration_minutes": 60},
                 {"code": "coloracao", "name": "Coloração", "duration_minutes": 60,
                  "buffer_minutes": 30}],
    "professionals": [
        {"code": "julia", "name": "Júlia", "services": ["corte", "coloracao"],
         "hours": {"tue": ["09:00-18:00"], "wed": ["09:00-18:00"]},
         "durations": {"corte": 90}},
        {"code": "marcos", "name": "Marcos", "services": ["corte"],
         "time_off": [{"from": "2026-06-08", "to": "2026-06-12", "note": "férias"}],
         "hours_exceptions": [{"day": "2026-06-02", "hours": ["14:00-18:00"]}]}],
    "hours": {"mon": ["09:00-18:00"], "tue": ["09:00-18:00"], "wed": ["09:00-18:00"]},
}


def _setup(engine: Engine, config: dict[str, Any] | None = None, contacts: int = 3
           ) -> list[tuple[int, int]]:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, config or SALON, now=NOW)
        pairs = []
        for n in range(contacts):
            contact = Contact(tenant_id=tenant.id, wa_id=f"55119999900{n:02d}", created_at=NOW)
            session.add(contact)
            session.flush()
            conversation = Conversation(tenant_id=tenant.id, contact_id=contact.id,
                                        last_activity_at=NOW, due_at=NOW, opened_at=NOW)
            session.add(conversation)
            session.flush()
            pairs.append((contact.id or 0, conversation.id or 0))
    return pairs


def _call(engine: Engine, pair: tuple[int, int], tool: str, args: dict[str, Any],
          tool_use_id: str, now: datetime = NOW, tz: ZoneInfo = SP) -> tuple[str, bool]:
    ctx = ToolContext(engine=engine, tenant_id=1, contact_id=pair[0], conversation_id=pair[1],
                      timezone=tz, now=now, tool_use_id=tool_use_id)
    return execute_tool(ctx, tool, args)


def _times(text: str, who: str) -> list[str]:
    """The "YYYY-MM-DD HH:MM" starts at which `who` is listed free."""
    return [f"{d} {t}" for d, t, names in re.findall(
            r"(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}) ([a-z, ]+)", text) if who in names.split(", ")]


def test_julias_monday_off_is_never_offered_nor_bookable(engine: Engine) -> None:
    pairs = _setup(engine)
    text, is_error = _call(engine, pairs[0], "find_available_slots",
                           {"service": "corte", "date": "2026-06-01", "professional": "julia"},
                           "f1")
    assert not is_error and "No free slots" in text
    booked, is_error = _call(engine, pairs[0], "book_appointment",
                             {"service": "corte", "start": "2026-06-01T10:00",
                              "professional": "julia"}, "b1")
    assert is_error and "julia does not work" in booked and "not working" in booked
    anyone, _ = _call(engine, pairs[0], "find_available_slots",
                      {"service": "corte", "date": "2026-06-01"}, "f2")
    assert _times(anyone, "marcos") and not _times(anyone, "julia")


def test_time_off_and_own_exceptions_shape_the_day(engine: Engine) -> None:
    pairs = _setup(engine)
    tue, _ = _call(engine, pairs[0], "find_available_slots",
                   {"service": "corte", "date": "2026-06-02", "professional": "marcos"}, "f1")
    assert _times(tue, "marcos")[0] == "2026-06-02 14:00"  # his own exception that day
    holiday, _ = _call(engine, pairs[0], "find_available_slots",
                       {"service": "corte", "date": "2026-06-08", "date_to": "2026-06-12",
                        "professional": "marcos"}, "f2")
    assert "No free slots" in holiday
    booked, is_error = _call(engine, pairs[0], "book_appointment",
                             {"service": "corte", "start": "2026-06-09T10:00",
                              "professional": "marcos"}, "b1")
    assert is_error and "does not work" in booked


def test_a_business_holiday_closes_everyone_and_a_short_day_bounds_own_hours(
        engine: Engine) -> None:
    pairs = _setup(engine, {**SALON, "hours_exceptions": [
        {"day": "2026-06-02", "hours": []}, {"day": "2026-06-03", "hours": ["12:00-15:00"]}]})
    closed, _ = _call(engine, pairs[0], "find_available_slots",
                      {"service": "corte", "date": "2026-06-02"}, "f1")
    assert "No free slots" in closed
    short, _ = _call(engine, pairs[0], "find_available_slots",
                     {"service": "corte", "date": "2026-06-03"}, "f2")
    julia = _times(short, "julia")  # 90 min with her: 12:00 .. 13:30
    assert julia[0] == "2026-06-03 12:00" and julia[-1] == "2026-06-03 13:30", short


def test_a_duration_of_her_own_and_a_buffer_after_the_service(engine: Engine) -> None:
    pairs = _setup(engine)
    booked, is_error = _call(engine, pairs[0], "book_appointment",
                             {"service": "corte", "start": "2026-06-02T09:00",
                              "professional": "julia"}, "b1")
    assert not is_error and "09:00-10:30" in booked  # her corte takes 90 min
    colour, is_error = _call(engine, pairs[1], "book_appointment",
                             {"service": "coloracao", "start": "2026-06-02T11:00",
                              "professional": "julia"}, "b2")
    assert not is_error and "11:00-12:00" in colour
    after, is_error = _call(engine, pairs[2], "book_appointment",
                            {"service": "corte", "start": "2026-06-02T12:00",
                             "professional": "julia"}, "b3")
    assert is_error and "no longer free" in after  # the 30 min clean-up
    text, _ = _call(engine, pairs[2], "find_available_slots",
                    {"service": "corte", "date": "2026-06-02", "professional": "julia"}, "f1")
    times = _times(text, "julia")
    assert "2026-06-02 12:00" not in times and "2026-06-02 12:30" in times
    # a coloração needs its own buffer free: not at 12:30 if corte starts at 13:00 + ...
    assert "+ 30 min after" in _call(engine, pairs[2], "find_available_slots",
                                     {"service": "coloracao", "date": "2026-06-02"}, "f2")[0]


def test_any_professional_goes_to_the_fewest_bookings_that_day_then_catalogue_order(
        engine: Engine) -> None:
    config = {**SALON, "professionals": [
        {"code": "ana", "name": "Ana", "services": ["corte"]},
        {"code": "bia", "name": "Bia", "services": ["corte"]}]}
    pairs = _setup(engine, config)
    first, _ = _call(engine, pairs[0], "book_appointment",
                     {"service": "corte", "start": "2026-06-01T10:00"}, "b1")
    second, _ = _call(engine, pairs[1], "book_appointment",
                      {"service": "corte", "start": "2026-06-01T15:00"}, "b2")
    third, _ = _call(engine, pairs[2], "book_appointment",
                     {"service": "corte", "start": "2026-06-01T16:00"}, "b3")
    assert "with Ana" in first  # a tie: catalogue order
    assert "with Bia" in second  # Ana has one that day
    assert "with Ana" in third
    with session_scope(engine) as session:
        assert len(session.exec(select(Appointment)).all()) == 3


def test_one_line_per_time_with_who_is_free_and_the_afternoon_reachable(
        engine: Engine) -> None:
    config = {**SALON, "professionals": [
        {"code": c, "name": c.title(), "services": ["corte"]} for c in ("ana", "bia", "caio")]}
    pairs = _setup(engine, config)
    text, _ = _call(engine, pairs[0], "find_available_slots",
                    {"service": "corte", "date": "2026-06-02"}, "f1")
    assert "2026-06-02 09:00 ana, bia, caio" in text
    assert text.count("2026-06-02 09:00") == 1
    afternoon, _ = _call(engine, pairs[0], "find_available_slots",
                         {"service": "corte", "date": "2026-06-02", "after": "14:00",
                          "before": "16:00"}, "f2")
    lines = re.findall(r"2026-06-02 (\d{2}:\d{2}) ", afternoon)
    assert lines == ["14:00", "14:30", "15:00", "15:30"], afternoon
    week, _ = _call(engine, pairs[0], "find_available_slots",
                    {"service": "corte", "date": "2026-06-01", "date_to": "2026-06-03"}, "f3")
    assert "more times from" in week and "17:00" in week  # the rest of the days summarised
    bad, is_error = _call(engine, pairs[0], "find_available_slots",
                          {"service": "corte", "after": "à tarde"}, "f4")
    assert is_error and "after must be a local time HH:MM" in bad


@pytest.mark.parametrize("professional, problems", [
    ({"hours": {"mon": ["09:00-12:00", "11:00-14:00"]}}, ["overlap"]),
    ({"time_off": [{"from": "2026-06-10", "to": "2026-06-08"}]}, ["ends (2026-06-08) before"]),
    ({"durations": {"coloracao": 30}}, ["coloracao: not a service this professional does"]),
    ({"hours": {"mon": ["12:00-09:00"]}, "time_off": [{"from": "2026-06-10", "to": "2026-06-08"}],
      "durations": {"coloracao": 30}},
     ["opens must be before closes", "before it starts", "not a service"]),
])
def test_bad_weeks_are_refused_naming_every_problem(engine: Engine, professional: dict[str, Any],
                                                     problems: list[str]) -> None:
    spec = {"code": "julia", "name": "Júlia", "services": ["corte"], **professional}
    with pytest.raises(TenantConfigError) as caught, session_scope(engine) as session:
        upsert_tenant(session, {**SALON, "professionals": [spec]}, now=NOW)
    said = "; ".join(caught.value.problems)
    for problem in problems:
        assert problem in said, said
    _setup(engine)
    with pytest.raises(TenantConfigError) as again, session_scope(engine) as session:
        change_professional(session, 1, "julia", services=["corte"], **professional)
    for problem in problems:
        assert problem in "; ".join(again.value.problems)
    with session_scope(engine) as session:  # nothing lost
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        text = catalogue_text(load(session, tenant, NOW.astimezone(SP).date()))
    assert "julia: Júlia; does corte, coloracao; works mon off, tue 09:00-18:00" in text
    assert "marcos: Marcos; does corte; time off 2026-06-08 to 2026-06-12 (férias)" in text


def test_the_catalogue_shows_time_off_and_own_dates_only_from_today_to_the_horizon(
        engine: Engine) -> None:
    config = {**SALON, "booking_horizon_days": 30, "professionals": [
        {"code": "julia", "name": "Júlia", "services": ["corte"],
         "time_off": [{"from": "2026-05-20", "to": "2026-05-25", "note": "passado"},
                      {"from": "2026-05-30", "to": "2026-06-02", "note": "em curso"},
                      {"from": "2026-08-10", "to": "2026-08-20", "note": "longe"}],
         "hours_exceptions": [{"day": "2026-06-05", "hours": ["10:00-12:00"]},
                              {"day": "2026-09-01", "hours": []}]}]}
    _setup(engine, config, contacts=0)
    with session_scope(engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        text = catalogue_text(load(session, tenant, NOW.astimezone(SP).date()))
    assert "time off 2026-05-30 to 2026-06-02 (em curso)" in text
    assert "passado" not in text and "longe" not in text  # past, and beyond the horizon
    assert "other hours 2026-06-05 10:00-12:00" in text and "2026-09-01" not in text


def test_the_catalogue_shows_the_nearest_time_off_whatever_the_files_order(
        engine: Engine) -> None:
    """35 one-day offs entered newest first: the catalogue keeps the soonest ones (the model
    must not promise the next days) and says how many it left out."""
    days = [f"2026-06-{d:02d}" for d in range(3, 30)] + [f"2026-07-{d:02d}" for d in range(1, 9)]
    config = {**SALON, "booking_horizon_days": 60, "professionals": [
        {"code": "julia", "name": "Júlia", "services": ["corte"],
         "time_off": [{"from": d, "to": d} for d in reversed(days)]}]}
    _setup(engine, config, contacts=0)
    with session_scope(engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        text = catalogue_text(load(session, tenant, NOW.astimezone(SP).date()))
    assert "time off 2026-06-03 to 2026-06-03, 2026-06-04 to 2026-06-04" in text
    assert f"(and {len(days) - EXCEPTIONS_SHOWN} more later" in text
    assert "2026-07-08" not in text
