"""Store parsed webhook updates: one transaction per update, each isolated from the others.

Synchronous (SQLModel sessions); the web handler runs it in a thread.
"""

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import structlog
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlmodel import Session, select

from bot.errors import StoreUnavailable
from bot.inbound import (
    BadItem,
    ErrorNotice,
    IdentityChange,
    InboundMessage,
    StatusUpdate,
    Update,
    is_envelope,
    parse_update,
)
from storage import contacts, conversations, messages, tenants
from storage.db import session_scope
from storage.models import Message, Outbound, Tenant

log = structlog.get_logger(__name__)

WA_TYPE_CHARS = 32  # Message.wa_type (storage/models.py)
PROFILE_NAME_CHARS = 200  # Contact.profile_name


@dataclass
class IngestResult:
    """What one webhook POST did: conversations needing a turn, and counts by outcome."""

    turn_conversation_ids: list[int] = field(default_factory=list)
    closed_conversation_ids: list[int] = field(default_factory=list)  # stale sessions ended
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1


def ingest_body(engine: Engine, body: bytes, *, now: datetime) -> IngestResult:
    """Decode, parse and store one signed webhook body (run in a thread: a 3 MB body does not
    block the event loop, and deep nesting meets a fresh stack).

    A body that is not JSON, or JSON that is not a webhook envelope, is kept whole, byte for
    byte, in the dead letters (DESIGN.md Data flow 1). Raises StoreUnavailable when the
    database is down.
    """
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:
        reason = f"unparsable body: {type(exc).__name__}: {exc}"[:500]
    else:
        if is_envelope(payload):
            return store_updates(engine, parse_update(payload), now=now)
        reason = "not a webhook envelope (no entry[])"
    store_unparsable(engine, body, reason, now=now)
    log.warning("webhook_unparsable_body", size=len(body), reason=reason[:100])
    result = IngestResult()
    result.count("unparsable")
    return result


def store_updates(engine: Engine, updates: list[Update], *, now: datetime) -> IngestResult:
    """Store every update; a failing one goes to the dead letters, the others still land.

    Raises StoreUnavailable when the database itself is down (the POST must get a 503).
    """
    result = IngestResult()
    for update in updates:
        try:
            outcome, conversation_id = _store_retrying(engine, update, now,
                                                       result.closed_conversation_ids)
        except (OperationalError, DBAPIError) as exc:
            if _is_disconnect(exc):
                raise StoreUnavailable(_describe(exc)) from exc
            outcome, conversation_id = _dead_letter(engine, update, exc, now), None
        except StoreUnavailable:
            raise
        except Exception as exc:  # one bad update must lose nothing else
            outcome, conversation_id = _dead_letter(engine, update, exc, now), None
        result.count(outcome)
        if conversation_id is not None and conversation_id not in result.turn_conversation_ids:
            result.turn_conversation_ids.append(conversation_id)
    return result


def _store_retrying(engine: Engine, update: Update, now: datetime,
                    closed: list[int]) -> tuple[str, int | None]:
    """Store one update; once more when a unique index refused it.

    Another web process can insert the same contact, conversation or message between our read
    and our insert (Meta redelivers and batches concurrently). The refused transaction rolled
    back whole; the retry reads the other process's committed row instead of losing the update.
    """
    try:
        return _store_one(engine, update, now, closed)
    except IntegrityError as exc:
        log.info("webhook_update_retried", kind=type(update).__name__, error=type(exc).__name__)
        return _store_one(engine, update, now, closed)


def store_unparsable(engine: Engine, body: bytes, reason: str, *, now: datetime) -> None:
    """Keep a body that is not JSON (or not a webhook) whole for inspection.

    Raises StoreUnavailable when the database is down; any other refusal is logged and the
    body dropped (a 503 would only bring the same bad body back for 7 days).
    """
    try:
        with session_scope(engine) as session:
            messages.add_dead_letter(session, body=body, reason=reason.replace("\x00", ""),
                                     now=now)
    except (OperationalError, DBAPIError) as exc:
        if _is_disconnect(exc):
            raise StoreUnavailable(_describe(exc)) from exc
        log.error("dead_letter_refused", error=type(exc).__name__, size=len(body))


