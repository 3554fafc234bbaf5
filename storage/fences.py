"""Fencing tokens: a turn that lost its conversation's lock can neither write nor send.

The per-conversation Redis lock (`storage.keys.lock_key`) is short and refreshed while a turn
runs (`workers.jobs.held_lock`), so a dead work horse frees it within seconds. A horse that is
alive but starved of CPU (`WORKER_CPU=idle` next to a busy web process) or paused outlives its
lock too, and meanwhile a second turn takes it. Redis cannot stop the first turn's writes; the
database can. `take` bumps the conversation's fence when a turn takes the lock; while that turn
runs inside `fenced(conversation_id, fence)`, every `storage.db.session_scope` begins by
checking the fence is still its own (`check_current`), holding a share lock on the fence row
until it commits (PostgreSQL; SQLite's `BEGIN IMMEDIATE` already serialises every transaction).
A later `take` therefore waits for a transaction already past its check, and every transaction
begun after it raises TurnFenced: the stale turn stops there, and sends nothing, since the
outbox claims a row in a transaction before each Graph call (workers/outbox.py).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from sqlmodel import Session, literal, select

from storage.errors import TurnFenced
from storage.messages import upsert
from storage.models import Conversation, TurnFence

_CURRENT: ContextVar[tuple[int, int] | None] = ContextVar("turn_fence", default=None)


def take(session: Session, conversation_id: int) -> int | None:
    """Bump the conversation's fence and return the new value (the taker's token); None when
    the conversation does not exist. One statement (`INSERT ... ON CONFLICT DO UPDATE`)."""
    table = TurnFence.__table__  # type: ignore[attr-defined]
    dialect = session.get_bind().dialect.name
    statement = upsert(dialect, table).from_select(
        ["conversation_id", "fence"],
        select(Conversation.id, literal(1)).where(Conversation.id == conversation_id),
    ).on_conflict_do_update(index_elements=["conversation_id"],
                            set_={"fence": table.c.fence + 1}).returning(table.c.fence)
    fence = session.connection().execute(statement).scalar()
    return None if fence is None else int(fence)


@contextmanager
def fenced(conversation_id: int, fence: int) -> Iterator[None]:
    """Every transaction opened in this context (this thread) checks the fence first."""
    token = _CURRENT.set((conversation_id, fence))
    try:
        yield
    finally:
        _CURRENT.reset(token)


@contextmanager
def unfenced() -> Iterator[None]:
    """For recording what already happened outside (a send Graph accepted, tokens a call
    used): true whoever holds the lock now, so a fenced-out turn still records it."""
    token = _CURRENT.set(None)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def check_current(session: Session) -> None:
    """Raise TurnFenced unless the fence of `fenced(...)` (if any) is the conversation's
    latest; on PostgreSQL the fence row stays share-locked until this transaction ends."""
    current = _CURRENT.get()
    if current is None:
        return
    conversation_id, fence = current
    statement = select(TurnFence.fence).where(TurnFence.conversation_id == conversation_id)
    if session.get_bind().dialect.name == "postgresql":
        statement = statement.with_for_update(read=True)  # FOR SHARE: `take` waits for us
    latest = session.exec(statement).first()
    if latest != fence:
        raise TurnFenced(f"conversation {conversation_id}: fence {fence} is not the latest "
                         f"({latest}); another turn took the lock")
