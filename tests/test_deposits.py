"""Deposits by Pix (issue 48): the rule, the held visit, every confirmation's outcome, the
release, the race between a payment and the release on PostgreSQL and SQLite, the Mercado
Pago signature, and the order messages as Meta documents them."""

import html
import io
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import structlog
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine
from sqlmodel import select

from agent.catalogue import catalogue_text
from agent.catalogue import load as catalogue_load
from agent.history import history_lines, load
from agent.tools.base import ToolContext
from agent.tools.registry import execute_tool
from agent.tools.replies import sent_reply
from bot.payments import MAX_PAYMENT_BODY
from cli.main import main
from core.logs import configure_logging
from operations.agenda import mark_paid
from operations.service import cancel_appointment
from payments.mercadopago import MercadoPago, signature, verify_signature
from payments.provider import PaymentError
from replay.environment import MERCADOPAGO_SECRET, MERCADOPAGO_TOKEN, ReplayEnvironment
from replay.errors import GraphRefusal
from replay.graph_api import validate_interactive, validate_order_button
from replay.runner import run_scenario_file
from storage import deposits, webhooks
from storage.catalogue import change_service
from storage.db import create_schema, make_engine, session_scope
from storage.models import (
    Appointment,
    Contact,
    Conversation,
    Deposit,
    Notice,
    PaymentEvent,
    Reminder,
    Service,
    Tenant,
    WebhookEvent,
)
from storage.tenants import upsert_tenant
from tests.console_helpers import seed
from tests.factories import TENANT
from tests.test_admin_api import call
from tests.test_console import Browser
from whatsapp.orders import order_details, order_details_button, order_problems, order_status
from workers import deposits as deposit_worker

SP = ZoneInfo("America/Sao_Paulo")
NOW = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)  # Mon 10:00 in São Paulo
SALON: dict[str, Any] = {
    **TENANT,
    "services": [
        {"code": "corte", "name": "Corte feminino", "duration_minutes": 60, "price_cents": 8000},
        {"code": "coloracao", "name": "Coloração", "duration_minutes": 60,
         "price_cents": 20000, "deposit_percent": 30}],
    "professionals": [{"code": "julia", "name": "Júlia", "services": ["corte", "coloracao"]}],
    "pix_key": "12345678000199", "pix_key_type": "CNPJ",
}


# -- the rule ----------------------------------------------------------------------------------

def _tenant(**keys: Any) -> Tenant:
    return Tenant(phone_number_id="1", name="S", created_at=NOW, **keys)


def _service(**keys: Any) -> Service:
    return Service(tenant_id=1, code="s", name="S", duration_minutes=60, **keys)


def test_a_services_own_rule_wins_over_the_tenants() -> None:
    tenant = _tenant(deposit_cents=5000)
    assert deposits.visit_deposit(tenant, [_service(price_cents=20000, deposit_percent=30)]) \
        == 6000
    assert deposits.visit_deposit(tenant, [_service(price_cents=20000)]) == 5000
    assert deposits.visit_deposit(tenant, [_service(deposit_cents=0)]) == 0
    assert deposits.visit_deposit(_tenant(deposit_percent=50), [_service(price_cents=999)]) \
        == 500  # half up to the cent
    assert deposits.visit_deposit(_tenant(deposit_percent=50), [_service()]) == 0  # no price


def test_the_tenants_amount_is_asked_once_per_visit() -> None:
    tenant = _tenant(deposit_cents=3000)
    assert deposits.visit_deposit(tenant, [_service(price_cents=1), _service()]) == 3000


@given(price=st.integers(0, 100_000_000), percent=st.integers(0, 100))
def test_a_percentage_deposit_is_whole_cents_between_zero_and_the_price(price: int,
                                                                        percent: int) -> None:
    cents = deposits.visit_deposit(_tenant(), [_service(price_cents=price,
                                                        deposit_percent=percent)])
    assert isinstance(cents, int) and 0 <= cents <= price
    assert abs(cents * 100 - price * percent) <= 50


# -- the held booking and its lifecycle ---------------------------------------------------------

def _setup(engine: Engine, contacts: int = 1, **keys: Any) -> list[tuple[int, int]]:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, {**SALON, **keys}, now=NOW)
        webhooks.create_endpoint(session, tenant.id, url="https://example.com/hook",
                                 events=["appointment.booked", "payment.received"], now=NOW)
        pairs = []
        for n in range(contacts):
            contact = Contact(tenant_id=tenant.id, wa_id=f"55119999900{n:02d}", created_at=NOW,
                              last_inbound_at=NOW)
            session.add(contact)
            session.flush()
            conversation = Conversation(tenant_id=tenant.id, contact_id=contact.id,
                                        last_activity_at=NOW, due_at=NOW, opened_at=NOW)
            session.add(conversation)
            session.flush()
            pairs.append((contact.id, conversation.id))
    return pairs


