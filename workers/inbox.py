"""Draining the inbox: webhook POSTs a web process accepted under load, stored now.

`drain_inbox` (RQ job, at most one queued or draining) claims up to BATCH entries at a time,
oldest first, stores each POST exactly as the web process would have (`bot.webhook.
store_posts`, with the POST's own receipt time: the message's time stamp and the inactivity
timeout read it), deletes the entries, and goes on until the inbox has stayed empty for
LINGER_SECONDS. While it drains it keeps its coalescing token, so POSTs spilled meanwhile
enqueue no other drain (a work horse is forked per job: one long drain is cheaper than many
short ones). It gives the token back once the inbox is empty, then looks once more, so an entry
committed just before is never left behind. After MAX_SECONDS it hands over to a new drain
queued behind the turns that waited meanwhile. Entries it cannot store for lack of Redis or
the database stay for the job's retry, or for the periodic reconcile (`workers.maintenance`).
"""

import time

import structlog
from redis.exceptions import RedisError
from rq import get_current_job
from sqlalchemy.exc import DBAPIError

from core import clock, metrics
from core.faults import crash_point
from intake.errors import StoreUnavailable
from intake.failures import describe, store_unparsable
from intake.posts import Stores, store_posts
from storage import inbox
from storage.jobs import INBOX_KEY, TOKEN_TTL_SECONDS, consume_token, enqueue_drain
from storage.keys import token_key
from workers.runtime import Runtime, get_runtime

log = structlog.get_logger(__name__)
BATCH = 200  # POSTs stored per transaction of `intake.group.store_group`
LINGER_SECONDS = 0.5  # an empty inbox is polled this long before the job ends
POLL_SECONDS = 0.05
MAX_SECONDS = 30.0  # then a fresh drain, queued behind the turns waiting meanwhile, takes over


def drain_inbox(conversation_id: int = INBOX_KEY, attempt: int = 1) -> int:
    """RQ job: drain the inbox; returns how many POSTs it stored. `conversation_id` is always
    INBOX_KEY (the coalescing key of the product's one inbox); `attempt` is unused (RQ's
    Retry re-runs a failed drain, whose entries are still there).

    The last attempt's failure gives the token back, so the next spilled POST enqueues a new
    drain instead of waiting for the reconcile (an earlier attempt keeps it for RQ's retry:
    one drain at a time). A failure is raised without its database cause: RQ logs a failed
    job's traceback at ERROR and keeps it for days, and SQLAlchemy's message carries the
    statement's parameters (phone numbers, names, text).
    """
    job = get_current_job()
    runtime = get_runtime()
    try:
        return drain(runtime, job_id=job.id if job else None)
    except Exception as exc:
        if job is not None and not job.retries_left:  # no retry of RQ's will hold it
            try:
                consume_token(runtime.redis, runtime.settings.redis_prefix, "inbox", INBOX_KEY,
                              job.id)
            except RedisError:
                pass  # Redis is what failed: the reconcile enqueues a drain later
        if isinstance(exc, StoreUnavailable):
            raise StoreUnavailable(str(exc)) from None
        if isinstance(exc, DBAPIError):
            raise StoreUnavailable(describe(exc)) from None
        raise


def drain(runtime: Runtime, *, job_id: str | None, linger: float = LINGER_SECONDS,
          max_seconds: float = MAX_SECONDS) -> int:
    """Store inbox entries until it stays empty for `linger` seconds; returns how many.

    `job_id`: the job holding the inbox's token (None when called directly, as tests and the
    replay do: there is no token then). Raises StoreUnavailable when the database or Redis
    fails; the entries of the failed batch are kept.
    """
    prefix = runtime.settings.redis_prefix
    started = time.monotonic()
    total = 0
    while True:
        idle_since = time.monotonic()
        while True:
            stored = drain_batch(runtime)
            total += stored
            now = time.monotonic()
            if stored:
                idle_since = now
            elif now - idle_since >= linger:
                break
            else:
                time.sleep(POLL_SECONDS)
            if job_id is not None and now - started > max_seconds:
                # behind the queued turns: under sustained load a worker alternates between
                # storing POSTs and answering them, instead of storing for as long as it lasts
                consume_token(runtime.redis, prefix, "inbox", INBOX_KEY, job_id)
                enqueue_drain(runtime.queue, prefix, at_front=False)
                log.info("inbox_drain_handed_over", posts=total)
                return total
        if job_id is None:
            return total
        crash_point("before_inbox_token_back")
        consume_token(runtime.redis, prefix, "inbox", INBOX_KEY, job_id)
        waiting, _ = inbox.backlog(runtime.engine)  # committed before the token went
        if not waiting or not runtime.redis.set(token_key(prefix, "inbox", INBOX_KEY), job_id,
                                                nx=True, ex=TOKEN_TTL_SECONDS):
            return total  # empty, or a drain enqueued since then takes over


def drain_batch(runtime: Runtime, limit: int = BATCH) -> int:
    """Store the oldest `limit` entries and delete them; returns how many (0: empty).

    A POST whose storing raised something else than StoreUnavailable (a bug) is kept whole in
    the dead letters, so one bad entry cannot stop the inbox. Raises StoreUnavailable.
    """
    stores = Stores(engine=runtime.engine, settings=runtime.settings, queue=runtime.queue)
    with inbox.claim(runtime.engine, limit) as entries:
        if not entries:
            return 0
        outcomes = store_posts(stores, [(e.body, e.received_at) for e in entries],
                               spill_updates=0)  # already in the inbox
        for outcome in outcomes:
            if isinstance(outcome, StoreUnavailable):
                raise outcome  # the entries stay: the retry stores what this one did not
        counts: dict[str, int] = {}
        costs: dict[str, int] = {}
        for entry, outcome in zip(entries, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.error("inbox_entry_failed", entry_id=entry.id,
                          error=type(outcome).__name__)
                store_unparsable(runtime.engine, entry.body,
                                 f"inbox: {type(outcome).__name__}: {outcome}"[:500],
                                 now=entry.received_at)
                counts["dead_letter"] = counts.get("dead_letter", 0) + 1
                continue
            for kind, amount in outcome.counts.items():
                counts[kind] = counts.get(kind, 0) + amount
            for category, micro_usd in outcome.whatsapp_micro_usd.items():
                costs[category] = costs.get(category, 0) + micro_usd
        lag = (clock.now() - entries[0].received_at).total_seconds()
    metrics.record(runtime.redis, runtime.settings.redis_prefix, *(
        metrics.inc("wagent_webhook_updates_total", {"kind": kind}, amount)
        for kind, amount in counts.items()), *(
        metrics.inc("wagent_whatsapp_cost_micro_usd_total", {"category": category}, micro_usd)
        for category, micro_usd in costs.items()))
    log.info("inbox_drained", posts=len(entries), lag_ms=round(lag * 1000))
    return len(entries)
