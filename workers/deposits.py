"""The deposits pass (issue 48, storage/deposits.py): release the holds that ended, ask the
provider for a Pix charge for each new held visit and queue its `order_details` message, and
confirm a provider's notification by fetching the payment. Run by the reminders pass
(workers/reminders.py), so by `wagent cron` every REMINDERS_PERIOD_SECONDS and by the replay.

No Pix code, key or payer data is logged: log lines name the deposit id and the outcome.
"""

import json
from datetime import datetime
from zoneinfo import ZoneInfo

import structlog
from sqlmodel import col, select

from core import clock
from payments.provider import MIN_CHARGE_LIFE, PaymentError, PixProvider
from storage import deposits, marks
from storage.db import session_scope
from storage.models import Contact, Deposit, PaymentEvent, Tenant
from storage.tenant_config import price_text
from whatsapp.orders import order_details, order_status
from whatsapp.window import window_closed
from workers import texts
from workers.outgoing import declared_template, greeting_name, store, template_body
from workers.runtime import Runtime, get_runtime

log = structlog.get_logger(__name__)

BATCH = 100
Target = tuple[int, int, bool]  # (tenant id, conversation id, coexistence): a flush to pace


def deposit_pass(runtime: Runtime, *, now: datetime) -> list[Target]:
    """Release the due holds, confirm the notifications still pending, then request every
    held deposit not requested yet; the conversations whose outbox got a message. With
    nothing to do: two reads, of two partial indexes (held deposits, pending events)."""
    with session_scope(runtime.engine) as session:
        due, unrequested = deposits.open_work(session, now=now, limit=BATCH)
    if due:
        with session_scope(runtime.engine) as session:
            released = deposits.release_due(session, now=now)
        log.info("deposits_released", count=len(released))
    confirm_pending(runtime, now=now)
    targets = []
    for deposit_id in unrequested:
        target = request_deposit(runtime, deposit_id, now=now)
        if target is not None:
            targets.append(target)
    return targets


def request_deposit(runtime: Runtime, deposit_id: int, *, now: datetime) -> Target | None:
    """Create the Pix charge (idempotent at the provider on the reference) and queue the
    order_details message inside the 24-hour window; outside it the tenant's declared
    order-details template (`deposit_template`) carrying the same payment, or, with none,
    the request is recorded as not sent and a note says so in the conversation (the agent's
    reply already said how much and until when)."""
    provider = runtime.payments
    with session_scope(runtime.engine) as session:
        deposit = session.get(Deposit, deposit_id)
        if deposit is None or deposit.status != "held" or deposit.requested_at is not None:
            return None
        amount, until, reference = deposit.amount_cents, deposit.hold_until, deposit.reference
    if provider is None:
        return _requested(runtime, deposit_id, now=now, charge=None, provider="")
    try:
        charge = provider.create_charge(amount, max(until, now + MIN_CHARGE_LIFE), reference,
                                        f"Sinal {reference}")
    except PaymentError as exc:
        log.warning("deposit_charge_failed", deposit_id=deposit_id, retryable=exc.retryable)
        return None  # the next pass tries again while the hold lasts
    return _requested(runtime, deposit_id, now=now, charge=(charge.charge_id, charge.code),
                      provider=provider.name)


def _requested(runtime: Runtime, deposit_id: int, *, now: datetime,
               charge: tuple[str, str] | None, provider: str) -> Target | None:
    with session_scope(runtime.engine) as session:
        deposit = session.exec(select(Deposit).where(Deposit.id == deposit_id)
                               .with_for_update()).first()
        if deposit is None or deposit.status != "held" or deposit.requested_at is not None:
            return None
        deposit.requested_at = now
        if charge is not None:
            deposit.charge_id, deposit.code, deposit.provider = charge[0], charge[1], provider
        session.add(deposit)
        tenant = session.get(Tenant, deposit.tenant_id)
        contact = session.get(Contact, deposit.contact_id)
        assert tenant is not None and contact is not None
        if charge is None or not tenant.pix_key:
            deposit.not_sent = "no_charge"
            log.info("deposit_request_not_sent", deposit_id=deposit_id, reason="no_charge")
            return None
        interactive = order_details(
            reference=deposit.reference, amount_cents=deposit.amount_cents,
            item=f"Sinal #{deposit.visit_id}", body=_body(tenant, deposit), code=charge[1],
            merchant_name=tenant.name, key=tenant.pix_key, key_type=tenant.pix_key_type)
        shown = f"[Pix deposit request {price_text(deposit.amount_cents, deposit.currency)}]"
        kind, body = "interactive", json.dumps(interactive, ensure_ascii=False)
        if window_closed(contact.last_inbound_at, now):
            spec = declared_template(tenant, tenant.deposit_template)
            if spec is None:  # shown with the deposit (agenda, API): staff see why
                deposit.not_sent = "window_closed"
                log.info("deposit_request_not_sent", deposit_id=deposit_id, reason="window")
                return None
            kind, shown = "template", f"{shown} [template {spec['name']}]"
            body = template_body(spec, _values(tenant, deposit, contact), {}, interactive)
        message = store(session, tenant, contact, shown=shown, kind=kind, body=body, now=now,
                        author=marks.product_author("notice"))
        assert tenant.id is not None
        return tenant.id, message.conversation_id, tenant.coexistence