def _book(engine: Engine, service: str = "coloracao", start: str = "2026-06-02T14:00",
          pair: tuple[int, int] = (1, 1), tool_use_id: str = "toolu_1") -> tuple[str, bool]:
    ctx = ToolContext(engine=engine, tenant_id=1, contact_id=pair[0], conversation_id=pair[1],
                      timezone=SP, now=NOW, tool_use_id=tool_use_id)
    return execute_tool(ctx, "book_appointment", {"service": service, "start": start})


def _deposit(engine: Engine) -> Deposit:
    with session_scope(engine) as session:
        row = session.exec(select(Deposit)).one()
        session.expunge(row)
        return row


def _pay(engine: Engine, reference: str, cents: int, event_id: str = "ev1",
         at: datetime = NOW) -> str | None:
    with session_scope(engine) as session:
        event = deposits.record_event(session, provider="mercadopago", event_id=event_id,
                                      reference=reference, amount_cents=cents, now=at)
        return None if event is None else deposits.confirm(session, event, now=at)


def _events(engine: Engine) -> list[str]:
    with session_scope(engine) as session:
        return sorted(e.type for e in session.exec(select(WebhookEvent)).all())


def test_a_booking_that_needs_a_deposit_is_held_blocks_the_slot_and_has_no_reminder(
        engine: Engine) -> None:
    pairs = _setup(engine, contacts=2)
    text, is_error = _book(engine, pair=pairs[0])
    assert not is_error
    assert text.startswith("Held until 10:30 for a R$ 60,00 Pix deposit (the code is sent")
    deposit = _deposit(engine)
    assert (deposit.status, deposit.amount_cents, deposit.currency) == ("held", 6000, "BRL")
    assert len(deposit.reference) <= 35
    with session_scope(engine) as session:
        assert session.exec(select(Reminder)).all() == []
    assert _events(engine) == []  # appointment.booked waits for the payment
    clash, is_error = _book(engine, pair=pairs[1], tool_use_id="toolu_2")
    assert is_error and "no longer free" in clash
    plain, is_error = _book(engine, service="corte", start="2026-06-02T16:00",
                            pair=pairs[1], tool_use_id="toolu_3")
    assert not is_error and plain.startswith("Booked.")


def test_paid_books_the_visit_schedules_reminders_fires_webhooks_and_tells_once(
        engine: Engine) -> None:
    _setup(engine)
    _book(engine)
    deposit = _deposit(engine)
    assert _pay(engine, deposit.reference, 6000) == "booked"
    assert _pay(engine, deposit.reference, 6000, event_id="ev1") is None  # replayed event
    assert _pay(engine, deposit.reference, 6000, event_id="ev2") == "already_paid"
    paid = _deposit(engine)
    assert (paid.status, paid.paid_cents, paid.paid_by) == ("paid", 6000, "provider")
    with session_scope(engine) as session:
        assert len(session.exec(select(Reminder)).all()) == 1
        assert [n.kind for n in session.exec(select(Notice)).all()] == ["deposit_paid"]
    assert _events(engine) == ["appointment.booked", "payment.received"]


@pytest.mark.parametrize(("reference", "cents", "outcome"), [
    ("wa1-1-00000000", 6000, "unknown_reference"), (None, 5999, "wrong_amount"),
    (None, 60000, "wrong_amount")])
def test_an_unknown_reference_or_a_wrong_amount_is_recorded_and_books_nothing(
        engine: Engine, reference: str | None, cents: int, outcome: str) -> None:
    _setup(engine)
    _book(engine)
    deposit = _deposit(engine)
    assert _pay(engine, reference or deposit.reference, cents) == outcome
    assert _deposit(engine).status == "held"
    with session_scope(engine) as session:
        assert session.exec(select(Reminder)).all() == []
        assert session.exec(select(Notice)).all() == []
    assert _events(engine) == []


def test_a_payment_the_provider_will_not_report_is_for_the_deposits_tenant_to_check(
        engine: Engine) -> None:
    _setup(engine)
    _book(engine)
    with session_scope(engine) as session:
        held = session.exec(select(Deposit)).one()
        held.charge_id = "1300000009"
        session.add(held)
        event = deposits.record_event(session, provider="mercadopago", event_id="e404",
                                      charge_id="1300000009", now=NOW)
        assert event is not None
        assert deposits.fetch_failed(session, event) == "fetch_failed"
        (check,) = deposits.to_check(session, held.tenant_id, now=NOW, limit=10)
    assert check["outcome"] == "fetch_failed" and _deposit(engine).status == "held"


def test_the_creation_notice_of_every_pix_charge_is_no_payment_for_staff_to_check(
        engine: Engine) -> None:
    # Mercado Pago notifies payment.created (status pending) for every charge it makes
    _setup(engine)
    _book(engine)
    deposit = _deposit(engine)
    with session_scope(engine) as session:
        event = deposits.record_event(session, provider="mercadopago", event_id="created",
                                      reference=deposit.reference, amount_cents=6000, now=NOW)
        assert event is not None
        assert deposits.confirm(session, event, now=NOW, paid=False) == "not_paid"
    assert _pay(engine, deposit.reference, 5000, event_id="short") == "wrong_amount"
    with session_scope(engine) as session:
        listed = deposits.to_check(session, 1, now=NOW, limit=10)
    assert [e["outcome"] for e in listed] == ["wrong_amount"]


