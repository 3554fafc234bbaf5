"""Issue 46 (3): each professional's and the business's agenda as an iCalendar feed, read back
with an independent parser (vobject, not the `icalendar` library that writes it): visits and
blocks with the service and the customer's first name only, no phone, notes only when the
tenant turns them on; a move keeps the UID and bumps SEQUENCE, a cancel is STATUS:CANCELLED;
ETag / Last-Modified answer 304; a revoked token is 404; the console shows, revokes and
reissues the URL."""

import html
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import vobject
from sqlmodel import select

from operations import agenda, feeds
from operations.service import cancel_appointment
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import Appointment, CalendarFeed, Contact, Tenant
from tests.conftest import START
from tests.console_helpers import Seeded, seed
from tests.test_console import Browser

CLINIC: dict[str, Any] = {
    "phone_number_id": "109876543210987", "name": "Clínica Exemplo",
    "timezone": "America/Sao_Paulo",
    "services": [{"code": "fisio", "name": "Fisioterapia", "duration_minutes": 60}],
    "professionals": [{"code": "julia", "name": "Júlia", "services": ["fisio"]},
                      {"code": "marcos", "name": "Marcos", "services": ["fisio"]}],
    "hours": {day: ["08:00-20:00"] for day in ("mon", "tue", "wed", "thu", "fri")},
}
PHONE = "5511987650001"


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    yield environment
    environment.close()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, Any]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers


def _events(body: bytes) -> dict[str, Any]:
    """The feed's VEVENTs by UID, parsed by vobject."""
    calendar = vobject.readOne(body.decode("utf-8"))
    return {str(e.uid.value): e for e in calendar.contents.get("vevent", [])}


def _with_tenant(env: ReplayEnvironment, action: Any, *args: Any, **kwargs: Any) -> Any:
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).one()
        return action(session, tenant, *args, now=env.clock.now(), **kwargs)


def _setup(env: ReplayEnvironment) -> dict[str, Any]:
    env.add_tenant(CLINIC)
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).one()
        contact = Contact(tenant_id=tenant.id, wa_id=PHONE, profile_name="Ana Teste",
                          created_at=env.clock.now())
        session.add(contact)
        session.flush()
        contact_id = contact.id
    booked = {pro: _with_tenant(env, agenda.book, agenda.StaffBooking.model_validate({
        "service": "fisio", "start": start, "professional": pro, "contact": str(contact_id),
        "note": "prefere a sala 2"})) for pro, start in (("julia", "2026-06-02T10:00"),
                                                          ("marcos", "2026-06-02T11:00"))}
    _with_tenant(env, agenda.block, agenda.Block.model_validate({
        "professional": "julia", "start": "2026-06-03T12:00", "end": "2026-06-03T13:00",
        "note": "almoço"}))
    token = _with_tenant(env, feeds.reissue, "julia")
    business = _with_tenant(env, feeds.reissue, "")
    return {"booked": booked, "julia": f"{env.web_url}/calendar/{token}.ics",
            "business": f"{env.web_url}/calendar/{business}.ics"}


def test_the_feed_shows_visits_and_blocks_without_phone_nor_notes(
        env: ReplayEnvironment) -> None:
    made = _setup(env)
    status, body, headers = _get(made["julia"])
    assert status == 200 and headers["Content-Type"].startswith("text/calendar")
    events = _events(body)
    summaries = sorted(str(e.summary.value) for e in events.values())
    assert summaries == ["Bloqueado · almoço", "Fisioterapia · Ana"]  # Júlia's only
    visit = next(e for e in events.values() if "Fisioterapia" in e.summary.value)
    assert visit.dtstart.value.isoformat() == "2026-06-02T10:00:00-03:00"
    assert visit.status.value == "CONFIRMED" and int(visit.sequence.value) == 0
    text = body.decode()
    assert PHONE not in text and PHONE[-8:] not in text and "Teste" not in text
    assert "sala 2" not in text and "DESCRIPTION" not in text
    _, everyone, _ = _get(made["business"])
    assert len([e for e in _events(everyone).values() if "Fisioterapia" in e.summary.value]) \
        == 2
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).one()
        tenant.feed_notes = True
        session.add(tenant)
    _, noted, _ = _get(made["julia"])
    assert [str(e.description.value) for e in _events(noted).values()
            if "description" in e.contents] == ["prefere a sala 2"]


