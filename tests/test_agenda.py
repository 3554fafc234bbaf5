"""Issue 22 (2, 5): the business's own bookings, moves, blocks and visit outcomes, through
operations/agenda.py (the admin API, the console and the CLI call it), against the agent's
tools on the same agenda."""

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine
from sqlmodel import select

from agent import history
from agent.tools.base import ToolContext
from agent.tools.registry import execute_tool
from cli.main import main
from operations import agenda
from operations.errors import Conflict, Invalid
from operations.service import counts, validated
from replay.runner import run_scenario_file
from storage import webhooks
from storage.db import session_scope
from storage.models import (
    Appointment,
    Contact,
    Conversation,
    Notice,
    Professional,
    ScheduleBlock,
    Tenant,
    WebhookEvent,
)
from storage.tenants import upsert_tenant
from tests.factories import TENANT

SP = ZoneInfo("America/Sao_Paulo")
NOW = datetime(2026, 6, 1, 11, 0, tzinfo=UTC)  # Mon 08:00 in São Paulo
SALON: dict[str, Any] = {
    **TENANT,
    "services": [{"code": "corte", "name": "Corte", "duration_minutes": 60}],
    "professionals": [{"code": "julia", "name": "Júlia", "services": ["corte"]},
                      {"code": "marcos", "name": "Marcos", "services": ["corte"]}],
}


def _setup(engine: Engine) -> tuple[int, int]:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, SALON, now=NOW)
        webhooks.create_endpoint(session, tenant.id or 0, url="https://hooks.example/x",
                                 events=["appointment.booked", "appointment.rescheduled"],
                                 now=NOW)
        contact = Contact(tenant_id=tenant.id, wa_id="551199990001", profile_name="Ana",
                          created_at=NOW)  # WhatsApp's spelling: no ninth digit
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


def _do(engine: Engine, action: Any, *args: Any, now: datetime = NOW) -> Any:
    with session_scope(engine) as session:
        tenant = session.get(Tenant, 1)
        return action(session, tenant, *args, now=now)


def _booking(**fields: Any) -> agenda.StaffBooking:
    return agenda.StaffBooking.model_validate({"service": "corte", **fields})


def test_a_staff_booking_for_a_new_phone_takes_the_slot_from_the_agent(engine: Engine) -> None:
    pair = _setup(engine)
    view = _do(engine, agenda.book, _booking(start="2026-06-02T10:00", professional="julia",
                                             phone="+55 (21) 98888-0002", name="Bia"))
    assert view["booked_by"] == "business" and view["professional"] == "julia"
    with session_scope(engine) as session:
        new = session.get(Contact, view["contact_id"])
        assert new is not None and new.wa_id == "5521988880002"
        event = session.exec(select(WebhookEvent)).one()
        assert event.type == "appointment.booked" and event.data["by"] == "business"
    text, is_error = _agent(engine, pair, "book_appointment",
                            {"service": "corte", "start": "2026-06-02T10:00",
                             "professional": "julia"}, "b1")
    assert is_error and "no longer free" in text
    offered, _ = _agent(engine, pair, "find_available_slots",
                        {"service": "corte", "date": "2026-06-02"}, "f1")
    assert "2026-06-02 10:00 marcos\n" in offered  # julia is taken at 10:00


def test_a_phone_matching_only_through_the_ninth_digit_asks_staff_to_confirm(
        engine: Engine) -> None:
    contact_id, _ = _setup(engine)
    with pytest.raises(Conflict) as caught:
        _do(engine, agenda.book, _booking(start="2026-06-02T10:00", phone="5511999990001"))
    assert f"contact #{contact_id}" in str(caught.value)
    with session_scope(engine) as session:  # nothing written
        assert session.exec(select(Appointment)).all() == []
        assert len(session.exec(select(Contact)).all()) == 1
    view = _do(engine, agenda.book, _booking(start="2026-06-02T10:00",
                                             contact=str(contact_id)))
    assert view["contact_id"] == contact_id
    same = _do(engine, agenda.book, _booking(start="2026-06-02T11:00", phone="551199990001"))
    assert same["contact_id"] == contact_id  # an exact match needs no confirmation
    assert agenda.phone_variants("5511999990001") == ["551199990001"]
    assert agenda.phone_variants("551199990001") == ["5511999990001"]
    assert agenda.phone_variants("14155550100") == []
    with pytest.raises(Invalid):
        _do(engine, agenda.book, _booking(start="2026-06-02T12:00", phone="12"))