def test_not_paid_by_the_holds_end_is_released_and_told_once(engine: Engine) -> None:
    _setup(engine)
    _book(engine)
    with session_scope(engine) as session:
        assert deposits.release_due(session, now=NOW + timedelta(minutes=29)) == []
    with session_scope(engine) as session:
        assert len(deposits.release_due(session, now=NOW + timedelta(minutes=30))) == 1
    with session_scope(engine) as session:
        assert deposits.release_due(session, now=NOW + timedelta(hours=1)) == []
        assert {a.status for a in session.exec(select(Appointment)).all()} == {"cancelled"}
        assert [n.kind for n in session.exec(select(Notice)).all()] == ["deposit_released"]
    assert _deposit(engine).status == "released"
    again, is_error = _book(engine, tool_use_id="toolu_2")  # the slot is free again
    assert not is_error and again.startswith("Held")


def test_paid_after_the_release_is_recorded_told_and_alerts_staff(engine: Engine) -> None:
    _setup(engine)
    _book(engine)
    later = NOW + timedelta(minutes=45)
    with session_scope(engine) as session:
        deposits.release_due(session, now=later)
    assert _pay(engine, _deposit(engine).reference, 6000, at=later) == "late"
    assert _deposit(engine).status == "late_paid"
    with session_scope(engine) as session:
        assert {a.status for a in session.exec(select(Appointment)).all()} == {"cancelled"}
        assert [n.kind for n in session.exec(select(Notice).order_by(Notice.id)).all()] == [
            "deposit_released", "deposit_late"]
        event = session.exec(select(WebhookEvent)).one()
        assert event.type == "payment.received" and event.data["late"] is True


