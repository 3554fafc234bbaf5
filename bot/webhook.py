"""The WhatsApp webhook: GET handshake and POST updates (ARCHITECTURE.md, Data flow 1)."""

import asyncio
import hmac
import logging
import weakref
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import datetime
from functools import partial
from typing import Any

import structlog
from aiohttp import web

from bot.bodies import closing, read_body
from bot.errors import http_refusal
from bot.metrics import SPILLED, record_updates
from core import clock
from core.settings import MAX_GROUP_POSTS, SMALL_BODY_BYTES
from intake.errors import StoreUnavailable
from intake.keys import ENGINE, SETTINGS, TURN_QUEUE
from intake.posts import Stores, spill_posts, store_posts
from intake.result import IngestResult
from whatsapp.signature import is_well_formed, verify_signature

log = structlog.get_logger(__name__)
_STDLIB_LOG = logging.getLogger(__name__)  # structlog's stdlib logger: its level, cached


async def verify_challenge(request: web.Request) -> web.Response:
    """Meta's handshake: echo `hub.challenge` as plain text when the verify token matches.

    400 when a parameter is missing, 403 on a wrong token or mode (Sources: WhatsApp §1).
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
    if not await _signature_holds(body, header, settings.whatsapp_app_secret):
        log.warning("webhook_bad_signature")
        raise web.HTTPForbidden(text="bad signature")
    result = await _group_commit(request.app).submit(body, clock.now())
    # a POST stored in a group is summed up by the group's own line (webhook_group_stored);
    # its own line is at DEBUG, asked first: a structlog call costs even when it is dropped
    if not result.grouped:
        log.info("webhook_received", **result.counts)
    elif _STDLIB_LOG.isEnabledFor(logging.DEBUG):
        log.debug("webhook_received", **result.counts)
    await record_updates(request.app, {SPILLED: 1} if result.spilled else result.counts,
                         result.whatsapp_micro_usd)
    return web.Response(text="ok")


async def _signature_holds(body: bytes, header: str, app_secret: str) -> bool:
    """`verify_signature`; a body over SMALL_BODY_BYTES is hashed on a thread of the large
    bodies' (hashlib lets go of the GIL while it hashes), so that the event loop answers the
    small POSTs meanwhile: 3 MB take milliseconds to hash (bench/head_of_line.py)."""
    if len(body) <= SMALL_BODY_BYTES:
        return verify_signature(body, header, app_secret)
    return await asyncio.get_running_loop().run_in_executor(
        _LARGE_BODIES, verify_signature, body, header, app_secret)


class GroupCommit:
    """Concurrent POSTs of one web process share a transaction (group commit).

    Up to `IN_FLIGHT` groups are stored at once; a POST that finds them all busy waits, and the
    POSTs that waited then go together: their customer messages are stored with a few
    set-based statements and one commit (`intake.group.store_group`), their turns enqueued, and only
    then is each answered, 200 or 503, as if alone. A POST that arrives alone, or that holds
    anything but customer messages (statuses, identity changes, bad items), is stored by
    itself (`_store_and_enqueue`: its messages a group of one), and so is one the group could
    not take. A big POST (`store_posts`) goes to the inbox at once; a body over
    SMALL_BODY_BYTES never joins a group: it is handled on threads of its own, beside the
    groups, so that the small POSTs never wait behind it (bench/head_of_line.py).

    Under load a group goes to the inbox instead (`spill`): its raw bodies in one INSERT, a
    drain job enqueued, each POST answered 200 once that is committed; a worker parses and
    stores them (`workers.inbox`). A process starts spilling when a group takes
    `webhook_spill_at` POSTs (default 2: as soon as POSTs arrive faster than one group is
    stored), and keeps spilling until SPILL_HOLD_SECONDS pass without a group of two or more:
    the full path, 0.6 ms of this process's CPU a POST and a transaction with the fence, is
    what made POSTs queue, and the inbox costs a fraction of it. A POST that finds no group
    running and the hold over (a salon's traffic, every test) is stored before its answer.
    """

    MAX_POSTS = MAX_GROUP_POSTS
    IN_FLIGHT = 4  # while one group waits for PostgreSQL or Redis, the next is stored
    MIN_POSTS = 16  # a second group starts once this many wait (the first starts at once)
    SPILL_HOLD_SECONDS = 1.0

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.stores = stores_of(app)
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
            raise http_refusal(exc, "temporarily unable to store the update") from exc

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
                store, self.stores, [(body, now) for body, now, _ in group]))
        except BaseException as exc:  # the answer must never hang
            outcomes = [exc] * len(group)
        for (_, _, future), outcome in zip(group, outcomes, strict=True):
            if future.done():  # the client went away
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)


_GROUPS: "weakref.WeakKeyDictionary[web.Application, GroupCommit]" = weakref.WeakKeyDictionary()

# the threads that parse and store bodies over SMALL_BODY_BYTES, apart from the groups' (the
# event loop's default executor), so that they never take all of those
_LARGE_BODIES = ThreadPoolExecutor(max_workers=2, thread_name_prefix="webhook-large-body")


def stores_of(app: web.Application) -> Stores:
    """What storing a POST needs, from the web app (`intake.posts.Stores`)."""
    return Stores(engine=app[ENGINE], settings=app[SETTINGS], queue=app[TURN_QUEUE])


def _group_commit(app: web.Application) -> GroupCommit:
    group = _GROUPS.get(app)
    if group is None:
        group = _GROUPS[app] = GroupCommit(app)
    return group
