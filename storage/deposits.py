"""Deposits by Pix (issue 48, docs/PAYMENTS.md): the rule, the held visit, and every
confirmation's outcome, in one place for every door (the agent's booking tool, the provider's
webhook job, staff marking a deposit paid, the periodic release).

- **Rule**: a service's own (`Service.deposit_cents`, else `deposit_percent` of its price)
  else the tenant's (`Tenant.deposit_cents`, else `deposit_percent`), summed over the visit's
  services; integer cents, a percentage rounded half up to the cent. 0: no deposit.
- **Held**: a visit that needs one keeps its rows `booked` (so it blocks its slots and counts
  in the customer's upcoming bookings with every existing query unchanged) and gets a
  `Deposit` row `held` until `hold_until`; it has no reminder until paid.
- **Confirm** (`confirm`): the deposit is read by its reference, locked (FOR UPDATE on
  PostgreSQL) and fresh, so a payment and the release racing for it see each other: one wins.
  held + right amount → paid (reminders made, `appointment.booked` and `payment.received`
  emitted, the customer told); released → late_paid (recorded, customer told, staff alerted by
  `payment.received` with `late` and the console); unknown reference, wrong amount, a replayed
  event → recorded in `PaymentEvent` with that outcome, nothing booked.
- **Release** (`release_due`): held past `hold_until` → the visit cancelled, `released`, the
  customer told once (a `Notice`).
"""

import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from storage import reminders, webhooks
from storage.appointments import booked, visit_rows
from storage.models import Appointment, Deposit, Notice, PaymentEvent, Service, Tenant
from storage.tenant_config import price_text

OUTCOMES = ("booked", "late", "already_paid", "unknown_reference", "wrong_amount",
            "not_paid", "pending", "fetch_failed")
REFUND_RULES = ("kept", "owed", "kept_inside_window")
RELEASE_BATCH = 200


def service_deposit(tenant: Tenant, service: Service) -> int:
    """The deposit in cents one service of a visit asks: its own amount, else its own
    percentage of its price, else the tenant's amount, else the tenant's percentage (a
    service without a price asks no percentage). Half up to the cent."""
    if service.deposit_cents is not None:
        return service.deposit_cents
    percent = service.deposit_percent
    if percent is None:
        if tenant.deposit_cents:
            return tenant.deposit_cents
        percent = tenant.deposit_percent
    if not percent or not service.price_cents:
        return 0
    return (service.price_cents * percent + 50) // 100


def visit_deposit(tenant: Tenant, services: Iterable[Service]) -> int:
    """The deposit in cents of a visit of `services`: the tenant's amount once for the visit
    when no service has its own rule, else the sum of each service's (`service_deposit`)."""
    services = list(services)
    own = any(s.deposit_cents is not None or s.deposit_percent is not None for s in services)
    if not own and tenant.deposit_cents:
        return tenant.deposit_cents
    return sum(service_deposit(tenant, s) for s in services)


def new_reference(tenant_id: int, visit_id: int) -> str:
    """A unique, unguessable `reference_id` (Meta: unique per order; the provider's external
    reference): "wa<tenant>-<visit>-<8 hex>", ASCII, at most 32 characters (Meta: 35)."""
    return f"wa{tenant_id}-{visit_id}-{secrets.token_hex(4)}"


def hold(session: Session, tenant: Tenant, rows: list[Appointment], services: list[Service],
         *, now: datetime) -> Deposit | None:
    """A `held` deposit for the visit of `rows` when its services ask one (None otherwise),
    in the booking's transaction; the caller then makes no reminder."""
    amount = visit_deposit(tenant, services)
    if amount <= 0:
        return None
    head = rows[0]
    assert head.id is not None and tenant.id is not None
    visit_id = head.visit_id or head.id
    deposit = Deposit(tenant_id=tenant.id, visit_id=visit_id, contact_id=head.contact_id,
                      reference=new_reference(tenant.id, visit_id), amount_cents=amount,
                      currency=tenant.currency,
                      hold_until=now + timedelta(minutes=tenant.deposit_hold_minutes),
                      created_at=now)
    session.add(deposit)
    session.flush()
    return deposit


def of_visits(session: Session, visit_ids: Iterable[int]) -> dict[int, Deposit]:
    """The latest deposit of each of these visits (for views and the agent's context)."""
    found: dict[int, Deposit] = {}
    ids = list(set(visit_ids))
    if ids:
        for row in session.exec(select(Deposit).where(col(Deposit.visit_id).in_(ids))
                                .order_by(col(Deposit.id))):
            found[row.visit_id] = row
    return found


def by_reference(session: Session, reference: str) -> Deposit | None:
    """The deposit of `reference`, locked and fresh (one wins a payment/release race)."""
    return session.exec(select(Deposit).where(Deposit.reference == reference)
                        .with_for_update().execution_options(populate_existing=True)).first()


