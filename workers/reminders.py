"""Reminders sent, their buttons answered, and the business's changes told to the customer
(issue 25; the rules of when in storage/reminders.py, docs/CONFIGURE.md "Reminders").

- `run_reminders` (RQ job, `wagent cron` every REMINDERS_PERIOD_SECONDS, once per period):
  `reminder_pass` reads the due reminders (one query on a partial index: nothing due, no
  other work) and the pending notices. Each reminder is claimed (scheduled → queued) in the
  transaction that stores it as an outbound message of the contact's open conversation
  (opened when there is none) with its outbox part, so it is queued at most once; the outbox
  sends it at most once (workers/outbox.py). Inside the 24-hour window it is a text with
  reply buttons (Confirmar, Remarcar, Cancelar); outside it the tenant's `reminder_template`
  with its quick replies; with neither it is skipped with the reason. Flushes are paced per
  phone number: at most `RATES[coexistence]` sends a second (20 for a number shared with the
  WhatsApp Business app, 80 otherwise).
- `answer_taps` (called by the turn, workers/turns.py, before any model call): a tap on a
  reminder's button, its payload verified (storage/reminders.verified). Confirmar sets
  `confirmed_at` and acknowledges (a second one: no second acknowledgement); Cancelar
  cancels inside the rules (`cancellation_window_minutes`) and acknowledges; Remarcar, and a
  Cancelar too late to accept, go to the agent with a text naming the appointment in full
  (inside the cancellation window, saying it can be neither cancelled nor moved now); a
  tap on a cancelled, moved or past appointment, or a forged payload, gets a short
  explanation. None of these but the agent's calls the model.
"""

import json
import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import structlog
from sqlmodel import Session

from core import clock
from core.faults import crash_point
from storage import appointments, deposits, marks, reminders, threads, webhooks
from storage import contacts as contact_repo
from storage import messages as message_repo
from storage.db import session_scope
from storage.jobs import enqueue_flush
from storage.models import (
    Appointment,
    Contact,
    Conversation,
    Message,
    Notice,
    Professional,
    Reminder,
    Service,
    Tenant,
)
from storage.tenant_config import check_placeholders
from whatsapp.graph import split_text
from whatsapp.interactive import Choice, buttons_message
from whatsapp.window import window_closed
from workers import texts
from workers.deposits import deposit_pass, order_status_update
from workers.maintenance import run_once_per_period
from workers.outgoing import declared_template, greeting_name, template_body
from workers.outgoing import store as store_outbound
from workers.runtime import Runtime, get_runtime

log = structlog.get_logger(__name__)

REMINDERS_PERIOD_SECONDS = 30
BATCH = 500
CHUNK = 50  # reminders stored in one transaction (one by one when a chunk fails)
RATES = {True: 20, False: 80}  # sends per second per phone number (coexistence or not)
TAP_TYPES = ("interactive", "button")
HANDLED = "answered by the reminder's buttons (no model call)"
_TAPPED = re.compile(r"\[tapped (button|quick reply) .*\]", re.DOTALL)


def run_reminders() -> int:
    """RQ job (cron): the reminders pass at the product's clock, once per period."""
    runtime = get_runtime()
    return run_once_per_period(runtime, "reminders", period_seconds=REMINDERS_PERIOD_SECONDS,
                               work=lambda: reminder_pass(runtime, now=clock.now())) or 0


def reminder_pass(runtime: Runtime, *, now: datetime, batch: int = BATCH) -> int:
    """Queue every due reminder and pending notice, `batch` rows a page; returns how many
    went to the outbox."""
    paced: dict[int, int] = {}  # tenant id -> sends queued in this pass
    queued = sum(pace(runtime, paced, target, now)
                 for target in deposit_pass(runtime, now=now))  # issue 48
    after: tuple[datetime, int] | None = None
    while True:
        with session_scope(runtime.engine) as session:
            rows = reminders.due(session, now=now, limit=batch, after=after)
        if rows:
            last = rows[-1]
            assert last.due_at is not None and last.id is not None
            after = (last.due_at, last.id)
        for start in range(0, len(rows), CHUNK):
            targets = queue_chunk(runtime, rows[start:start + CHUNK], now=now)
            crash_point("after_reminder_queued")  # stored, their flushes not enqueued yet
            for target in targets:
                queued += pace(runtime, paced, target, now)
        if len(rows) < batch:
            break
    while True:
        with session_scope(runtime.engine) as session:
            notices = reminders.pending_notices(session, limit=batch)
        for notice in notices:
            queued += pace(runtime, paced, queue_notice(runtime, notice, now=now), now)
        if len(notices) < batch:
            break
    if queued:
        log.info("reminders_queued", sends=queued)
    return queued