def _race(engine: Engine, reference: str, event_id: str, at: datetime) -> None:
    """A payment and the release pass, started together."""
    barrier = threading.Barrier(2)

    def pay() -> None:
        barrier.wait()
        _pay(engine, reference, 6000, event_id=event_id, at=at)

    def release() -> None:
        barrier.wait()
        with session_scope(engine) as session:
            deposits.release_due(session, now=at)

    threads = [threading.Thread(target=pay), threading.Thread(target=release)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_a_payment_racing_the_release_either_books_or_is_late_never_both(
        engine: Engine) -> None:
    """Both lock the deposit (FOR UPDATE; SKIP LOCKED for the release) on PostgreSQL; SQLite's
    transactions are serial. Whoever wins, the visit and the deposit agree."""
    for round_ in range(4):
        pairs = _setup(engine) if round_ == 0 else [(1, 1)]
        _book(engine, start=f"2026-06-02T1{round_ + 3}:00", pair=pairs[0],
              tool_use_id=f"toolu_r{round_}")
        with session_scope(engine) as session:
            deposit = session.exec(select(Deposit).where(Deposit.status == "held")).one()
            reference, visit_id = deposit.reference, deposit.visit_id
        _race(engine, reference, f"race{round_}", NOW + timedelta(minutes=31))
        with session_scope(engine) as session:
            deposit = session.exec(select(Deposit).where(Deposit.visit_id == visit_id)).one()
            status = {a.status for a in session.exec(select(Appointment).where(
                Appointment.visit_id == visit_id)).all()}
        assert (deposit.status, status) in ((("paid", {"booked"})),
                                            ("late_paid", {"cancelled"}))


# -- the provider's signature ---------------------------------------------------------------

def test_a_mercado_pago_signature_checks_the_data_id_request_id_and_age() -> None:
    header = signature("s3cret", "123456", "req-1", "1780318830")
    assert verify_signature("s3cret", header, "req-1", "123456", now=1780318830)
    assert not verify_signature("s3cret", header, "req-1", "123457", now=1780318830)
    assert not verify_signature("s3cret", header, "req-2", "123456", now=1780318830)
    assert not verify_signature("other", header, "req-1", "123456", now=1780318830)
    assert not verify_signature("s3cret", header, "req-1", "123456", now=1780318830 + 301)
    assert not verify_signature("s3cret", None, "req-1", "123456")
    assert not verify_signature("s3cret", "ts=1,v1=", "req-1", "123456")


@given(st.text(max_size=80))
@example("ts=\u00b2,v1=00")  # a Unicode digit: str.isdigit() is True, int() raises
def test_any_malformed_signature_header_is_refused_without_raising(header: str) -> None:
    assert not verify_signature("s3cret", header, "req-1", "123456", now=1780318830)


# -- the order messages -----------------------------------------------------------------------

def _details(**keys: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"reference": "wa1-7-abcdef12", "amount_cents": 6000,
                              "item": "Sinal #7", "body": "Pague o sinal", "code": "000201…",
                              "merchant_name": "Salão Exemplo", "key": "12345678000199",
                              "key_type": "CNPJ", **keys}
    return order_details(**values)


def test_order_messages_pass_the_graph_doubles_check() -> None:
    details = _details()
    params = details["action"]["parameters"]
    assert params["total_amount"] == {"value": 6000, "offset": 100}
    assert params["payment_settings"][0]["type"] == "pix_dynamic_code"
    validate_interactive(details)
    validate_interactive(order_status(reference="wa1-7-abcdef12", status="completed",
                                      body="Sinal recebido"))


@pytest.mark.parametrize(("path", "value", "problem"), [
    (("action", "name"), "pay", "review_and_pay"),
    (("action", "parameters", "payment_type"), "us", "payment_type"),
    (("action", "parameters", "total_amount", "value"), 5000, "subtotal"),
    (("action", "parameters", "total_amount", "offset"), 1, "offset 100"),
    (("action", "parameters", "reference_id"), "x" * 36, "reference_id"),
])
def test_the_graph_double_refuses_an_order_details_meta_would_refuse(
        path: tuple[str, ...], value: Any, problem: str) -> None:
    details = _details()
    target = details
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert any(problem in p for p in order_problems(details))
    with pytest.raises(GraphRefusal):
        validate_interactive(details)
    with pytest.raises(ValueError):
        order_status(reference="r", status="paid", body="x")


# -- the replay scenarios of "How to show it" ----------------------------------------------------

SCENARIOS = Path(__file__).parent / "scenarios" / "deposits"


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.json")))
def test_deposit_scenarios(name: str) -> None:
    result = run_scenario_file(SCENARIOS / f"{name}.json", cli=main)
    assert result.passed, "\n".join(result.failures + result.transcript)
    assert result.api_errors == 0 and result.unscripted_calls == 0 and not result.leftover


# -- what the agent sees, cancellations and moves -----------------------------------------------

def _tool(engine: Engine, name: str, args: dict[str, Any], tool_use_id: str,
          now: datetime = NOW) -> tuple[str, bool]:
    ctx = ToolContext(engine=engine, tenant_id=1, contact_id=1, conversation_id=1,
                      timezone=SP, now=now, tool_use_id=tool_use_id)
    return execute_tool(ctx, name, args)


def test_the_agent_sees_the_deposit_in_its_listing_and_history(engine: Engine) -> None:
    _setup(engine)
    _book(engine)
    listing, _ = _tool(engine, "list_my_appointments", {}, "toolu_l1")
    assert "(R$ 60.00 deposit unpaid, held until 10:30)" in listing
    with session_scope(engine) as session:
        lines, _, _ = history_lines(load(session, 1, 1, NOW, SP))
    assert lines[0].endswith("booked; R$ 60.00 deposit unpaid, held until 10:30")
    _pay(engine, _deposit(engine).reference, 6000)
    listing, _ = _tool(engine, "list_my_appointments", {}, "toolu_l2")
    assert "(R$ 60.00 deposit paid)" in listing


def test_a_held_visit_cancelled_withdraws_its_deposit_and_is_not_released_later(
        engine: Engine) -> None:
    _setup(engine)
    _book(engine)
    _, is_error = _tool(engine, "cancel_appointment", {"appointment_id": 1}, "toolu_c")
    assert not is_error and _deposit(engine).status == "cancelled"
    with session_scope(engine) as session:
        assert deposits.release_due(session, now=NOW + timedelta(hours=1)) == []
        assert session.exec(select(Notice)).all() == []


@pytest.mark.parametrize(("rule", "window", "refund"), [
    ("kept", 0, "kept"), ("owed", 0, "owed"), ("kept_inside_window", 24 * 60, "owed")])
def test_a_paid_visit_cancelled_records_the_tenants_refund_rule(
        engine: Engine, rule: str, window: int, refund: str) -> None:
    _setup(engine, deposit_refund=rule, cancellation_window_minutes=window)
    _book(engine)  # Tue 14:00, 28 h from now
    _pay(engine, _deposit(engine).reference, 6000)
    _, is_error = _tool(engine, "cancel_appointment", {"appointment_id": 1}, "toolu_c")
    assert not is_error
    assert _deposit(engine).refund == refund


def test_inside_the_window_the_deposit_is_kept_and_a_business_cancel_owes_it(
        engine: Engine) -> None:
    _setup(engine, deposit_refund="kept", cancellation_window_minutes=36 * 60)
    _book(engine)
    _pay(engine, _deposit(engine).reference, 6000)
    paid = _deposit(engine)
    tenant = _tenant(deposit_refund="kept_inside_window", cancellation_window_minutes=36 * 60)
    start = datetime(2026, 6, 2, 17, 0, tzinfo=UTC)
    assert deposits.refund_rule(tenant, paid, start_at=start, now=NOW) == "kept"
    assert deposits.refund_rule(tenant, paid, start_at=start, now=NOW - timedelta(hours=9)) \
        == "owed"
    with session_scope(engine) as session:
        cancel_appointment(session, session.get(Tenant, 1), 1, now=NOW)
    assert _deposit(engine).refund == "owed"


def test_a_held_visit_moved_keeps_its_deposit_and_still_has_no_reminder(engine: Engine) -> None:
    _setup(engine)
    _book(engine)
    moved, is_error = _tool(engine, "reschedule_appointment",
                            {"appointment_id": 1, "start": "2026-06-02T16:00"}, "toolu_m")
    assert not is_error, moved
    deposit = _deposit(engine)
    with session_scope(engine) as session:
        new = session.exec(select(Appointment).where(Appointment.status == "booked")).one()
        assert deposit.visit_id == (new.visit_id or new.id) and deposit.status == "held"
        assert session.exec(select(Reminder).where(Reminder.status == "scheduled")).all() == []
    assert _pay(engine, deposit.reference, 6000) == "booked"
    with session_scope(engine) as session:
        assert len(session.exec(select(Reminder).where(
            Reminder.status == "scheduled")).all()) == 1


# -- the admin API and the provider's webhook over HTTP ----------------------------------------

OPERATOR = "operator-token-for-deposits"


@pytest.fixture
def api_env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=NOW, database_url=database_url, redis_url=redis_url,
                                    admin_token=OPERATOR)
    environment.add_tenant(SALON)
    yield environment
    environment.close()


