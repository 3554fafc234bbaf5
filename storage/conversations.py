"""Conversations: one open session per contact; a stale one closes when the next message comes."""

from datetime import datetime, timedelta

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from storage.models import Conversation


def open_or_get(session: Session, *, tenant_id: int, contact_id: int, now: datetime,
                inactivity_timeout: timedelta) -> Conversation:
    """The contact's open conversation, or a new one when none is open or the open one is idle
    for longer than `inactivity_timeout` (it is closed here, even before the sweeper runs).
    """
    current = get_open(session, contact_id)
    if current is not None and now - current.last_activity_at <= inactivity_timeout:
        return current
    if current is not None:
        close(session, current, now=now)
    conversation = Conversation(tenant_id=tenant_id, contact_id=contact_id, status="open",
                                last_activity_at=now, due_at=now + inactivity_timeout,
                                opened_at=now)
    try:
        with session.begin_nested():
            session.add(conversation)
    except IntegrityError:  # another process opened it first (partial unique index)
        found = get_open(session, contact_id)
        assert found is not None
        return found
    return conversation


def touch(conversation: Conversation, *, now: datetime, inactivity_timeout: timedelta) -> None:
    """Record activity (either side): the sweeper's due time moves with it."""
    conversation.last_activity_at = now
    conversation.due_at = now + inactivity_timeout


def get_open(session: Session, contact_id: int) -> Conversation | None:
    return session.exec(select(Conversation).where(
        Conversation.contact_id == contact_id, Conversation.status == "open")).first()


def close(session: Session, conversation: Conversation, *, now: datetime) -> None:
    conversation.status = "closed"
    conversation.closed_at = now
    session.add(conversation)
    session.flush()


def latest_for_contact(session: Session, contact_id: int) -> Conversation | None:
    return session.exec(select(Conversation).where(Conversation.contact_id == contact_id)
                        .order_by(Conversation.id.desc())).first()  # type: ignore[union-attr]
