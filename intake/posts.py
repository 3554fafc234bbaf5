"""Storing a webhook POST and enqueueing its jobs: one POST alone, or a group of them in one
transaction, or a group put in the inbox (docs/ARCHITECTURE.md, "Storing an update").

Both processes store updates this way: the web process (`bot.webhook`, in a thread) and the
inbox drain (`workers.inbox`), each passing its `Stores`.
"""

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from redis.exceptions import RedisError
from rq import Queue
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from core import clock
from core.settings import SMALL_BODY_BYTES, Settings
from intake.errors import StoreUnavailable
from intake.failures import describe, is_disconnect
from intake.group import store_group
from intake.ingest import UPDATES_PER_TRANSACTION, count_updates, inbound_only, ingest_body
from intake.items import Pending
from intake.result import IngestResult
from storage import inbox
from storage.jobs import (
    enqueue_drain,
    enqueue_facts,
    enqueue_rederive,
    enqueue_turn,
    enqueue_turns,
)
from whatsapp.inbound import InboundMessage

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Stores:
    """What storing a POST needs, the same in both processes that store: the web process
    (`bot.webhook.stores_of` its app) and the inbox drain (`workers.inbox`, its runtime's)."""

    engine: Engine
    settings: Settings
    queue: Queue  # turns, fact extractions, summary re-derivations and drains


def spill_posts(stores: Stores, posts: list[tuple[bytes, datetime]]) -> list[IngestResult]:
    """Put a group of signed POSTs in the inbox (in a thread) and enqueue the drain job.

    Raises StoreUnavailable (every POST's 503, so Meta redelivers) when the INSERT fails, and
    when the drain cannot be enqueued (Redis down), as the one-POST path does when a turn
    cannot be: the entries then stay, the periodic reconcile (`workers.maintenance`) enqueues a
    drain once they are a minute old, and the redelivered copies are stored as duplicates.
    """
    settings = stores.settings
    started = time.perf_counter()
    try:
        inbox.add_many(stores.engine, posts)
    except DBAPIError as exc:  # OperationalError is one
        raise StoreUnavailable(describe(exc)) from exc
    try:
        enqueue_drain(stores.queue, settings.redis_prefix)
    except (RedisError, RuntimeError) as exc:
        log.warning("inbox_drain_not_enqueued", posts=len(posts), error=type(exc).__name__)
        raise StoreUnavailable(f"cannot enqueue the inbox drain: {exc}") from exc
    log.info("webhook_group_spilled", posts=len(posts),
             total_ms=round((time.perf_counter() - started) * 1000, 1))
    return [IngestResult(grouped=True, spilled=True) for _ in posts]


def store_posts(stores: Stores, posts: list[tuple[bytes, datetime]], *,
                spill_updates: int | None = None) -> list[IngestResult | BaseException]:
    """Store and enqueue POSTs (in a thread; `workers.inbox` calls it too). A big POST, of
    more than `spill_updates` updates or a body over SMALL_BODY_BYTES, goes to the inbox at
    once (`spill_posts`; `spill_updates` defaults to WEBHOOK_SPILL_UPDATES; 0: never, as the
    drain passes). Those made only of customer messages share one transaction when there
    are two or more (`intake.group.store_group`); the others are stored one by one after it
    (`ingest.store_updates`, where a lone POST's messages are a group of one). Returns each
    POST's result, or the exception that is its answer (StoreUnavailable: 503)."""
    limit = stores.settings.webhook_spill_updates if spill_updates is None else spill_updates
    outcomes = _spill_big(stores, posts, limit)
    rest = [k for k in range(len(posts)) if k not in outcomes]
    group = _gather(posts, rest)
    started = time.perf_counter()
    failed = _store_group(stores, list(group.values()))
    if isinstance(failed, StoreUnavailable):  # the database is down: each its 503 at once
        outcomes.update(dict.fromkeys(group, failed))
    elif failed is not None:
        group = {}  # nothing of the group was kept: each POST alone
    stored_at = time.perf_counter()
    kept = [p.result for k, p in group.items() if k not in outcomes]
    turns_failed = _enqueue_turns(
        stores, sorted({c for r in kept for c in r.turn_conversation_ids}),
        {c: t for r in kept for c, t in r.tenants.items()})
    done: dict[tuple[str, int], StoreUnavailable | None] = {}
    for k in rest:
        if k not in outcomes:
            outcomes[k] = _answer(stores, posts[k], group.get(k), turns_failed, done)
    if group and failed is None:
        log.info("webhook_group_stored", posts=len(posts), grouped=len(group),
                 messages=sum(p.result.counts.get("message", 0) for p in group.values()),
                 store_ms=round((stored_at - started) * 1000, 1),
                 total_ms=round((time.perf_counter() - started) * 1000, 1))
    return [outcomes[k] for k in range(len(posts))]


