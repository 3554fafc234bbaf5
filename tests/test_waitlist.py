"""The waitlist (issue 47): the replay scenarios of "How to show it", the entries' rules, the
offer's channel, the refusals told, the signed button ids, and the race on PostgreSQL."""

import json
import threading
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine
from sqlmodel import select

from agent.tools.base import ToolContext
from agent.tools.registry import execute_tool
from operations import agenda
from operations.errors import Conflict
from replay.environment import ReplayEnvironment
from replay.runner import run_scenario_file
from storage import waitlist, webhooks
from storage.db import session_scope
from storage.models import (
    Appointment,
    Contact,
    Conversation,
    Outbound,
    Service,
    Tenant,
    WaitlistEntry,
    WebhookEvent,
)
from storage.tenants import upsert_tenant
from tests.conftest import START
from tests.console_helpers import seed
from tests.factories import ANA, TENANT
from tests.test_admin_api import call as admin_call
from tests.test_console import Browser
from workers import waitlist as offers

SCENARIOS = Path(__file__).parent / "scenarios" / "waitlist"


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.json")))
def test_waitlist_scenarios(name: str, database_url: str | None, redis_url: str | None) -> None:
    """tests/scenarios/waitlist (docs/WAITLIST.md, "Shown by"): a full Saturday, two
    customers join, one cancel; fill_on_cancel: the first taps Quero and is booked, no model
    call; hold_expires: her hold runs out, the next takes it, her late Quero is told it was
    taken; nao_posso: the next is offered, and nobody twice."""
    result = run_scenario_file(SCENARIOS / f"{name}.json", database_url=database_url,
                               redis_url=redis_url)
    assert result.passed, "\n".join(result.failures + result.transcript)
    assert result.api_errors == 0 and result.unscripted_calls == 0 and not result.leftover
    assert len(list(SCENARIOS.glob("*.json"))) == 3


# -- the rules, on both databases -------------------------------------------------------------

SP = ZoneInfo("America/Sao_Paulo")
NOW = datetime(2026, 6, 1, 11, 0, tzinfo=UTC)  # Mon 08:00 in São Paulo
TUESDAY = date(2026, 6, 2)
SECRET = "k" * 32
SALON: dict[str, Any] = {
    **TENANT, "services": [{"code": "corte", "name": "Corte", "duration_minutes": 60}],
    "professionals": [{"code": "julia", "name": "Júlia", "services": ["corte"]}],
    "hours": {"mon": ["09:00-18:00"], "tue": ["09:00-18:00"]}}


def _setup(engine: Engine, *names: str, **settings_: Any) -> list[int]:
    """The salon (with a waitlist.filled endpoint) and one contact per name, each inside the
    24-hour window; their ids."""
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, SALON, now=NOW)
        for key, value in settings_.items():
            setattr(tenant, key, value)
        session.add(tenant)
        webhooks.create_endpoint(session, tenant.id or 0, url="https://hooks.example/x",
                                 events=["waitlist.filled"], now=NOW)
        contacts = [Contact(tenant_id=tenant.id, wa_id=f"55119999900{n:02d}", profile_name=name,
                            created_at=NOW, last_inbound_at=NOW - timedelta(hours=1))
                    for n, name in enumerate(names)]
        session.add_all(contacts)
        session.flush()
        for contact in contacts:  # a conversation each, with the contact's id (_tool)
            session.add(Conversation(id=contact.id, tenant_id=tenant.id, contact_id=contact.id,
                                     last_activity_at=NOW, due_at=NOW, opened_at=NOW))
        session.flush()
        return [c.id or 0 for c in contacts]


def _tool(engine: Engine, contact_id: int, tool: str, args: dict[str, Any], use: str,
          now: datetime = NOW) -> tuple[str, bool]:
    return execute_tool(ToolContext(engine=engine, tenant_id=1, contact_id=contact_id,
                                    conversation_id=contact_id, timezone=SP, now=now,
                                    tool_use_id=use), tool, args)


def _fill(engine: Engine, contact_id: int, hour: int, use: str) -> None:
    text, is_error = _tool(engine, contact_id, "book_appointment",
                           {"service": "corte", "start": f"2026-06-02T{hour:02d}:00"}, use)
    assert not is_error, text


