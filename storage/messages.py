"""Messages, the outbox, delivery statuses, usage rows and dead letters."""

import hashlib
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select, update

from storage.models import DeadLetter, Message, Outbound, WamidTombstone

STATUS_RANK = {"pending": 0, "sending": 1, "sent": 2, "delivered": 3, "read": 4, "played": 4}
TERMINAL = {"failed", "refused"}


def wamid_hash(wamid: str) -> str:
    return hashlib.sha256(wamid.encode()).hexdigest()


def is_tombstoned(session: Session, wamid: str) -> bool:
    """True when `wamid` belonged to an erased contact (a redelivery must not be answered)."""
    return session.get(WamidTombstone, wamid_hash(wamid)) is not None


def get_by_wamid(session: Session, wamid: str) -> Message | None:
    return session.exec(select(Message).where(Message.wamid == wamid)).first()


def insert_inbound(session: Session, message: Message) -> tuple[Message, bool]:
    """Store an inbound message once per wamid. Returns (row, created).

    A redelivery (same wamid) returns the stored row and False, even under a race between two
    web processes (the unique index decides).
    """
    assert message.wamid
    existing = get_by_wamid(session, message.wamid)
    if existing is not None:
        return existing, False
    try:
        with session.begin_nested():
            session.add(message)
    except IntegrityError:
        existing = get_by_wamid(session, message.wamid)
        assert existing is not None
        return existing, False
    return message, True


def append(session: Session, *, tenant_id: int, conversation_id: int, role: str,
           direction: str, content: list[dict[str, Any]], now: datetime) -> Message:
    """Add one history message (assistant content or a user message of tool results) at the
    next position. Callers hold the conversation's turn lock.
    """
    message = Message(tenant_id=tenant_id, conversation_id=conversation_id, role=role,
                      direction=direction, content=content, received_at=now, starts_turn=False,
                      answered_at=now, position=_next_position(session, conversation_id))
    session.add(message)
    session.flush()
    return message


def assign_positions(session: Session, conversation_id: int) -> int:
    """Place every inbound message not yet in the history at its end, in the order the
    customer sent them.

    Returns the highest position of the history (0 when empty). Callers hold the turn lock.
    """
    position = _next_position(session, conversation_id) - 1
    # Meta orders nothing: a burst takes the order the customer sent it in (Meta's
    # timestamp, seconds), then arrival
    waiting = session.exec(select(Message).where(
        Message.conversation_id == conversation_id, col(Message.position).is_(None),
    ).order_by(func.coalesce(Message.meta_timestamp, Message.received_at),
               col(Message.id))).all()
    for message in waiting:
        position += 1
        message.position = position
        session.add(message)
    session.flush()
    return position


def _next_position(session: Session, conversation_id: int) -> int:
    current = session.exec(select(func.max(Message.position)).where(
        Message.conversation_id == conversation_id)).one()
    return int(current or 0) + 1


def history(session: Session, conversation_id: int, *, after_id: int = 0) -> list[Message]:
    """The history after message `after_id` (the summary's end), in position order."""
    after = 0
    if after_id:
        marker = session.get(Message, after_id)
        after = marker.position or 0 if marker is not None else 0
    return list(session.exec(select(Message).where(
        Message.conversation_id == conversation_id, col(Message.position) > after,
    ).order_by(col(Message.position))).all())


def pending_inbound(session: Session, conversation_id: int) -> list[Message]:
    """Customer messages that start a turn and are not answered yet, oldest first."""
    return list(session.exec(select(Message).where(
        Message.conversation_id == conversation_id, Message.direction == "inbound",
        col(Message.starts_turn).is_(True), col(Message.answered_at).is_(None),
    ).order_by(col(Message.id))).all())


def mark_answered(session: Session, conversation_id: int, *, up_to_position: int,
                  now: datetime, reason: str | None = None) -> int:
    """Mark inbound messages placed at or before `up_to_position` handled (`reason` says why
    when they were not answered); returns how many.
    """
    result = session.exec(update(Message).where(
        col(Message.conversation_id) == conversation_id, col(Message.direction) == "inbound",
        col(Message.position) <= up_to_position, col(Message.answered_at).is_(None),
    ).values(answered_at=now, status_reason=reason))
    return int(result.rowcount or 0)


def add_outbound(session: Session, *, message: Message, parts: list[str], to: str | None,
                 recipient: str | None, now: datetime, kind: str = "text") -> list[Outbound]:
    """Queue the parts of a reply in the outbox (one row per part, unique per message).
    `kind` "template": each part is an approved template's name.
    """
    assert message.id is not None
    rows = [Outbound(tenant_id=message.tenant_id, conversation_id=message.conversation_id,
                     message_id=message.id, part=i, kind=kind, to=to, recipient=recipient,
                     body=body, created_at=now) for i, body in enumerate(parts)]
    session.add_all(rows)
    session.flush()
    return rows


def unsent_outbound(session: Session, conversation_id: int) -> list[Outbound]:
    return list(session.exec(select(Outbound).where(
        Outbound.conversation_id == conversation_id, Outbound.status == "pending",
    ).order_by(col(Outbound.id))).all())


def skip_rest_of_reply(session: Session, row: Outbound, reason: str) -> int:
    """After a part failed for good, the later parts of the same reply are not sent (they would
    arrive later, out of context)."""
    result = session.exec(update(Outbound).where(
        col(Outbound.message_id) == row.message_id, col(Outbound.part) > row.part,
        col(Outbound.status) == "pending",
    ).values(status="failed", error_reason=reason))
    return int(result.rowcount or 0)


def claim_outbound(session: Session, outbound_id: int) -> bool:
    """pending → sending, atomically; False when someone else claimed it (never send twice)."""
    result = session.exec(update(Outbound).where(
        col(Outbound.id) == outbound_id, col(Outbound.status) == "pending",
    ).values(status="sending"))
    return bool(result.rowcount)


def apply_status(session: Session, *, wamid: str, status: str, error_code: int | None,
                 error_reason: str | None, now: datetime) -> Outbound | None:
    """Advance the delivery state of our send `wamid`: monotonic (sent < delivered < read),
    failed is terminal. Returns the row, or None for an unknown wamid.
    """
    row = session.exec(select(Outbound).where(Outbound.wamid == wamid)).first()
    if row is None:
        return None
    if row.status in TERMINAL:
        return row
    if status == "failed":
        row.status, row.error_code, row.error_reason = "failed", error_code, error_reason
    elif STATUS_RANK.get(status, -1) > STATUS_RANK.get(row.status, -1):
        row.status = "read" if status == "played" else status
    else:
        return row
    row.status_at = now
    session.add(row)
    message = session.get(Message, row.message_id)
    if message is not None:
        message.delivery_status = row.status
        session.add(message)
    session.flush()
    return row


def add_dead_letter(session: Session, *, body: bytes, reason: str, now: datetime) -> None:
    session.add(DeadLetter(received_at=now, reason=reason[:2000], body=body))
    session.flush()
