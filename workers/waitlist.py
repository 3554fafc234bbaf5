"""The waitlist filled by itself (issue 47; the entries' rules in storage/waitlist.py, the
agent's side in agent/tools/waitlist.py).

- `run_waitlist` (RQ job, `wagent cron` every WAITLIST_PERIOD_SECONDS, once per period):
  `waitlist_pass` releases the holds that ran out and expires the entries whose window
  ended (storage/waitlist.end_stale); then, first come first served, each waiting entry is
  offered the first free slot of its window it has not passed (a slot freed by a customer's
  cancel or move, the business's, a block removed: whatever freed it, the free time is read
  as every booking reads it, availability.free_slots, held slots busy), and held for it
  `waitlist_hold_minutes`; then every held offer not yet sent is sent (a staff offer by
  hand, operations/agenda.offer_slot, is one). Inside the 24-hour window the offer is a text
  with the buttons Quero / Não posso; outside it the tenant's `waitlist_template` (a paid
  message) unless `waitlist_inside_window_only`; with neither the hold is given back and the
  slot goes to the next entry. Each offer is held and stored in one transaction with its
  outbox part, so it is sent at most once.
- `answer_offer_taps` (called by the turn, workers/turns.py, before any model call, beside
  the reminders' `answer_taps`): a tap on an offer's button, its id verified. Quero books the
  held slot with the house rules of book_appointment (agent/tools/scheduling.place_visit:
  notice, horizon, the customer's limit of upcoming visits, their own bookings, the
  professional's hours; a refusal is told with its reason) and emits `appointment.booked`
  and `waitlist.filled`; Não posso gives the slot back (the next pass offers it to the next
  entry); a tap on an offer no longer held (taken, expired, another offer's button) is told
  the time was taken. None of these calls the model.
"""

import json
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import structlog
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from agent.errors import ToolError
from agent.tools import availability, scheduling
from agent.tools.availability import Taken
from agent.tools.base import ToolContext
from agent.tools.slots import Slot, overlaps
from core import clock
from storage import appointments, marks, reminders, waitlist, webhooks
from storage import contacts as contact_repo
from storage import messages as message_repo
from storage.db import session_scope
from storage.models import (
    Appointment,
    Contact,
    Conversation,
    Message,
    Professional,
    Service,
    Tenant,
    WaitlistEntry,
)
from whatsapp.graph import split_text
from whatsapp.interactive import Choice, buttons_message
from whatsapp.window import window_closed
from workers import texts
from workers.maintenance import run_once_per_period
from workers.outgoing import declared_template, template_body
from workers.outgoing import store as store_outbound
from workers.reminders import (
    TAP_TYPES,
    fields,
    pace,
    render,
)
from workers.runtime import Runtime, get_runtime

log = structlog.get_logger(__name__)

WAITLIST_PERIOD_SECONDS = 30
BATCH = 500
HANDLED = "answered by the waitlist offer's buttons (no model call)"


def run_waitlist() -> int:
    """RQ job (cron): the waitlist pass at the product's clock, once per period."""
    runtime = get_runtime()
    return run_once_per_period(runtime, "waitlist", period_seconds=WAITLIST_PERIOD_SECONDS,
                               work=lambda: waitlist_pass(runtime, now=clock.now())) or 0


def waitlist_pass(runtime: Runtime, *, now: datetime, batch: int = BATCH) -> int:
    """End the stale holds and entries, hold a slot for each waiting entry that has one, send
    the held offers; returns how many offers went to the outbox."""
    with session_scope(runtime.engine) as session:
        released, expired = waitlist.end_stale(session, now=now)
        entry_ids = [e.id for e in waitlist.waiting(session, now=now, limit=batch)]
    for entry_id in entry_ids:
        try:
            with session_scope(runtime.engine) as session:
                hold_next(session, entry_id or 0, now=now)
        except IntegrityError:  # another pass held that slot first: the next pass goes on
            log.info("waitlist_hold_raced", entry_id=entry_id)
    paced: dict[int, int] = {}
    sent = 0
    with session_scope(runtime.engine) as session:
        unsent = waitlist.unsent_offers(session, limit=batch)
    for entry_id in unsent:
        with session_scope(runtime.engine) as session:
            target = send_offer(session, runtime.settings.button_key(), entry_id, now=now)
        sent += pace(runtime, paced, target, now)
    if sent or released or expired:
        log.info("waitlist_pass", offers=sent, released=released, expired=expired)
    return sent