def _window(engine: Engine, contact_id: int, hour: int, use: str) -> tuple[str, bool]:
    """Join the window of one start: `hour`:00 (slots every 30 minutes)."""
    return _tool(engine, contact_id, "find_available_slots", {
        "service": "corte", "date": "2026-06-02", "after": f"{hour:02d}:00",
        "before": f"{hour:02d}:30", "waitlist": "join"}, use)


def _entries(engine: Engine) -> list[WaitlistEntry]:
    with session_scope(engine) as session:
        return list(session.exec(select(WaitlistEntry).order_by(WaitlistEntry.id)).all())


def _pass(engine: Engine, now: datetime) -> list[tuple[int, int, bool]]:
    """The pass's work without a queue: end the stale, hold, write the offers."""
    with session_scope(engine) as session:
        waitlist.end_stale(session, now=now)
        ids = [e.id or 0 for e in waitlist.waiting(session, now=now, limit=100)]
    for entry_id in ids:
        with session_scope(engine) as session:
            offers.hold_next(session, entry_id, now=now)
    targets = []
    with session_scope(engine) as session:
        unsent = waitlist.unsent_offers(session, limit=100)
    for entry_id in unsent:
        with session_scope(engine) as session:
            target = offers.send_offer(session, SECRET, entry_id, now=now)
        if target:
            targets.append(target)
    return targets


def _tap(engine: Engine, entry_id: int, start: datetime, accept: bool,
         now: datetime) -> str | None:
    with session_scope(engine) as session:
        tenant, entry = session.get(Tenant, 1), waitlist.locked(session, entry_id)
        assert tenant is not None and entry is not None
        contact = session.get(Contact, entry.contact_id)
        assert contact is not None
        return offers.answer_tap(session, tenant, contact, entry, start, accept, now=now)


def test_joining_only_when_nothing_fits_listing_and_leaving(engine: Engine) -> None:
    carla, ana = _setup(engine, "Carla", "Ana")
    text, _ = _window(engine, ana, 10, "j0")
    assert text.startswith("Not joined: times are free") and "10:00" in text
    _fill(engine, carla, 10, "b1")
    text, is_error = _window(engine, ana, 10, "j1")
    assert not is_error and text.startswith("Joined the waitlist: corte, Tue 2026-06-02 "
                                             "from 10:00 before 10:30, anyone")
    assert _window(engine, ana, 10, "j2")[0].startswith("Already on the waitlist")
    listed, _ = _tool(engine, ana, "find_available_slots", {"waitlist": "list"}, "l1")
    assert listed.count("\n- ") == 1 and "2026-06-02 from 10:00" in listed
    _, is_error = _tool(engine, ana, "find_available_slots",
                        {"service": "corte", "date": "2026-06-02", "date_to": "2026-06-03",
                         "waitlist": "join"}, "j3")
    assert is_error  # a window is one day
    left, _ = _tool(engine, ana, "find_available_slots",
                    {"waitlist": "leave", "date": "2026-06-02"}, "x1")
    assert left == "Left 1 waitlist entry."
    assert _tool(engine, ana, "find_available_slots", {"waitlist": "list"}, "l2")[0] \
        == "This customer is on no waitlist."


def test_entries_expire_at_the_windows_end(engine: Engine) -> None:
    carla, ana = _setup(engine, "Carla", "Ana")
    _fill(engine, carla, 10, "b1")
    _window(engine, ana, 10, "j1")
    end = datetime(2026, 6, 2, 10, 30, tzinfo=SP)
    with session_scope(engine) as session:
        assert waitlist.end_stale(session, now=end - timedelta(minutes=1)) == (0, 0)
        assert waitlist.end_stale(session, now=end) == (0, 1)
    assert [e.status for e in _entries(engine)] == ["expired"]


