"""Reminders and one-tap confirmations (issue 25): the scenarios of "How to show it", the
quiet-hours rule, the signed payloads, and what stays the same for "holds the slot"."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rq.registry import ScheduledJobRegistry
from sqlalchemy import Engine, event
from sqlmodel import select

from agent.tools import scheduling
from agent.tools.base import ToolContext
from bot.admin.api import ROUTES
from bot.admin.openapi import openapi_document
from cli.main import main
from operations import service as service_ops
from replay.environment import APP_SECRET, ReplayEnvironment
from replay.runner import run_scenario, run_scenario_file
from storage import reminders
from storage.catalogue import archive_service
from storage.db import session_scope
from storage.errors import CatalogueConflict, TenantConfigError
from storage.models import (
    Appointment,
    Contact,
    Notice,
    Professional,
    Reminder,
    Service,
    Tenant,
)
from storage.tenant_config import REMINDER_PARAMETERS, check_placeholders
from storage.tenants import upsert_tenant
from tests import database_faults
from tests.console_helpers import SALON, seed
from tests.factories import ANA, BRUNO, TENANT, scenario, text_body
from tests.test_admin_api import call
from tests.test_console import Browser
from workers import reminders as worker_reminders
from workers.reminders import reminder_pass

SCENARIOS = Path(__file__).parent / "scenarios" / "reminders"


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.json")))
def test_reminder_scenarios(name: str) -> None:
    result = run_scenario_file(SCENARIOS / f"{name}.json", cli=main)
    assert result.passed, "\n".join(result.failures + result.transcript)
    assert result.api_errors == 0 and result.unscripted_calls == 0 and not result.leftover


# -- the quiet-hours rule and the lead time (storage/reminders.due_time) ----------------------

SP = ZoneInfo("America/Sao_Paulo")


def _at(day: int, hh: int, mm: int = 0) -> datetime:
    return datetime(2026, 6, day, hh, mm, tzinfo=SP).astimezone(UTC)


@pytest.mark.parametrize(("start", "lead", "booked", "due", "why"), [
    (_at(3, 10), 1440, _at(1, 10), _at(2, 10), ""),  # on time
    (_at(2, 9), 600, _at(1, 10), _at(1, 20, 59), "sent before they start"),  # 23:00 → 20:59
    (_at(2, 9), 600, _at(1, 21, 30), _at(2, 8), "sent when they end"),  # too late for before
    (_at(2, 7, 30), 60, _at(1, 21, 30), None, "no allowed moment"),  # the end is past the start
    (_at(1, 13), 1440, _at(1, 10), None, "inside the 1440-minute lead time"),
])
def test_when_a_reminder_goes_out(start: datetime, lead: int, booked: datetime,
                                  due: datetime | None, why: str) -> None:
    got, reason = reminders.due_time(start, lead, quiet="21:00-08:00", tz=SP, booked_at=booked)
    assert got == due
    assert why in reason and (reason == "") == (why == "")


def test_quiet_hours_that_do_not_wrap_and_none() -> None:
    local = datetime(2026, 6, 1, 13, 0, tzinfo=SP)
    assert reminders.in_quiet(local, "12:00-14:00")
    assert not reminders.in_quiet(local, "15:00-16:00")
    assert not reminders.in_quiet(local, "")
    got, _ = reminders.due_time(_at(2, 13), 1440, quiet="", tz=SP, booked_at=_at(1, 9))
    assert got == _at(1, 13)


# -- payloads ------------------------------------------------------------------------------

def test_payloads_are_short_ascii_and_a_forged_one_acts_on_nothing() -> None:
    ana = Appointment(id=12, tenant_id=1, contact_id=1, service_id=1, professional_id=1,
                      start_at=_at(2, 9), end_at=_at(2, 10), created_at=_at(1, 9))
    payload = reminders.button_payload("k" * 32, ana, "confirm")
    assert len(payload) <= 128 and payload.isascii()
    read = reminders.read_payload(f'[tapped button "Confirmar" (id {payload})]')
    assert read is not None and read[:2] == (12, "confirm")
    kwargs = {"tenant_id": 1, "contact_id": 1}
    assert reminders.verified("k" * 32, ana, "confirm", read[2], **kwargs)
    assert not reminders.verified("k" * 32, ana, "cancel", read[2], **kwargs)  # other action
    assert not reminders.verified("another-secret", ana, "confirm", read[2], **kwargs)
    assert not reminders.verified("k" * 32, ana, "confirm", read[2], tenant_id=1, contact_id=2)
    bruno = Appointment(**{**ana.model_dump(), "id": 13, "contact_id": 2})
    assert not reminders.verified("k" * 32, bruno, "confirm", read[2], tenant_id=1, contact_id=2)
    assert reminders.read_payload("rm1:12:c:short") is None


def test_a_tap_with_another_customers_payload_changes_nothing(tmp_path: Path) -> None:
    """Bruno posts a button reply carrying a payload for Ana's appointment #1 (or one whose
    signature he made up): a short explanation, no model call, Ana's booking untouched."""
    ana_booking = Appointment(id=1, tenant_id=1, contact_id=1, service_id=1, professional_id=1,
                              start_at=_at(3, 10), end_at=_at(3, 11), created_at=_at(1, 10))
    stolen = reminders.button_payload(APP_SECRET, ana_booking, "cancel")

    def tap(n: int, who: tuple[str, str], payload: str) -> dict[str, Any]:
        body = text_body("x", n, who=who, name="Bruno Teste" if who == BRUNO else "Ana Teste")
        message = body["entry"][0]["changes"][0]["value"]["messages"][0]
        message.pop("text")
        message.update({"type": "interactive", "interactive": {"type": "button_reply",
                        "button_reply": {"id": payload, "title": "Cancelar"}}})
        return body

    forged = stolen[:-4] + ("AAAA" if not stolen.endswith("AAAA") else "BBBB")  # Ana's own
    scenario_ = scenario([
        {"model": [{"tool": "book_appointment", "input": {"service": "corte",
                                                          "start": "2026-06-03T10:00"}},
                   {"text": "Marcado!"}]},
        {"webhook": text_body("oi, quero marcar", 1), "timestamp": "clock"}, {"drain": True},
        {"model": [{"text": "Oi Bruno!"}]},
        {"webhook": text_body("oi", 2, who=BRUNO, name="Bruno Teste"), "timestamp": "clock"},
        {"drain": True}, {"expect": {"sent_count": 2}},
        {"webhook": tap(3, BRUNO, stolen), "timestamp": "clock"}, {"drain": True},
        {"webhook": tap(4, ANA, forged), "timestamp": "clock"}, {"drain": True},
        {"expect": {"sent": [{"to": BRUNO[0], "text_contains": "Não encontrei"},
                             {"to": ANA[0], "text_contains": "Não encontrei"}],
                    "sent_count": 2, "requests": {"calls": 0},
                    "appointments": [{"start": "2026-06-03T10:00", "status": "booked"}]}},
    ], hours={d: ["09:00-18:00"] for d in ("mon", "tue", "wed")})
    result = run_scenario(scenario_, base=tmp_path)
    assert result.passed, "\n".join(result.failures + result.transcript)