def test_a_block_hides_slots_and_over_bookings_needs_force_which_keeps_them(
        engine: Engine) -> None:
    pair = _setup(engine)
    blocked = _do(engine, agenda.block, agenda.Block.model_validate(
        {"professional": "julia", "start": "2026-06-02T14:00", "end": "2026-06-02T15:00",
         "note": "reunião"}))
    assert blocked["kept"] == []
    offered, _ = _agent(engine, pair, "find_available_slots",
                        {"service": "corte", "date": "2026-06-02", "professional": "julia"},
                        "f1")
    assert "13:30" not in offered and "14:00" not in offered and "14:30" not in offered
    assert "15:00 julia" in offered
    text, is_error = _agent(engine, pair, "book_appointment",
                            {"service": "corte", "start": "2026-06-02T14:00",
                             "professional": "julia"}, "b1")
    assert is_error and "no longer free" in text
    booked = _do(engine, agenda.book, _booking(start="2026-06-02T16:00", professional="julia",
                                               contact=str(pair[0])))
    over = agenda.Block.model_validate({"professional": "julia", "start": "2026-06-02T15:30",
                                        "end": "2026-06-02T18:00"})
    with pytest.raises(Conflict) as caught:
        _do(engine, agenda.block, over)
    assert f"#{booked['id']}" in "; ".join(caught.value.problems)
    forced = _do(engine, agenda.block, over.model_copy(update={"force": True}))
    assert [a["id"] for a in forced["kept"]] == [booked["id"]]
    with session_scope(engine) as session:
        row = session.get(Appointment, booked["id"])
        assert row is not None and row.status == "booked"
    day = _do(engine, lambda s, t, d, now: agenda.day_view(s, t, d),
              datetime(2026, 6, 2).date())
    julia = day["professionals"][0]
    assert julia["code"] == "julia" and len(julia["blocks"]) == 2
    assert [a["id"] for a in julia["appointments"]] == [booked["id"]]
    with pytest.raises(Invalid) as too_long:
        _do(engine, agenda.block, agenda.Block.model_validate(
            {"professional": "julia", "start": "2026-06-02T14:00", "end": "2026-07-20T14:00"}))
    assert "time_off" in str(too_long.value)
    with pytest.raises(Invalid):  # an end before its start: named by the body's check
        validated(agenda.Block, {"professional": "julia", "start": "2026-06-02T15:00",
                                 "end": "2026-06-02T14:00"})


def test_a_move_frees_the_old_time_and_emits_rescheduled_by_business(engine: Engine) -> None:
    pair = _setup(engine)
    booked = _do(engine, agenda.book, _booking(start="2026-06-02T10:00", professional="julia",
                                               contact=str(pair[0])))
    moved = _do(engine, agenda.move, booked["id"], agenda.Move(start="2026-06-02T15:00"))
    assert moved["start"] == "2026-06-02T15:00" and moved["professional"] == "julia"
    with session_scope(engine) as session:
        types = [(e.type, e.data["by"]) for e in session.exec(select(WebhookEvent))]
    assert ("appointment.rescheduled", "business") in types
    with session_scope(engine) as session:  # issue 25's bookkeeping, as the agent's move
        old = session.get(Appointment, booked["id"])
        assert old is not None and old.status == "cancelled" and old.moved_to_id == moved["id"]
        assert [n.kind for n in session.exec(select(Notice))] == ["moved"]
    text, is_error = _agent(engine, pair, "book_appointment",
                            {"service": "corte", "start": "2026-06-02T10:00",
                             "professional": "julia"}, "b1")
    assert not is_error, text
    with pytest.raises(Invalid) as caught:  # julia's hours are the business's: not Sunday
        _do(engine, agenda.move, moved["id"], agenda.Move(start="2026-06-07T10:00"))
    assert "julia does not work" in str(caught.value)