def test_a_held_slot_is_busy_for_everyone_else_and_the_hold_gives_way(engine: Engine) -> None:
    carla, ana, bruno = _setup(engine, "Carla", "Ana", "Bruno")
    _fill(engine, carla, 10, "b1")
    _window(engine, ana, 10, "j1")
    _window(engine, bruno, 10, "j2")
    _tool(engine, carla, "cancel_appointment", {"appointment_id": 1}, "c1")
    targets = _pass(engine, NOW)
    assert len(targets) == 1  # Ana only: one slot, one offer
    found, _ = _tool(engine, bruno, "find_available_slots",
                     {"service": "corte", "date": "2026-06-02"}, "f1")
    assert "10:00" not in found
    text, is_error = _tool(engine, bruno, "book_appointment",
                           {"service": "corte", "start": "2026-06-02T10:00"}, "b2")
    assert is_error and "no longer free" in text
    with session_scope(engine) as session:
        sent = session.exec(select(Outbound)).one()
        assert sent.kind == "interactive" and "wl1:1:" in sent.body and "Quero" in sent.body
    later = NOW + timedelta(minutes=15)
    assert len(_pass(engine, later)) == 1  # Ana's hold expired: Bruno's turn
    assert [e.status for e in _entries(engine)] == ["waiting", "offered"]
    assert _entries(engine)[0].passed == [f"{_entries(engine)[1].offer_professional_id}@"
                                          "2026-06-02T13:00"]


