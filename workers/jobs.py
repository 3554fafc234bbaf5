"""The shell every per-conversation job shares: coalescing token, lock, log context."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import anthropic
import structlog
from redis.exceptions import LockError
from rq import get_current_job

from core import clock, metrics
from core.network import network_cause
from storage.db import session_scope
from storage.jobs import consume_token, lock_key
from storage.models import Usage
from workers.runtime import Runtime, get_runtime

log = structlog.get_logger(__name__)
LOCKED_RETRY = timedelta(seconds=30)


def run_coalesced(kind: str, conversation_id: int, attempt: int, *,
                  handle: Callable[[Runtime, int, int], str],
                  reenqueue: Callable[[Runtime, int, datetime, int], object],
                  lock_timeout: int = 360, blocking_timeout: int = 330,
                  lock_kind: str | None = None) -> str:
    """Run `handle(runtime, conversation_id, attempt)` as the conversation's one `kind` job.

    The coalescing token is consumed before anything reads the database (a later trigger
    enqueues exactly one follow-up); the lock (of `lock_kind`, default `kind`: a flush job
    takes the turn's, so sends and turns of a conversation never run alongside; a summary
    re-derivation takes the compaction's) keeps that follow-up from running alongside. A lock
    still held after `blocking_timeout` seconds re-enqueues the job 30 s later.
    """
    runtime = get_runtime()
    job = get_current_job()
    prefix = runtime.settings.redis_prefix
    with structlog.contextvars.bound_contextvars(conversation_id=conversation_id,
                                                 job_id=job.id if job else None):
        if job is not None:
            consume_token(runtime.redis, prefix, kind, conversation_id, job.id)
        lock = runtime.redis.lock(lock_key(prefix, lock_kind or kind, conversation_id),
                                  timeout=lock_timeout, blocking_timeout=blocking_timeout)
        if not lock.acquire():
            reenqueue(runtime, conversation_id, clock.now() + LOCKED_RETRY, attempt)
            return "locked"
        try:
            return handle(runtime, conversation_id, attempt)
        finally:
            try:
                lock.release()
            except LockError:
                log.warning("job_lock_lost", kind=kind)


def record_call_usage(runtime: Runtime, *, tenant_id: int, conversation_id: int | None,
                      response: Any, purpose: str) -> Usage:
    """Store the four usage counters of one Messages API call (and the 1-hour write part)."""
    usage = response.usage
    detail = getattr(usage, "cache_creation", None)
    row = Usage(tenant_id=tenant_id, conversation_id=conversation_id, purpose=purpose,
                model=str(response.model), request_id=getattr(response, "_request_id", None),
                input_tokens=usage.input_tokens or 0,
                cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
                cache_creation_1h_input_tokens=int(getattr(detail, "ephemeral_1h_input_tokens",
                                                           0) or 0) if detail else 0,
                cache_read_input_tokens=usage.cache_read_input_tokens or 0,
                output_tokens=usage.output_tokens or 0, created_at=clock.now())
    with session_scope(runtime.engine) as session:
        session.add(row)
    _record_usage_metrics(runtime, row)
    return row


def call_model(runtime: Runtime, purpose: str, **request: Any) -> Any:
    """`messages.create(**request)` with the purpose header; counts the call, and a failure by
    class (`error_class`) before re-raising it unchanged.
    """
    try:
        return runtime.anthropic.messages.create(**request,
                                                 extra_headers={"x-wagent-purpose": purpose})
    except anthropic.APIError as exc:
        _record(runtime, metrics.inc("wagent_claude_errors_total",
                                     {"purpose": purpose, "class": error_class(exc)}))
        raise
    finally:
        _record(runtime, metrics.inc("wagent_claude_calls_total", {"purpose": purpose}))


def error_class(exc: anthropic.APIError) -> str:
    """429, 529 (overloaded), 5xx, the 4xx status itself (400 is our bug), timeout, connection."""
    if isinstance(exc, anthropic.APITimeoutError):
        return "timeout"
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        return "5xx" if status >= 500 and status != 529 else str(status)
    if isinstance(exc, anthropic.APIConnectionError):
        return "connection"
    return "other"


def connection_cause(exc: BaseException) -> str | None:
    """For a Messages API call that got no answer (`APIConnectionError`, `APITimeoutError`):
    dns, refused, tls, timeout, ... (core/network.py); None for an error the API answered."""
    if isinstance(exc, anthropic.APIConnectionError):
        return network_cause(exc)
    return None


def _record_usage_metrics(runtime: Runtime, row: Usage) -> None:
    purpose = {"purpose": row.purpose}
    context = row.input_tokens + row.cache_creation_input_tokens + row.cache_read_input_tokens
    _record(runtime,
            metrics.observe("wagent_context_tokens", context, purpose),
            metrics.set_gauge("wagent_context_tokens_last", context, purpose),
            metrics.inc("wagent_input_tokens_total", {**purpose, "kind": "uncached"},
                        row.input_tokens),
            metrics.inc("wagent_input_tokens_total", {**purpose, "kind": "cache_read"},
                        row.cache_read_input_tokens),
            metrics.inc("wagent_input_tokens_total", {**purpose, "kind": "cache_write"},
                        row.cache_creation_input_tokens),
            metrics.inc("wagent_output_tokens_total", purpose, row.output_tokens))


def _record(runtime: Runtime, *updates: list[metrics.Op]) -> None:
    metrics.record(runtime.redis, runtime.settings.redis_prefix, *updates)