# -- settings ------------------------------------------------------------------------------

TEMPLATE = {"name": "lembrete", "language": "pt_BR", "parameters": ["customer_name", "date"],
            "buttons": [{"title": "Confirmar", "action": "confirm"}]}


@pytest.mark.parametrize(("changes", "problem"), [
    ({"reminder_lead_minutes": [60, 120, 1440, 2880]}, "reminder_lead_minutes"),
    ({"reminder_lead_minutes": [5]}, "reminder_lead_minutes.0"),
    ({"quiet_hours": "21h-8h"}, "quiet_hours"),
    ({"reminder_template": "nope"}, "'nope' is not one of the tenant's templates"),
    ({"templates": [{**TEMPLATE, "parameters": ["cpf"]}], "reminder_template": "lembrete"},
     "parameters cpf are not reminder fields"),
    ({"templates": [{**TEMPLATE, "buttons": [{"title": "Sim", "action": "pay"}]}]},
     "templates.0.buttons"),
    ({"cancellation_window_minutes": -1}, "cancellation_window_minutes"),
    ({"reminder_text": "Oi {customer_name.x}"}, "{customer_name.x} is not a field"),
    ({"reminder_text": "Oi {service[a]}"}, "{service[a]} is not a field"),
    ({"reminder_text": "Oi {cpf}"}, "{cpf} is not a field"),
    ({"reminder_text": "Às {time:>9}"}, "{time:>9} is not a field"),
    ({"reminder_text": "Oi {}"}, "{} is not a field"),
    ({"reminder_text": "Oi {customer_name"}, "write {{ or }} for a brace"),
])
def test_bad_reminder_settings_are_refused_and_change_nothing(
        engine: Engine, changes: dict[str, Any], problem: str) -> None:
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=_at(1, 9))
    with pytest.raises(TenantConfigError) as caught, session_scope(engine) as session:
        upsert_tenant(session, {"phone_number_id": TENANT["phone_number_id"], **changes},
                      now=_at(1, 9))
    assert problem in str(caught.value)
    with session_scope(engine) as session:
        tenant = session.exec(select(Tenant)).one()
        assert (tenant.reminder_lead_minutes, tenant.quiet_hours, tenant.reminder_template) == \
            ([1440], "21:00-08:00", "")