def pace(runtime: Runtime, paced: dict[int, int], target: tuple[int, int, bool] | None,
          now: datetime) -> int:
    """Enqueue the flush of a queued send: the n-th send of a tenant in this pass at
    now + n // rate seconds. Returns 1 when there was one."""
    if target is None:
        return 0
    tenant_id, conversation_id, coexistence = target
    n = paced.get(tenant_id, 0)
    paced[tenant_id] = n + 1
    delay = n // RATES[coexistence]
    enqueue_flush(runtime.queue, runtime.settings.redis_prefix, conversation_id,
                  at=now + timedelta(seconds=delay) if delay else None)
    return 1


def fields(session: Session, tenant: Tenant, appointment: Appointment,
           contact: Contact | None, rows: list[Appointment] | None = None) -> dict[str, str]:
    """The reminder fields of an appointment (storage/tenant_config.REMINDER_PARAMETERS), local;
    with `rows` (a visit's booked rows, by start), every service and professional of the
    visit, each named once, from its start. A visit booked for someone else (`for_name`)
    names them after its services ("Corte (para filha: Ana)"); `for_whom` (" (para
    filha: Ana)" or "") is for the product's own texts only (not a tenant placeholder)."""
    rows = rows or [appointment]
    language = tenant.language
    services = list(dict.fromkeys(s.name for r in rows
                                  if (s := session.get(Service, r.service_id))))
    pros = list(dict.fromkeys(p.name for r in rows
                              if (p := session.get(Professional, r.professional_id))))
    local = rows[0].start_at.astimezone(ZoneInfo(tenant.timezone))
    weekdays = texts.text(language, "weekdays").split(",")
    day = (f"{weekdays[local.weekday()]} {local:%d/%m}" if language == "pt-BR"
           else f"{weekdays[local.weekday()]} {local:%Y-%m-%d}")
    whom = " ".join(rows[0].for_name.split())
    for_whom = texts.text(language, "for_whom").format(name=whom) if whom else ""
    return {"customer_name": greeting_name(contact.profile_name if contact else None),
            "service": _listed(services, language) + for_whom,
            "professional": _listed(pros, language),
            "date": day, "time": _times(session, tenant, rows), "address": tenant.address,
            "for_whom": for_whom}


def reminder_default(session: Session, tenant: Tenant, rows: list[Appointment]) -> str:
    """The product's reminder text for a visit (workers/texts.py): "reminder" ("{service} com
    {professional}, {date} às {time}") for one professional's services back to back, else
    "reminder_visit", whose {time} says who does what when (`_times`)."""
    simple = len(_parts(session, rows)) == 1 and _sequential(rows) and len(
        {r.professional_id for r in rows}) == 1
    return texts.text(tenant.language, "reminder" if simple else "reminder_visit")


def _sequential(rows: list[Appointment]) -> bool:
    """Each row starts when the one before ends (one run, nothing at once, no gap)."""
    return all(b.start_at == a.end_at for a, b in zip(rows, rows[1:], strict=False))


def _parts(session: Session,
           rows: list[Appointment]) -> list[tuple[datetime, list[tuple[str, str]]]]:
    """The visit's parts, by start: (start, [(service, professional)]). A row joins the part
    that starts when it starts, or, while the part is one professional's run back to back,
    the part it follows with no gap with the same professional; anything else (a later
    start, another professional, a gap) begins a part."""
    parts: list[tuple[datetime, list[tuple[str, str]]]] = []
    last: dict[int, Appointment] = {}  # part index -> its last row
    for row in rows:
        service = session.get(Service, row.service_id)
        pro = session.get(Professional, row.professional_id)
        item = (service.name if service else "?", pro.name if pro else "?")
        here = next((i for i, (at, _) in enumerate(parts) if at == row.start_at), None)
        if here is None and parts:
            previous = last[len(parts) - 1]
            run = [r for r in rows if r.start_at >= parts[-1][0] and r is not row
                   and r.start_at < row.start_at]
            if (previous.end_at == row.start_at and previous.professional_id
                    == row.professional_id and _sequential(run)
                    and len({r.professional_id for r in run}) == 1):
                here = len(parts) - 1
        if here is None:
            parts.append((row.start_at, []))
            here = len(parts) - 1
        parts[here][1].append(item)
        last[here] = row
    return parts


