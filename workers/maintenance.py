"""Periodic maintenance: retention purge, reconciliation of lost turns, the per-period guard.

Redis is not the source of truth: `reconcile_pending` finds customer messages waiting for a turn
longer than a threshold (a lost enqueue, a flushed Redis, a job that failed for good, a worker
killed mid-turn) whose conversation has no turn running and no job that will run, and enqueues
their turns again; the turn answers each message once whatever happens (its fence,
storage/fences.py, and the compare-and-set on the answered marks). Outbox parts left pending
past their due time get a flush job again the same way.
`purge_expired` removes the personal data of conversations closed longer ago than the tenant's
retention period (messages, summary, tool calls), in batches, keeping appointments and facts,
and the conversation row with its usage; `purge_retention` also deletes the dead letters older
than DEAD_LETTER_RETENTION_DAYS.
"""

from collections.abc import Callable
from datetime import datetime, timedelta

import structlog
from sqlalchemy import Engine
from sqlmodel import and_, col, delete, func, or_, select, update

from core import clock
from storage import dead_letters, inbox, media, webhooks
from storage.conversations import tenants_of
from storage.db import session_scope
from storage.jobs import (
    INBOX_KEY,
    consume_token,
    enqueue_drain,
    enqueue_flush,
    enqueue_turns,
    held_locks,
    stale_tokens,
)
from storage.keys import period_key, token_key
from storage.messages import mark_outbound, wamid_hash
from storage.models import Conversation, Message, Outbound, Tenant, ToolCall, WamidTombstone
from workers.handoffs import alert_unanswered
from workers.runtime import Runtime, get_runtime

log = structlog.get_logger(__name__)
# A message waiting this long with no turn running and no job that will run is lost: longer than
# a dead work horse's lock lives (TURN_LOCK_TIMEOUT) and than the debounce
RECONCILE_AFTER = timedelta(seconds=30)
RECONCILE_PERIOD_SECONDS = 15  # `wagent cron` enqueues the reconcile this often
BATCH = 200
MAX_PAGES = 500  # conversations reconciled per run at most: MAX_PAGES * BATCH


def run_once_per_period(runtime: Runtime, name: str, *, period_seconds: int,
                        work: Callable[[], int]) -> int | None:
    """Run `work` unless this period's run already happened (two schedulers, a restart): a
    Redis `SET NX` on the period's key, on the product's clock. None when skipped.
    """
    period = int(clock.now().timestamp()) // period_seconds
    key = period_key(runtime.settings.redis_prefix, name, period)
    if not runtime.redis.set(key, "1", nx=True, ex=period_seconds * 2):
        log.info("periodic_job_skipped", job=name, period=period)
        return None
    return work()


Cursor = tuple[datetime, int]  # (the oldest waiting message's received_at, conversation_id)


def find_pending(engine: Engine, *, now: datetime, older_than: timedelta = RECONCILE_AFTER,
                 after: Cursor | None = None, limit: int = BATCH) -> list[Cursor]:
    """Conversations with a customer message waiting for a turn longer than `older_than`, the
    longest waiting first: (received_at of its oldest waiting message, conversation_id), at
    most `limit`, after the cursor `after` (the last pair of the previous page), so one run
    pages through them all and a page whose turns keep failing cannot hide the rest. Reads
    the partial index of unanswered messages (ix_message_unanswered). A conversation staff
    handle is left out (storage/staff.py: its messages wait for them); once the staff state
    ends, what still waits is found here and answered by the agent."""
    oldest = func.min(Message.received_at)
    with_staff = select(Conversation.id).where(  # their messages wait for staff
        col(Conversation.id) == col(Message.conversation_id), Conversation.status == "open",
        col(Conversation.staff_until) > now).exists()
    statement = select(oldest, Message.conversation_id).where(
        col(Message.answered_at).is_(None), Message.direction == "inbound",
        col(Message.starts_turn).is_(True), col(Message.received_at) <= now - older_than,
        ~with_staff,
    ).group_by(col(Message.conversation_id))
    if after is not None:
        statement = statement.having(or_(oldest > after[0], and_(
            oldest == after[0], col(Message.conversation_id) > after[1])))
    with session_scope(engine) as session:
        rows = session.exec(statement.order_by(oldest, col(Message.conversation_id))
                            .limit(limit)).all()
    return [(at, int(cid)) for at, cid in rows]


STALE_SENDING = timedelta(minutes=10)


