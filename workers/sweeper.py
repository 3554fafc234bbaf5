"""The inactivity sweeper: close conversations idle for longer than their tenant's timeout.

`find_due` is the choice: one query on the (status, due_at) index, in batches read in the
index's order (a batch stops after its rows: no sort of everything due, so 100k due close in
linear time), and a sweep with nothing due costs the same with ten or a million open
conversations. A closed row leaves the range, so the next batch needs no cursor; a busy one is
left out by id. `close_due` closes each batch with one compare-and-set (still open, still
due), so two schedulers, a restart or a slow run never close one twice, and a message that
lands meanwhile (moving `due_at`) keeps it open. A conversation whose turn is running is
skipped this time. Closing never deletes messages.
`sweep_inactive` is the job shell, guarded per period. It closes only what was due before the
oldest POST still waiting in the inbox (`sweep_horizon`): that POST may be the customer's
message that keeps the session open.
"""

from collections.abc import Callable, Collection
from datetime import datetime

import structlog
from sqlalchemy import Engine
from sqlmodel import Session, col, select, update

from core import clock, metrics
from storage import inbox
from storage.db import session_scope
from storage.keys import lock_key
from storage.models import Conversation
from workers.facts_hook import after_close
from workers.maintenance import run_once_per_period
from workers.runtime import get_runtime

log = structlog.get_logger(__name__)
BATCH = 2000


def find_due(session: Session, *, now: datetime, skip: Collection[int] = (),
             limit: int = BATCH) -> list[int]:
    """Ids of open conversations due for closing at `now` (due_at <= now), oldest due first,
    leaving out `skip`: at most `limit`, read in the (status, due_at) index's order, so the
    query stops after `limit` rows whatever the number due (no sort)."""
    statement = select(Conversation.id).where(
        Conversation.status == "open", col(Conversation.due_at) <= now)
    if skip:
        statement = statement.where(col(Conversation.id).not_in(list(skip)))
    rows = session.exec(statement.order_by(col(Conversation.due_at)).limit(limit)).all()
    return [int(cid) for cid in rows if cid is not None]


def sweep_horizon(engine: Engine, *, now: datetime) -> datetime:
    """`now`, or the receipt time of the oldest POST in the inbox when that is earlier: a
    message received before a conversation's due time but not yet stored must find it open."""
    _, oldest = inbox.backlog(engine)
    return now if oldest is None or oldest >= now else oldest


def close_due(engine: Engine, *, now: datetime, due_by: datetime | None = None,
              is_busy: Callable[[int], bool] = lambda _cid: False,
              on_closed: Callable[[int], object] = lambda _cid: None) -> int:
    """Close every conversation due at `due_by` (default `now`), with `closed_at` = `now`;
    returns how many this call closed.

    `is_busy(conversation_id)` skips one whose turn is running; `on_closed` runs after the
    commit for each one closed here (fact extraction).
    """
    cutoff = now if due_by is None else min(due_by, now)
    closed, busy = 0, set[int]()
    while True:
        with session_scope(engine) as session:
            ids = find_due(session, now=cutoff, skip=busy)
            busy.update(cid for cid in ids if is_busy(cid))
            mine = _close(session, [cid for cid in ids if cid not in busy], cutoff, now)
        for cid in mine:
            on_closed(cid)
        closed += len(mine)
        if len(ids) < BATCH:
            return closed


def _close(session: Session, conversation_ids: list[int], cutoff: datetime,
           now: datetime) -> list[int]:
    """One compare-and-set for the batch; returns the ids this call actually closed."""
    if not conversation_ids:
        return []
    result = session.exec(update(Conversation).where(  # type: ignore[call-overload]
        col(Conversation.id).in_(conversation_ids), col(Conversation.status) == "open",
        col(Conversation.due_at) <= cutoff,
    ).values(status="closed", closed_at=now).returning(Conversation.id))
    return sorted(int(row[0]) for row in result)


def sweep_inactive() -> int:
    """RQ job (enqueued by the cron process): close idle conversations at the product's clock.

    Guarded per period: a second scheduler's copy of the same period does nothing.
    """
    runtime = get_runtime()
    prefix = runtime.settings.redis_prefix

    def busy(conversation_id: int) -> bool:
        return bool(runtime.redis.exists(lock_key(prefix, "turn", conversation_id)))

    def closed(conversation_id: int) -> None:
        after_close(runtime, conversation_id)

    def sweep() -> int:
        now = clock.now()
        count = close_due(runtime.engine, now=now, due_by=sweep_horizon(runtime.engine, now=now),
                          is_busy=busy, on_closed=closed)
        log.info("sweep_done", closed=count)
        metrics.record(runtime.redis, prefix, metrics.inc("wagent_sweeps_total"),
                       metrics.inc("wagent_sweep_closed_total", amount=count))
        return count

    return run_once_per_period(runtime, "sweep", period_seconds=240, work=sweep) or 0
