"""Per-process resources of a worker, built once, after RQ's fork: settings, engine, Redis,
queue, the Anthropic client and the Graph API client.
"""

import os
from dataclasses import dataclass

import anthropic
import httpx2
import redis
from rq import Queue
from sqlalchemy import Engine

from core.settings import Settings
from storage.db import connect_redis, make_engine
from workers.whatsapp import GraphClient


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    redis: redis.Redis
    queue: Queue
    anthropic: anthropic.Anthropic
    graph: GraphClient


_runtime: Runtime | None = None


def build_runtime(settings: Settings, *, engine: Engine | None = None,
                  redis_client: redis.Redis | None = None) -> Runtime:
    """Make every client from `settings`. The SDK does not retry (`max_retries=0`): the turn
    job is the one retry layer (reference/anthropic.md §5.2), on the product's clock.
    """
    connection = redis_client or connect_redis(settings.redis_url)
    return Runtime(
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
    )


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


def _forget_after_fork() -> None:
    global _runtime
    _runtime = None


os.register_at_fork(after_in_child=_forget_after_fork)
