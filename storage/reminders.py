"""Reminders of appointments and notices of the business's changes (issue 25): when each is
due, the quiet-hours rule, the signed payloads of their buttons, and the indexed queries of
the periodic pass (workers/reminders.py sends them; docs/CONFIGURE.md "Reminders").

- **One reminder per visit and lead time** (`Tenant.reminder_lead_minutes`, at most 3; issue
  38: `Reminder.appointment_id` is the visit's booking number, storage/appointments.py), made
  when the visit is booked (`schedule`), cancelled with it (`cancel_for`; a move cancels the
  old booking's and schedules the new one's; a visit whose start changed gets its unsent ones
  made again, `reschedule`). A booking made inside a lead time gets that reminder `skipped`,
  with the reason. The send checks the visit again (workers/reminders.py): one no longer
  booked, started, completed or starting at another time than `Reminder.start_at` is not
  reminded.
- **Quiet hours** (`Tenant.quiet_hours`, local "HH:MM-HH:MM", may wrap midnight): a reminder
  due then goes out at the last allowed moment before them (one minute before they start),
  or, when that moment had passed at booking, at their end if that is still before the
  appointment; otherwise it is skipped with the reason (`due_time`).
- **Payloads** (`button_payload`, `read_payload`): "rm1:<appointment>:<c|r|x>:<mac>", at most
  128 ASCII characters; the mac is an HMAC-SHA256 (first 22 base64url characters, 132 bits)
  over the tenant, the contact, the appointment and the action, keyed with the product's
  secret (core/settings.py `button_secret`), so a payload made up or copied from another
  customer acts on nothing.
"""

import base64
import hashlib
import hmac
import re
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import update
from sqlmodel import Session, and_, col, or_, select

from storage import messages
from storage.models import Appointment, Deposit, Notice, Outbound, Reminder, Tenant

MAX_LEADS = 3
QUIET_MARGIN = timedelta(minutes=1)  # "before quiet hours": this long before they start
ACTIONS = {"confirm": "c", "reschedule": "r", "cancel": "x"}
_ACTION_OF = {v: k for k, v in ACTIONS.items()}
PAYLOAD_RE = re.compile(r"rm1:([0-9]{1,10}):([crx]):([A-Za-z0-9_-]{22})")
MAX_PAYLOAD = 128


def cancellation_open(window_minutes: int, start_at: datetime, now: datetime) -> bool:
    """Whether the customer may still cancel an appointment starting at `start_at`: at least
    the tenant's `cancellation_window_minutes` before it (0: until it starts). The one rule:
    the reminder's Cancelar and Remarcar buttons (workers/reminders.py) and the agent's
    cancel_appointment and reschedule_appointment tools ask it (a move frees the slot as a
    cancellation does); staff moves and cancellations are not limited."""
    return start_at > now and start_at - now >= timedelta(minutes=window_minutes)


def _hhmm(value: str) -> time:
    return time(int(value[:2]), int(value[3:5]))


def in_quiet(local: datetime, quiet: str) -> bool:
    """Whether local time `local` falls in `quiet` ("21:00-08:00": from 21:00 included to
    08:00 excluded; "" never)."""
    if not quiet:
        return False
    start, end, now = _hhmm(quiet[:5]), _hhmm(quiet[6:]), local.time()
    if start == end:
        return False
    return start <= now < end if start < end else (now >= start or now < end)


