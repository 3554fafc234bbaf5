"""The WhatsApp webhook: GET handshake and POST updates (DESIGN.md, Data flow 1)."""

import asyncio
import hmac
from collections.abc import Callable
from datetime import timedelta
from typing import ParamSpec, TypeVar

import structlog
from aiohttp import web
from redis.exceptions import RedisError

from bot.errors import StoreUnavailable
from bot.ingest import ingest_body
from bot.keys import ENGINE, SETTINGS, TURN_QUEUE
from bot.metrics import record_updates
from bot.signature import verify_signature
from core import clock
from storage.jobs import enqueue_facts, enqueue_turn

log = structlog.get_logger(__name__)
P = ParamSpec("P")
T = TypeVar("T")


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

    401 without `X-Hub-Signature-256`, 403 when it is wrong, 413 over the body limit (Meta: 3 MB);
    once the signature is valid: 200 (an unreadable body is dead-lettered), or 503 when the
    update could not be stored or its turn not enqueued, so Meta redelivers.
    """
    settings = request.app[SETTINGS]
    body = await _read_body(request, settings.max_body_bytes)
    header = request.headers.get("X-Hub-Signature-256")
    if not header:
        raise web.HTTPUnauthorized(text="missing X-Hub-Signature-256")
    if not verify_signature(body, header, settings.whatsapp_app_secret):
        log.warning("webhook_bad_signature")
        raise web.HTTPForbidden(text="bad signature")
    result = await _offload(ingest_body, request.app[ENGINE], body, now=clock.now())
    for conversation_id in result.turn_conversation_ids:
        await _offload(_enqueue, request.app, conversation_id)
    for conversation_id in result.closed_conversation_ids:
        await _offload(_enqueue, request.app, conversation_id, kind="facts")
    log.info("webhook_received", **result.counts)
    await record_updates(request.app, result.counts)
    return web.Response(text="ok")


async def _read_body(request: web.Request, limit: int) -> bytes:
    """The whole raw body, or 413 as soon as it passes `limit` bytes (Meta: up to 3 MB).

    `StreamReader.read(n)` returns what is buffered, not n bytes: a large body arrives in many
    chunks, so read until EOF (a partial body would fail the signature with a 403).
    """
    if request.content_length is not None and request.content_length > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
    body = bytearray()
    while chunk := await request.content.read(limit + 1 - len(body)):
        body += chunk
        if len(body) > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=len(body))
    return bytes(body)


def _enqueue(app: web.Application, conversation_id: int, kind: str = "turn") -> None:
    settings = app[SETTINGS]
    try:
        if kind == "facts":
            enqueue_facts(app[TURN_QUEUE], settings.redis_prefix, conversation_id)
        else:  # a short debounce lets a burst of messages settle into one turn
            at = (clock.now() + timedelta(seconds=settings.turn_debounce_seconds)
                  if settings.turn_debounce_seconds > 0 else None)
            enqueue_turn(app[TURN_QUEUE], settings.redis_prefix, conversation_id,
                         job_timeout=settings.turn_job_timeout, at=at)
    except RedisError as exc:
        raise StoreUnavailable(f"cannot enqueue turn: {exc}") from exc


async def _offload(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking storage work in a thread; StoreUnavailable becomes a 503."""
    try:
        return await asyncio.to_thread(func, *args, **kwargs)
    except StoreUnavailable as exc:
        log.error("webhook_store_unavailable", error=str(exc)[:300])
        raise web.HTTPServiceUnavailable(text="temporarily unable to store the update") from exc
