"""Storing a webhook POST and enqueueing its jobs: one POST alone, or a group of them in one
transaction, or a group put in the inbox (docs/ARCHITECTURE.md, "Storing an update").

Both processes store updates this way: the web process (`bot.webhook`, in a thread) and the
inbox drain (`workers.inbox`), each passing a mapping of the keys in `intake.keys`.
"""

import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import structlog
from redis.exceptions import RedisError
from sqlalchemy.exc import DBAPIError, OperationalError

from core import clock
from core.settings import SMALL_BODY_BYTES, Settings
from intake.errors import StoreUnavailable
from intake.ingest import (
    UPDATES_PER_TRANSACTION,
    IngestResult,
    Pending,
    count_updates,
    describe,
    inbound_only,
    ingest_body,
    is_disconnect,
    store_group,
)
from intake.keys import ENGINE, SETTINGS, TURN_QUEUE
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


# what storing needs: the web app, or `workers.inbox`'s mapping of the same keys
Stores = Mapping[Any, Any]


def spill_posts(app: Stores, posts: list[tuple[bytes, datetime]]) -> list[IngestResult]:
    """Put a group of signed POSTs in the inbox (in a thread) and enqueue the drain job.

    Raises StoreUnavailable (every POST's 503, so Meta redelivers) when the INSERT fails, and
    when the drain cannot be enqueued (Redis down), as the one-POST path does when a turn
    cannot be: the entries then stay, the periodic reconcile (`workers.maintenance`) enqueues a
    drain once they are a minute old, and the redelivered copies are stored as duplicates.
    """
    settings = app[SETTINGS]
    started = time.perf_counter()
    try:
        inbox.add_many(app[ENGINE], posts)
    except (OperationalError, DBAPIError) as exc:
        raise StoreUnavailable(describe(exc)) from exc
    try:
        enqueue_drain(app[TURN_QUEUE], settings.redis_prefix)
    except (RedisError, RuntimeError) as exc:
        log.warning("inbox_drain_not_enqueued", posts=len(posts), error=type(exc).__name__)
        raise StoreUnavailable(f"cannot enqueue the inbox drain: {exc}") from exc
    log.info("webhook_group_spilled", posts=len(posts),
             total_ms=round((time.perf_counter() - started) * 1000, 1))
    return [IngestResult(grouped=True, spilled=True) for _ in posts]


def store_posts(app: Stores, posts: list[tuple[bytes, datetime]], *,
                spill_updates: int | None = None) -> list[IngestResult | BaseException]:
    """Store and enqueue POSTs (in a thread; `workers.inbox` calls it too). A big POST, of
    more than `spill_updates` updates or a body over SMALL_BODY_BYTES, goes to the inbox at
    once (`spill_posts`; `spill_updates` defaults to WEBHOOK_SPILL_UPDATES; 0: never, as the
    drain passes). Those made only of customer messages share one transaction when there
    are two or more (`ingest.store_group`); the others are stored one by one after it
    (`ingest.store_updates`, where a lone POST's messages are a group of one). Returns each
    POST's result, or the exception that is its answer (StoreUnavailable: 503)."""
    limit = app[SETTINGS].webhook_spill_updates if spill_updates is None else spill_updates
    # a body over SMALL_BODY_BYTES is not even parsed here (3 MB of JSON: 50 ms of the GIL)
    big = [k for k, (body, _) in enumerate(posts) if limit and (
        len(body) > SMALL_BODY_BYTES or count_updates(body) > limit)]
    outcomes: dict[int, IngestResult | BaseException] = {}
    if big:
        try:
            outcomes.update(zip(big, spill_posts(app, [posts[k] for k in big]), strict=True))
        except StoreUnavailable as exc:
            outcomes.update(dict.fromkeys(big, exc))
    rest = [k for k in range(len(posts)) if k not in outcomes]
    found = {k: msgs for k in rest if len(rest) > 1 and (msgs := _inbound_only(posts[k][0]))
             and len(msgs) <= UPDATES_PER_TRANSACTION}  # a lone POST is parsed once, by ingest
    group = {k: Pending(msgs, posts[k][1]) for k, msgs in found.items()} if len(found) > 1 \
        else {}
    started = time.perf_counter()
    failed = _store_group(app, list(group.values()))
    if isinstance(failed, StoreUnavailable):  # the database is down: each its 503 at once
        outcomes.update(dict.fromkeys(group, failed))
    elif failed is not None:
        group = {}  # nothing of the group was kept: each POST alone
    stored_at = time.perf_counter()
    turns_failed = _enqueue_turns(app, sorted({
        c for k, p in group.items() if k not in outcomes for c in p.result.turn_conversation_ids}))
    facts: dict[tuple[str, int], StoreUnavailable | None] = {}
    for k in rest:
        if k in outcomes:
            continue
        body, now = posts[k]
        try:
            if k not in group:
                outcomes[k] = _store_and_enqueue(app, body, now)
                continue
            pending = group[k]
            # the closed sessions' facts first: the close is committed, and a redelivery
            # would not report it again
            for conversation_id in pending.result.closed_conversation_ids:
                _enqueue_once(app, conversation_id, "facts", facts)
            for conversation_id in pending.result.rederive_conversation_ids:
                _enqueue_once(app, conversation_id, "rederive", facts)
            if turns_failed is not None and pending.result.turn_conversation_ids:
                outcomes[k] = turns_failed  # its 503: Meta redelivers, the turn comes then
                continue
            pending.result.grouped = True
            outcomes[k] = pending.result
        except Exception as exc:  # this POST's answer only (StoreUnavailable: its 503)
            outcomes[k] = exc
    if group and failed is None:
        log.info("webhook_group_stored", posts=len(posts), grouped=len(group),
                 messages=sum(p.result.counts.get("message", 0) for p in group.values()),
                 store_ms=round((stored_at - started) * 1000, 1),
                 total_ms=round((time.perf_counter() - started) * 1000, 1))
    return [outcomes[k] for k in range(len(posts))]