def _spill_big(stores: Stores, posts: list[tuple[bytes, datetime]],
               limit: int) -> dict[int, IngestResult | BaseException]:
    """Spill the big POSTs (`store_posts`; `limit` 0: none is); their outcomes by index."""
    # a body over SMALL_BODY_BYTES is not even parsed here (3 MB of JSON: 50 ms of the GIL)
    big = [k for k, (body, _) in enumerate(posts) if limit and (
        len(body) > SMALL_BODY_BYTES or count_updates(body) > limit)]
    if not big:
        return {}
    try:
        return dict(zip(big, spill_posts(stores, [posts[k] for k in big]), strict=True))
    except StoreUnavailable as exc:
        return dict.fromkeys(big, exc)


def _gather(posts: list[tuple[bytes, datetime]], rest: list[int]) -> dict[int, Pending]:
    """The group among the POSTs `rest` (by index): those made only of customer messages, at
    most UPDATES_PER_TRANSACTION each, when there are two or more; else none."""
    if len(rest) < 2:
        return {}  # a lone POST is parsed once, by ingest
    found = {k: msgs for k in rest
             if (msgs := _inbound_only(posts[k][0])) and len(msgs) <= UPDATES_PER_TRANSACTION}
    return {k: Pending(msgs, posts[k][1]) for k, msgs in found.items()} if len(found) > 1 \
        else {}


def _answer(stores: Stores, post: tuple[bytes, datetime], pending: Pending | None,
            turns_failed: StoreUnavailable | None,
            done: dict[tuple[str, int], StoreUnavailable | None]) -> IngestResult | BaseException:
    """One POST's answer: stored alone (`pending` None), or its part of the group with its
    jobs enqueued; the exception that is its answer when that failed (StoreUnavailable:
    its 503)."""
    try:
        if pending is None:
            return _store_and_enqueue(stores, *post)
        # the closed sessions' facts first: the close is committed, and a redelivery
        # would not report it again
        for conversation_id in pending.result.closed_conversation_ids:
            _enqueue_once(stores, conversation_id, "facts", done,
                          pending.result.tenants.get(conversation_id))
        for conversation_id in pending.result.rederive_conversation_ids:
            _enqueue_once(stores, conversation_id, "rederive", done,
                          pending.result.tenants.get(conversation_id))
        if turns_failed is not None and pending.result.turn_conversation_ids:
            return turns_failed  # its 503: Meta redelivers, the turn comes then
        pending.result.grouped = True
        return pending.result
    except Exception as exc:  # this POST's answer only
        return exc


def _store_group(stores: Stores, group: list[Pending]) -> BaseException | None:
    """`intake.group.store_group` on the POSTs of a group (none: nothing to do). None when stored;
    StoreUnavailable when the database is down; another error when the group must be stored
    POST by POST instead (a deadlock, a race, a value the database refused: nothing of the
    group was kept)."""
    if not group:
        return None
    try:
        store_group(stores.engine, group)
    except DBAPIError as exc:  # OperationalError is one
        if is_disconnect(exc) and not _retryable(exc):
            return StoreUnavailable(describe(exc))
        log.warning("webhook_group_retried_alone", posts=len(group), error=type(exc).__name__)
        return exc
    except Exception as exc:
        log.warning("webhook_group_retried_alone", posts=len(group), error=type(exc).__name__)
        return exc
    return None