def _times(session: Session, tenant: Tenant, rows: list[Appointment]) -> str:
    """The visit's time: its start ("09:00") when one professional's services run one after
    the other with no gap; otherwise the start of each part with who does what in it
    ("14:00 (Escova com Júlia e Manicure com Bia) e 14:45 (Corte com Júlia)", "09:00 (Troca
    de óleo e Alinhamento com Pedro) e 14:00 (Diagnóstico com Pedro)"), so a visit split in
    time or run in parallel is never told as one simple run from its start (`_parts`)."""
    tz, language = ZoneInfo(tenant.timezone), tenant.language
    parts = _parts(session, rows)
    if len(parts) == 1 and _sequential(rows) and len({r.professional_id for r in rows}) == 1:
        return f"{rows[0].start_at.astimezone(tz):%H:%M}"
    said = []
    for at, items in parts:
        groups: list[tuple[list[str], str]] = []  # a professional's services, in order
        for service, pro in items:
            if groups and groups[-1][1] == pro:
                groups[-1][0].append(service)
            else:
                groups.append(([service], pro))
        what = _listed([texts.text(language, "with").format(
            service=_listed(names, language), professional=pro) for names, pro in groups],
            language)
        said.append(f"{at.astimezone(tz):%H:%M} ({what})")
    return _listed(said, language)


def _listed(names: list[str], language: str) -> str:
    """"a", "a e b", "a, b e c" (the language's "and": workers/texts.py)."""
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} {texts.text(language, 'and')} {names[-1]}"


def describe(session: Session, tenant: Tenant, appointment: Appointment,
             rows: list[Appointment] | None = None) -> str:
    """The appointment (or the visit of `rows`) in full, as the agent reads it: "#12, corte
    with Júlia, Tue 2026-06-02 09:00"; a visit: "#12, corte with Júlia, escova with Marcos,
    Tue 2026-06-02 09:00"."""
    rows = rows or [appointment]
    what = []
    for row in rows:
        service = session.get(Service, row.service_id)
        pro = session.get(Professional, row.professional_id)
        what.append(f"{service.name if service else '?'} with {pro.name if pro else '?'}")
    local = rows[0].start_at.astimezone(ZoneInfo(tenant.timezone))
    return (f"appointment #{appointments.number_of(rows[0])}, {', '.join(what)}, "
            f"{local:%a %Y-%m-%d %H:%M}")


Target = tuple[int, int, bool]  # (tenant id, conversation id, coexistence) of a queued send


def queue_chunk(runtime: Runtime, rows: list[Reminder], *, now: datetime) -> list[Target]:
    """Store and queue these due reminders in one transaction; when it fails (a row that
    cannot be written), each in a transaction of its own, so one bad row holds up no other
    (it is logged, and stays scheduled for the next pass)."""
    secret = runtime.settings.button_key()
    try:
        with session_scope(runtime.engine) as session:
            found = [_queue_in(session, secret, row, now) for row in rows]
        return [t for t in found if t is not None]
    except Exception as exc:  # noqa: BLE001 - retried one by one below
        log.warning("reminder_chunk_failed", reminders=len(rows), error=type(exc).__name__)
    targets = []
    for row in rows:
        try:
            target = queue_reminder(runtime, row, now=now)
        except Exception as exc:  # noqa: BLE001 - the others still go
            log.error("reminder_failed", reminder_id=row.id, error=type(exc).__name__)
            continue
        if target is not None:
            targets.append(target)
    return targets


def queue_reminder(runtime: Runtime, reminder: Reminder, *, now: datetime) -> Target | None:
    """Store and queue one due reminder (or skip it with the reason), in one transaction;
    returns the Target of a queued send, None otherwise."""
    with session_scope(runtime.engine) as session:
        return _queue_in(session, runtime.settings.button_key(), reminder, now)