def _store_group(app: Stores, group: list[Pending]) -> BaseException | None:
    """`ingest.store_group` on the POSTs of a group (none: nothing to do). None when stored;
    StoreUnavailable when the database is down; another error when the group must be stored
    POST by POST instead (a deadlock, a race, a value the database refused: nothing of the
    group was kept)."""
    if not group:
        return None
    try:
        store_group(app[ENGINE], group)
    except (OperationalError, DBAPIError) as exc:
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


def _enqueue_turns(app: Stores, conversation_ids: list[int]) -> StoreUnavailable | None:
    """Enqueue the group's turns in one Redis transaction (storage.jobs.enqueue_turns: a
    conversation whose turn is queued and has not read the database yet gets none, since it
    will see our committed messages). None when done; the error every POST that needs a turn
    answers with (503) when Redis failed, in which case nothing was enqueued."""
    if not conversation_ids:
        return None
    settings = app[SETTINGS]
    try:
        enqueue_turns(app[TURN_QUEUE], settings.redis_prefix, conversation_ids,
                      job_timeout=settings.turn_job_timeout, at=_turn_at(settings))
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


def _enqueue_once(app: Stores, conversation_id: int, kind: str,
                  done: dict[tuple[str, int], StoreUnavailable | None]) -> None:
    """Enqueue once per group (coalesced in Redis anyway); a failure fails every POST that
    needs it."""
    key = (kind, conversation_id)
    if key in done:
        if done[key] is not None:
            raise done[key]  # type: ignore[misc]
        return
    try:
        _enqueue(app, conversation_id, kind=kind)
    except StoreUnavailable as exc:
        done[key] = exc
        raise
    done[key] = None


def _store_and_enqueue(app: Stores, body: bytes, now: datetime) -> IngestResult:
    """Store the body, then enqueue its turns and fact extractions: one trip to a thread."""
    result = ingest_body(app[ENGINE], body, now=now)
    failed: StoreUnavailable | None = None
    # every enqueue is tried before a failure answers 503: the redelivery brings the turn back
    # (its message is still unanswered), but not the close of a stale session
    for conversation_id, kind in [*((c, "facts") for c in result.closed_conversation_ids),
                                  *((c, "rederive") for c in result.rederive_conversation_ids),
                                  *((c, "turn") for c in result.turn_conversation_ids)]:
        try:
            _enqueue(app, conversation_id, kind=kind)
        except StoreUnavailable as exc:
            failed = failed or exc
    if failed is not None:
        raise failed
    return result


def _enqueue(app: Stores, conversation_id: int, kind: str = "turn") -> None:
    settings = app[SETTINGS]
    try:
        if kind == "facts":
            enqueue_facts(app[TURN_QUEUE], settings.redis_prefix, conversation_id)
        elif kind == "rederive":
            enqueue_rederive(app[TURN_QUEUE], settings.redis_prefix, conversation_id)
        else:
            enqueue_turn(app[TURN_QUEUE], settings.redis_prefix, conversation_id,
                         job_timeout=settings.turn_job_timeout, at=_turn_at(settings))
    except (RedisError, RuntimeError) as exc:
        raise StoreUnavailable(f"cannot enqueue turn: {exc}") from exc
