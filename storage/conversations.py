"""Conversations: one open session per contact; a stale one closes when the next message comes."""

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, update
from sqlmodel import Session, col, select

from storage.messages import insert_rows, prepared, row_values, upsert
from storage.models import Conversation


def inactivity_timeout(minutes: int) -> timedelta:
    """A tenant's `inactivity_timeout_minutes` as the session's inactivity timeout."""
    return timedelta(minutes=minutes)


def due_at(last_activity_at: datetime, inactivity_timeout: timedelta) -> datetime:
    """When the sweeper closes a conversation last active at `last_activity_at` (its `due_at`
    column): the tenant's inactivity timeout later (ARCHITECTURE.md, Session end). The one
    place a due time is computed."""
    return last_activity_at + inactivity_timeout


def is_stale(last_activity_at: datetime, *, now: datetime, inactivity_timeout: timedelta) -> bool:
    """True when a conversation last active at `last_activity_at` has been idle for longer than
    the inactivity timeout at `now`: the contact's next message opens a new one (it is closed
    then, even before the sweeper runs). The one place staleness is decided."""
    return now - last_activity_at > inactivity_timeout


def open_new(session: Session, *, tenant_id: int, contact_id: int, now: datetime,
             inactivity_timeout: timedelta, last_inbound_at: datetime | None = None) -> int | None:
    """Open a conversation for the contact in one round trip (`INSERT … ON CONFLICT DO
    NOTHING RETURNING id`); None when another transaction opened one first (the partial
    unique index: at most one open per contact). On PostgreSQL a concurrent insert is waited
    for, never turned into an error that would redo the whole update.
    """
    connection, statement = prepared(session, "open_conversation", _build_open_new)
    new_id = connection.execute(statement, row_values(Conversation(
        tenant_id=tenant_id, contact_id=contact_id, status="open", last_activity_at=now,
        due_at=due_at(now, inactivity_timeout), opened_at=now, last_inbound_at=last_inbound_at,
    ))).scalar()
    return None if new_id is None else int(new_id)


def _build_open_new(dialect: str) -> Any:
    table = Conversation.__table__  # type: ignore[attr-defined]
    return upsert(dialect, table).on_conflict_do_nothing().returning(table.c.id)


def close_if_open(session: Session, conversation_id: int, *, now: datetime) -> bool:
    """Close a stale conversation; False when it was no longer open (someone closed it)."""
    result = session.execute(update(Conversation).where(
        Conversation.id == conversation_id, Conversation.status == "open",  # type: ignore[arg-type]
    ).values(status="closed", closed_at=now))
    return bool(result.rowcount)  # type: ignore[attr-defined]


def record_inbound(session: Session, conversation_id: int, *, now: datetime,
                   inactivity_timeout: timedelta, last_inbound_at: datetime) -> None:
    """A customer message arrived: activity, the sweeper's due time and the last inbound time,
    in one UPDATE."""
    connection, statement = prepared(session, "conversation_by_id", _build_update_by_id)
    connection.execute(statement, {"_id": conversation_id, "last_activity_at": now,
                                   "due_at": due_at(now, inactivity_timeout),
                                   "last_inbound_at": last_inbound_at})


def _build_update_by_id(_: str) -> Any:
    """UPDATE conversation … WHERE id = :_id; the SET clause comes from the parameters."""
    table = Conversation.__table__  # type: ignore[attr-defined]
    return update(table).where(table.c.id == bindparam("_id"))


def open_many(session: Session, rows: list[dict[str, Any]]) -> dict[int, int]:
    """Open conversations (each the values of every column but the id) in one statement (`ON
    CONFLICT DO NOTHING`: at most one open per contact); returns contact_id -> new
    conversation id for those opened."""
    return {int(r.contact_id): int(r.id) for r in insert_rows(
        session, Conversation.__table__,  # type: ignore[attr-defined]
        rows, returning=("id", "contact_id"))}


def close_many(session: Session, conversation_ids: list[int], *, now: datetime) -> list[int]:
    """Close stale conversations; returns those this call closed (not already closed)."""
    if not conversation_ids:
        return []
    table = Conversation.__table__  # type: ignore[attr-defined]
    result = session.connection().execute(
        update(table).where(table.c.id.in_(conversation_ids), table.c.status == "open")
        .values(status="closed", closed_at=now).returning(table.c.id))
    return [int(i) for i in result.scalars()]


def record_inbound_many(session: Session, values: list[dict[str, Any]]) -> None:
    """`record_inbound` for many conversations (each dict: `_id`, `last_activity_at`,
    `due_at`, `last_inbound_at`), in one executemany."""
    if values:
        connection, statement = prepared(session, "conversation_by_id", _build_update_by_id)
        connection.execute(statement, values)


def touch(conversation: Conversation, *, now: datetime, inactivity_timeout: timedelta) -> None:
    """Record activity (either side): the sweeper's due time moves with it."""
    conversation.last_activity_at = now
    conversation.due_at = due_at(now, inactivity_timeout)


def touch_values(*, now: datetime, inactivity_timeout: timedelta) -> dict[str, datetime]:
    """`touch` as the values of an UPDATE of the conversation (a writer that does not read
    the row)."""
    return {"last_activity_at": now, "due_at": due_at(now, inactivity_timeout)}


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


def with_staff(conversation: Conversation, now: datetime) -> bool:
    """True while staff handle `conversation` at `now` (its `staff_until` is later, and it is
    open): its customer messages are stored and marked handled by staff, no turn answers
    them and nothing is marked read (storage/staff.py). The one place this is decided."""
    until = conversation.staff_until
    return conversation.status == "open" and until is not None and until > now


def tenants_of(session: Session, conversation_ids: list[int]) -> dict[int, int]:
    """conversation_id -> tenant_id for those of `conversation_ids` that exist (one query):
    the tag of the jobs enqueued for them (storage/jobs.job_id_for)."""
    if not conversation_ids:
        return {}
    rows = session.exec(select(Conversation.id, Conversation.tenant_id).where(
        col(Conversation.id).in_(conversation_ids))).all()
    return {int(cid): int(tid) for cid, tid in rows if cid is not None}