def _store_one(engine: Engine, update: Update, now: datetime,
               closed: list[int]) -> tuple[str, int | None]:
    if isinstance(update, InboundMessage):
        return _store_message(engine, update, now, closed)
    if isinstance(update, StatusUpdate):
        return _store_status(engine, update, now), None
    if isinstance(update, IdentityChange):
        return _store_identity_change(engine, update, now), None
    if isinstance(update, ErrorNotice):
        log.warning("webhook_error_notice", code=update.code, title=update.title,
                    phone_number_id=update.phone_number_id)
        return "error_notice", None
    assert isinstance(update, BadItem)
    store_unparsable(engine, _dump(update.raw), f"{update.where}: {update.reason}", now=now)
    log.warning("webhook_bad_item", where=update.where, reason=update.reason)
    return "dead_letter", None


def _store_message(engine: Engine, msg: InboundMessage, now: datetime,
                   closed: list[int]) -> tuple[str, int | None]:
    with session_scope(engine) as session:
        if messages.is_tombstoned(session, msg.wamid):  # an erased contact's redelivery
            log.info("inbound_erased_redelivery")
            return "duplicate", None
        existing = messages.get_by_wamid(session, msg.wamid)
        if existing is not None:
            log.info("inbound_duplicate", conversation_id=existing.conversation_id)
            pending = existing.starts_turn and existing.answered_at is None
            return "duplicate", existing.conversation_id if pending else None
        tenant = tenants.get_by_phone_number_id(session, msg.phone_number_id)
        if tenant is None:  # kept for inspection: a number being onboarded loses nothing
            log.warning("unknown_phone_number_id", phone_number_id=msg.phone_number_id)
            messages.add_dead_letter(session, body=json.dumps(msg.raw, default=str).encode(),
                                     reason=f"unknown phone_number_id {msg.phone_number_id}",
                                     now=now)
            return "unknown_tenant", None
        assert tenant.id is not None
        contact = contacts.find_or_create(session, tenant_id=tenant.id, wa_id=msg.wa_id,
                                          user_id=msg.user_id, profile_name=_fit(
                                              msg.profile_name, PROFILE_NAME_CHARS), now=now)
        assert contact.id is not None
        previous = conversations.get_open(session, contact.id)
        conversation = conversations.open_or_get(
            session, tenant_id=tenant.id, contact_id=contact.id, now=now,
            inactivity_timeout=timedelta(minutes=tenant.inactivity_timeout_minutes))
        if previous is not None and previous.id != conversation.id and previous.id is not None:
            closed.append(previous.id)  # a stale session ended here: extract its facts
        assert conversation.id is not None
        row, created = messages.insert_inbound(session, Message(
            tenant_id=tenant.id, conversation_id=conversation.id, role="user",
            direction="inbound", content=[{"type": "text", "text": stamp(
                msg.text, now, tenant, sent_at=customer_sent_at(msg.timestamp, now))}],
            wamid=msg.wamid, wa_type=_fit(msg.wa_type, WA_TYPE_CHARS),
            meta_timestamp=msg.timestamp, received_at=now,
            starts_turn=msg.starts_turn, answered_at=None if msg.starts_turn else now))
        if not created:
            return "duplicate", None
        conversations.touch(conversation, now=now, inactivity_timeout=timedelta(
            minutes=tenant.inactivity_timeout_minutes))
        sent_at = customer_sent_at(msg.timestamp, now)
        conversation.last_inbound_at = _latest(conversation.last_inbound_at, sent_at)
        contact.last_inbound_at = _latest(contact.last_inbound_at, sent_at)
        session.add_all([conversation, contact])
        log.info("inbound_stored", tenant_id=tenant.id, conversation_id=conversation.id,
                 wa_type=msg.wa_type, message_id=row.id)
        log.debug("inbound_text", text=msg.text, wa_id=msg.wa_id)
        return "message", conversation.id if msg.starts_turn else None


def _fit(text: str | None, size: int) -> str | None:
    """`text` cut to its column's size: PostgreSQL refuses a longer VARCHAR, and a customer's
    message must not be dead-lettered for a long profile name or a new message type."""
    return text[:size] if text else text


LATE_AFTER = timedelta(minutes=15)  # Meta redelivers after outages, sometimes hours late