def settle_stale_sends(engine: Engine, *, now: datetime) -> int:
    """Sends claimed long ago and never finished (the worker died around the Graph call): they
    may or may not have gone out, so they are not sent again (never twice) but marked
    `unknown`, with an error log for the on-call engineer. Stale by the claim (`claimed_at`,
    STALE_SENDING ago: far past the Graph call's timeout), not by the row's age (a part retried
    for hours is old and in a live call); each written by a compare-and-set, so a send that
    finished meanwhile keeps its outcome. Returns how many.
    """
    cutoff = now - STALE_SENDING
    settled = 0
    with session_scope(engine) as session:
        rows = session.exec(select(Outbound).where(
            Outbound.status == "sending",
            func.coalesce(Outbound.claimed_at, Outbound.created_at) <= cutoff,
        ).limit(BATCH)).all()
        for row in rows:
            assert row.id is not None
            if mark_outbound(session, row.id, status="unknown", now=now, cause="crashed",
                             reason="the worker stopped during the send; it may not have gone "
                             "out", attempts=row.attempts + 1, claimed_before=cutoff) is None:
                continue
            settled += 1
            log.error("send_outcome_unknown_after_crash", outbound_id=row.id,
                      conversation_id=row.conversation_id)
    return settled


def find_stranded_sends(engine: Engine, *, now: datetime,
                        older_than: timedelta = RECONCILE_AFTER,
                        limit: int = BATCH) -> list[int]:
    """Conversations with an outbox part still pending longer than `older_than` after it was
    due (its `retry_at`, else its creation): the flush job that should have sent it was lost
    (a flushed Redis, a job that failed for good). Tenants paused by a 190 wait for `resume`."""
    due = func.coalesce(Outbound.retry_at, Outbound.created_at)
    with session_scope(engine) as session:
        rows = session.exec(select(Outbound.conversation_id).join(
            Tenant, col(Tenant.id) == col(Outbound.tenant_id)).where(
            Outbound.status == "pending", Tenant.sending_paused_reason == "",
            due <= now - older_than).distinct().limit(limit)).all()
    return sorted({int(cid) for cid in rows})


INBOX_STALE = timedelta(minutes=1)


def reconcile_inbox(runtime: Runtime, *, now: datetime) -> bool:
    """Enqueue a fresh drain when the inbox holds an entry older than INBOX_STALE (the drain
    could not be enqueued, or its job died holding the token); True when it did. The old
    token is dropped first; two drains at once take different entries."""
    waiting, oldest = inbox.backlog(runtime.engine)
    if not waiting or oldest is None or now - oldest < INBOX_STALE:
        return False
    prefix = runtime.settings.redis_prefix
    runtime.redis.delete(token_key(prefix, "inbox", INBOX_KEY))
    enqueue_drain(runtime.queue, prefix)
    log.warning("reconciled_inbox", entries=waiting,
                oldest_age_s=round((now - oldest).total_seconds()))
    return True


def reconcile_pending(runtime: Runtime, *, now: datetime,
                      older_than: timedelta = RECONCILE_AFTER, batch: int = BATCH) -> int:
    """Enqueue a turn for every conversation with a forgotten message (and a drain for a
    forgotten inbox, a flush for a stranded send, and settle sends a crash left claimed);
    returns how many turn jobs were
    actually enqueued. `older_than` 0 (after Redis came back empty) takes every waiting
    message; `batch` conversations a page, MAX_PAGES pages at most."""
    reconcile_inbox(runtime, now=now)
    settle_stale_sends(runtime.engine, now=now)
    _reflush_stranded(runtime, now=now)
    alert_unanswered(runtime, now=now)  # handoffs nobody picked up (workers/handoffs.py)
    enqueued = waiting = 0
    after: Cursor | None = None
    for _ in range(MAX_PAGES):
        page = find_pending(runtime.engine, now=now, older_than=older_than, after=after,
                            limit=batch)
        enqueued += _enqueue_lost(runtime, [cid for _, cid in page], now=now)
        waiting += len(page)
        if len(page) < batch:
            break
        after = page[-1]
    if enqueued:
        log.warning("reconciled_lost_turns", enqueued=enqueued, waiting=waiting)
    return enqueued


def _enqueue_lost(runtime: Runtime, conversation_ids: list[int], *, now: datetime) -> int:
    """Enqueue the turns of these conversations but those whose turn is running (its lock is
    held); a token whose job will never run (`storage.jobs.stale_tokens`) is dropped first,
    a live one coalesces. Returns how many jobs were made."""
    if not conversation_ids:
        return 0
    prefix, redis = runtime.settings.redis_prefix, runtime.redis
    running = held_locks(redis, prefix, "turn", conversation_ids)
    free = [cid for cid in conversation_ids if cid not in running]
    for conversation_id, job_id in stale_tokens(runtime.queue, prefix, "turn", free,
                                                now=now).items():
        consume_token(redis, prefix, "turn", conversation_id, job_id)
        log.info("reconcile_dropped_stale_token", conversation_id=conversation_id,
                 stale_job_id=job_id)
    with session_scope(runtime.engine) as session:  # the fair move's tags (storage/jobs.py)
        tenants = tenants_of(session, free)
    made = enqueue_turns(runtime.queue, prefix, free,
                         job_timeout=runtime.settings.turn_job_timeout, tenants=tenants)
    return sum(1 for job_id in made.values() if job_id)