def hold_next(session: Session, entry_id: int, *, now: datetime) -> Slot | None:
    """Hold for waiting entry `entry_id` the first free slot of its window it has not
    passed and that does not overlap the customer's own bookings; the slot, or None."""
    entry = waitlist.locked(session, entry_id)
    if entry is None or entry.status != "waiting" or entry.ends_at <= now:
        return None
    tenant = session.get(Tenant, entry.tenant_id)
    service = session.get(Service, entry.service_id)
    if tenant is None or service is None:
        return None
    pros = ([p] if entry.professional_id and (p := session.get(Professional,
                                                                entry.professional_id))
            else availability.candidates(session, tenant.id or 0, service, None))
    slots = availability.free_slots(
        session, tenant=tenant, service=service, pros=pros, first=entry.day, last=entry.day,
        now=now, after=_hhmm(entry.after), before=_hhmm(entry.before))
    own = availability.own_intervals(session, entry.contact_id, entry.ends_at - timedelta(
        days=2), entry.ends_at + timedelta(days=1))
    passed = set(entry.passed or [])
    slot = next((s for s in slots if waitlist.slot_key(s.professional_id, s.start) not in passed
                 and not any(overlaps((s.start, s.end), o) for o in own)), None)
    if slot is None:
        return None
    waitlist.hold(session, tenant, entry, slot.professional_id, slot.start,
                  availability.held_until(session, tenant, service, slot), now=now)
    return slot


def _hhmm(value: str) -> time | None:
    return time.fromisoformat(value) if value else None


def _offered(entry: WaitlistEntry) -> Appointment:
    """The offered slot as an unsaved appointment row (for the reminder fields)."""
    assert entry.offer_start_at is not None and entry.offer_end_at is not None
    return Appointment(tenant_id=entry.tenant_id, contact_id=entry.contact_id,
                       service_id=entry.service_id,
                       professional_id=entry.offer_professional_id or 0,
                       start_at=entry.offer_start_at, end_at=entry.offer_end_at,
                       created_at=entry.created_at)


def send_offer(session: Session, secret: str, entry_id: int, *,
               now: datetime) -> tuple[int, int, bool] | None:
    """Write the held offer of `entry_id` as an outbound message with its outbox part (module
    docstring), or give the hold back when it cannot go; the flush target, or None."""
    entry = waitlist.locked(session, entry_id)
    if entry is None or entry.status != "offered" or entry.offer_message_id is not None \
            or entry.offer_start_at is None:
        return None
    tenant = session.get(Tenant, entry.tenant_id)
    contact = session.get(Contact, entry.contact_id)
    assert tenant is not None and contact is not None
    values = {**fields(session, tenant, _offered(entry), contact),
              "hold": str(tenant.waitlist_hold_minutes)}
    accept, decline = (waitlist.button_payload(secret, entry, entry.offer_start_at, a)
                       for a in (True, False))
    titles = [texts.text(tenant.language, k) for k in ("button_want", "button_cannot")]
    text = render(texts.text(tenant.language, "waitlist_offer"), values)
    spec = declared_template(tenant, tenant.waitlist_template)
    if contact_repo.address(contact) == (None, None):
        spec, text = None, ""
    if text and not window_closed(contact.last_inbound_at, now):
        body = json.dumps(buttons_message(body=text, buttons=[
            Choice(accept, titles[0]), Choice(decline, titles[1])]), ensure_ascii=False)
        kind, shown = "interactive", text
    elif spec is not None and not tenant.waitlist_inside_window_only:
        body = template_body(spec, values, {"confirm": accept, "cancel": decline})
        kind, shown = "template", f"[waitlist template {spec['name']}]"
    else:  # cannot be offered now: the slot goes to the next entry
        waitlist.release(entry)
        session.add(entry)
        log.info("waitlist_offer_not_sent", entry_id=entry.id)
        return None
    message = store_outbound(session, tenant, contact, shown=f"[waitlist offer] {shown}",
                             kind=kind, body=body, now=now,
                             author=marks.product_author("notice"), buttons=titles)
    entry.offer_message_id = message.id
    session.add(entry)
    assert tenant.id is not None
    return tenant.id, message.conversation_id, tenant.coexistence


# -- taps ------------------------------------------------------------------------------------