def record_event(session: Session, *, provider: str, event_id: str, reference: str = "",
                 amount_cents: int | None = None, now: datetime, charge_id: str = "",
                 tenant_id: int | None = None) -> PaymentEvent | None:
    """Record one confirmation received, `pending` until `confirm` decides; None when this
    (provider, event id) was recorded before: a replayed event, which books nothing."""
    event = PaymentEvent(tenant_id=tenant_id, provider=provider, event_id=event_id[:128],
                         reference=reference[:64], amount_cents=amount_cents,
                         charge_id=charge_id[:64], received_at=now)
    try:
        with session.begin_nested():
            session.add(event)
    except IntegrityError:
        return None
    return event


def confirm(session: Session, event: PaymentEvent, *, now: datetime, paid: bool = True,
            by: str = "provider") -> str:
    """Apply a recorded confirmation `event` (the provider said the charge is `paid`) to its
    deposit and return its outcome (also stored on the event): see the module docstring."""
    deposit = by_reference(session, event.reference) if event.reference else None
    outcome = _outcome(deposit, event, paid)
    event.outcome = outcome
    if deposit is not None:
        event.tenant_id = deposit.tenant_id
    session.add(event)
    if deposit is None or outcome not in ("booked", "late"):
        return outcome
    deposit.paid_cents, deposit.paid_at, deposit.paid_by = event.amount_cents or 0, now, by
    deposit.status = "paid" if outcome == "booked" else "late_paid"
    session.add(deposit)
    tenant = session.get(Tenant, deposit.tenant_id)
    assert tenant is not None
    rows = booked(visit_rows(session, deposit.visit_id, lock=True))
    if outcome == "booked" and rows:
        reminders.schedule(session, tenant, rows[0], now=now)
        for row in rows:
            webhooks.emit(session, tenant.id or 0, "appointment.booked",
                          webhooks.appointment_data(session, row, by="customer"), now=now)
    webhooks.emit(session, deposit.tenant_id, "payment.received",
                  payment_data(deposit, late=outcome == "late"), now=now)
    _tell(session, deposit, "deposit_paid" if outcome == "booked" else "deposit_late", now)
    return outcome


def fetch_failed(session: Session, event: PaymentEvent) -> str:
    """Record that the provider refused, for good, to say what `event`'s payment is (a
    non-retryable PaymentError, e.g. 404): outcome fetch_failed, no longer pending (the
    polling pass would retry it forever and keep newer ones waiting), shown to staff as a
    payment to check under the tenant of the deposit with that charge id."""
    deposit = session.exec(select(Deposit).where(
        Deposit.charge_id == event.charge_id)).first() if event.charge_id else None
    if deposit is not None:
        event.tenant_id = deposit.tenant_id
    event.outcome = "fetch_failed"
    session.add(event)
    return event.outcome


def _outcome(deposit: Deposit | None, event: PaymentEvent, paid: bool) -> str:
    if deposit is None:
        return "unknown_reference"
    if not paid:
        return "not_paid"
    if event.amount_cents != deposit.amount_cents:
        return "wrong_amount"
    if deposit.status in ("paid", "late_paid"):
        return "already_paid"
    return "booked" if deposit.status == "held" else "late"


def payment_data(deposit: Deposit, *, late: bool) -> dict[str, Any]:
    """The `data` of a payment.received event: ids, the reference and cents; never the Pix
    code, key or payer."""
    return {"visit_id": deposit.visit_id, "contact_id": deposit.contact_id,
            "reference": deposit.reference, "amount_cents": deposit.paid_cents,
            "currency": deposit.currency, "by": deposit.paid_by, "late": late}


def open_work(session: Session, *, now: datetime, limit: int) -> tuple[bool, list[int]]:
    """One read of the held deposits (the partial index ix_deposit_held_until): whether
    some hold ended by `now`, and the ids of those whose Pix request is not made yet."""
    rows = session.exec(select(Deposit.id, Deposit.hold_until, Deposit.requested_at).where(
        Deposit.status == "held").order_by(col(Deposit.hold_until)).limit(limit)).all()
    return (any(until <= now for _, until, _ in rows),
            [i for i, until, asked in rows if asked is None and until > now and i is not None])


def release_due(session: Session, *, now: datetime, limit: int = RELEASE_BATCH) -> list[int]:
    """Release every held deposit whose hold ended by `now` (the partial index
    ix_deposit_held_until; SKIP LOCKED on PostgreSQL, so a payment holding one is not waited
    for: it wins, and the next pass finds it paid): the visit's booked rows cancelled, the
    deposit `released`, the customer told once. Returns the released deposits' ids."""
    due = session.exec(select(Deposit).where(Deposit.status == "held",
                                             col(Deposit.hold_until) <= now)
                       .order_by(col(Deposit.hold_until)).limit(limit)
                       .with_for_update(skip_locked=True)
                       .execution_options(populate_existing=True)).all()
    released = []
    for deposit in due:
        if deposit.status != "held":
            continue
        for row in booked(visit_rows(session, deposit.visit_id, lock=True)):
            row.status, row.cancelled_at = "cancelled", now
            session.add(row)
        reminders.cancel_for(session, deposit.visit_id, reason="deposit not paid in time")
        deposit.status, deposit.released_at = "released", now
        session.add(deposit)
        _tell(session, deposit, "deposit_released", now)
        assert deposit.id is not None
        released.append(deposit.id)
    return released