def stamp(text: str, received_at: datetime, tenant: Tenant, *,
          sent_at: datetime | None = None) -> str:
    """Prefix the received time in the tenant's timezone, e.g. "[Mon 2026-06-01 10:00] oi".

    The time lives in the message itself so `system` stays byte-identical between turns and the
    cached prefix survives (DESIGN.md: time without cache misses). A message delivered more
    than 15 minutes after the customer sent it says so, so the answer can acknowledge the delay.
    """
    zone = ZoneInfo(tenant.timezone)
    local = received_at.astimezone(zone)
    late = ""
    if sent_at is not None and received_at - sent_at > LATE_AFTER:
        late = f", delivered late: sent {sent_at.astimezone(zone):%a %H:%M}"
    return f"[{local:%a %Y-%m-%d %H:%M}{late}] {text}"


def customer_sent_at(meta_timestamp: datetime | None, now: datetime) -> datetime:
    """When the customer sent it: Meta's timestamp, never in the future. It starts the 24-hour
    customer service window (reference/whatsapp.md §6), not our receipt time.
    """
    return min(meta_timestamp, now) if meta_timestamp is not None else now


def _latest(current: datetime | None, candidate: datetime) -> datetime:
    return candidate if current is None or candidate > current else current


def _store_status(engine: Engine, status: StatusUpdate, now: datetime) -> str:
    """Advance the delivery state of our send, only under the tenant that sent it (the status
    names its `phone_number_id`); an unknown wamid or number changes nothing."""
    with session_scope(engine) as session:
        tenant = tenants.get_by_phone_number_id(session, status.phone_number_id)
        if tenant is None or not _sent_by(session, tenant, status.wamid):
            log.info("status_unknown_wamid", status=status.status)
            return "status_unknown"
        row = messages.apply_status(session, wamid=status.wamid, status=status.status,
                                    error_code=status.error_code,
                                    error_reason=status.error_reason, now=now)
    if row is None:
        log.info("status_unknown_wamid", status=status.status)
        return "status_unknown"
    if status.status == "failed":
        log.warning("outbound_failed", conversation_id=row.conversation_id,
                    error_code=status.error_code)
    return "status"


def _sent_by(session: Session, tenant: Tenant, wamid: str) -> bool:
    return session.exec(select(Outbound.id).where(
        Outbound.wamid == wamid, Outbound.tenant_id == tenant.id)).first() is not None


def _store_identity_change(engine: Engine, change: IdentityChange, now: datetime) -> str:
    with session_scope(engine) as session:
        tenant = tenants.get_by_phone_number_id(session, change.phone_number_id)
        if tenant is None or tenant.id is None:
            return "unknown_tenant"
        contact = contacts.rekey(session, tenant_id=tenant.id, kind=change.kind,
                                 old_wa_id=change.old_wa_id,
                                 old_user_id=change.old_user_id, new_wa_id=change.new_wa_id,
                                 new_user_id=change.new_user_id, now=now)
    log.info("contact_rekeyed", kind=change.kind, found=contact is not None)
    return "identity_change"


def _dead_letter(engine: Engine, update: Update, exc: Exception, now: datetime) -> str:
    log.error("webhook_update_failed", kind=type(update).__name__, error=type(exc).__name__)
    raw = getattr(update, "raw", None) or update.__dict__
    store_unparsable(engine, _dump(raw),
                     f"{type(update).__name__}: {type(exc).__name__}: {exc}", now=now)
    return "dead_letter"


def _dump(raw: object) -> bytes:
    """An item as JSON bytes for the dead letters; a marker when it cannot be serialised (an
    item nested deeper than the encoder's recursion limit)."""
    try:
        return json.dumps(raw, default=str).encode()
    except (RecursionError, ValueError, TypeError) as exc:
        return json.dumps({"unserializable": type(raw).__name__,
                           "error": type(exc).__name__}).encode()


def _describe(exc: DBAPIError) -> str:
    """The driver's error without SQLAlchemy's statement and parameters: those carry phone
    numbers and message text, which reach the logs only at DEBUG (DESIGN.md Authority)."""
    orig = exc.orig or exc
    first_line = (str(orig).splitlines() or [""])[0]
    return f"{type(orig).__name__}: {first_line}"[:300]


def _is_disconnect(exc: DBAPIError) -> bool:
    return bool(getattr(exc, "connection_invalidated", False)) or isinstance(exc, OperationalError)