def due_time(start_at: datetime, lead_minutes: int, *, quiet: str, tz: ZoneInfo,
             booked_at: datetime) -> tuple[datetime | None, str]:
    """When the reminder `lead_minutes` before `start_at` goes out, and why it moved or is
    skipped: (due, "") on time; (due, reason) moved out of quiet hours; (None, reason)
    skipped. Aware UTC in and out; the quiet hours are local to `tz`."""
    due = start_at - timedelta(minutes=lead_minutes)
    if due <= booked_at:
        ahead = int((start_at - booked_at).total_seconds() // 60)
        return None, (f"booked {ahead} minutes before the start, inside the "
                      f"{lead_minutes}-minute lead time")
    local = due.astimezone(tz)
    if not in_quiet(local, quiet):
        return due, ""
    # instants are compared and moved in UTC: wall-clock arithmetic in `tz` goes wrong on a
    # day the clocks change (a quiet start right after a spring-forward gap, a fall-back hour)
    quiet_start = _instant(datetime.combine(local.date(), _hhmm(quiet[:5])), tz)
    if quiet_start > due:
        quiet_start = _instant(datetime.combine(local.date() - timedelta(days=1),
                                                _hhmm(quiet[:5])), tz)
    before = _out_of_quiet(quiet_start - QUIET_MARGIN, quiet, tz, step=-QUIET_MARGIN)
    if before is not None and booked_at < before < due:
        return before, f"due in quiet hours {quiet}: sent before they start"
    quiet_end = _instant(datetime.combine(local.date(), _hhmm(quiet[6:])), tz)
    if quiet_end <= due:
        quiet_end = _instant(datetime.combine(local.date() + timedelta(days=1),
                                              _hhmm(quiet[6:])), tz)
    after = _out_of_quiet(quiet_end, quiet, tz, step=QUIET_MARGIN)
    if after is not None and booked_at < after < start_at:
        return after, f"due in quiet hours {quiet}: sent when they end"
    return None, (f"due in quiet hours {quiet}, with no allowed moment between the booking "
                  "and the appointment")


def _instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant of naive local time `wall` in `tz` (an ambiguous time: its first
    occurrence; one in a spring-forward gap: as if the clocks had not moved yet)."""
    return wall.replace(tzinfo=tz, fold=0).astimezone(UTC)


def _out_of_quiet(moment: datetime, quiet: str, tz: ZoneInfo, *,
                  step: timedelta) -> datetime | None:
    """`moment`, or the nearest instant from it in `step`s (at most 3 h of them) that is not
    in quiet hours local to `tz` (a clock change can shift a computed edge into them)."""
    for _ in range(180):
        if not in_quiet(moment.astimezone(tz), quiet):
            return moment
        moment += step
    return None


def schedule(session: Session, tenant: Tenant, appointment: Appointment, *,
             now: datetime, start_at: datetime | None = None,
             leads: set[int] | None = None, held: bool | None = None) -> list[Reminder]:
    """Make the reminders of `appointment`'s visit, one per lead time of the tenant (or of
    `leads`), scheduled or skipped with the reason, for the visit's start `start_at` (default:
    the appointment's). Called in the booking's transaction (the agent's tool, staff).
    `held`: whether the visit is held for its deposit, when the caller knows (a visit it
    just created and held none for: False); None reads it."""
    assert appointment.id is not None and tenant.id is not None
    visit_id = appointment.visit_id or appointment.id
    if held is None:
        held = session.exec(select(Deposit.id).where(
            Deposit.visit_id == visit_id, Deposit.status == "held").limit(1)).first() is not None
    if held:
        return []  # issue 48: a visit held for its deposit is reminded once paid
    tz = ZoneInfo(tenant.timezone)
    start = start_at or appointment.start_at
    rows = []
    for lead in sorted({int(m) for m in tenant.reminder_lead_minutes or []})[:MAX_LEADS]:
        if leads is not None and lead not in leads:
            continue
        due, reason = due_time(start, lead, quiet=tenant.quiet_hours, tz=tz, booked_at=now)
        rows.append(Reminder(tenant_id=tenant.id,
                             appointment_id=appointment.visit_id or appointment.id,
                             lead_minutes=lead, due_at=due, reason=reason[:300],
                             status="scheduled" if due is not None else "skipped",
                             created_at=now, start_at=start))
    session.add_all(rows)
    session.flush()
    return rows


def reschedule(session: Session, tenant: Tenant, head: Appointment, *, start_at: datetime,
               now: datetime) -> list[Reminder]:
    """The visit of `head` now starts at `start_at` (one of its services moved or was
    cancelled): its reminders not queued yet are made again for that start; a lead time
    whose reminder already went out is not sent twice."""
    visit_id = head.visit_id or head.id
    assert visit_id is not None
    withdraw(session, visit_id, reason="the visit moved")
    rows = list(session.exec(select(Reminder).where(col(Reminder.appointment_id) == visit_id)))
    sent = {r.lead_minutes for r in rows if r.status == "queued" and not _withdrawn(session, r)}
    for row in rows:
        if row.lead_minutes not in sent:
            session.delete(row)
    session.flush()
    leads = {int(m) for m in tenant.reminder_lead_minutes or []} - sent
    return schedule(session, tenant, head, now=now, start_at=start_at, leads=leads)


def cancel_for(session: Session, appointment_id: int, *, reason: str) -> int:
    """The visit `appointment_id` was cancelled or moved: its reminders not sent yet are
    cancelled, and one queued but still waiting in the outbox (a rate limit's retry) is
    withdrawn (`withdraw`). Returns how many were cancelled."""
    result = session.exec(update(Reminder).where(
        col(Reminder.appointment_id) == appointment_id, col(Reminder.status) == "scheduled",
    ).values(status="cancelled", reason=reason[:300]))
    withdraw(session, appointment_id, reason=reason)
    return int(result.rowcount or 0)


def after_change(session: Session, tenant: Tenant, visit_id: int, *,
                 starts_at: datetime, reason: str, now: datetime) -> None:
    """One service of visit `visit_id` (which started at `starts_at`) was cancelled or moved:
    with nothing of it booked any more its reminders are cancelled (`cancel_for`), with a new
    start they are made again (`reschedule`), otherwise they stay, and one queued but not
    sent yet is written again from the visit as it is now (`requeue`)."""
    live = [r for r in session.exec(select(Appointment).where(
        or_(col(Appointment.visit_id) == visit_id, col(Appointment.id) == visit_id),
        col(Appointment.status) == "booked").order_by(col(Appointment.start_at)))]
    if not live:
        cancel_for(session, visit_id, reason=reason)
    elif live[0].start_at != starts_at:
        reschedule(session, tenant, live[0], start_at=live[0].start_at, now=now)
    else:
        requeue(session, visit_id, reason=reason, now=now)


def _withdrawn(session: Session, reminder: Reminder) -> bool:
    """Whether a queued reminder never went out: every part of its message refused."""
    statuses = session.exec(select(Outbound.status).where(
        Outbound.message_id == reminder.message_id)).all()
    return bool(statuses) and all(s == "refused" for s in statuses)


def requeue(session: Session, visit_id: int, *, reason: str, now: datetime) -> int:
    """The visit's services changed but not its start: its queued reminders still waiting in
    the outbox (`withdraw`) are scheduled again, due `now`, so the next pass renders them
    from the visit as it is then (never naming a service it no longer has). One already
    sent, or being sent, is left. Returns how many."""
    withdraw(session, visit_id, reason=reason)
    again = [r for r in session.exec(select(Reminder).where(
        col(Reminder.appointment_id) == visit_id, col(Reminder.status) == "queued")
        .execution_options(populate_existing=True)) if _withdrawn(session, r)]
    for row in again:
        row.status, row.due_at, row.message_id, row.queued_at = "scheduled", now, None, None
        session.add(row)
    session.flush()
    return len(again)


def withdraw(session: Session, visit_id: int, *, reason: str) -> int:
    """The outbox parts of the visit's queued reminders not sent yet (pending: waiting for a
    retry) become refused with `reason`, so a reminder never goes out naming a time the
    visit no longer has, and each such reminder's `delivery_status` says so (failed, with the
    reason in the console). Compare-and-set on pending: a part the outbox already claimed is
    left to it. Returns how many."""
    queued = select(Reminder.message_id).where(col(Reminder.appointment_id) == visit_id,
                                                col(Reminder.status) == "queued",
                                                col(Reminder.message_id).is_not(None))
    withdrawn = session.exec(update(Outbound).where(
        col(Outbound.message_id).in_(queued), col(Outbound.status) == "pending",
    ).values(status="refused", error_code=None, error_cause=None, retry_at=None,
             error_reason=f"not sent: {reason}"[:300]).returning(col(Outbound.message_id))
    ).all()
    for message_id in sorted({int(m) for m, in withdrawn}):  # the parts, then their replies:
        messages.refresh_delivery(session, message_id)  # the outbox's lock order
    return len(withdrawn)


def due(session: Session, *, now: datetime, limit: int,
        after: tuple[datetime, int] | None = None) -> list[Reminder]:
    """Scheduled reminders due at `now`, oldest due first, after the cursor `after` (the
    (due_at, id) of the previous page's last, so a page that could not be written is not read
    again in the same pass): one query on the partial index ix_reminder_scheduled_due (a pass
    with nothing due reads nothing else)."""
    statement = select(Reminder).where(col(Reminder.status) == "scheduled",
                                       col(Reminder.due_at) <= now)
    if after is not None:
        statement = statement.where(or_(col(Reminder.due_at) > after[0], and_(
            col(Reminder.due_at) == after[0], col(Reminder.id) > after[1])))
    return list(session.exec(statement.order_by(col(Reminder.due_at), col(Reminder.id))
                             .limit(limit)).all())


def claim(session: Session, reminder_id: int, *, status: str, now: datetime,
          reason: str = "", message_id: int | None = None) -> bool:
    """Compare-and-set scheduled → `status` (queued, skipped, cancelled): True for the one
    pass that wins, so a reminder is queued at most once."""
    result = session.exec(update(Reminder).where(
        col(Reminder.id) == reminder_id, col(Reminder.status) == "scheduled",
    ).values(status=status, reason=reason[:300], message_id=message_id, queued_at=now))
    return bool(result.rowcount)


def of_appointments(session: Session, appointment_ids: list[int]) -> dict[int, list[Reminder]]:
    """The reminders of these appointments, by appointment, by lead time (for views)."""
    found: dict[int, list[Reminder]] = {}
    if appointment_ids:
        for row in session.exec(select(Reminder).where(
                col(Reminder.appointment_id).in_(appointment_ids))
                .order_by(col(Reminder.lead_minutes).desc())):
            found.setdefault(row.appointment_id, []).append(row)
    return found


def record_notice(session: Session, appointment: Appointment, *, kind: str,
                  now: datetime) -> Notice:
    """The business cancelled (`kind` cancelled) or moved (moved) the appointment: a notice
    to the customer, pending until the next reminders pass writes and queues it."""
    assert appointment.id is not None
    notice = Notice(tenant_id=appointment.tenant_id, appointment_id=appointment.id, kind=kind,
                    created_at=now)
    session.add(notice)
    session.flush()
    return notice


def pending_notices(session: Session, *, limit: int) -> list[Notice]:
    """Notices not written yet, oldest first (the partial index ix_notice_pending)."""
    return list(session.exec(select(Notice).where(col(Notice.status) == "pending")
                             .order_by(col(Notice.id)).limit(limit)).all())


def last_notices(session: Session, appointment_ids: list[int]) -> dict[int, Notice]:
    """The latest notice of each of these appointments (for views)."""
    found: dict[int, Notice] = {}
    if appointment_ids:
        for row in session.exec(select(Notice).where(
                col(Notice.appointment_id).in_(appointment_ids)).order_by(col(Notice.id))):
            found[row.appointment_id] = row
    return found


def _mac(secret: str, tenant_id: int, contact_id: int, appointment_id: int, code: str) -> str:
    digest = hmac.new(secret.encode(), f"{tenant_id}:{contact_id}:{appointment_id}:{code}"
                      .encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode()[:22]


def button_payload(secret: str, appointment: Appointment, action: str) -> str:
    """The payload (button id) of a reminder's button: at most MAX_PAYLOAD ASCII characters."""
    assert appointment.id is not None
    code = ACTIONS[action]
    mac = _mac(secret, appointment.tenant_id, appointment.contact_id, appointment.id, code)
    payload = f"rm1:{appointment.id}:{code}:{mac}"
    assert len(payload) <= MAX_PAYLOAD and payload.isascii()
    return payload