def _queue_in(session: Session, secret: str, reminder: Reminder,
              now: datetime) -> Target | None:
    assert reminder.id is not None
    appointment = session.get(Appointment, reminder.appointment_id)  # the visit's number
    tenant = session.get(Tenant, reminder.tenant_id)
    contact = session.get(Contact, appointment.contact_id) if appointment else None
    if appointment is None or tenant is None or contact is None \
            or contact_repo.address(contact) == (None, None):
        reminders.claim(session, reminder.id, status="skipped", now=now,
                        reason="the customer has no WhatsApp address")
        return None
    # checked at the send, not only when scheduled: the visit may have moved, been cancelled
    # or completed since (a reminder retried after a rate limit included)
    live = appointments.booked(appointments.visit_rows(session, reminder.appointment_id))
    gone = _not_remindable(live, reminder, now)
    if gone:
        reminders.claim(session, reminder.id, status="cancelled", now=now, reason=gone)
        return None
    values = fields(session, tenant, appointment, contact, live)
    payloads = {a: reminders.button_payload(secret, appointment, a)
                for a in reminders.ACTIONS}
    spec = declared_template(tenant, tenant.reminder_template)
    titles: list[str] = []
    held = _thread_rule(session, reminder, tenant, contact, now)
    if held == threads.SKIP_AND_SHOW:
        return None
    if held is None and not window_closed(contact.last_inbound_at, now):
        try:
            text = render(tenant.reminder_text or reminder_default(session, tenant, live),
                          values)
        except ValueError as exc:  # a text stored before the check at write
            reminders.claim(session, reminder.id, status="skipped", now=now,
                            reason=f"reminder_text does not render: {exc}"[:300])
            log.info("reminder_skipped_text", reminder_id=reminder.id)
            return None
        titles = [texts.text(tenant.language, f"button_{a}")
                  for a in ("confirm", "reschedule", "cancel")]
        body = json.dumps(buttons_message(body=text, buttons=[
            Choice(payloads[a], title) for a, title in zip(
                ("confirm", "reschedule", "cancel"), titles, strict=True)]), ensure_ascii=False)
        kind, shown = "interactive", text
    elif spec is not None:
        body, kind = template_body(spec, values, payloads), "template"
        shown = f"[reminder template {spec['name']}]"
    else:
        reminders.claim(session, reminder.id, status="skipped", now=now,
                        reason=f"{_why_template(held)} and no reminder_template is declared")
        log.info("reminder_skipped_window_closed", reminder_id=reminder.id)
        return None
    if not reminders.claim(session, reminder.id, status="queued", now=now):
        return None  # another pass took it
    shown = (f"[reminder {reminder.lead_minutes} min before "
             f"{describe(session, tenant, appointment, live)}] {shown}")
    message = store_outbound(session, tenant, contact, shown=shown, kind=kind, body=body,
                             now=now, author=marks.product_author("reminder"), buttons=titles)
    row = session.get(Reminder, reminder.id)
    assert row is not None and tenant.id is not None
    row.message_id = message.id
    session.add(row)
    return tenant.id, message.conversation_id, tenant.coexistence


def _thread_rule(session: Session, reminder: Reminder, tenant: Tenant, contact: Contact,
                 now: datetime) -> str | None:
    """The tenant's `busy_thread_rule` when another sender holds the thread (None when not,
    storage/threads.py); under SKIP_AND_SHOW the reminder is skipped here, its reason shown."""
    held = threads.busy_rule(tenant, contact, now)
    if held == threads.SKIP_AND_SHOW:
        reminders.claim(session, int(reminder.id or 0), status="skipped", now=now,
                        reason=threads.SKIPPED_HELD)
        log.info("reminder_skipped_thread_held", reminder_id=reminder.id)
    return held


def _why_template(held: str | None) -> str:
    """Why only a template could go out: another sender's thread, or the closed window."""
    return "another sender holds the thread" if held else "the 24-hour window is closed"


def _not_remindable(live: list[Appointment], reminder: Reminder, now: datetime) -> str:
    """Why the visit of `live` (its booked rows) gets no reminder now ("": it does)."""
    if not live:
        return "appointment cancelled, not upcoming"
    if live[0].start_at <= now:
        return "the visit has started, not upcoming"
    if any(r.outcome for r in live):
        return "the visit is marked done"
    if reminder.start_at is not None and live[0].start_at != reminder.start_at:
        return "the visit moved since the reminder was scheduled"
    return ""