def test_a_move_keeps_the_uid_and_bumps_sequence_and_a_cancel_is_marked(
        env: ReplayEnvironment) -> None:
    made = _setup(env)
    _, before, _ = _get(made["julia"])
    (uid,) = [u for u, e in _events(before).items() if "Fisioterapia" in e.summary.value]
    moved = _with_tenant(env, agenda.move, made["booked"]["julia"]["id"],
                         agenda.Move.model_validate({"start": "2026-06-04T15:00"}))
    _, after, _ = _get(made["julia"])
    event = _events(after)[uid]
    assert event.dtstart.value.isoformat() == "2026-06-04T15:00:00-03:00"
    assert int(event.sequence.value) == 1 and event.status.value == "CONFIRMED"
    assert len([e for e in _events(after).values() if "Fisioterapia" in e.summary.value]) == 1
    again = _with_tenant(env, agenda.move, moved["id"],
                         agenda.Move.model_validate({"start": "2026-06-05T09:00"}))
    _with_tenant(env, cancel_appointment, again["id"])
    _, cancelled, _ = _get(made["julia"])
    event = _events(cancelled)[uid]
    assert event.status.value == "CANCELLED" and int(event.sequence.value) == 3
    assert event.dtstart.value.isoformat() == "2026-06-05T09:00:00-03:00"


def test_an_unchanged_feed_answers_304_and_a_change_a_new_etag(env: ReplayEnvironment) -> None:
    made = _setup(env)
    status, _, headers = _get(made["julia"])
    etag, modified = headers["ETag"], headers["Last-Modified"]
    assert status == 200 and etag and modified
    assert _get(made["julia"], {"If-None-Match": etag})[0] == 304
    assert _get(made["julia"], {"If-Modified-Since": modified})[0] == 304
    assert _get(made["julia"], {"If-None-Match": '"other"'})[0] == 200
    env.clock.advance(timedelta(minutes=5))
    _with_tenant(env, cancel_appointment, made["booked"]["julia"]["id"])
    status, _, headers = _get(made["julia"], {"If-None-Match": etag})
    assert status == 200 and headers["ETag"] != etag
    assert _get(made["julia"], {"If-Modified-Since": modified})[0] == 200


def test_a_note_or_name_changed_in_place_changes_the_etag(env: ReplayEnvironment) -> None:
    made = _setup(env)
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).one()
        tenant.feed_notes = True
        session.add(tenant)
    etag = _get(made["julia"])[2]["ETag"]
    with session_scope(env.engine) as session:  # add_appointment_note writes it in place
        row = session.get(Appointment, made["booked"]["julia"]["id"])
        assert row is not None
        row.note = "prefere a sala 3"
        session.add(row)
    status, body, headers = _get(made["julia"], {"If-None-Match": etag})
    assert status == 200 and "sala 3" in body.decode() and headers["ETag"] != etag
    etag = headers["ETag"]
    with session_scope(env.engine) as session:  # the name the event shows
        contact = session.exec(select(Contact)).one()
        contact.profile_name = "Bia Teste"
        session.add(contact)
    status, body, _ = _get(made["julia"], {"If-None-Match": etag})
    assert status == 200 and "Fisioterapia · Bia" in body.decode()


def test_a_revoked_or_unknown_token_is_404_and_a_reissued_one_works(
        env: ReplayEnvironment) -> None:
    made = _setup(env)
    assert _with_tenant(env, feeds.revoke, "julia") == 1
    assert _get(made["julia"])[0] == 404
    assert _get(f"{env.web_url}/calendar/{'x' * 43}.ics")[0] == 404
    assert _get(made["business"])[0] == 200  # another scope's feed is untouched
    first = _with_tenant(env, feeds.reissue, "marcos")
    second = _with_tenant(env, feeds.reissue, "marcos")
    assert _get(f"{env.web_url}/calendar/{first}.ics")[0] == 404
    assert _get(f"{env.web_url}/calendar/{second}.ics")[0] == 200


def _flash(page: str) -> str:
    found = re.search(r'<div class="flash[^"]*" role="status">(.*?)</div>', page, re.S)
    return html.unescape(found.group(1)) if found else ""


def test_the_console_shows_issues_and_revokes_a_feed_url(env: ReplayEnvironment) -> None:
    seeded: Seeded = seed(env)
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert 'id="feeds"' in page and "/calendar/" not in page
    browser.request("/console/agenda/feeds", {"csrf": browser.csrf, "day": "2026-06-02",
                                              "professional": "julia"})
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert "Endereço do calendário gerado" in _flash(page)
    url = re.search(r'value="(http[^"]+/calendar/[^"]+\.ics)"', page)
    assert url is not None and _get(html.unescape(url.group(1)))[0] == 200
    browser.request("/console/agenda/feeds", {"csrf": browser.csrf, "day": "2026-06-02",
                                              "professional": "julia", "action": "revoke"})
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert "revogado" in _flash(page) and _get(html.unescape(url.group(1)))[0] == 404
    browser.request("/console/agenda/feeds", {"csrf": browser.csrf, "day": "2026-06-02",
                                              "professional": "nobody"})
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert "nobody" in _flash(page)
    with session_scope(env.engine) as session:
        assert len(session.exec(select(CalendarFeed)).all()) == 1
