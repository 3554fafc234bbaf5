"""Issue 22: the console's day agenda: each professional's day with bookings and blocks, the
forms to book (a new customer by phone), block (over bookings only with force), move and mark
a visit; refusals come back to the day with their reasons; another tenant's block is not
reachable."""

import html
import re
from collections.abc import Iterator

import pytest
from sqlmodel import select

from replay.environment import ReplayEnvironment
from storage.catalogue import change_professional, change_service
from storage.db import session_scope
from storage.models import Appointment, Contact, ScheduleBlock
from tests.conftest import START
from tests.console_helpers import Seeded, seed
from tests.test_console import Browser


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    yield environment
    environment.close()


def _flash(page: str) -> str:
    found = re.search(r'<div class="flash[^"]*" role="status">(.*?)</div>', page, re.S)
    return html.unescape(found.group(1)) if found else ""


def test_the_day_agenda_books_blocks_and_refuses_with_reasons(env: ReplayEnvironment) -> None:
    seeded: Seeded = seed(env)
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    status, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert status == 200 and "Júlia" in page and "09:00-18:00" in page
    assert 'id="book-form"' in page and 'id="block-form"' in page
    assert 'name="viewport"' in page  # a phone's width
    with session_scope(env.engine) as session:
        seeded_booking = session.exec(select(Appointment)).first()
        assert seeded_booking is not None
    status, _, headers = browser.request("/console/agenda/book", {
        "csrf": browser.csrf, "day": "2026-06-02", "service": "corte", "professional": "julia",
        "time": "10:00", "phone": "+55 21 98888-0002", "name": "Bia Teste"})
    assert status == 303 and headers["Location"] == "/console/agenda?day=2026-06-02"
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert "Agendado: 10:00 Júlia" in _flash(page) and "Bia Teste" in page
    with session_scope(env.engine) as session:
        bia = session.exec(select(Contact).where(Contact.wa_id == "5521988880002")).one()
        assert session.exec(select(Appointment).where(
            Appointment.contact_id == bia.id)).one().booked_by == "business"
    browser.request("/console/agenda/block", {
        "csrf": browser.csrf, "day": "2026-06-02", "professional": "julia", "time": "14:30",
        "until": "16:00", "note": "reunião"})
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    refused = _flash(page)
    assert f"#{seeded_booking.id}" in refused, refused  # the 15:00 booking is named
    assert "julia tem 1 agendamento(s) neste horário" in refused, refused
    browser.request("/console/agenda/block", {
        "csrf": browser.csrf, "day": "2026-06-02", "professional": "julia", "time": "14:30",
        "until": "16:00", "note": "reunião", "force": "1"})
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert "Horário bloqueado" in _flash(page) and "Bloqueado · reunião" in page
    browser.request("/console/agenda/book", {
        "csrf": browser.csrf, "day": "2026-06-02", "service": "corte", "professional": "julia",
        "time": "7:00", "phone": "5521988880003"})
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert "start" in _flash(page), _flash(page)  # a malformed time is named, nothing booked
    browser.request("/console/agenda/book", {
        "csrf": browser.csrf, "day": "2026-06-02", "service": "corte", "professional": "julia",
        "time": "19:00", "phone": "5521988880003"})
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert "julia não trabalha em 2026-06-02 às 19:00 (corte); horário do dia: 09:00-18:00" \
        in _flash(page), _flash(page)
    with session_scope(env.engine) as session:
        block = session.exec(select(ScheduleBlock)).one()
        assert session.exec(select(Contact).where(
            Contact.wa_id == "5521988880003")).first() is None
    other = Browser(env.web_url)
    other.sign_in(seeded.garage_token)
    other.request("/console/agenda?day=2026-06-02")
    assert other.request(f"/console/agenda/blocks/{block.id}/remove",
                         {"csrf": other.csrf, "day": "2026-06-02"})[0] in (303, 404)
    with session_scope(env.engine) as session:
        assert session.get(ScheduleBlock, block.id) is not None  # not the garage's to remove
    browser.request(f"/console/agenda/blocks/{block.id}/remove",
                    {"csrf": browser.csrf, "day": "2026-06-02"})
    with session_scope(env.engine) as session:
        assert session.get(ScheduleBlock, block.id) is None
    browser.request(f"/console/agenda/appointments/{seeded_booking.id}/outcome",
                    {"csrf": browser.csrf, "day": "2026-06-02", "outcome": "no_show"})
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert f"o agendamento #{seeded_booking.id} ainda não começou" in _flash(page)
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert 'type="date" name="move_date" value="2026-06-02"' in page  # Remarcar: date, time
    assert 'type="time" name="move_time"' in page and 'name="start"' not in page
    browser.request(f"/console/agenda/appointments/{seeded_booking.id}/move",
                    {"csrf": browser.csrf, "day": "2026-06-02", "move_date": "2026-06-02",
                     "move_time": "17:00"})
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert "Remarcado: 2026-06-02 17:00" in _flash(page)
    browser.request(f"/console/agenda/appointments/{seeded_booking.id}/move",
                    {"csrf": browser.csrf, "day": "2026-06-02", "move_date": "2026-06-02",
                     "move_time": ""})  # a time left out: refused, nothing moved
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert "Remarcado" not in _flash(page)


def test_the_catalogue_page_shows_a_professionals_own_week(env: ReplayEnvironment) -> None:
    seeded: Seeded = seed(env)
    with session_scope(env.engine) as session:
        change_professional(session, 1, "julia", hours={"tue": ["13:00-18:00"]},
                            time_off=[{"from": "2026-06-16", "to": "2026-06-20",
                                       "note": "férias"}])
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    _, page, _ = browser.request("/console/catalog")
    assert "Terça 13:00-18:00" in page and "2026-06-16 – 2026-06-20 (férias)" in page
    _, day, _ = browser.request("/console/agenda?day=2026-06-02")
    assert "Horário: 13:00-18:00" in day
    _, monday, _ = browser.request("/console/agenda?day=2026-06-01")
    assert "Não trabalha neste dia" in monday


def test_the_booking_form_books_a_visit_of_several_services(env: ReplayEnvironment) -> None:
    seeded: Seeded = seed(env)
    with session_scope(env.engine) as session:
        change_service(session, 1, "escova", name="Escova", duration_minutes=30)
        change_professional(session, 1, "julia", services=["corte", "escova"])
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert page.count('<select name="services">') == 2 and "Depois, na mesma visita" in page
    browser.request("/console/agenda/book", {
        "csrf": browser.csrf, "day": "2026-06-02", "service": "corte", "services": ["escova", ""],
        "professional": "julia", "time": "10:00", "phone": "+55 21 98888-0002"})
    _, page, _ = browser.request("/console/agenda?day=2026-06-02")
    assert "Agendado: 10:00 Corte feminino (Júlia), 11:00 Escova (Júlia)" in _flash(page), \
        _flash(page)
    with session_scope(env.engine) as session:
        bia = session.exec(select(Contact).where(Contact.wa_id == "5521988880002")).one()
        rows = session.exec(select(Appointment).where(Appointment.contact_id == bia.id)
                            .order_by(Appointment.start_at)).all()
        assert len(rows) == 2 and rows[0].visit_id == rows[1].visit_id == rows[0].id