def test_outside_the_window_a_template_or_nothing(engine: Engine) -> None:
    templates = [{"name": "vaga_aberta", "language": "pt_BR",
                  "parameters": ["customer_name", "date", "time"],
                  "buttons": [{"title": "Quero", "action": "confirm"},
                              {"title": "Não posso", "action": "cancel"}]}]
    carla, ana = _setup(engine, "Carla", "Ana", templates=templates)
    _fill(engine, carla, 10, "b1")
    _window(engine, ana, 10, "j1")
    _tool(engine, carla, "cancel_appointment", {"appointment_id": 1}, "c1")
    with session_scope(engine) as session:  # Ana wrote 25 hours ago: the window is closed
        contact = session.get(Contact, ana)
        assert contact is not None
        contact.last_inbound_at = NOW - timedelta(hours=25)
        session.add(contact)
    late = NOW
    assert _pass(engine, late) == []  # no template declared: not offered, stays waiting
    assert _entries(engine)[0].status == "waiting" and _entries(engine)[0].passed
    with session_scope(engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        tenant.waitlist_template = "vaga_aberta"
        entry = session.get(WaitlistEntry, 1)
        assert entry is not None
        entry.passed = []
        session.add_all([tenant, entry])
    _pass(engine, late)
    with session_scope(engine) as session:
        sent = session.exec(select(Outbound)).one()
        assert sent.kind == "template" and '"name": "vaga_aberta"' in sent.body
        assert "wl1:1:" in sent.body
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        tenant.waitlist_inside_window_only = True
        entry = session.get(WaitlistEntry, 1)
        assert entry is not None
        waitlist.release(entry)
        entry.passed = []
        session.add_all([tenant, entry])
    assert _pass(engine, late + timedelta(minutes=1)) == []  # limited to the window: none
    with session_scope(engine) as session:
        assert len(session.exec(select(Outbound)).all()) == 1


def test_quero_books_under_the_house_rules_and_tells_a_refusal(engine: Engine) -> None:
    carla, ana, bruno = _setup(engine, "Carla", "Ana", "Bruno", max_upcoming_bookings=1)
    _fill(engine, carla, 10, "b1")
    _fill(engine, ana, 15, "b2")  # Ana already holds her one allowed booking
    _window(engine, ana, 10, "j1")
    _window(engine, bruno, 10, "j2")
    _tool(engine, carla, "cancel_appointment", {"appointment_id": 1}, "c1")
    _pass(engine, NOW)
    start = datetime(2026, 6, 2, 13, 0, tzinfo=UTC)
    said = _tap(engine, 1, start, True, NOW + timedelta(minutes=1))
    assert said is not None and said.startswith("Não consegui marcar o horário de ter "
                                                 "02/06 às 10:00: você já tem o máximo")
    _pass(engine, NOW + timedelta(minutes=2))  # the next: Bruno
    said = _tap(engine, 2, start, True, NOW + timedelta(minutes=3))
    assert said == "Pronto! Marquei Corte com Júlia, ter 02/06 às 10:00."
    assert _tap(engine, 2, start, True, NOW + timedelta(minutes=4)) is None  # a second tap
    with session_scope(engine) as session:
        booked = session.exec(select(Appointment).where(
            Appointment.status == "booked", Appointment.start_at == start)).one()
        assert booked.contact_id == bruno
        event = session.exec(select(WebhookEvent)).one()
        assert event.type == "waitlist.filled" and event.data["waitlist_entry_id"] == 2
        assert event.data["appointment_id"] == booked.id and "text" not in event.data


def test_button_ids_are_signed_short_and_tell_offers_apart() -> None:
    entry = WaitlistEntry(id=7, tenant_id=1, contact_id=3, service_id=1, day=TUESDAY,
                          ends_at=NOW, created_at=NOW)
    start = datetime(2026, 6, 2, 13, 0, tzinfo=UTC)
    payload = waitlist.button_payload(SECRET, entry, start, True)
    assert len(payload) <= 128 and payload.isascii()
    read = waitlist.read_payload(f'[tapped button "Quero" (id {payload})]')
    assert read is not None and read[:3] == (7, start, True)
    kwargs = {"tenant_id": 1, "contact_id": 3}
    assert waitlist.verified(SECRET, entry, read[3], read[4], **kwargs)
    assert not waitlist.verified(SECRET, entry, read[3], read[4], tenant_id=1, contact_id=4)
    assert not waitlist.verified("other" * 8, entry, read[3], read[4], **kwargs)
    assert not waitlist.verified(SECRET, entry, read[3].replace(":y", ":n"), read[4], **kwargs)
    other = waitlist.button_payload(SECRET, entry, start + timedelta(hours=1), True)
    assert other.split(":")[-1] != payload.split(":")[-1]
    assert waitlist.read_payload("wl1:7:202606021300:y:short") is None
    assert waitlist.read_payload("wl1:7:202613021300:y:" + "A" * 22) is None  # month 13


@settings(max_examples=60, deadline=None)
@given(zone=st.sampled_from(["America/Sao_Paulo", "America/Manaus", "Europe/Lisbon",
                             "America/New_York", "Asia/Kolkata", "Pacific/Chatham"]),
       day=st.dates(min_value=date(2026, 1, 1), max_value=date(2030, 12, 31)),
       before=st.one_of(st.just(""), st.times().map(lambda t: f"{t:%H}:{t.minute // 15 * 15:02d}")))
def test_a_window_ends_at_its_local_before_or_midnight(zone: str, day: date,
                                                        before: str) -> None:
    """Whatever the zone and day (DST changes included), an entry expires at the local time
    its window ends: `before`, or the next local midnight."""
    tz = ZoneInfo(zone)
    ends = waitlist.window_end(Tenant(name="x", phone_number_id="1", timezone=zone,
                                      created_at=NOW), day, before)
    assert ends.tzinfo is not None
    local = ends.astimezone(tz)
    if before:
        wanted = time.fromisoformat(before)
        moved = datetime.combine(day, wanted, tz).astimezone(UTC).astimezone(tz)
        assert local == moved  # a time skipped by DST lands just after the gap
    else:
        assert local.date() == day + timedelta(days=1) and local.minute == 0 \
            and local.hour in (0, 1)  # 01:00 only where midnight is skipped by DST


def test_staff_see_the_waitlist_of_a_day_and_offer_a_slot_by_hand(engine: Engine) -> None:
    carla, ana = _setup(engine, "Carla", "Ana")
    _fill(engine, carla, 10, "b1")
    _window(engine, ana, 10, "j1")
    with session_scope(engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        view = agenda.day_view(session, tenant, TUESDAY)
        assert [(w["contact_name"], w["status"], w["after"]) for w in view["waitlist"]] == [
            ("Ana", "waiting", "10:00")]
        with pytest.raises(Conflict):  # Carla's
            agenda.offer_slot(session, tenant, 1, agenda.WaitlistOffer(
                professional="julia", start="2026-06-02T10:00"), now=NOW)
    with session_scope(engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        held = agenda.offer_slot(session, tenant, 1, agenda.WaitlistOffer(
            professional="julia", start="2026-06-02T16:00"), now=NOW)  # outside her window
        assert held["status"] == "offered" and held["offered"]["start"] == "2026-06-02T16:00"
        with pytest.raises(Conflict):  # already offered
            agenda.offer_slot(session, tenant, 1, agenda.WaitlistOffer(
                professional="julia", start="2026-06-02T17:00"), now=NOW)
    assert len(_pass(engine, NOW)) == 1  # the pass writes it
    said = _tap(engine, 1, datetime(2026, 6, 2, 19, 0, tzinfo=UTC), True, NOW)
    assert said is not None and said.startswith("Pronto!")


# -- the race, on PostgreSQL (and SQLite) -----------------------------------------------------

def _race(engine: Engine, start: datetime, taps: dict[str, int], at: datetime) -> dict[str, Any]:
    """Each of `taps` (who: entry id) taps Quero on the offer of `start` while staff book
    it for a walk-in, all at once; what each was told ("staff": ok or refused)."""
    barrier = threading.Barrier(len(taps) + 1)
    results: dict[str, Any] = {}

    def tap(who: str, entry_id: int) -> None:
        barrier.wait()
        results[who] = _tap(engine, entry_id, start, True, at)

    def staff() -> None:
        barrier.wait()
        try:
            with session_scope(engine) as session:
                agenda.book(session, session.get(Tenant, 1), agenda.StaffBooking(
                    service="corte", start=f"{start.astimezone(SP):%Y-%m-%dT%H:%M}",
                    professional="julia", phone="5521988880099"), now=at)
            results["staff"] = "ok"
        except Conflict:
            results["staff"] = "refused"

    threads = [threading.Thread(target=tap, args=item) for item in taps.items()]
    threads.append(threading.Thread(target=staff))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_offers_and_a_staff_booking_racing_for_one_slot_give_one_booking(
        engine: Engine) -> None:
    """Bruno held the 10:00 and let it expire (his Quero button is still in his chat); Ana
    holds it now. Bruno's late Quero, Ana's Quero and a staff booking race at once: one
    booking, Ana's. Then again for 14:00 with Ana's hold just expired: the staff's."""
    carla, ana, bruno = _setup(engine, "Carla", "Ana", "Bruno")
    for round_, hour in enumerate((10, 14)):
        _fill(engine, carla, hour, f"b{round_}")
        _window(engine, bruno, hour, f"jb{round_}")
        _window(engine, ana, hour, f"ja{round_}")
    ids = {(e.contact_id, e.after): e.id or 0 for e in _entries(engine)}
    for round_, hour in enumerate((10, 14)):
        t0 = NOW + timedelta(hours=round_)
        with session_scope(engine) as session:
            row = session.exec(select(Appointment).where(
                Appointment.status == "booked", Appointment.contact_id == carla)
                .order_by(Appointment.start_at)).first()
            assert row is not None
        _tool(engine, carla, "cancel_appointment", {"appointment_id": row.booking_number},
              f"c{round_}", now=t0)
        start = row.start_at
        bruno_id, ana_id = ids[(bruno, f"{hour:02d}:00")], ids[(ana, f"{hour:02d}:00")]
        _pass(engine, t0)  # Bruno waited first: his hold
        assert _entries(engine)[bruno_id - 1].status == "offered"
        _pass(engine, t0 + timedelta(minutes=15))  # expired: Ana's hold
        assert _entries(engine)[ana_id - 1].status == "offered"
        race_at = t0 + timedelta(minutes=16 if round_ == 0 else 31)  # live / just expired
        results = _race(engine, start, {"ana": ana_id, "bruno": bruno_id}, race_at)
        with session_scope(engine) as session:
            booked = session.exec(select(Appointment).where(
                Appointment.status == "booked", Appointment.start_at == start)).all()
        assert len(booked) == 1, results
        assert "já foi preenchido" in str(results["bruno"])
        if round_ == 0:
            assert booked[0].contact_id == ana and results["staff"] == "refused"
            assert str(results["ana"]).startswith("Pronto!")
        else:
            assert booked[0].contact_id not in (ana, bruno) and results["staff"] == "ok"
            assert "já foi preenchido" in str(results["ana"])


# -- the doors: admin API settings, the day's waitlist, an offer by hand ----------------------

OPERATOR = "operator-token-for-tests"
ANA_PHONE = ANA[0]


@pytest.fixture
def admin_env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url,
                                    redis_url=redis_url, admin_token=OPERATOR)
    environment.add_tenant(TENANT)  # Saturday 09:00-13:00, julia
    yield environment
    environment.close()


def test_the_admin_api_sets_the_waitlist_settings_shows_the_day_and_offers_by_hand(
        admin_env: ReplayEnvironment) -> None:
    env = admin_env
    status, tenants = admin_call(env, "GET", "/admin/tenants", token=OPERATOR)
    tid = tenants[0]["id"]
    status, body = admin_call(env, "PATCH", f"/admin/tenants/{tid}", {
        "waitlist_hold_minutes": 0, "waitlist_template": "nao_declarado"}, token=OPERATOR)
    assert status == 422 and "waitlist_hold_minutes" in json.dumps(body)
    status, body = admin_call(env, "PATCH", f"/admin/tenants/{tid}",
                              {"waitlist_template": "nao_declarado"}, token=OPERATOR)
    assert status == 422 and "waitlist_template" in json.dumps(body)  # not a declared one
    status, _ = admin_call(env, "PATCH", f"/admin/tenants/{tid}", {
        "waitlist_hold_minutes": 20, "waitlist_inside_window_only": True}, token=OPERATOR)
    assert status == 200
    now = env.clock.now()
    with session_scope(env.engine) as session:
        tenant = session.get(Tenant, tid)
        assert tenant is not None and tenant.waitlist_hold_minutes == 20
        contact = Contact(tenant_id=tid, wa_id=ANA_PHONE, profile_name="Ana", created_at=now,
                          last_inbound_at=now)
        session.add(contact)
        session.flush()
        entry, _ = waitlist.join(session, tenant, contact_id=contact.id or 0, service_id=1,
                                 professional_id=None, day=date(2026, 6, 6), after="09:00",
                                 before="", now=now)
        entry_id = entry.id
    status, day = admin_call(env, "GET", f"/admin/tenants/{tid}/agenda/2026-06-06",
                             token=OPERATOR)
    assert status == 200 and [(w["id"], w["status"]) for w in day["waitlist"]] == [
        (entry_id, "waiting")]
    path = f"/admin/tenants/{tid}/waitlist/{entry_id}/offer"
    status, body = admin_call(env, "POST", path, {"professional": "julia", "start": "sábado"},
                              token=OPERATOR)
    assert status == 422  # a bad body: named, nothing held
    status, body = admin_call(env, "POST", path, {"professional": "julia",
                                                  "start": "2026-06-06T09:00"}, token=OPERATOR)
    assert status == 200 and body["offered"]["start"] == "2026-06-06T09:00"
    assert body["offered"]["expires_at"] == (now + timedelta(minutes=20)).isoformat()
    status, body = admin_call(env, "POST", path, {"professional": "julia",
                                                  "start": "2026-06-06T10:00"}, token=OPERATOR)
    assert status == 409  # already offered
    status, _ = admin_call(env, "POST", f"/admin/tenants/{tid}/waitlist/999/offer",
                           {"professional": "julia", "start": "2026-06-06T10:00"},
                           token=OPERATOR)
    assert status == 404


def test_the_console_day_shows_the_waitlist_and_offers_a_time(
        database_url: str | None, redis_url: str | None) -> None:
    env = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    try:
        seeded = seed(env)  # the salon's customer has a conversation; julia works 09:00-18:00
        with session_scope(env.engine) as session:
            conversation = session.get(Conversation, seeded.salon_conversation_id)
            assert conversation is not None
            tenant = session.get(Tenant, conversation.tenant_id)
            assert tenant is not None
            entry, _ = waitlist.join(session, tenant, contact_id=conversation.contact_id,
                                     service_id=session.exec(select(Service.id).where(
                                         Service.tenant_id == tenant.id)).first() or 0,
                                     professional_id=None, day=date(2026, 6, 2),
                                     after="16:00", before="", now=env.clock.now())
            entry_id = entry.id
        browser = Browser(env.web_url)
        browser.sign_in(seeded.salon_token)
        _, page, _ = browser.request("/console/agenda?day=2026-06-02")
        assert 'id="waitlist"' in page and f'id="waitlist-{entry_id}"' in page
        assert "esperando" in page and f"/console/agenda/waitlist/{entry_id}/offer" in page
        status, _, headers = browser.request(f"/console/agenda/waitlist/{entry_id}/offer", {
            "csrf": browser.csrf, "day": "2026-06-02", "professional": "julia",
            "time": "17:00"})
        assert status == 303 and headers["Location"] == "/console/agenda?day=2026-06-02"
        _, page, _ = browser.request("/console/agenda?day=2026-06-02")
        assert "Oferecido: 17:00" in page and "horário oferecido" in page
    finally:
        env.close()
