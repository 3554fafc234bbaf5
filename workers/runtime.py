"""Per-process resources of a worker, built once, after RQ's fork: settings, engine, Redis,
queue, the Anthropic client and the Graph API client.
"""

import json
import logging
import os
import socket
from dataclasses import dataclass

import anthropic
import httpx2
import redis
from rq import Queue
from sqlalchemy import Engine
from sqlalchemy.orm import configure_mappers

from core.settings import Settings
from hooks.client import Resolve
from payments.mercadopago import MercadoPago
from payments.provider import PixProvider
from storage import webhooks
from storage.db import connect_redis, make_engine
from storage.jobs import enqueue_webhooks
from whatsapp.graph import GraphClient
from whatsapp.rate_card import use_rate_card


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    redis: redis.Redis
    queue: Queue
    anthropic: anthropic.Anthropic
    graph: GraphClient
    resolve: Resolve = socket.getaddrinfo  # the webhook deliveries' DNS (hooks/client.py)
    payments: PixProvider | None = None  # the Pix provider (issue 48); None: none configured


_runtime: Runtime | None = None


def build_runtime(settings: Settings, *, engine: Engine | None = None,
                  redis_client: redis.Redis | None = None) -> Runtime:
    """Make every client from `settings`. The SDK does not retry (`max_retries=0`): the turn
    job is the one retry layer (Sources: Anthropic §5.2), on the product's clock.
    """
    connection = redis_client or connect_redis(settings.redis_url)
    use_rate_card(settings.rate_card_path)  # a bad card stops the start (RateCardError)
    runtime = Runtime(
        settings=settings,
        engine=engine or make_engine(settings.database_url),
        redis=connection,
        queue=Queue(settings.queue_name, connection=connection),
        anthropic=anthropic.Anthropic(
            api_key=settings.anthropic_api_key, base_url=settings.anthropic_base_url,
            max_retries=0, timeout=httpx2.Timeout(settings.anthropic_timeout, connect=5.0)),
        graph=GraphClient(base_url=settings.graph_api_base_url,
                          api_version=settings.graph_api_version,
                          access_token=settings.whatsapp_access_token),
        payments=pix_provider(settings),
    )
    # the webhook deliveries an event emitted in this process are enqueued on commit
    webhooks.install_enqueuer(runtime.engine,
                              lambda ids: enqueue_webhooks(runtime.queue, ids))
    return runtime


def pix_provider(settings: Settings) -> PixProvider | None:
    """The deployment's Pix provider (Mercado Pago) when its access token is set."""
    if not settings.mercadopago_access_token:
        return None
    return MercadoPago(access_token=settings.mercadopago_access_token,
                       webhook_secret=settings.mercadopago_webhook_secret,
                       base_url=settings.mercadopago_base_url)


def get_runtime() -> Runtime:
    """The process's runtime, built from the environment on first use (inside the job)."""
    global _runtime
    if _runtime is None:
        _runtime = build_runtime(Settings.from_env())
    return _runtime


def set_runtime(runtime: Runtime | None) -> None:
    """Install a runtime (replays and tests), or None to build from the environment again."""
    global _runtime
    _runtime = runtime


_fork_safe = False  # children forked from this process keep `_runtime` (prepare_worker_parent)


def prepare_worker_parent(settings: Settings) -> Runtime:
    """Build the runtime in `wagent worker`'s supervisor, before it forks its long-lived work
    process (workers/processes.py), and warm what each new work process would otherwise build:
    the TLS contexts of the two HTTP clients, the SQLAlchemy mappers, the dialect's
    first-connect checks and the SDK's response parsers (measured in bench/load.py: 0.39
    CPU-s a turn before, most of it this).

    Forking is safe because the parent does no I/O with it: the engine's pool is discarded in
    the child (storage/db.py), redis-py opens new connections when the pid changes, and the
    HTTP clients' pools are empty. Every work process forked from the parent inherits it, and
    keeps its pools warm from job to job; a process forked from a work process (which has used
    it) builds its own.
    """
    global _runtime, _fork_safe
    configure_mappers()
    runtime = build_runtime(settings)
    try:  # the dialect checks the server once per engine; a database down now is not fatal
        with runtime.engine.connect():
            pass
    except Exception:  # noqa: BLE001 (the work process connects again, and reports it)
        pass
    runtime.engine.dispose()
    _warm_sdk_parsers()
    _runtime, _fork_safe = runtime, True
    return runtime


def _warm_sdk_parsers() -> None:
    """One `messages.create` against an in-process transport: the SDK builds its request
    transforms and pydantic response validators lazily, on the first call of a process."""
    answer = {"id": "msg_warm", "type": "message", "role": "assistant", "model": "warm",
              "content": [{"type": "text", "text": "ok"},
                          {"type": "tool_use", "id": "toolu_warm", "name": "warm", "input": {}}],
              "stop_reason": "end_turn", "stop_sequence": None,
              "usage": {"input_tokens": 1, "output_tokens": 1,
                        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
    transport = httpx2.MockTransport(lambda _: httpx2.Response(
        200, content=json.dumps(answer).encode(), headers={"content-type": "application/json"}))
    # the client's INFO line "HTTP Request: POST http://warm.invalid/..." would read as a real
    # call in the worker's start-up log (issue 36): its logger is quiet for this one call
    http_log = logging.getLogger("httpx2")
    level = http_log.level
    http_log.setLevel(logging.WARNING)
    try:
        _warm_call(transport)
    finally:
        http_log.setLevel(level)


def _warm_call(transport: httpx2.MockTransport) -> None:
    with httpx2.Client(transport=transport) as http:
        client = anthropic.Anthropic(api_key="warm", base_url="http://warm.invalid",
                                     max_retries=0, http_client=http)
        client.messages.create(
            model="warm", max_tokens=1, system=[{"type": "text", "text": "warm"}],
            tools=[{"name": "warm", "description": "warm", "input_schema": {"type": "object"}}],
            messages=[{"role": "user", "content": [{"type": "text", "text": "warm"}]}])


def _forget_after_fork() -> None:
    global _runtime, _fork_safe
    if not _fork_safe:
        _runtime = None
    _fork_safe = False


os.register_at_fork(after_in_child=_forget_after_fork)