def queue_notice(runtime: Runtime, notice: Notice, *,
                 now: datetime) -> tuple[int, int, bool] | None:
    """Write one pending notice: a text inside the window, the tenant's `notice_template`
    outside it, else `not_sent` with the reason (shown in the console)."""
    with session_scope(runtime.engine) as session:
        row = session.get(Notice, notice.id)
        appointment = session.get(Appointment, notice.appointment_id)
        tenant = session.get(Tenant, notice.tenant_id)
        contact = session.get(Contact, appointment.contact_id) if appointment else None
        if row is None or row.status != "pending" or appointment is None or tenant is None \
                or contact is None:
            return None
        values = fields(session, tenant, appointment, contact)
        deposit = row.kind.startswith("deposit_")  # issue 48: not a change by the business,
        # so never the business's notice_template
        spec = None if deposit else declared_template(tenant, tenant.notice_template)
        held = threads.busy_rule(tenant, contact, now)  # another sender holds the thread
        if held is None and not window_closed(contact.last_inbound_at, now):
            text = _format(texts.text(tenant.language, f"notice_{row.kind}"), values)
            body, kind, shown = text, "text", text
        elif spec is not None and held != threads.SKIP_AND_SHOW:
            body, kind = template_body(spec, values, {}), "template"
            shown = f"[notice template {spec['name']}]"
        else:
            row.status = "not_sent"
            row.reason = threads.SKIPPED_HELD if held == threads.SKIP_AND_SHOW else \
                _why_template(held) if deposit else \
                f"{_why_template(held)} and no notice_template is declared"
            session.add(row)
            return None
        what = row.kind.replace("_", " ") if deposit else f"the business {row.kind}"
        shown = f"[{what} {describe(session, tenant, appointment)}] {shown}"
        if row.kind == "deposit_paid" and kind == "text":  # Meta: update the order (issue 48)
            _order_completed(session, tenant, contact, appointment.id, now)
        message = store_outbound(session, tenant, contact, shown=shown, kind=kind, body=body,
                                 now=now, author=marks.product_author("notice"))
        row.status, row.message_id = "queued", message.id
        session.add(row)
        assert tenant.id is not None
        return tenant.id, message.conversation_id, tenant.coexistence


def _order_completed(session: Session, tenant: Tenant, contact: Contact, visit_id: int | None,
                     now: datetime) -> None:
    """Queue the order_status `completed` of the visit's paid deposit (one with a code)."""
    deposit = deposits.of_visits(session, [visit_id or 0]).get(visit_id or 0)
    if deposit is not None and deposit.code:
        store_outbound(session, tenant, contact, shown="[Pix deposit: order completed]",
               kind="interactive", body=order_status_update(tenant, deposit), now=now,
               author=marks.product_author("notice"))


_NO_NAME = re.compile(r"^\s*\{customer_name\}[,:!\s]*|[,\s]*\{customer_name\}")


def render(template: str, values: dict[str, str]) -> str:
    """A tenant's text with its fields filled in; with no name known, "Olá, {customer_name}!"
    reads "Olá!"; ValueError when it has a field it may not have
    (storage/tenant_config.check_placeholders, the rule applied at write)."""
    check_placeholders(template, tuple(values))
    if not values.get("customer_name"):
        template = _NO_NAME.sub("", template)
        template = template[:1].upper() + template[1:]  # "{customer_name}, lembrete" → "Lembrete"
    return template.format(**values)


def _format(template: str, values: dict[str, str]) -> str:
    """`template` with `values` (render), or whole when it does not render."""
    try:
        return render(template, values)
    except ValueError:  # the product's own texts: never; kept whole rather than lost
        return template


# -- taps ------------------------------------------------------------------------------------