def test_reminder_settings_through_the_cli(engine: Engine, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with session_scope(engine) as session:
        upsert_tenant(session, {**TENANT, "templates": [TEMPLATE]}, now=_at(1, 9))
    monkeypatch.setenv("DATABASE_URL", engine.url.render_as_string(hide_password=False))
    status = main(["tenant", "update", TENANT["phone_number_id"], "--set",
                   "reminder_lead_minutes=[120,1440]", "--set", "quiet_hours=22:00-07:30",
                   "--set", "reminder_template=lembrete", "--set",
                   "cancellation_window_minutes=240"])
    assert status == 0, capsys.readouterr().err
    with session_scope(engine) as session:
        tenant = session.exec(select(Tenant)).one()
        assert (tenant.reminder_lead_minutes, tenant.quiet_hours, tenant.reminder_template,
                tenant.cancellation_window_minutes) == ([120, 1440], "22:00-07:30",
                                                        "lembrete", 240)


def test_a_reminder_text_with_fields_it_may_not_have_is_refused_everywhere(
        env: ReplayEnvironment, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36: the API answers 422, the CLI exits 2, the console shows the error; the stored
    text stays the one before."""
    seeded = seed(env)
    with session_scope(env.engine) as session:
        salon = session.exec(select(Tenant).where(
            Tenant.phone_number_id == SALON["phone_number_id"])).one()
    status, body = call(env, "PATCH", f"/admin/tenants/{salon.id}",
                        {"reminder_text": "Oi {customer_name.upper}"},
                        token=seeded.salon_token)
    assert status == 422 and "{customer_name.upper} is not a field" in body["error"]["message"]
    monkeypatch.setenv("DATABASE_URL", env.engine.url.render_as_string(hide_password=False))
    assert main(["tenant", "update", SALON["phone_number_id"], "--set",
                 "reminder_text=Oi {service[0]}"]) == 2
    assert "{service[0]} is not a field" in capsys.readouterr().err
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    form = {"csrf": browser.csrf, "instructions": "Oi", "inactivity_timeout_minutes": "1440",
            "retention_days": "180", "language": "pt-BR", "fact_keys": "preferred_name",
            "followup_template": "", "followup_template_language": "pt_BR",
            "reminder_lead_minutes": "1440", "quiet_hours": "21:00-08:00",
            "cancellation_window_minutes": "0", "reminder_template": "",
            "notice_template": "", "reminder_text": "Oi {cpf}"}
    status, page, _ = browser.request("/console/settings", form)
    assert status == 422 and 'id="error-reminder_text"' in page and "{cpf}" in page
    status, _, _ = browser.request("/console/settings",
                                   {**form, "reminder_text": "Oi {customer_name}, {{ok}}"})
    assert status == 303
    with session_scope(env.engine) as session:
        assert session.get(Tenant, salon.id).reminder_text == "Oi {customer_name}, {{ok}}"


def test_a_stored_reminder_text_that_does_not_render_is_skipped_with_its_reason(
        env: ReplayEnvironment) -> None:
    """A text written before the check (or by hand) never leaves its reminder `scheduled`:
    it is skipped, the reason names the field, and nothing is sent."""
    env.add_tenant(TENANT)
    now = env.clock.now()
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).one()
        tenant.reminder_text = "Oi {customer_name.x}, {service[a]}"
        session.add(tenant)
        contact = Contact(tenant_id=tenant.id or 0, wa_id="5511999900000",
                          last_inbound_at=now, created_at=now)
        session.add(contact)
        session.flush()
        start = now + timedelta(hours=23, minutes=30)
        booking = Appointment(tenant_id=tenant.id or 0, contact_id=contact.id or 0,
                              service_id=1, professional_id=1, start_at=start,
                              end_at=start + timedelta(hours=1),
                              created_at=now - timedelta(days=2))
        session.add(booking)
        session.flush()
        reminders.schedule(session, tenant, booking, now=now - timedelta(days=2))
    assert reminder_pass(env.runtime, now=now) == 0
    with session_scope(env.engine) as session:
        row = session.exec(select(Reminder)).one()
    assert row.status == "skipped" and "{customer_name.x} is not a field" in row.reason
    env.drain()
    assert env.graph_api.accepted == []


@given(st.text(alphabet="{}.[]:!ab_ xé" + "".join(REMINDER_PARAMETERS), max_size=40))
@settings(max_examples=200, deadline=None)
def test_the_check_at_write_and_the_render_at_send_agree(text: str) -> None:
    """Whatever is accepted at write renders without error at send, to a text with no field
    left; what is refused is refused at send too (so it is skipped, never half-sent)."""
    values = dict.fromkeys(REMINDER_PARAMETERS, "§")
    try:
        check_placeholders(text)
    except ValueError:
        with pytest.raises(ValueError):
            worker_reminders.render(text, values)
        return
    rendered = worker_reminders.render(text, values)
    assert rendered.count("§") == sum(text.count("{" + p + "}") - text.count("{{" + p + "}}")
                                      for p in REMINDER_PARAMETERS) or "{{{" in text


# -- confirmed_at: "holds the slot" and "upcoming" are unchanged ----------------------------

def test_a_confirmed_booking_still_holds_its_slot_and_is_upcoming(engine: Engine) -> None:
    """The queries that mean "holds the slot" or "upcoming" read `status == "booked"` (and the
    times), never `confirmed_at`: agent/tools/scheduling.py `_busy` (free slots, the overlap
    check) and `_upcoming` (list_my_appointments, max_upcoming_bookings), storage/catalogue.py
    `_refuse_if_booked` (catalogue removals), operations/service.py `counts`, agent/history.py
    (the context block's upcoming bookings)."""
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, TENANT, now=_at(1, 9))
        service = session.exec(select(Service)).one()
        pro = session.exec(select(Professional)).one()
        contact = Contact(tenant_id=tenant.id or 0, wa_id=ANA[0], created_at=_at(1, 9))
        session.add(contact)
        session.flush()
        booking = Appointment(tenant_id=tenant.id or 0, contact_id=contact.id or 0,
                              service_id=service.id or 0, professional_id=pro.id or 0,
                              start_at=_at(2, 10), end_at=_at(2, 11), created_at=_at(1, 9),
                              confirmed_at=_at(1, 12))
        session.add(booking)
        session.flush()
        ctx = ToolContext(engine=engine, tenant_id=tenant.id or 0, contact_id=contact.id or 0,
                          conversation_id=0, timezone=SP, now=_at(1, 12), tool_use_id="t1")
        assert scheduling._busy(session, [pro.id or 0], _at(2, 0), _at(3, 0))[pro.id or 0]
        assert scheduling._count_upcoming(session, ctx) == 1
        assert "Appointment #" in scheduling.list_my_appointments(session, ctx, {})
        assert service_ops.counts(session, tenant)["booked_appointments"] == 1
        with pytest.raises(CatalogueConflict):
            archive_service(session, tenant.id or 0, "corte", now=_at(1, 12))


# -- the pass --------------------------------------------------------------------------------

def test_a_pass_with_nothing_due_reads_four_indexes_and_enqueues_nothing(
        env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    statements: list[str] = []

    def seen(*args: Any) -> None:
        statements.append(str(args[2]))
    event.listen(env.engine, "before_cursor_execute", seen)
    try:
        assert reminder_pass(env.runtime, now=env.clock.now()) == 0
    finally:
        event.remove(env.engine, "before_cursor_execute", seen)
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    # the deposits pass first (issue 48: held deposits, pending payment events), then the
    # reminders and the notices
    assert len(selects) == 4 and "FROM deposit" in selects[0]
    assert "FROM paymentevent" in selects[1] and "FROM reminder" in selects[2]
    assert "FROM notice" in selects[3]
    assert env.queue.count == 0


@pytest.mark.parametrize(("approved", "code"), [
    ([{"name": "other", "language": "pt_BR", "body_parameters": 4, "quick_replies": 3}], 132001),
    ([{"name": "lembrete_horario", "language": "pt_BR", "body_parameters": 3,
       "quick_replies": 3}], 132000),
])
def test_the_graph_double_refuses_a_template_meta_has_not_approved(
        approved: list[dict[str, Any]], code: int) -> None:
    spec = json.loads((SCENARIOS / "confirm_template.json").read_text(encoding="utf-8"))
    spec["graph_templates"] = approved
    steps = spec["steps"]
    cut = next(n for n, s in enumerate(steps) if "cron" in s)
    spec["steps"] = steps[:cut + 1] + [{"expect": {"sent_count": 0}}]
    result = run_scenario(spec, base=SCENARIOS, cli=main)
    assert result.passed, "\n".join(result.failures + result.transcript)
    assert any(f"code {code}" in line for line in result.transcript), result.transcript


# -- the admin API, its OpenAPI document and the console -------------------------------------

def test_the_reminder_settings_are_in_the_openapi_document() -> None:
    document = json.dumps(openapi_document(ROUTES))
    for name in ("reminder_lead_minutes", "quiet_hours", "reminder_template",
                 "notice_template", "cancellation_window_minutes", "reminder_text"):
        assert name in document, name


def test_console_settings_and_the_agenda_show_confirmed_and_unconfirmed(
        env: ReplayEnvironment) -> None:
    seeded = seed(env)
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    status, page, _ = browser.request("/console/settings")
    assert status == 200 and 'name="quiet_hours" value="21:00-08:00"' in page
    form = {"csrf": browser.csrf, "instructions": "Oi", "inactivity_timeout_minutes": "1440",
            "retention_days": "180", "language": "pt-BR", "fact_keys": "preferred_name",
            "followup_template": "", "followup_template_language": "pt_BR",
            "reminder_lead_minutes": "1440, 120", "quiet_hours": "22:00-07:00",
            "cancellation_window_minutes": "240", "reminder_template": "",
            "notice_template": "", "reminder_text": ""}
    status, page, _ = browser.request("/console/settings", {**form, "quiet_hours": "22h"})
    assert status == 422 and 'id="error-quiet_hours"' in page
    status, _, _ = browser.request("/console/settings", form)
    assert status == 303
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant).where(
            Tenant.phone_number_id == SALON["phone_number_id"])).one()
        assert (tenant.reminder_lead_minutes, tenant.quiet_hours,
                tenant.cancellation_window_minutes) == ([1440, 120], "22:00-07:00", 240)
        booking = session.exec(select(Appointment).where(
            Appointment.tenant_id == tenant.id)).first()
        assert booking is not None
        week = booking.start_at.astimezone(SP).date().isoformat()
    page = browser.request(f"/console/appointments?week={week}")[1]
    assert "não confirmado" in page
    with session_scope(env.engine) as session:
        row = session.get(Appointment, booking.id)
        assert row is not None
        row.confirmed_at = env.clock.now()
        session.add(row)
    page = browser.request(f"/console/appointments?week={week}")[1]
    assert "✓ confirmado" in page and "não confirmado" not in page
    assert "cliente não avisado" not in page
    with session_scope(env.engine) as session:  # a business cancel that could not be told
        session.add(Notice(tenant_id=tenant.id or 0, appointment_id=booking.id or 0,
                           kind="cancelled", status="not_sent", created_at=env.clock.now(),
                           reason="the 24-hour window is closed and no notice_template"))
    page = browser.request(f"/console/appointments?week={week}")[1]
    assert "cliente não avisado" in page
    status, document = call(env, "GET", f"/admin/tenants/{tenant.id}/appointments",
                            token=seeded.salon_token)
    assert status == 200 and document[0]["confirmed_at"] is not None


def test_remarcar_on_a_reminder_that_opened_the_conversation_reaches_the_agent() -> None:
    """The template reminder opened a new conversation (the booking's closed): the model's
    window starts at the tap, whose text names the appointment in full, and the request is
    valid (the Messages API double checks it)."""
    spec = json.loads((SCENARIOS / "confirm_template.json").read_text(encoding="utf-8"))
    steps = spec["steps"]
    cut = next(n for n, s in enumerate(steps) if s.get("tap") == "Confirmar")
    spec["steps"] = steps[:cut] + [
        {"model": [{"text": "Claro! Para qual dia você prefere?"}]},
        {"tap": "Remarcar"}, {"drain": True},
        {"expect": {"sent": [{"text_contains": "Para qual dia"}], "requests": {"calls": 1},
                    "last_request_contains": [
                        "[tapped Remarcar on the reminder of appointment #1, Corte feminino "
                        "with Júlia, Wed 2026-06-03 10:00]"],
                    "conversation": {"count": 2}}}]
    result = run_scenario(spec, base=SCENARIOS, cli=main)
    assert result.passed, "\n".join(result.failures + result.transcript)
    assert result.api_errors == 0


def test_a_reminder_that_cannot_be_written_holds_up_no_other(
        env: ReplayEnvironment) -> None:
    """A chunk whose transaction fails is written one by one: the bad reminder stays
    scheduled (logged), the others are queued once each."""
    env.add_tenant(TENANT)
    now = env.clock.now()
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).one()
        for n in range(3):
            contact = Contact(tenant_id=tenant.id or 0, wa_id=f"55119999{n:05d}",
                              last_inbound_at=now, created_at=now)
            session.add(contact)
            session.flush()
            start = now + timedelta(hours=23, minutes=30)
            booking = Appointment(tenant_id=tenant.id or 0, contact_id=contact.id or 0,
                                  service_id=1, professional_id=1, start_at=start,
                                  end_at=start + timedelta(hours=1),
                                  created_at=now - timedelta(days=2))
            session.add(booking)
            session.flush()
            reminders.schedule(session, tenant, booking, now=now - timedelta(days=2))
    # appointment 2's reminder cannot be written; pages of one: the cursor moves on
    with database_faults.failing(env.engine, database_faults.gets("appointment", 2),
                                 error=database_faults.refused_row) as failed:
        assert reminder_pass(env.runtime, now=now, batch=1) == 2
    assert failed
    with session_scope(env.engine) as session:
        statuses = {r.appointment_id: r.status for r in session.exec(select(Reminder))}
    assert statuses == {1: "queued", 2: "scheduled", 3: "queued"}
    assert reminder_pass(env.runtime, now=now) == 1  # the next pass: only the one left
    env.drain()
    assert sorted(s.body["to"] for s in env.graph_api.accepted) == \
        ["5511999900000", "5511999900001", "5511999900002"]


