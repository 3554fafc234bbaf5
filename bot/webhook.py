"""The WhatsApp webhook: GET handshake and POST updates (DESIGN.md, Data flow 1)."""

import asyncio
import hmac
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import structlog
from aiohttp import web
from redis.exceptions import RedisError
from sqlalchemy.exc import DBAPIError, OperationalError

from bot.bodies import closing, read_body
from bot.errors import StoreUnavailable
from bot.inbound import InboundMessage
from bot.ingest import (
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
from bot.keys import ENGINE, SETTINGS, TURN_QUEUE
from bot.metrics import SPILLED, record_updates
from bot.signature import is_well_formed, verify_signature
from core import clock
from core.settings import MAX_GROUP_POSTS, SMALL_BODY_BYTES, Settings
from storage import inbox
from storage.jobs import (
    enqueue_drain,
    enqueue_facts,
    enqueue_rederive,
    enqueue_turn,
    enqueue_turns,
)

log = structlog.get_logger(__name__)


async def verify_challenge(request: web.Request) -> web.Response:
    """Meta's handshake: echo `hub.challenge` as plain text when the verify token matches.

    400 when a parameter is missing, 403 on a wrong token or mode (reference/whatsapp.md §1).
    No signature check: a GET has no body. The token is compared in constant time as UTF-8
    bytes (`compare_digest` raises on non-ASCII str, which would be a 500).
    """
    mode = request.query.get("hub.mode")
    token = request.query.get("hub.verify_token")
    challenge = request.query.get("hub.challenge")
    if mode is None or token is None or challenge is None:
        raise web.HTTPBadRequest(text="missing hub.mode, hub.verify_token or hub.challenge")
    expected = request.app[SETTINGS].whatsapp_verify_token
    if mode != "subscribe" or not expected or not hmac.compare_digest(
            token.encode("utf-8", "surrogateescape"), expected.encode()):
        raise web.HTTPForbidden(text="verification failed")
    return web.Response(text=challenge, content_type="text/plain")


async def receive_update(request: web.Request) -> web.Response:
    """Verify, store and enqueue one webhook POST.

    Before a byte of the body is read: 401 without `X-Hub-Signature-256`, 403 when it is not
    of the form `sha256=<64 hex>`. Then the body is read within bounds (bot/bodies.py: 413
    over the limit, Meta: 3 MB; 408 below the minimum rate; 503 when the process's budget
    for bodies has no room), and 403 when the signature is wrong. Once it is valid: 200 (an
    unreadable body is dead-lettered), or 503 when the update could not be stored or its
    turn not enqueued, so Meta redelivers.
    """
    settings = request.app[SETTINGS]
    header = request.headers.get("X-Hub-Signature-256")
    if not header:
        raise closing(web.HTTPUnauthorized(text="missing X-Hub-Signature-256"))
    if not is_well_formed(header):
        log.warning("webhook_bad_signature", reason="malformed")
        raise closing(web.HTTPForbidden(text="bad signature"))
    body = await read_body(request, settings.max_body_bytes)
    if not verify_signature(body, header, settings.whatsapp_app_secret):
        log.warning("webhook_bad_signature")
        raise web.HTTPForbidden(text="bad signature")
    result = await _group_commit(request.app).submit(body, clock.now())
    # a POST stored in a group is summed up by the group's own line (webhook_group_stored)
    (log.debug if result.grouped else log.info)("webhook_received", **result.counts)
    await record_updates(request.app, {SPILLED: 1} if result.spilled else result.counts)
    return web.Response(text="ok")


class GroupCommit:
    """Concurrent POSTs of one web process share a transaction (group commit).

    Up to `IN_FLIGHT` groups are stored at once; a POST that finds them all busy waits, and the
    POSTs that waited then go together: their customer messages are stored with a few
    set-based statements and one commit (`ingest.store_group`), their turns enqueued, and only
    then is each answered, 200 or 503, as if alone. A POST that arrives alone, or that holds
    anything but customer messages (statuses, identity changes, bad items), is stored by
    itself (`_store_and_enqueue`: its messages a group of one), and so is one the group could
    not take. A big POST (`store_posts`) goes to the inbox at once; a body over
    SMALL_BODY_BYTES never joins a group: it is handled on threads of its own, beside the
    groups, so that the small POSTs never wait behind it (bench/head_of_line.py).

    Under load a group goes to the inbox instead (`spill`): its raw bodies in one INSERT, a
    drain job enqueued, each POST answered 200 once that is committed; a worker parses and
    stores them (`workers.inbox`). A process starts spilling when `webhook_spill_at` POSTs wait
    for a group (the queue a second group would start for), and keeps spilling until
    SPILL_HOLD_SECONDS pass without a group of two or more: the full path, 0.6 ms of this
    process's CPU a POST, is what made POSTs queue, and the inbox costs a fraction of it.
    """

    MAX_POSTS = MAX_GROUP_POSTS
    IN_FLIGHT = 4  # while one group waits for PostgreSQL or Redis, the next is stored
    MIN_POSTS = 16  # a second group starts once this many wait (the first starts at once)
    SPILL_HOLD_SECONDS = 1.0

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.waiting: list[tuple[bytes, datetime, asyncio.Future[IngestResult]]] = []
        self.running: set[asyncio.Task[None]] = set()
        self.beside: set[asyncio.Task[None]] = set()  # large bodies, each on its own
        self.spill_at = app[SETTINGS].webhook_spill_at
        self.spill_until = 0.0  # event-loop time until which every group is spilled

    async def submit(self, body: bytes, now: datetime) -> IngestResult:
        """Store and enqueue one POST; StoreUnavailable becomes a 503."""
        future: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
        if len(body) > SMALL_BODY_BYTES:
            # beside the groups, on threads of its own: a POST that holds thousands of
            # updates (or a slow 3 MB parse) never makes the small POSTs wait
            task = asyncio.create_task(self._store([(body, now, future)], pool=_LARGE_BODIES))
            self.beside.add(task)
            task.add_done_callback(self.beside.discard)
        else:
            self.waiting.append((body, now, future))
            self._start()
        try:
            return await future
        except StoreUnavailable as exc:
            log.error("webhook_store_unavailable", error=str(exc)[:300])
            raise web.HTTPServiceUnavailable(
                text="temporarily unable to store the update") from exc

    def _start(self) -> None:
        while self.waiting and (not self.running or len(self.running) < self.IN_FLIGHT
                                and len(self.waiting) >= self.MIN_POSTS):
            group = self.waiting[:self.MAX_POSTS]
            del self.waiting[:self.MAX_POSTS]
            task = asyncio.create_task(self._store(group, spill=self._spill(len(group))))
            self.running.add(task)
            task.add_done_callback(self._done)

    def _spill(self, posts: int) -> bool:
        """Whether a group of `posts` goes to the inbox (and the hold renewed)."""
        if self.spill_at <= 0:
            return False
        now = asyncio.get_running_loop().time()
        if posts >= self.spill_at or (posts >= 2 and now < self.spill_until):
            self.spill_until = now + self.SPILL_HOLD_SECONDS
        return now < self.spill_until

    def _done(self, task: "asyncio.Task[None]") -> None:
        self.running.discard(task)
        self._start()

    async def _store(self, group: list[tuple[bytes, datetime,
                                             "asyncio.Future[IngestResult]"]], *,
                     spill: bool = False, pool: Executor | None = None) -> None:
        outcomes: list[IngestResult | BaseException]
        store: Callable[[Stores, list[tuple[bytes, datetime]]], list[Any]] = \
            spill_posts if spill else store_posts
        try:
            outcomes = await asyncio.get_running_loop().run_in_executor(pool, partial(
                store, self.app, [(body, now) for body, now, _ in group]))
        except BaseException as exc:  # the answer must never hang
            outcomes = [exc] * len(group)
        for (_, _, future), outcome in zip(group, outcomes, strict=True):
            if future.done():  # the client went away
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)


# what storing needs: the web app, or `workers.inbox`'s mapping of the same keys
Stores = Mapping[Any, Any]
# the threads that parse and store bodies over SMALL_BODY_BYTES, apart from the groups' (the
# event loop's default executor), so that they never take all of those
_LARGE_BODIES = ThreadPoolExecutor(max_workers=2, thread_name_prefix="webhook-large-body")

_GROUPS: "weakref.WeakKeyDictionary[web.Application, GroupCommit]" = weakref.WeakKeyDictionary()


def _group_commit(app: web.Application) -> GroupCommit:
    group = _GROUPS.get(app)
    if group is None:
        group = _GROUPS[app] = GroupCommit(app)
    return group


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