def answer_offer_taps(session: Session, tenant: Tenant, contact: Contact,
                      conversation: Conversation, *, secret: str, now: datetime,
                      pending: list[Message] | None = None) -> int:
    """Answer the pending taps on waitlist offers' buttons of `conversation` (module
    docstring), without the model; returns how many were handled. `pending`: the
    conversation's pending customer messages when the caller read them in this transaction
    (storage/messages.pending_inbound), else read here."""
    assert conversation.id is not None
    handled, replies = 0, []
    if pending is None:
        pending = message_repo.pending_inbound(session, conversation.id)
    for message in pending:
        if message.wa_type not in TAP_TYPES:
            continue
        text = " ".join(str(b.get("text", "")) for b in message.content
                        if b.get("type") == "text")
        parsed = waitlist.read_payload(text)
        if parsed is None:
            continue
        entry_id, start, accept, signed, mac = parsed
        entry = waitlist.locked(session, entry_id)
        if entry is None or not waitlist.verified(secret, entry, signed, mac,
                                                  tenant_id=tenant.id or 0,
                                                  contact_id=contact.id or 0):
            log.warning("waitlist_tap_not_verified")
            reply: str | None = texts.text(tenant.language, "tap_unknown")
        else:
            reply = answer_tap(session, tenant, contact, entry, start, accept, now=now)
        message.answered_at, message.status_reason = now, HANDLED
        session.add(message)
        handled += 1
        if reply:
            replies.append(reply)
    if replies:
        said = "\n".join(replies)
        reply_message = message_repo.append(
            session, tenant_id=tenant.id or 0, conversation_id=conversation.id,
            role="assistant", direction="outbound", content=[{"type": "text", "text": said}],
            now=now, author=marks.product_author("tap_ack"))
        to, recipient = contact_repo.address(contact)
        message_repo.add_outbound(session, message=reply_message, parts=split_text(said),
                                  to=to, recipient=recipient, now=now)
    session.flush()
    return handled


def answer_tap(session: Session, tenant: Tenant, contact: Contact, entry: WaitlistEntry,
               start: datetime, accept: bool, *, now: datetime) -> str | None:
    """The reply to one verified tap (Quero: `accept`) on the offer of `start` to `entry`
    (locked by the caller: storage/waitlist.locked): a text, or None (nothing to say)."""
    language = tenant.language
    current = entry.status == "offered" and entry.offer_start_at == start
    shown = _offered(entry) if current else Appointment(
        tenant_id=entry.tenant_id, contact_id=entry.contact_id, service_id=entry.service_id,
        professional_id=entry.professional_id or 0, start_at=start, end_at=start,
        created_at=now)
    values = fields(session, tenant, shown, contact)
    if entry.status == "booked" and current is False and entry.appointment_id is not None:
        booked = session.get(Appointment, entry.appointment_id)
        if booked is not None and booked.start_at == start:
            return None  # a second tap on the offer it took: no second acknowledgement
    if not current or (entry.offer_expires_at is not None and entry.offer_expires_at <= now):
        if current:  # held until now, not taken in time: the next entry's
            waitlist.release(entry)
            session.add(entry)
        return render(texts.text(language, "waitlist_taken"), values)
    if not accept:
        waitlist.release(entry)
        session.add(entry)
        return texts.text(language, "waitlist_declined")
    return _book(session, tenant, contact, entry, values, now=now)


def _book(session: Session, tenant: Tenant, contact: Contact, entry: WaitlistEntry,
          values: dict[str, str], *, now: datetime) -> str:
    """Book the slot held for `entry` (its Quero) under the house rules, or say why not."""
    assert entry.offer_start_at is not None and entry.id is not None
    start, pro_id = entry.offer_start_at, entry.offer_professional_id or 0
    entry.status = "booking"  # its hold no longer counts as busy for its own booking
    session.add(entry)
    session.flush()
    service = session.get(Service, entry.service_id)
    pro = session.get(Professional, pro_id)
    assert service is not None and pro is not None
    ctx = ToolContext(engine=session.get_bind(), tenant_id=tenant.id or 0,  # type: ignore[arg-type]
                      contact_id=contact.id or 0, conversation_id=0,
                      timezone=ZoneInfo(tenant.timezone), now=now,
                      tool_use_id=f"waitlist:{entry.id}:{start:%Y%m%d%H%M}")
    reason = ""
    try:
        with session.begin_nested():
            try:
                scheduling.check_upcoming(session, ctx, tenant)
            except ToolError:
                reason = "refused_limit"
                raise
            rows = scheduling.place_visit(session, ctx, [service], start, pro.code)
    except Taken:
        waitlist.release(entry)
        session.add(entry)
        return render(texts.text(tenant.language, "waitlist_taken"), values)
    except ToolError as exc:
        waitlist.release(entry)
        session.add(entry)
        reason = reason or ("refused_clash" if "already has a booking" in str(exc)
                            else "refused_rules")
        log.info("waitlist_booking_refused", entry_id=entry.id, reason=reason)
        return render(texts.text(tenant.language, "waitlist_refused"),
                      {**values, "reason": texts.text(tenant.language, reason)})
    entry.status, entry.appointment_id = "booked", rows[0].id
    session.add(entry)
    reminders.schedule(session, tenant, rows[0], now=now)
    data = webhooks.appointment_data(session, rows[0], by="customer")
    webhooks.emit(session, tenant.id or 0, "appointment.booked", data, now=now)
    webhooks.emit(session, tenant.id or 0, "waitlist.filled",
                  {**data, "waitlist_entry_id": entry.id,
                   "booking_number": appointments.number_of(rows[0]),
                   "waiting_since": entry.created_at.isoformat()}, now=now)
    return render(texts.text(tenant.language, "waitlist_booked"), values)