def _reflush_stranded(runtime: Runtime, *, now: datetime) -> int:
    """A flush job for every conversation whose outbox part is past its due time
    (`find_stranded_sends`), after dropping a `send` token whose job will never run; returns
    how many flush jobs were made."""
    stranded = find_stranded_sends(runtime.engine, now=now)
    if not stranded:
        return 0
    prefix, redis = runtime.settings.redis_prefix, runtime.redis
    for conversation_id, job_id in stale_tokens(runtime.queue, prefix, "send", stranded,
                                                now=now).items():
        consume_token(redis, prefix, "send", conversation_id, job_id)
    made = sum(1 for c in stranded if enqueue_flush(runtime.queue, prefix, c))
    log.warning("reconciled_stranded_sends", conversations=len(stranded), enqueued=made)
    return made


def purge_expired(engine: Engine, *, now: datetime) -> int:
    """Purge closed conversations past their tenant's retention; returns how many."""
    purged = 0
    with session_scope(engine) as session:
        tenants = session.exec(select(Tenant.id, Tenant.retention_days)).all()
    for tenant_id, days in tenants:
        with session_scope(engine) as session:  # bytes never outlive retention, open or not
            media.delete_older_than(session, tenant_id or 0, now - timedelta(days=days))
        while True:
            with session_scope(engine) as session:
                ids = [int(i) for i in session.exec(select(Conversation.id).where(
                    Conversation.tenant_id == tenant_id, Conversation.status == "closed",
                    col(Conversation.purged_at).is_(None),
                    col(Conversation.closed_at) <= now - timedelta(days=days),
                ).limit(BATCH)).all() if i is not None]
                _purge(session, ids, now)
            purged += len(ids)
            if len(ids) < BATCH:
                break
    if purged:
        log.info("retention_purged", conversations=purged)
    return purged


def _purge(session, ids: list[int], now: datetime) -> None:  # type: ignore[no-untyped-def]
    if not ids:
        return
    wamids = [w for w in session.exec(select(Message.wamid).where(
        col(Message.conversation_id).in_(ids), col(Message.wamid).is_not(None))).all() if w]
    for wamid in wamids:  # a redelivery of a purged message is still recognised
        if session.get(WamidTombstone, wamid_hash(wamid)) is None:
            session.add(WamidTombstone(wamid_hash=wamid_hash(wamid), created_at=now))
    session.exec(delete(ToolCall).where(col(ToolCall.conversation_id).in_(ids)))
    media.delete_for_conversations(session, ids)
    session.exec(delete(Message).where(col(Message.conversation_id).in_(ids)))
    session.exec(update(Conversation).where(col(Conversation.id).in_(ids)).values(
        summary="", context_block="", purged_at=now))


def reconcile(recovery: bool = False) -> int:
    """RQ job: re-enqueue forgotten turns. From `wagent cron` every RECONCILE_PERIOD_SECONDS,
    once per period; with `recovery` (a keeper found Redis empty, workers/keeper.py) at once
    and for every waiting message, however recent."""
    runtime = get_runtime()
    if recovery:
        return reconcile_pending(runtime, now=clock.now(), older_than=timedelta(0))
    return run_once_per_period(runtime, "reconcile", period_seconds=RECONCILE_PERIOD_SECONDS,
                               work=lambda: reconcile_pending(runtime, now=clock.now())) or 0


def purge_retention() -> int:
    """RQ job (cron): the retention purge, once per period."""
    runtime = get_runtime()
    return run_once_per_period(runtime, "retention", period_seconds=3600, work=lambda: purge_all(
        runtime.engine, now=clock.now(),
        dead_letter_retention_days=runtime.settings.dead_letter_retention_days)) or 0


def purge_all(engine: Engine, *, now: datetime, dead_letter_retention_days: int,
              dead_letter_batch: int = dead_letters.BATCH) -> int:
    """The retention purge: expired conversations, dead letters older than
    `dead_letter_retention_days` (`dead_letter_batch` a transaction), and finished webhook
    deliveries past `storage.webhooks.LOG_RETENTION`; returns how many of them all."""
    conversations = purge_expired(engine, now=now)
    letters = dead_letters.purge_expired(engine, now=now, batch=dead_letter_batch,
                                         retention_days=dead_letter_retention_days)
    if letters:
        log.info("retention_purged_dead_letters", dead_letters=letters)
    with session_scope(engine) as session:
        deliveries = webhooks.purge_finished(session, now=now)
    if deliveries:
        log.info("retention_purged_webhook_deliveries", deliveries=deliveries)
    return conversations + letters + deliveries