def test_the_admin_api_sets_the_rule_books_held_and_marks_the_deposit_paid(
        api_env: ReplayEnvironment) -> None:
    status, _ = call(api_env, "PATCH", "/admin/tenants/1",
                     {"deposit_percent": 50, "deposit_hold_minutes": 45}, token=OPERATOR)
    assert status == 200
    status, _ = call(api_env, "PATCH", "/admin/tenants/1",
                     {"deposit_percent": 101}, token=OPERATOR)
    assert status == 422
    status, booked = call(api_env, "POST", "/admin/tenants/1/appointments",
                          {"service": "corte", "start": "2026-06-02T14:00",
                           "phone": "+55 11 99999-0001"}, token=OPERATOR)
    assert status == 201, booked
    assert booked["deposit"]["status"] == "held" and booked["deposit"]["amount_cents"] == 4000
    assert booked["deposit"]["hold_until"] == "2026-06-01T13:45:00+00:00"
    path = f"/admin/tenants/1/appointments/{booked['id']}/deposit-paid"
    status, problem = call(api_env, "POST", path, {"amount_cents": 0}, token=OPERATOR)
    assert status == 422, problem
    status, paid = call(api_env, "POST", path, {}, token=OPERATOR)
    assert status == 200 and paid["payment"] == "booked"
    assert paid["deposit"]["status"] == "paid" and paid["reminders"]


def test_the_provider_webhook_refuses_a_forged_or_oversized_body_and_records_nothing(
        api_env: ReplayEnvironment) -> None:
    url = f"{api_env.web_url}/payments/mercadopago?data.id=1300000001&type=payment"
    for headers, body, expected in [
            ({}, b"{}", 401),
            ({"x-signature": "ts=1,v1=00", "x-request-id": "r"}, b"{}", 401),
            ({}, b"x" * (MAX_PAYMENT_BODY + 1), 413)]:
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        assert status == expected
    with session_scope(api_env.engine) as session:
        assert session.exec(select(PaymentEvent)).all() == []


