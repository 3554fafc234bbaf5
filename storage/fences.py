"""Fencing tokens: a turn that lost its conversation's lock can neither write nor send.

The per-conversation Redis lock (`storage.keys.lock_key`) is short and refreshed while a turn
runs (`workers.jobs.held_lock`), so a dead work horse frees it within seconds. A horse that is
alive but starved of CPU (`WORKER_CPU=idle` next to a busy web process) or paused outlives its
lock too, and meanwhile a second turn takes it. Redis cannot stop the first turn's writes; the
database can. `take` bumps the conversation's fence when a turn takes the lock; while that turn
runs inside `fenced(conversation_id, fence)`, every `storage.db.session_scope` begins by
checking the fence is still its own (`check_current`), holding a shared advisory lock on the
conversation's fence key until it commits (PostgreSQL; SQLite's `BEGIN IMMEDIATE` already
serialises every transaction), which `take` takes exclusively before bumping the fence. A later
`take` therefore waits for a transaction already past its check, and every transaction begun
after it raises TurnFenced: the stale turn stops there, and sends nothing, since the
outbox claims a row in a transaction before each Graph call (workers/outbox.py).

An advisory lock, not `SELECT ... FOR SHARE` on the fence row (issue 43): a row lock gives even
a read-only transaction a transaction id, so its commit waits for a WAL flush; an advisory lock
allocates none. The lock and the read go in one round trip as two statements, the read after
the lock: in READ COMMITTED each statement takes its own snapshot, so the read sees a fence that
a `take` committed while the lock waited (one statement would read its older snapshot).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from sqlmodel import Session, literal, select

from storage import batched
from storage.errors import TurnFenced
from storage.messages import upsert
from storage.models import Conversation, TurnFence

FENCE_LOCK = 43  # the advisory-lock class of fence keys: (FENCE_LOCK, conversation_id)
_CURRENT: ContextVar[tuple[int, int] | None] = ContextVar("turn_fence", default=None)


def take(session: Session, conversation_id: int) -> int | None:
    """Bump the conversation's fence and return the new value (the taker's token); None when
    the conversation does not exist. One statement (`INSERT ... ON CONFLICT DO UPDATE`), after
    the fence key's exclusive advisory lock on PostgreSQL (waits for every transaction past
    its check; held until this transaction ends), the two in one round trip there."""
    table = TurnFence.__table__  # type: ignore[attr-defined]
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return _lock_and_bump(session, conversation_id)
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
    latest; on PostgreSQL the fence key stays share-locked until this transaction ends."""
    current = _CURRENT.get()
    if current is None:
        return
    conversation_id, fence = current
    if session.get_bind().dialect.name == "postgresql":
        latest = _lock_and_read(session, conversation_id)
    else:
        latest = session.exec(select(TurnFence.fence).where(
            TurnFence.conversation_id == conversation_id)).first()
    if latest != fence:
        raise TurnFenced(f"conversation {conversation_id}: fence {fence} is not the latest "
                         f"({latest}); another turn took the lock")


def _lock_and_bump(session: Session, conversation_id: int) -> int | None:
    """`take` on PostgreSQL: the fence key's exclusive advisory lock, then the bump, in one
    round trip (storage/batched.py: the bump's snapshot is taken once the lock is granted)."""
    key, name = int(conversation_id), TurnFence.__tablename__
    row = batched.last_row(session, [
        f"SELECT pg_advisory_xact_lock({FENCE_LOCK}, {key})",
        f"INSERT INTO {name} (conversation_id, fence) "
        f"SELECT id, 1 FROM {Conversation.__tablename__} WHERE id = {key} "
        f"ON CONFLICT (conversation_id) DO UPDATE SET fence = {name}.fence + 1 "
        f"RETURNING fence"])
    return None if row is None else int(row[0])


def _lock_and_read(session: Session, conversation_id: int) -> int | None:
    """The fence key's shared advisory lock (`take` waits for it), then the fence as committed
    once the lock is granted: one round trip, two statements (storage/batched.py)."""
    key = int(conversation_id)
    row = batched.last_row(session, [
        f"SELECT pg_advisory_xact_lock_shared({FENCE_LOCK}, {key})",
        f"SELECT fence FROM {TurnFence.__tablename__} WHERE conversation_id = {key}"])
    return None if row is None else int(row[0])