def _inbound_only(body: bytes) -> list[InboundMessage] | None:
    """`ingest.inbound_only`; a body it cannot take goes the one-POST way, which dead-letters
    what it cannot read."""
    try:
        return inbound_only(body)
    except Exception:
        return None


def _enqueue_turns(stores: Stores, conversation_ids: list[int],
                   tenants: dict[int, int]) -> StoreUnavailable | None:
    """Enqueue the group's turns in one Redis transaction (storage.jobs.enqueue_turns: a
    conversation whose turn is queued and has not read the database yet gets none, since it
    will see our committed messages). None when done; the error every POST that needs a turn
    answers with (503) when Redis failed, in which case nothing was enqueued."""
    if not conversation_ids:
        return None
    settings = stores.settings
    try:
        enqueue_turns(stores.queue, settings.redis_prefix, conversation_ids,
                      job_timeout=settings.turn_job_timeout, at=_turn_at(settings),
                      tenants=tenants)
    except (RedisError, RuntimeError) as exc:
        return StoreUnavailable(f"cannot enqueue turns: {exc}")
    return None


def _turn_at(settings: Settings) -> datetime | None:
    """When a turn enqueued now runs: after the debounce, which lets a burst of messages
    settle into one turn; None (at once) when the debounce is 0."""
    if settings.turn_debounce_seconds <= 0:
        return None
    return clock.now() + timedelta(seconds=settings.turn_debounce_seconds)


def _retryable(exc: DBAPIError) -> bool:
    """A deadlock or serialization failure: the group rolled back, each POST can go alone."""
    return str(getattr(exc.orig, "sqlstate", "") or "").startswith("40")


def _enqueue_once(stores: Stores, conversation_id: int, kind: str,
                  done: dict[tuple[str, int], StoreUnavailable | None],
                  tenant_id: int | None = None) -> None:
    """Enqueue once per group (coalesced in Redis anyway); a failure fails every POST that
    needs it."""
    key = (kind, conversation_id)
    if key in done:
        failed = done[key]
        if failed is not None:
            raise failed
        return
    try:
        _enqueue(stores, conversation_id, kind=kind, tenant_id=tenant_id)
    except StoreUnavailable as exc:
        done[key] = exc
        raise
    done[key] = None


def _store_and_enqueue(stores: Stores, body: bytes, now: datetime) -> IngestResult:
    """Store the body, then enqueue its turns and fact extractions: one trip to a thread."""
    result = ingest_body(stores.engine, body, now=now)
    failed: StoreUnavailable | None = None
    # every enqueue is tried before a failure answers 503: the redelivery brings the turn back
    # (its message is still unanswered), but not the close of a stale session
    for conversation_id, kind in [*((c, "facts") for c in result.closed_conversation_ids),
                                  *((c, "rederive") for c in result.rederive_conversation_ids),
                                  *((c, "turn") for c in result.turn_conversation_ids)]:
        try:
            _enqueue(stores, conversation_id, kind=kind,
                     tenant_id=result.tenants.get(conversation_id))
        except StoreUnavailable as exc:
            failed = failed or exc
    if failed is not None:
        raise failed
    return result


def _enqueue(stores: Stores, conversation_id: int, kind: str = "turn",
             tenant_id: int | None = None) -> None:
    settings = stores.settings
    try:
        if kind == "facts":
            enqueue_facts(stores.queue, settings.redis_prefix, conversation_id,
                          tenant_id=tenant_id)
        elif kind == "rederive":
            enqueue_rederive(stores.queue, settings.redis_prefix, conversation_id,
                             tenant_id=tenant_id)
        else:
            enqueue_turn(stores.queue, settings.redis_prefix, conversation_id,
                         job_timeout=settings.turn_job_timeout, at=_turn_at(settings),
                         tenant_id=tenant_id)
    except (RedisError, RuntimeError) as exc:
        raise StoreUnavailable(f"cannot enqueue turn: {exc}") from exc
