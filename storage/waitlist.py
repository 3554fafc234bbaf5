"""The waitlist (issue 47): customers waiting for a slot in a window, and the freed slot
offered to one of them and held.

- An entry is a window: a local day, optional local starts after/before, a service, optionally
  a professional (`WaitlistEntry`). It expires at the window's end (`ends_at`). A customer
  holds at most MAX_ENTRIES waiting entries; the same window twice is one entry.
- An offer holds one slot (professional, start) for one entry until `offer_expires_at` (the
  tenant's `waitlist_hold_minutes`). A held slot is busy for every other booking and offer
  (agent/tools/availability.busy_intervals reads `holds`); its own Quero takes it. At
  most one live offer of one slot: the partial unique index `uq_waitlist_entry_offered_slot`.
- A Não posso, or a hold that expired, puts the entry back to waiting with the slot in
  `passed` (never offered to it again); the next pass offers the slot to the next entry.
- The buttons' ids (`button_payload`): `wl1:<entry id>:<offered start, UTC
  YYYYMMDDHHMM>:<y|n>:<mac>`, at most 128 ASCII characters (Meta's limit on a reply button's
  id, Sources: WhatsApp §5.2), signed like a reminder's (storage/reminders.py), so a forged or
  another customer's id is refused and an old offer's button is told apart from the current.
"""

import base64
import hashlib
import hmac
import re
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import Select
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from storage.models import Tenant, WaitlistEntry

MAX_ENTRIES = 5  # waiting entries per customer
LIVE = ("waiting", "offered")
PAYLOAD_RE = re.compile(r"wl1:([0-9]{1,10}):([0-9]{12}):([yn]):([A-Za-z0-9_-]{22})")
_STAMP = "%Y%m%d%H%M"
UTC = ZoneInfo("UTC")


def window_end(tenant: Tenant, day: date, before: str) -> datetime:
    """The aware UTC end of a window on local `day`: its `before` ("HH:MM") or the day's end."""
    tz = ZoneInfo(tenant.timezone)
    if before:
        return datetime.combine(day, time.fromisoformat(before), tz).astimezone(UTC)
    return datetime.combine(day + timedelta(days=1), time(0), tz).astimezone(UTC)


def join(session: Session, tenant: Tenant, *, contact_id: int, service_id: int,
         professional_id: int | None, day: date, after: str, before: str,
         now: datetime) -> tuple[WaitlistEntry, bool]:
    """(the entry, whether it is new) for this window: the customer's live entry for the
    same window, or a new one. ValueError when the window already ended or the customer
    holds MAX_ENTRIES live entries."""
    ends_at = window_end(tenant, day, before)
    if ends_at <= now:
        raise ValueError("that window has already ended")
    live = of_contact(session, tenant.id or 0, contact_id, now=now)
    same = next((e for e in live if (e.service_id, e.professional_id, e.day, e.after,
                                     e.before) == (service_id, professional_id, day, after,
                                                   before)), None)
    if same is not None:
        return same, False
    if len(live) >= MAX_ENTRIES:
        raise ValueError(f"this customer is already waiting in {len(live)} windows, the "
                         f"most ({MAX_ENTRIES}); one must be left first")
    entry = WaitlistEntry(tenant_id=tenant.id or 0, contact_id=contact_id,
                          service_id=service_id, professional_id=professional_id, day=day,
                          after=after, before=before, ends_at=ends_at, created_at=now)
    session.add(entry)
    session.flush()
    return entry, True


def of_contact(session: Session, tenant_id: int, contact_id: int, *,
               now: datetime) -> list[WaitlistEntry]:
    """The customer's live entries (waiting or offered, not ended), by day then id."""
    return list(session.exec(select(WaitlistEntry).where(
        WaitlistEntry.tenant_id == tenant_id, WaitlistEntry.contact_id == contact_id,
        col(WaitlistEntry.status).in_(LIVE), col(WaitlistEntry.ends_at) > now)
        .order_by(col(WaitlistEntry.day), col(WaitlistEntry.id))).all())


def leave(session: Session, tenant_id: int, contact_id: int, *, day: date | None,
          now: datetime) -> int:
    """The customer leaves their live entries (of `day` only, when given): how many. A held
    slot is given back (the next pass offers it to the next entry)."""
    left = 0
    for entry in of_contact(session, tenant_id, contact_id, now=now):
        if day is None or entry.day == day:
            entry.status = "left"
            session.add(entry)
            left += 1
    session.flush()
    return left


def of_day(session: Session, tenant_id: int, day: date) -> list[WaitlistEntry]:
    """Every entry of the tenant's local `day` (any status), in waiting order (for staff)."""
    return list(session.exec(select(WaitlistEntry).where(
        WaitlistEntry.tenant_id == tenant_id, WaitlistEntry.day == day)
        .order_by(col(WaitlistEntry.id))).all())


def waiting(session: Session, *, now: datetime, limit: int) -> list[WaitlistEntry]:
    """Entries waiting in a window not ended, first come first served (by id)."""
    return list(session.exec(select(WaitlistEntry).where(
        WaitlistEntry.status == "waiting", col(WaitlistEntry.ends_at) > now)
        .order_by(col(WaitlistEntry.id)).limit(limit)).all())


def slot_key(professional_id: int, start: datetime) -> str:
    return f"{professional_id}@{start.astimezone(UTC):%Y-%m-%dT%H:%M}"