def _tell(session: Session, deposit: Deposit, kind: str, now: datetime) -> None:
    """The customer is told once per kind (`Deposit.told` keeps the last kind told)."""
    if deposit.told == kind:
        return
    deposit.told = kind
    session.add(deposit)
    session.add(Notice(tenant_id=deposit.tenant_id, appointment_id=deposit.visit_id,
                       kind=kind, created_at=now))
    session.flush()


# not_paid is no payment to check: Mercado Pago notifies every Pix charge when it is created
# (payment.created, status pending), and a charge never paid is released by the hold's end
CHECK_OUTCOMES = ("late", "wrong_amount", "fetch_failed")
CHECK_DAYS = 30


def to_check(session: Session, tenant_id: int, *, now: datetime,
             limit: int) -> list[dict[str, Any]]:
    """The tenant's payments a person must look at, newest first, from the last CHECK_DAYS:
    a deposit paid after its release (rebook or refund), a payment of another amount. Each:
    outcome, reference, cents, when. (A confirmation for an unknown reference names no
    tenant: it stays in `paymentevent` for the operator.)"""
    rows = session.exec(select(PaymentEvent).where(
        PaymentEvent.tenant_id == tenant_id, col(PaymentEvent.outcome).in_(CHECK_OUTCOMES),
        col(PaymentEvent.received_at) >= now - timedelta(days=CHECK_DAYS))
        .order_by(col(PaymentEvent.id).desc()).limit(limit)).all()
    return [{"outcome": e.outcome, "reference": e.reference, "amount_cents": e.amount_cents,
             "amount": price_text(e.amount_cents), "provider": e.provider,
             "received_at": e.received_at.isoformat()} for e in rows]


def status_note(deposit: Deposit, tz: ZoneInfo) -> str:
    """What the agent reads of a visit's deposit (English, short: every token is paid):
    "R$ 60.00 deposit unpaid, held until 10:30", "... paid", "... not paid: released",
    "... paid after release: staff rebook or refund"."""
    amount = price_text(deposit.amount_cents, deposit.currency, language="en")
    if deposit.status == "held":
        return f"{amount} deposit unpaid, held until {deposit.hold_until.astimezone(tz):%H:%M}"
    return f"{amount} deposit " + {
        "paid": "paid", "released": "not paid: released",
        "late_paid": "paid after release: staff rebook or refund"}.get(deposit.status,
                                                                        deposit.status)


def follow(session: Session, visit_id: int, new_visit_id: int) -> None:
    """A whole visit moved to new rows (a new booking number): its open deposit goes with
    it, held or paid, before the new visit's reminders are made (none while held)."""
    for deposit in session.exec(select(Deposit).where(
            Deposit.visit_id == visit_id, col(Deposit.status).in_(("held", "paid")))):
        deposit.visit_id = new_visit_id
        session.add(deposit)
    session.flush()


def on_cancel(session: Session, tenant: Tenant, visit_id: int, *, starts_at: datetime,
              now: datetime, by: str = "customer") -> str:
    """A visit with nothing booked any more (cancelled by the customer or the business):
    a held deposit is withdrawn (`cancelled`: the release does not tell the customer), a
    paid one records what the tenant's rule says (`refund_rule`: kept or owed; refunds are
    done by staff; a cancel `by` the business always owes it back). Returns the refund
    recorded ("" when none)."""
    if booked(visit_rows(session, visit_id)):
        return ""  # one service of several: the visit and its deposit stand
    deposit = session.exec(select(Deposit).where(Deposit.visit_id == visit_id)
                           .order_by(col(Deposit.id).desc()).with_for_update()).first()
    if deposit is None or deposit.status not in ("held", "paid"):
        return ""
    if deposit.status == "held":
        deposit.status = "cancelled"
    else:
        deposit.refund = "owed" if by == "business" else refund_rule(
            tenant, deposit, start_at=starts_at, now=now)
    session.add(deposit)
    session.flush()
    return deposit.refund


def refund_rule(tenant: Tenant, deposit: Deposit, *, start_at: datetime,
                now: datetime) -> str:
    """What a cancellation does to a paid deposit: "kept" or "owed" (the tenant's
    `deposit_refund`; kept_inside_window: owed when cancelled at least the tenant's
    `cancellation_window_minutes` before the start, the rule of
    storage/reminders.cancellation_open); "" for a deposit not paid."""
    if deposit.status != "paid":
        return ""
    rule = tenant.deposit_refund
    if rule == "kept_inside_window":
        opened = reminders.cancellation_open(tenant.cancellation_window_minutes, start_at, now)
        return "owed" if opened else "kept"
    return rule if rule in ("kept", "owed") else "kept"