def answer_taps(session: Session, tenant: Tenant, contact: Contact, conversation: Conversation,
                *, secret: str, now: datetime, pending: list[Message] | None = None) -> int:
    """Answer the pending taps on reminder buttons of `conversation` (see the module
    docstring); returns how many were handled here, without the model. A tap the agent must
    handle (Remarcar, a late Cancelar) has its text replaced by one naming the appointment.
    `pending`: the conversation's pending customer messages when the caller read them in
    this transaction (storage/messages.pending_inbound), else read here."""
    assert conversation.id is not None
    handled = 0
    replies: list[str] = []
    if pending is None:
        pending = message_repo.pending_inbound(session, conversation.id)
    for message in pending:
        if message.wa_type not in TAP_TYPES:
            continue
        text = " ".join(str(b.get("text", "")) for b in message.content
                        if b.get("type") == "text")
        parsed = reminders.read_payload(text)
        if parsed is None:
            continue
        appointment_id, action, mac = parsed
        appointment = appointments.locked(session, appointment_id)  # a staff move may race it
        if appointment is None or not reminders.verified(
                secret, appointment, action, mac, tenant_id=tenant.id or 0,
                contact_id=contact.id or 0):
            log.warning("reminder_tap_not_verified")
            reply: str | None = texts.text(tenant.language, "tap_unknown")
        else:
            reply = _tap(session, tenant, appointment, action, message, now=now)
            if reply == "":  # the agent answers it
                continue
            _name_tap(session, tenant, appointment, action, message)
        message.answered_at, message.status_reason = now, HANDLED
        session.add(message)
        handled += 1
        if reply:
            replies.append(reply)
    if replies:
        message = message_repo.append(
            session, tenant_id=tenant.id or 0, conversation_id=conversation.id,
            role="assistant", direction="outbound",
            content=[{"type": "text", "text": "\n".join(replies)}], now=now,
            author=marks.product_author("tap_ack"))
        to, recipient = contact_repo.address(contact)
        message_repo.add_outbound(session, message=message, parts=split_text("\n".join(replies)),
                                  to=to, recipient=recipient, now=now)
    session.flush()
    return handled


def _tap(session: Session, tenant: Tenant, appointment: Appointment, action: str,
         message: Message, *, now: datetime) -> str | None:
    """The reply to one verified tap on the reminder of `appointment`'s visit (every booked
    service of it): a text, None (nothing to say), or "" (the agent's)."""
    language = tenant.language
    rows = appointments.visit_rows(session, appointments.visit_of(appointment), lock=True)
    live = appointments.booked(rows)
    values = fields(session, tenant, appointment, None, live or [appointment])
    if not live:
        return _format(texts.text(language, "tap_moved" if any(r.moved_to_id for r in rows)
                                  else "tap_cancelled"), values)
    if live[0].start_at <= now:
        return _format(texts.text(language, "tap_past"), values)
    if action == "confirm":
        if all(r.confirmed_at is not None for r in live):
            return None  # a second Confirmar: no second acknowledgement
        for row in live:
            row.confirmed_at = row.confirmed_at or now
            session.add(row)
        return _format(texts.text(language, "reminder_confirmed"), values)
    if action == "cancel" and reminders.cancellation_open(tenant.cancellation_window_minutes,
                                                          live[0].start_at, now):
        for row in live:
            row.status, row.cancelled_at = "cancelled", now
            session.add(row)
        session.flush()
        reminders.cancel_for(session, appointments.visit_of(appointment),
                             reason="appointment cancelled")
        deposits.on_cancel(session, tenant, appointments.visit_of(appointment),
                           starts_at=live[0].start_at, now=now)
        for row in live:
            webhooks.emit(session, tenant.id or 0, "appointment.cancelled",
                          webhooks.appointment_data(session, row, by="customer"), now=now)
        return _format(texts.text(language, "reminder_cancelled"), values)
    blocked = action in ("cancel", "reschedule") and not reminders.cancellation_open(
        tenant.cancellation_window_minutes, live[0].start_at, now)
    _name_tap(session, tenant, appointment, action, message, note=(
        f"it starts in less than the cancellation window of "
        f"{tenant.cancellation_window_minutes} minutes, so it cannot be "
        f"{'cancelled' if action == 'cancel' else 'moved'} now: explain the policy")
        if blocked else "")
    return ""


def _name_tap(session: Session, tenant: Tenant, appointment: Appointment, action: str,
              message: Message, *, note: str = "") -> None:
    """A verified tap's text names the reminder it answered, in full (issue 37): "[tapped
    Confirmar on the reminder of appointment #1, Corte feminino with Júlia, Tue ...]" (every
    booked service of its visit), with `note` for the agent."""
    live = appointments.booked(appointments.visit_rows(session, appointments.visit_of(
        appointment))) or None
    title = texts.text(tenant.language, f"button_{action}")
    said = f"[tapped {title} on the reminder of {describe(session, tenant, appointment, live)}"
    said += f"; {note}]" if note else "]"
    message.content = [{**b, "text": _TAPPED.sub(lambda _m: said, str(b["text"]))}
                       if b.get("type") == "text" else b for b in message.content]
    session.add(message)
