"""Store parsed webhook updates: one transaction per update, each isolated from the others.

Synchronous (SQLModel sessions); the web handler runs it in a thread.
"""

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import structlog
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from bot.errors import StoreUnavailable
from bot.inbound import BadItem, ErrorNotice, IdentityChange, InboundMessage, StatusUpdate, Update
from storage import contacts, conversations, messages, tenants
from storage.db import session_scope
from storage.models import Message, Tenant

log = structlog.get_logger(__name__)


@dataclass
class IngestResult:
    """What one webhook POST did: conversations needing a turn, and counts by outcome."""

    turn_conversation_ids: list[int] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1


def store_updates(engine: Engine, updates: list[Update], *, now: datetime) -> IngestResult:
    """Store every update; a failing one goes to the dead letters, the others still land.

    Raises StoreUnavailable when the database itself is down (the POST must get a 503).
    """
    result = IngestResult()
    for update in updates:
        try:
            outcome, conversation_id = _store_one(engine, update, now)
        except (OperationalError, DBAPIError) as exc:
            if _is_disconnect(exc):
                raise StoreUnavailable(str(exc)) from exc
            outcome, conversation_id = _dead_letter(engine, update, exc, now), None
        except Exception as exc:  # one bad update must lose nothing else
            outcome, conversation_id = _dead_letter(engine, update, exc, now), None
        result.count(outcome)
        if conversation_id is not None and conversation_id not in result.turn_conversation_ids:
            result.turn_conversation_ids.append(conversation_id)
    return result


def store_unparsable(engine: Engine, body: bytes, reason: str, *, now: datetime) -> None:
    """Keep a body that is not JSON (or not a webhook) whole for inspection."""
    try:
        with session_scope(engine) as session:
            messages.add_dead_letter(session, body=body, reason=reason, now=now)
    except (OperationalError, DBAPIError) as exc:
        raise StoreUnavailable(str(exc)) from exc


def _store_one(engine: Engine, update: Update, now: datetime) -> tuple[str, int | None]:
    if isinstance(update, InboundMessage):
        return _store_message(engine, update, now)
    if isinstance(update, StatusUpdate):
        return _store_status(engine, update, now), None
    if isinstance(update, IdentityChange):
        return _store_identity_change(engine, update, now), None
    if isinstance(update, ErrorNotice):
        log.warning("webhook_error_notice", code=update.code, title=update.title,
                    phone_number_id=update.phone_number_id)
        return "error_notice", None
    assert isinstance(update, BadItem)
    store_unparsable(engine, json.dumps(update.raw, default=str).encode(),
                     f"{update.where}: {update.reason}", now=now)
    log.warning("webhook_bad_item", where=update.where, reason=update.reason)
    return "dead_letter", None


def _store_message(engine: Engine, msg: InboundMessage, now: datetime) -> tuple[str, int | None]:
    with session_scope(engine) as session:
        existing = messages.get_by_wamid(session, msg.wamid)
        if existing is not None:
            log.info("inbound_duplicate", conversation_id=existing.conversation_id)
            pending = existing.starts_turn and existing.answered_at is None
            return "duplicate", existing.conversation_id if pending else None
        tenant = tenants.get_by_phone_number_id(session, msg.phone_number_id)
        if tenant is None:
            log.warning("unknown_phone_number_id", phone_number_id=msg.phone_number_id)
            return "unknown_tenant", None
        assert tenant.id is not None
        contact = contacts.find_or_create(session, tenant_id=tenant.id, wa_id=msg.wa_id,
                                          user_id=msg.user_id, profile_name=msg.profile_name,
                                          now=now)
        assert contact.id is not None
        conversation = conversations.open_or_get(
            session, tenant_id=tenant.id, contact_id=contact.id, now=now,
            inactivity_timeout=timedelta(minutes=tenant.inactivity_timeout_minutes))
        assert conversation.id is not None
        row, created = messages.insert_inbound(session, Message(
            tenant_id=tenant.id, conversation_id=conversation.id, role="user",
            direction="inbound", content=[{"type": "text", "text": stamp(msg.text, now, tenant)}],
            wamid=msg.wamid, wa_type=msg.wa_type, meta_timestamp=msg.timestamp, received_at=now,
            starts_turn=msg.starts_turn, answered_at=None if msg.starts_turn else now))
        if not created:
            return "duplicate", None
        conversation.last_activity_at = now
        conversation.last_inbound_at = now
        contact.last_inbound_at = now
        session.add_all([conversation, contact])
        log.info("inbound_stored", tenant_id=tenant.id, conversation_id=conversation.id,
                 wa_type=msg.wa_type, message_id=row.id)
        log.debug("inbound_text", text=msg.text, wa_id=msg.wa_id)
        return "message", conversation.id if msg.starts_turn else None


def stamp(text: str, received_at: datetime, tenant: Tenant) -> str:
    """Prefix the received time in the tenant's timezone, e.g. "[Mon 2026-06-01 10:00] oi".

    The time lives in the message itself so `system` stays byte-identical between turns and the
    cached prefix survives (DESIGN.md: time without cache misses).
    """
    local = received_at.astimezone(ZoneInfo(tenant.timezone))
    return f"[{local:%a %Y-%m-%d %H:%M}] {text}"


def _store_status(engine: Engine, status: StatusUpdate, now: datetime) -> str:
    with session_scope(engine) as session:
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


def _store_identity_change(engine: Engine, change: IdentityChange, now: datetime) -> str:
    with session_scope(engine) as session:
        tenant = tenants.get_by_phone_number_id(session, change.phone_number_id)
        if tenant is None or tenant.id is None:
            return "unknown_tenant"
        contact = contacts.rekey(session, tenant_id=tenant.id, old_wa_id=change.old_wa_id,
                                 old_user_id=change.old_user_id, new_wa_id=change.new_wa_id,
                                 new_user_id=change.new_user_id, now=now)
    log.info("contact_rekeyed", kind=change.kind, found=contact is not None)
    return "identity_change"


def _dead_letter(engine: Engine, update: Update, exc: Exception, now: datetime) -> str:
    log.error("webhook_update_failed", kind=type(update).__name__, error=type(exc).__name__)
    raw = getattr(update, "raw", None) or update.__dict__
    store_unparsable(engine, json.dumps(raw, default=str).encode(),
                     f"{type(update).__name__}: {type(exc).__name__}: {exc}", now=now)
    return "dead_letter"


def _is_disconnect(exc: DBAPIError) -> bool:
    return bool(getattr(exc, "connection_invalidated", False)) or isinstance(exc, OperationalError)