def read_payload(text: str) -> tuple[int, str, str] | None:
    """(appointment id, action, mac) of the first reminder payload in `text`, unverified."""
    found = PAYLOAD_RE.search(text)
    if found is None:
        return None
    return int(found.group(1)), _ACTION_OF[found.group(2)], found.group(3)


def verified(secret: str, appointment: Appointment | None, action: str, mac: str, *,
             tenant_id: int, contact_id: int) -> bool:
    """Whether `mac` was made by this product for this tenant's contact, appointment and
    action (constant-time); False for an appointment of anyone else."""
    if appointment is None or appointment.id is None or appointment.tenant_id != tenant_id \
            or appointment.contact_id != contact_id:
        return False
    return hmac.compare_digest(mac, _mac(secret, tenant_id, contact_id, appointment.id,
                                         ACTIONS[action]))


def reminder_of_message(session: Session, message_id: int) -> Reminder | None:
    return session.exec(select(Reminder).where(Reminder.message_id == message_id)).first()


def summary(rows: list[Reminder]) -> list[dict[str, Any]]:
    """The reminders of one appointment as views show them."""
    return [{"lead_minutes": r.lead_minutes, "status": r.status, "reason": r.reason,
             "due_at": r.due_at.isoformat() if r.due_at else None} for r in rows]