def test_staff_and_the_agent_booking_one_slot_at_once_give_one_booking(engine: Engine) -> None:
    pair = _setup(engine)
    barrier = threading.Barrier(4)
    results: list[str] = []

    def staff(n: int) -> None:
        barrier.wait()
        try:
            _do(engine, agenda.book, _booking(start="2026-06-02T14:00", professional="julia",
                                              phone=f"55219888800{n:02d}"))
            results.append("ok")
        except Conflict:
            results.append("refused")

    def agent(n: int) -> None:
        barrier.wait()
        _, is_error = _agent(engine, pair, "book_appointment",
                             {"service": "corte", "start": "2026-06-02T14:00",
                              "professional": "julia"}, f"t{n}")
        results.append("refused" if is_error else "ok")

    threads = [threading.Thread(target=f, args=(n,)) for n, f in enumerate(
        (staff, staff, agent, agent))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["ok", "refused", "refused", "refused"]
    with session_scope(engine) as session:
        assert len(session.exec(select(Appointment).where(
            Appointment.status == "booked")).all()) == 1


def test_outcomes_stay_apart_from_status_and_the_history_counts_no_shows(
        engine: Engine) -> None:
    pair = _setup(engine)
    first = _do(engine, agenda.book, _booking(start="2026-06-02T10:00", professional="julia",
                                              contact=str(pair[0])))
    second = _do(engine, agenda.book, _booking(start="2026-06-09T10:00", professional="julia",
                                               contact=str(pair[0])))
    with pytest.raises(Conflict):  # not started yet
        _do(engine, agenda.set_outcome, first["id"], "no_show")
    later = datetime(2026, 6, 2, 14, 0, tzinfo=UTC)
    marked = _do(engine, agenda.set_outcome, first["id"], "no_show", now=later)
    assert marked["outcome"] == "no_show" and marked["status"] == "booked"
    with pytest.raises(Invalid):
        _do(engine, agenda.set_outcome, first["id"], "gone", now=later)
    # "holds the slot" and "upcoming" are unchanged by an outcome (agenda.HOLDS_THE_SLOT)
    text, is_error = _agent(engine, pair, "list_my_appointments", {}, "l1", now=later)
    assert f"#{second['id']}" in text and f"#{first['id']}" not in text
    with session_scope(engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None and counts(session, tenant)["booked_appointments"] == 2
        seen = history.load(session, 1, pair[0], later, SP)
    assert [b.id for b in seen.upcoming] == [second["id"]] and seen.no_shows == 1
    lines = history.history_lines(seen)
    assert "no-show (did not come)" in lines[1][0] and lines[2] == "no-shows: 1"
    taken, is_error = _agent(engine, pair, "book_appointment",
                             {"service": "corte", "start": "2026-06-09T10:00",
                              "professional": "julia"}, "b2", now=later)
    assert is_error and "no longer free" in taken
    done = _do(engine, agenda.set_outcome, second["id"], "completed",
               now=later + timedelta(days=7))
    assert done["outcome"] == "completed"


@pytest.mark.parametrize("name", ["julia_monday_off.json", "blocked_hour.json",
                                  "staff_booking_cli.json"])
def test_the_scheduling_scenarios(name: str, database_url: str | None,
                                  redis_url: str | None) -> None:
    """tests/scenarios: Júlia's Monday off never offered nor bookable; a blocked hour never
    offered; a staff booking from the CLI (a `wagent` step) takes the slot from the agent."""
    result = run_scenario_file(Path(__file__).parent / "scenarios" / name,
                               database_url=database_url, redis_url=redis_url, cli=main)
    assert result.passed, result.failures
    assert result.api_errors == 0 and result.unscripted_calls == 0


def _race(engine: Engine, pair: tuple[int, int], start: str, n: int) -> dict[str, bool]:
    barrier = threading.Barrier(2)
    outcome: dict[str, bool] = {}

    def block() -> None:
        barrier.wait()
        try:
            _do(engine, agenda.block, agenda.Block.model_validate({
                "professional": "julia", "start": start,
                "end": f"{start[:11]}{int(start[11:13]) + 1}:00"}))
            outcome["block"] = True
        except Conflict:
            outcome["block"] = False

    def book() -> None:
        barrier.wait()
        _, is_error = _agent(engine, pair, "book_appointment",
                             {"service": "corte", "start": start, "professional": "julia"},
                             f"race{n}")
        outcome["booking"] = not is_error

    threads = [threading.Thread(target=block), threading.Thread(target=book)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcome


def test_a_block_and_a_booking_at_once_never_both_hold_the_time(engine: Engine) -> None:
    """The block's check and insert share the booking's lock: either the block is refused
    (the booking is inside it) or the booking is (the time is blocked), on both engines."""
    pair = _setup(engine)
    for n in range(4):
        start = f"2026-06-02T{10 + 2 * n}:00"
        outcome = _race(engine, pair, start, n)
        assert sorted(outcome.values()) == [False, True], (start, outcome)


def _at_once(*calls: Any) -> list[tuple[str, Any]]:
    barrier = threading.Barrier(len(calls))
    out: list[tuple[str, Any]] = [("", None)] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = ("ok", calls[i]())
        except Exception as exc:  # noqa: BLE001 (the losing side's refusal is the point)
            out[i] = ("refused", exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


@pytest.mark.parametrize("customer", ["reschedule_appointment", "cancel_appointment"])
def test_a_staff_move_racing_the_customers_change_of_the_same_booking_lets_one_win(
        engine: Engine, customer: str) -> None:
    """The agent's tools lock the booking as staff moves do (FOR UPDATE, read again): one of
    the two changes it, the other is told it is no longer an upcoming booking. Never two
    live bookings for one, nor "cancelled" told for a booking that moved and stays."""
    pair = _setup(engine)
    for n in range(3):
        view = _do(engine, agenda.book, _booking(start=f"2026-06-02T{9 + 2 * n:02d}:00",
                                                 professional="julia", contact=str(pair[0])))
        args: dict[str, Any] = {"appointment_id": view["id"]}
        if customer == "reschedule_appointment":
            args["start"] = f"2026-06-09T{9 + 2 * n:02d}:00"
        staff, agent = _at_once(
            lambda v=view, k=n: _do(engine, agenda.move, v["id"],
                                    agenda.Move(start=f"2026-06-08T{9 + 2 * k:02d}:00")),
            lambda a=args, k=n: _agent(engine, pair, customer, a, f"race{customer}{k}"))
        agent_won = agent[0] == "ok" and not agent[1][1]
        staff_won = staff[0] == "ok"
        assert agent_won != staff_won, (staff, agent)
        expected = 0 if (agent_won and customer == "cancel_appointment") else 1
        with session_scope(engine) as session:
            rows = session.exec(select(Appointment).where(
                Appointment.start_at >= NOW + timedelta(days=6))).all()
            made_now = [r for r in rows if r.start_at.astimezone(SP).hour == 9 + 2 * n]
        # the moved-to (8th) or the rescheduled-to (9th) booking: exactly one, or none
        # when the customer's cancel won
        assert sum(1 for r in made_now if r.status == "booked") == expected, made_now


def test_staff_cannot_move_a_booking_into_the_past(engine: Engine) -> None:
    pair = _setup(engine)
    view = _do(engine, agenda.book, _booking(start="2026-06-02T10:00", professional="julia",
                                             contact=str(pair[0])))
    with pytest.raises(Invalid, match="already be over"):
        _do(engine, agenda.move, view["id"], agenda.Move(start="2026-05-26T10:00"))


def test_a_staff_booking_naming_both_a_contact_and_a_phone_is_refused(engine: Engine) -> None:
    pair = _setup(engine)
    with pytest.raises(Invalid, match="not both"):
        _do(engine, agenda.book, _booking(start="2026-06-02T10:00", professional="julia",
                                          contact=str(pair[0]), phone="+55 21 98888-7777"))


@pytest.mark.parametrize("phone", ["11 99999-0001", "(11) 9999-0001", "055 11 99999-0001",
                                   "0 11 99999 0001"])
def test_a_staff_typed_phone_without_its_country_code_is_refused_not_a_new_contact(
        engine: Engine, phone: str) -> None:
    _setup(engine)
    with pytest.raises(Invalid, match="no country code"):
        _do(engine, agenda.book, _booking(start="2026-06-02T10:00", phone=phone))
    with session_scope(engine) as session:
        assert len(session.exec(select(Contact)).all()) == 1  # Ana only


def test_a_no_show_later_cancelled_counts_no_more_as_the_history_lines_say(
        engine: Engine) -> None:
    pair = _setup(engine)
    visit = _do(engine, agenda.book, _booking(start="2026-06-02T10:00", professional="julia",
                                              contact=str(pair[0])))
    later = datetime(2026, 6, 2, 14, 0, tzinfo=UTC)
    _do(engine, agenda.set_outcome, visit["id"], "no_show", now=later)
    with session_scope(engine) as session:
        row = session.get(Appointment, visit["id"])
        assert row is not None
        row.status = "cancelled"  # as a staff move of an in-progress visit leaves the original
        session.add(row)
    with session_scope(engine) as session:
        seen = history.load(session, 1, pair[0], later, SP)
    assert seen.no_shows == 0


def test_a_staff_visit_keeps_the_professional_of_the_service_before_as_the_agent_does(
        engine: Engine) -> None:
    """Newcomer trial item 3: Júlia does escova and corte, Ana (first in the catalogue) only
    corte; booked by staff, the corte after the escova stays with Júlia, who is free then,
    as the agent books it (availability.visit_slots' rule), not the first free in order."""
    salon = {**SALON, "services": [*SALON["services"], {"code": "escova", "name": "Escova",
                                                         "duration_minutes": 45}],
             "professionals": [{"code": "ana", "name": "Ana", "services": ["corte"]},
                               {"code": "julia", "name": "Júlia",
                                "services": ["escova", "corte"]}]}
    with session_scope(engine) as session:
        upsert_tenant(session, salon, now=NOW)
    booked = _do(engine, agenda.book, _booking(service="escova", then=["corte"],
                                               start="2026-06-02T09:00",
                                               phone="5511988880001"))
    assert [(r["service"], r["professional"], r["start"][11:16]) for r in booked["visit"]] == [
        ("escova", "julia", "09:00"), ("corte", "julia", "09:45")]
    # Júlia busy then: the corte goes to whoever is free, as before
    with session_scope(engine) as session:
        julia = session.exec(select(Professional).where(Professional.code == "julia")).one()
        session.add(ScheduleBlock(tenant_id=julia.tenant_id, professional_id=julia.id or 0,
                                  start_at=datetime(2026, 6, 9, 12, 45, tzinfo=UTC),
                                  end_at=datetime(2026, 6, 9, 14, 0, tzinfo=UTC),
                                  created_at=NOW))
    booked = _do(engine, agenda.book, _booking(service="escova", then=["corte"],
                                               start="2026-06-09T09:00",
                                               phone="5511988880002"))
    assert [(r["service"], r["professional"], r["start"][11:16]) for r in booked["visit"]] == [
        ("escova", "julia", "09:00"), ("corte", "ana", "09:45")]


def test_a_tool_use_id_stored_for_another_tool_is_logged_and_runs_nothing(
        engine: Engine) -> None:
    """Newcomer trial item 1: an id minted twice answers with the stored result (tool
    effects are keyed on it) and says so in the log, naming both tools."""
    from structlog.testing import capture_logs
    pair = _setup(engine)
    first = _agent(engine, pair, "find_available_slots", {"service": "corte",
                                                           "date": "2026-06-02"}, "toolu_twice")
    with capture_logs() as logs:
        again = _agent(engine, pair, "handoff_to_human", {"reason": "r", "summary": "s"},
                       "toolu_twice")
    assert again == first
    assert [(e["event"], e["tool"], e["stored_tool"]) for e in logs
            if e["event"] == "tool_use_id_reused"] == [
        ("tool_use_id_reused", "handoff_to_human", "find_available_slots")]
    with session_scope(engine) as session:
        assert session.exec(select(Conversation)).one().staff_until is None