def _values(tenant: Tenant, deposit: Deposit, contact: Contact) -> dict[str, str]:
    """The deposit template's parameters (storage/tenant_config.DEPOSIT_PARAMETERS)."""
    until = deposit.hold_until.astimezone(ZoneInfo(tenant.timezone))
    return {"customer_name": greeting_name(contact.profile_name),
            "amount": price_text(deposit.amount_cents, deposit.currency,
                                 language=tenant.language),
            "until": f"{until:%H:%M}"}


def _body(tenant: Tenant, deposit: Deposit) -> str:
    until = deposit.hold_until.astimezone(ZoneInfo(tenant.timezone))
    return texts.text(tenant.language, "deposit_request").format(
        amount=price_text(deposit.amount_cents, deposit.currency, language=tenant.language),
        time=f"{until:%H:%M}")


def order_status_update(tenant: Tenant, deposit: Deposit) -> str:
    """The order_status body (JSON) telling the customer their deposit was received."""
    return json.dumps(order_status(
        reference=deposit.reference, status="completed",
        body=texts.text(tenant.language, "deposit_received")), ensure_ascii=False)


def run_confirm(payment_event_id: int) -> str:
    """RQ job (storage/jobs.PAYMENT_JOB): confirm one recorded notification now."""
    return confirm_notification(get_runtime(), payment_event_id, now=clock.now())


def confirm_pending(runtime: Runtime, *, now: datetime) -> int:
    """Confirm every provider notification still pending (its job lost, or the provider
    was down): the polling half of "webhook or polling". Returns how many were decided."""
    with session_scope(runtime.engine) as session:
        ids = list(session.exec(select(PaymentEvent.id).where(
            PaymentEvent.outcome == "pending", PaymentEvent.charge_id != "")
            .order_by(col(PaymentEvent.id)).limit(BATCH)).all())
    return sum(confirm_notification(runtime, i, now=now) not in ("skipped", "failed")
               for i in ids if i is not None)


def confirm_notification(runtime: Runtime, event_id: int, *, now: datetime) -> str:
    """RQ job body: fetch the payment a recorded webhook named and apply it
    (storage/deposits.confirm); the outcome. A retryable provider error leaves the event
    pending ("failed": the next pass tries again); a non-retryable one (404, a malformed id)
    records it as fetch_failed, a payment for staff to check (storage/deposits.fetch_failed)."""
    provider: PixProvider | None = runtime.payments
    with session_scope(runtime.engine) as session:
        event = session.get(PaymentEvent, event_id)
        if event is None or event.outcome != "pending" or provider is None:
            return "skipped"
        charge_id = event.charge_id
    try:
        status = provider.fetch(charge_id)
    except PaymentError as exc:
        log.warning("payment_fetch_failed", payment_event_id=event_id, retryable=exc.retryable)
        if exc.retryable:
            return "failed"
        with session_scope(runtime.engine) as session:
            event = session.exec(select(PaymentEvent).where(PaymentEvent.id == event_id)
                                 .with_for_update()).first()
            if event is None or event.outcome != "pending":
                return "skipped"
            return deposits.fetch_failed(session, event)
    with session_scope(runtime.engine) as session:
        event = session.exec(select(PaymentEvent).where(PaymentEvent.id == event_id)
                             .with_for_update()).first()
        if event is None or event.outcome != "pending":
            return "skipped"
        event.reference, event.amount_cents = status.reference, status.amount_cents
        outcome = deposits.confirm(session, event, now=now, paid=status.paid)
    log.info("payment_confirmed", payment_event_id=event_id, outcome=outcome)
    return outcome