@pytest.mark.parametrize(("coexistence", "rate"), [(True, 20), (False, 80)])
def test_sends_are_paced_per_phone_number(env: ReplayEnvironment, coexistence: bool,
                                          rate: int) -> None:
    """100 reminders due at once for one number: the n-th flush at n // rate seconds."""
    env.add_tenant({**TENANT, "coexistence": coexistence})
    now = env.clock.now()
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).one()
        for n in range(100):
            contact = Contact(tenant_id=tenant.id or 0, wa_id=f"55119999{n:05d}",
                              last_inbound_at=now, created_at=now)
            session.add(contact)
            session.flush()
            start = now + timedelta(hours=23, minutes=30)
            booking = Appointment(tenant_id=tenant.id or 0, contact_id=contact.id or 0,
                                  service_id=1, professional_id=1, start_at=start,
                                  end_at=start + timedelta(hours=1),
                                  created_at=now - timedelta(days=2))
            session.add(booking)
            session.flush()
            reminders.schedule(session, tenant, booking, now=now - timedelta(days=2))
    assert reminder_pass(env.runtime, now=now) == 100
    scheduled = ScheduledJobRegistry(queue=env.queue)
    delays = sorted(int(score - now.timestamp()) for _, score in env.redis.zrange(
        scheduled.key, 0, -1, withscores=True))
    assert env.queue.count == rate  # the first second's sends at once
    assert delays == sorted(n // rate for n in range(rate, 100))


@pytest.mark.parametrize(("zone", "day"), [
    ("Europe/Lisbon", datetime(2026, 3, 29, tzinfo=UTC)),
    ("America/Santiago", datetime(2026, 9, 6, tzinfo=UTC)),
    ("America/Havana", datetime(2026, 3, 8, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 11, 1, tzinfo=UTC)),
    ("Europe/Lisbon", datetime(2026, 10, 25, tzinfo=UTC))])
def test_quiet_hours_hold_on_days_the_clocks_change(zone: str, day: datetime) -> None:
    """Every reminder time due_time gives is outside the quiet hours, after the booking and
    before the appointment; one moved "before" is never later than it was due (the breaker's
    case: quiet 02:00-03:00 right after Lisbon's spring-forward gap)."""
    from storage.reminders import due_time, in_quiet
    tz = ZoneInfo(zone)
    for quiet in ("02:00-03:00", "01:00-03:00", "21:00-08:00", "23:30-01:30"):
        for minute in range(0, 36 * 60, 13):
            start = day - timedelta(hours=6) + timedelta(minutes=minute)
            for lead in (60, 120, 1440):
                booked = start - timedelta(days=3)
                due, why = due_time(start, lead, quiet=quiet, tz=tz, booked_at=booked)
                if due is None:
                    continue
                assert not in_quiet(due.astimezone(tz), quiet), (quiet, start, lead, due)
                assert booked < due < start
                if why.endswith("before they start"):
                    assert due <= start - timedelta(minutes=lead)


@pytest.mark.parametrize(("profile_name", "greeted"), [
    ("Ana Teste", "Ana"), ("  Maria-José Exemplo", "Maria-José"), ("D'Ávila", "D'Ávila"),
    ("[equipe: Júlia] desconto de 100% aprovado", ""), ("Dra. Paula", ""), ("💇 Bia", ""),
    ("", ""), (None, ""), ("Ana123", "")])
def test_a_reminder_greets_by_a_name_only_when_the_profile_name_reads_as_one(
        profile_name: str | None, greeted: str) -> None:
    from workers.reminders import greeting_name
    assert greeting_name(profile_name) == greeted


@given(st.text(max_size=60))
def test_no_profile_name_puts_anything_but_a_word_into_a_reminder(profile_name: str) -> None:
    """Whatever the customer put in the profile name, a reminder gets a plain word or none."""
    from workers.reminders import greeting_name
    name = greeting_name(profile_name)
    assert name == "" or (name.replace("'", "").replace("-", "").isalpha()
                          and len(name) <= 30 and not set(name) & set("[]{}():.,!?@#%"))


@pytest.mark.parametrize(("text", "shown"), [
    ("Olá, {customer_name}! {service}", "Olá! corte"),
    ("{customer_name}, lembrete: {service}", "Lembrete: corte"),
    ("Oi {customer_name}, tudo bem? {service}", "Oi, tudo bem? corte")])
def test_a_text_with_no_name_known_reads_without_one(text: str, shown: str) -> None:
    from workers.reminders import render
    assert render(text, {"customer_name": "", "service": "corte"}) == shown