def hold(session: Session, tenant: Tenant, entry: WaitlistEntry, professional_id: int,
         start: datetime, end: datetime, *, now: datetime) -> None:
    """Hold [start, end) of `professional_id` (`end`: the visit's end plus its service's
    buffer) for `entry`, the tenant's `waitlist_hold_minutes` from `now`; its message is
    written by the next pass (workers/waitlist.send_offer). IntegrityError when that slot
    is already held for another entry."""
    entry.status, entry.offer_professional_id = "offered", professional_id
    entry.offer_start_at, entry.offer_end_at = start, end
    entry.offer_expires_at = now + timedelta(minutes=tenant.waitlist_hold_minutes)
    entry.offer_message_id = None
    session.add(entry)
    session.flush()


def release(entry: WaitlistEntry) -> None:
    """The entry's offer ends without a booking (Não posso, the hold expired, staff): back to
    waiting, its slot passed."""
    if entry.offer_professional_id is not None and entry.offer_start_at is not None:
        key = slot_key(entry.offer_professional_id, entry.offer_start_at)
        entry.passed = [*(entry.passed or []), key]
    entry.status = "waiting"
    entry.offer_professional_id = entry.offer_start_at = entry.offer_end_at = None
    entry.offer_expires_at = None


def end_stale(session: Session, *, now: datetime) -> tuple[int, int]:
    """(holds released, entries expired): every offer whose hold ran out goes back to
    waiting (`release`), and every live entry whose window ended expires."""
    released = 0
    for entry in session.exec(select(WaitlistEntry).where(
            WaitlistEntry.status == "offered", col(WaitlistEntry.offer_expires_at) <= now)
            .with_for_update()):
        release(entry)
        session.add(entry)
        released += 1
    session.flush()
    expired = 0
    for entry in session.exec(select(WaitlistEntry).where(
            col(WaitlistEntry.status).in_(LIVE), col(WaitlistEntry.ends_at) <= now)
            .with_for_update()):
        entry.status = "expired"
        session.add(entry)
        expired += 1
    session.flush()
    return released, expired


def holds(session: Session, professional_ids: Sequence[int], since: datetime,
          until: datetime, *, now: datetime | None = None) -> list[tuple[int, datetime, datetime]]:
    """(professional id, start, end) of every live offer of these professionals overlapping
    [since, until): held and, at `now` when given, not run out (one read; an entry taking
    its offer leaves `offered` first)."""
    rows = session.execute(held_intervals(professional_ids, since, until, now=now))
    return [(pid or 0, start, end) for pid, start, end in rows if start and end]


def held_intervals(professional_ids: Sequence[int], since: datetime, until: datetime, *,
                   now: datetime | None = None
                   ) -> Select[int | None, datetime | None, datetime | None]:
    """The select of `holds`: (professional id, start, end) of the live offers (a part of
    agent/tools/availability.busy_intervals' one read)."""
    live = [col(WaitlistEntry.offer_expires_at) > now] if now is not None else []
    return sa_select(col(WaitlistEntry.offer_professional_id), col(WaitlistEntry.offer_start_at),
                     col(WaitlistEntry.offer_end_at)).where(
        col(WaitlistEntry.status) == "offered", *live,
        col(WaitlistEntry.offer_professional_id).in_(list(professional_ids)),
        col(WaitlistEntry.offer_start_at) < until, col(WaitlistEntry.offer_end_at) > since)


def unsent_offers(session: Session, *, limit: int) -> list[int]:
    """Ids of the held offers whose message is not written yet (just held, by the pass or by
    staff by hand), oldest first."""
    return [e.id for e in session.exec(select(WaitlistEntry).where(
        WaitlistEntry.status == "offered", col(WaitlistEntry.offer_message_id).is_(None))
        .order_by(col(WaitlistEntry.id)).limit(limit)) if e.id is not None]


def locked(session: Session, entry_id: int) -> WaitlistEntry | None:
    """Entry `entry_id`, locked until the transaction ends and read fresh."""
    return session.exec(select(WaitlistEntry).where(WaitlistEntry.id == entry_id)
                        .with_for_update().execution_options(populate_existing=True)).first()


# -- buttons ---------------------------------------------------------------------------------

def _mac(secret: str, entry: WaitlistEntry, stamp: str, code: str) -> str:
    digest = hmac.new(secret.encode(), f"wl:{entry.tenant_id}:{entry.contact_id}:{entry.id}:"
                      f"{stamp}:{code}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode()[:22]


def button_payload(secret: str, entry: WaitlistEntry, start: datetime, accept: bool) -> str:
    """The id of an offer's Quero (`accept`) or Não posso button (module docstring)."""
    code, stamp = "y" if accept else "n", f"{start.astimezone(UTC):{_STAMP}}"
    return f"wl1:{entry.id}:{stamp}:{code}:{_mac(secret, entry, stamp, code)}"


def read_payload(text: str) -> tuple[int, datetime, bool, str, str] | None:
    """(entry id, offered start, accept, stamp+code, mac) of the first offer button id in
    `text`, unverified; None when there is none."""
    found = PAYLOAD_RE.search(text)
    if found is None:
        return None
    try:
        start = datetime.strptime(found.group(2), _STAMP).replace(tzinfo=UTC)
    except ValueError:
        return None
    return (int(found.group(1)), start, found.group(3) == "y",
            f"{found.group(2)}:{found.group(3)}", found.group(4))


def verified(secret: str, entry: WaitlistEntry | None, signed: str, mac: str, *,
             tenant_id: int, contact_id: int) -> bool:
    """Whether `mac` was made by this product for this tenant's contact and entry
    (constant-time); False for anyone else's entry."""
    if entry is None or entry.tenant_id != tenant_id or entry.contact_id != contact_id:
        return False
    stamp, code = signed.split(":")
    return hmac.compare_digest(mac, _mac(secret, entry, stamp, code))