def test_a_signed_notification_of_another_type_is_acknowledged_and_records_nothing(
        api_env: ReplayEnvironment) -> None:
    # the account's app may subscribe to merchant orders too: a 401 is retried for days
    for query in ("data.id=1300000001&type=merchant_order", "data.id=abc&type=payment"):
        data_id = query.split("&")[0].removeprefix("data.id=")
        ts = str(int(api_env.clock.now().timestamp()))
        request = urllib.request.Request(
            f"{api_env.web_url}/payments/mercadopago?{query}", data=b'{"id": 1}',
            headers={"x-signature": signature(MERCADOPAGO_SECRET, data_id, "r1", ts),
                     "x-request-id": "r1"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200 and json.loads(response.read()) == {"ignored": True}
    with session_scope(api_env.engine) as session:
        assert session.exec(select(PaymentEvent)).all() == []


def _post_signed(env: ReplayEnvironment, body: bytes, headers: dict[str, str]) -> Any:
    request = urllib.request.Request(
        f"{env.web_url}/payments/mercadopago?data.id=1300000001&type=payment", data=body,
        headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def test_a_signed_request_resent_with_another_body_id_is_the_same_event(
        api_env: ReplayEnvironment) -> None:
    # the body's `id` is not signed: the event is the signed data.id and x-request-id
    ts = str(int(api_env.clock.now().timestamp()))
    headers = {"x-signature": signature(MERCADOPAGO_SECRET, "1300000001", "r1", ts),
               "x-request-id": "r1", "Content-Type": "application/json"}
    first = _post_signed(api_env, b'{"id": 1, "data": {"id": "1300000001"}}', headers)
    assert first == (200, {"received": True})
    for body in (b'{"id": 2, "data": {"id": "1300000001"}}', b'{"id": 3}', b"not json"):
        assert _post_signed(api_env, body, headers) == (200, {"duplicate": True})
    # a body naming another payment than the signed one is refused
    assert _post_signed(api_env, b'{"id": 4, "data": {"id": "1300000002"}}', headers)[0] == 401
    with session_scope(api_env.engine) as session:
        events = session.exec(select(PaymentEvent)).all()
    assert [(e.event_id, e.charge_id) for e in events] == [("1300000001:r1", "1300000001")]
    client = MercadoPago(access_token="", webhook_secret=MERCADOPAGO_SECRET)
    lower = {k.lower(): v for k, v in headers.items()}
    query = {"data.id": "1300000001", "type": "payment"}
    ids = {client.verify_webhook(body, lower, query) for body in (b'{"id": 5}', b'{"id": 6}')}
    assert len(ids) == 1


def test_a_payment_the_provider_does_not_know_is_to_check_and_blocks_no_newer_one(
        api_env: ReplayEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    # a 404 is not retried forever: the oldest BATCH of them would keep newer ones waiting
    monkeypatch.setattr(deposit_worker, "BATCH", 2)
    client = MercadoPago(access_token=MERCADOPAGO_TOKEN, webhook_secret=MERCADOPAGO_SECRET,
                         base_url=api_env.mercadopago_api.base_url)
    charge = client.create_charge(6000, NOW + timedelta(minutes=31), "wa1-1-abcd", "Sinal")
    api_env.mercadopago_api.pay("wa1-1-abcd")
    with session_scope(api_env.engine) as session:
        for n in range(3):
            deposits.record_event(session, provider="mercadopago", event_id=f"gone{n}",
                                  charge_id=f"99999999{n}", now=NOW)
        deposits.record_event(session, provider="mercadopago", event_id="real",
                              charge_id=charge.charge_id, now=NOW)
    for _ in range(2):
        deposit_worker.confirm_pending(api_env.runtime, now=NOW)
    with session_scope(api_env.engine) as session:
        outcomes = {e.event_id: e.outcome for e in session.exec(select(PaymentEvent)).all()}
    assert outcomes == {"gone0": "fetch_failed", "gone1": "fetch_failed",
                        "gone2": "fetch_failed", "real": "unknown_reference"}


def test_no_pix_code_or_key_reaches_the_logs() -> None:
    """At DEBUG, into a stream of the test's own (not whatever an earlier test in the same
    process configured: under xdist the order varies)."""
    buffer = io.StringIO()
    root = logging.getLogger()
    previous = (list(root.handlers), root.level)
    configure_logging("DEBUG", "json", stream=buffer)
    try:
        result = run_scenario_file(SCENARIOS / "paid.json", cli=main)
    finally:
        root.handlers[:] = previous[0]
        root.setLevel(previous[1])
        structlog.reset_defaults()
    assert result.passed, "\n".join(result.failures)
    logged = buffer.getvalue()
    assert "payment_confirmed" in logged  # the log lines were captured
    assert SALON["pix_key"] not in logged and "br.gov.bcb.pix" not in logged


# -- the console: the agenda shows the deposit and takes "Sinal recebido"; attention lists -----

def test_the_console_shows_the_deposit_marks_it_paid_and_lists_payments_to_check(
        database_url: str | None, redis_url: str | None) -> None:
    env = ReplayEnvironment(start=NOW, database_url=database_url, redis_url=redis_url)
    try:
        seeded = seed(env)
        with session_scope(env.engine) as session:
            tenant = session.exec(select(Tenant).where(
                Tenant.phone_number_id == TENANT["phone_number_id"])).one()
            change_service(session, tenant.id or 0, "corte", price_cents=9000,
                           deposit_cents=3000)
            contact_id = session.exec(select(Contact.id).where(
                Contact.tenant_id == tenant.id)).first()
        browser = Browser(env.web_url)
        browser.sign_in(seeded.salon_token)
        browser.request("/console/agenda?day=2026-06-03")
        browser.request("/console/agenda/book", {
            "csrf": browser.csrf, "day": "2026-06-02", "service": "corte",
            "professional": "julia", "time": "10:00", "contact": str(contact_id)})
        _, page, _ = browser.request("/console/agenda?day=2026-06-02")
        assert "aguardando sinal R$ 30,00" in page and "Sinal recebido" in page
        with session_scope(env.engine) as session:
            held = session.exec(select(Deposit)).one()
            row = session.exec(select(Appointment).where(
                Appointment.visit_id == held.visit_id)).first() or session.get(
                Appointment, held.visit_id)
            assert row is not None
            deposits.release_due(session, now=held.hold_until)  # released: paid late below
        status, _, _ = browser.request(f"/console/agenda/appointments/{row.id}/deposit-paid",
                                       {"csrf": browser.csrf, "day": "2026-06-02"})
        assert status == 303
        _, page, _ = browser.request("/console/agenda?day=2026-06-02")
        assert "Sinal registrado: late" in html.unescape(page)
        _, page, _ = browser.request("/console/attention")
        assert 'id="payments-to-check"' in page
        assert "Sinal pago depois da liberação: remarcar ou devolver · R$ 30,00" in page
    finally:
        env.close()


def test_the_mercado_pago_client_against_its_double(api_env: ReplayEnvironment) -> None:
    base = api_env.mercadopago_api.base_url
    client = MercadoPago(access_token=MERCADOPAGO_TOKEN, webhook_secret=MERCADOPAGO_SECRET,
                         base_url=base)
    first = client.create_charge(6000, NOW + timedelta(minutes=31), "wa1-1-abcd", "Sinal")
    again = client.create_charge(6000, NOW + timedelta(minutes=31), "wa1-1-abcd", "Sinal")
    assert first.charge_id == again.charge_id and first.code.startswith("000201")
    status = client.fetch(first.charge_id)
    assert (status.paid, status.amount_cents, status.reference) == (False, 6000, "wa1-1-abcd")
    api_env.mercadopago_api.pay("wa1-1-abcd")
    assert client.fetch(first.charge_id).paid
    with pytest.raises(PaymentError) as short:
        client.create_charge(6000, NOW + timedelta(minutes=10), "wa1-2-abcd", "Sinal")
    assert not short.value.retryable
    assert "30 minutes" in api_env.mercadopago_api.refusals[-1]
    with pytest.raises(PaymentError):
        MercadoPago(access_token="wrong", webhook_secret="", base_url=base).fetch(
            first.charge_id)


# -- any order of confirmations and releases keeps the visit and the deposit in agreement ------

ACTIONS = st.lists(st.sampled_from(["pay", "pay_wrong", "replay", "release", "staff"]),
                   max_size=6)


@settings(max_examples=25, deadline=None)
@given(actions=ACTIONS)
def test_any_order_of_payments_and_releases_keeps_one_outcome(tmp_path_factory: Any,
                                                               actions: list[str]) -> None:
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('orders')}/t.db")
    create_schema(engine)
    try:
        _setup(engine)
        _book(engine)
        reference = _deposit(engine).reference
        for n, action in enumerate(actions):
            at = NOW + timedelta(minutes=10 * n)
            if action == "release":
                with session_scope(engine) as session:
                    deposits.release_due(session, now=at + timedelta(minutes=30))
            elif action == "staff":
                with session_scope(engine) as session:
                    tenant = session.get(Tenant, 1)
                    assert tenant is not None
                    mark_paid(session, tenant, 1, now=at)
            else:
                _pay(engine, reference, 5000 if action == "pay_wrong" else 6000,
                     event_id="same" if action == "replay" else f"ev{n}", at=at)
            _agree(engine)
    finally:
        engine.dispose()


def _agree(engine: Engine) -> None:
    deposit = _deposit(engine)
    with session_scope(engine) as session:
        rows = {a.status for a in session.exec(select(Appointment)).all()}
        scheduled = session.exec(select(Reminder).where(Reminder.status == "scheduled")).all()
        kinds = [n.kind for n in session.exec(select(Notice)).all()]
    assert deposit.status in ("held", "paid", "released", "late_paid")
    assert rows == ({"booked"} if deposit.status in ("held", "paid") else {"cancelled"})
    assert bool(scheduled) == (deposit.status == "paid")
    assert len(kinds) == len(set(kinds))  # each told once
    assert ("deposit_paid" in kinds) == (deposit.status == "paid")
    assert ("deposit_late" in kinds) == (deposit.status == "late_paid")
    assert sorted(_events(engine)).count("payment.received") == (
        deposit.status in ("paid", "late_paid"))


def test_a_held_booking_never_sends_the_models_booking_reply(engine: Engine) -> None:
    """A reply written for a booking ("Marcado!") is not sent for a visit held for its
    deposit: the model is told to write one that says what is held, until when, and how much
    (found by a newcomer's trial: the customer was told "Marcado" for a held visit)."""
    pairs = _setup(engine)
    ctx = ToolContext(engine=engine, tenant_id=1, contact_id=pairs[0][0],
                      conversation_id=pairs[0][1], timezone=SP, now=NOW, tool_use_id="toolu_r")
    args = {"service": "coloracao", "start": "2026-06-02T14:00",
            "reply": "Marcado: coloração terça 02/06 às 14:00!"}
    text, is_error = execute_tool(ctx, "book_appointment", args)
    assert not is_error and text.startswith("Held until 10:30 for a R$ 60,00 Pix deposit")
    assert "Your reply was NOT sent: the visit is held, not booked" in text
    assert sent_reply(args, text) is None


def test_the_house_rules_name_each_services_deposit_and_the_hold(engine: Engine) -> None:
    """The cached catalogue says which services ask a Pix deposit, how much and how long a
    booking waits for it, so the agent can say it before it books (issue 48)."""
    _setup(engine)
    with session_scope(engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        text = catalogue_text(catalogue_load(session, tenant, NOW.date()))
    assert ("A Pix deposit holds a booking, not yet booked, for 30 minutes until paid "
            "(unpaid: released): coloracao R$ 60,00.") in text
    assert "corte R$" not in text  # a service that asks none is not named


# -- outside the 24-hour window: the declared order-details template (issue 48 item 1) ---------

DEPOSIT_TEMPLATE = {"name": "sinal_pix", "parameters": ["customer_name", "amount", "until"]}


@pytest.mark.parametrize(("inside", "declared", "sent"), [
    (True, True, "order_details"), (False, True, "template"), (False, False, None)])
def test_the_deposit_request_goes_as_order_details_a_template_or_not_with_the_reason(
        api_env: ReplayEnvironment, inside: bool, declared: bool, sent: str | None) -> None:
    if declared:
        status, body = call(api_env, "PATCH", "/admin/tenants/1", {
            "templates": [DEPOSIT_TEMPLATE], "deposit_template": "sinal_pix"}, token=OPERATOR)
        assert status == 200, body
        api_env.graph_api.approve_templates([{"name": "sinal_pix", "body_parameters": 3,
                                              "order_details": True}])
    status, booked = call(api_env, "POST", "/admin/tenants/1/appointments",
                          {"service": "coloracao", "start": "2026-06-02T14:00",
                           "phone": "+55 11 99999-0001"}, token=OPERATOR)
    assert status == 201 and booked["deposit"]["status"] == "held", booked
    if inside:
        with session_scope(api_env.engine) as session:
            for contact in session.exec(select(Contact)).all():
                contact.last_inbound_at = NOW - timedelta(hours=1)
                session.add(contact)
    api_env.cron()
    sends = [s.body for s in api_env.graph_api.sends if s.wamid is not None]
    deposit = _deposit(api_env.engine)
    if sent is None:
        assert sends == [] and deposit.not_sent == "window_closed"
        status, listed = call(api_env, "GET", "/admin/tenants/1/appointments?from=2026-06-02",
                              None, token=OPERATOR)
        assert status == 200 and listed[0]["deposit"]["not_sent"] == "window_closed"
        return
    assert [s["type"] for s in sends] == ["interactive" if sent == "order_details" else sent]
    assert deposit.not_sent == ""
    if sent == "order_details":
        params = sends[0]["interactive"]["action"]["parameters"]
    else:
        template = sends[0]["template"]
        assert template["name"] == "sinal_pix"
        body, button = template["components"]
        assert [p["text"] for p in body["parameters"]][1:] == ["R$ 60,00", "10:30"]
        assert (button["sub_type"], button["index"]) == ("order_details", "0")
        params = button["parameters"][0]["action"]["order_details"]
    assert params["reference_id"] == deposit.reference
    assert params["total_amount"] == {"value": 6000, "offset": 100}
    assert params["payment_settings"][0]["pix_dynamic_code"]["code"] == deposit.code


@pytest.mark.parametrize(("changes", "problem"), [
    ({"deposit_template": "nao_declarado"}, "not one of the tenant's templates"),
    ({"templates": [{**DEPOSIT_TEMPLATE, "parameters": ["service"]}],
      "deposit_template": "sinal_pix"}, "are not deposit fields"),
    ({"templates": [{**DEPOSIT_TEMPLATE, "buttons": ["Pagar"]}],
      "deposit_template": "sinal_pix"}, "no quick-reply buttons"),
    ({"deposit_template": "Sinal Pix"}, "deposit_template")])
def test_a_deposit_template_that_cannot_carry_the_payment_is_refused_and_changes_nothing(
        api_env: ReplayEnvironment, changes: dict[str, Any], problem: str) -> None:
    status, body = call(api_env, "PATCH", "/admin/tenants/1", changes, token=OPERATOR)
    assert status == 422 and problem in json.dumps(body), body
    with session_scope(api_env.engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None and (tenant.deposit_template, tenant.templates) == ("", [])


def test_the_graph_double_refuses_an_order_details_template_meta_would_refuse() -> None:
    details = _details()
    good = {"name": "sinal_pix", "language": {"code": "pt_BR"},
            "components": [order_details_button(details)]}
    validate_order_button(good)
    details["action"]["parameters"]["total_amount"]["value"] = 1
    with pytest.raises(GraphRefusal) as refused:
        validate_order_button({**good, "components": [order_details_button(details)]})
    assert "subtotal" in str(refused.value.details)
    with pytest.raises(GraphRefusal):
        validate_order_button({**good, "components": [
            {**order_details_button(_details()), "index": "1"}]})


def test_the_deposit_template_through_the_cli(engine: Engine, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with session_scope(engine) as session:
        upsert_tenant(session, {**SALON, "templates": [DEPOSIT_TEMPLATE]}, now=NOW)
    monkeypatch.setenv("DATABASE_URL", engine.url.render_as_string(hide_password=False))
    assert main(["tenant", "update", SALON["phone_number_id"], "--set",
                 "deposit_template=nao_declarado"]) != 0
    assert "not one of the tenant's templates" in capsys.readouterr().err
    status = main(["tenant", "update", SALON["phone_number_id"], "--set",
                   "deposit_template=sinal_pix"])
    assert status == 0, capsys.readouterr().err
    with session_scope(engine) as session:
        assert session.exec(select(Tenant)).one().deposit_template == "sinal_pix"
