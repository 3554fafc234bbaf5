"""The shell every per-conversation job shares: coalescing token, lock, fence, log context,
and the retries of a job a database or Redis outage stopped."""

import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import anthropic
import structlog
from redis.exceptions import LockError, LockNotOwnedError, RedisError, WatchError
from redis.lock import Lock
from rq import get_current_job
from sqlmodel import Session, col, select

from core import clock, metrics
from core.network import network_cause
from hooks.errors import DeliveryError
from storage import fences, job_catalogue
from storage.db import is_outage, session_scope
from storage.errors import TurnFenced
from storage.jobs import consume_token, tenant_of
from storage.keys import lock_key, tenant_pause_key
from storage.models import Usage
from storage.scheduled import enqueue_due
from usage.ledger import model_cost_micro_usd
from workers import heartbeats, outages
from workers.call_slots import DEFER, TenantCallsBusy
from workers.model_calls import create_counted, record
from workers.runtime import Runtime, get_runtime

log = structlog.get_logger(__name__)
LOCKED_RETRY = timedelta(seconds=30)
LOCK_REFRESHES = 3  # a held lock's TTL is renewed this many times per TTL
# A job a database or Redis outage stopped is enqueued again after these delays (then the
# last one), so it runs within 15 s of the service coming back; the product's clock.
OUTAGE_DELAYS = tuple(timedelta(seconds=s) for s in (1, 2, 4, 8, 15))
OUTAGE_MAX_RETRIES = 60  # about 15 minutes; past that the reconciler takes over once it is back
# A tenant's turns held after one of them got an Anthropic 429 (`pause_tenant`): its
# `retry-after`, else this, never more than the max (seconds).
TENANT_PAUSE_DEFAULT = 10.0
TENANT_PAUSE_MAX = 60.0

# reenqueue(runtime, conversation_id, at, attempt, outage): the job's own enqueue function
Reenqueue = Callable[[Runtime, int, datetime, int, int], object]

# The Messages API failures worth another try: 429, 529 and 5xx, no answer (connection, timeout).
# Sources: Anthropic §5.2. The SDK does not retry (workers/runtime.py): one retry layer.
PROVIDER_TRANSIENT: tuple[type[Exception], ...] = (
    anthropic.RateLimitError, anthropic.InternalServerError, anthropic.APIConnectionError)


@dataclass(frozen=True)
class RetryPolicy:
    """How a job kind retries the provider's transient failures (`transient`): attempt n
    (1-based) is followed by `delays[n - 1]` (then the last delay) until `max_attempts`
    attempts were made; `max_attempts` None means the setting `TURN_MAX_ATTEMPTS`."""

    delays: tuple[timedelta, ...]
    max_attempts: int | None
    transient: tuple[type[Exception], ...] = PROVIDER_TRANSIENT

    def delay(self, attempt: int) -> timedelta:
        return self.delays[min(attempt - 1, len(self.delays) - 1)]

    def may_retry(self, attempt: int, runtime: Runtime) -> bool:
        """True while attempt `attempt` is not the last one allowed."""
        limit = runtime.settings.turn_max_attempts if self.max_attempts is None \
            else self.max_attempts
        return attempt < limit


def _seconds(*delays: int) -> tuple[timedelta, ...]:
    return tuple(timedelta(seconds=s) for s in delays)


# The one table of provider retries per job kind (a database or Redis outage is retried
# separately, for every kind alike: OUTAGE_DELAYS above, `retry_after_outage`; the outbox's
# send tries are its own: workers/outbox.py `retry_delay`). A turn retries sooner: a customer
# waits for it; the background jobs can wait minutes.
RETRY_POLICIES: dict[str, RetryPolicy] = {
    "turn": RetryPolicy(delays=_seconds(10, 40, 120), max_attempts=None),
    "compact": RetryPolicy(delays=_seconds(30, 120, 600), max_attempts=4),
    "rederive": RetryPolicy(delays=_seconds(30, 120, 600), max_attempts=4),
    "facts": RetryPolicy(delays=_seconds(30, 120, 600), max_attempts=4),
    # outbound webhooks (workers/webhooks.py): the endpoint's failures (hooks/errors.py), not
    # the provider's; backoff up to 8 h, the 12th and last attempt about 23.8 h after the first
    "webhook": RetryPolicy(delays=_seconds(30, 60, 120, 300, 600, 1800, 3600, 7200, 14400,
                                           28800), max_attempts=12, transient=(DeliveryError,)),
}


def run_coalesced(kind: str, conversation_id: int, attempt: int, *,
                  handle: Callable[[Runtime, int, int], str], reenqueue: Reenqueue,
                  outage: int = 0, fence: bool = False, blocking_timeout: float = 30,
                  lock_kind: str | None = None) -> str:
    """Run `handle(runtime, conversation_id, attempt)` as the conversation's one `kind` job.

    The coalescing token is consumed before anything reads the database (a later trigger
    enqueues exactly one follow-up); the lock (`held_lock`, of `lock_kind`, default `kind`: a
    flush job takes the turn's, so sends and turns of a conversation never run alongside; a
    summary re-derivation takes the compaction's) keeps that follow-up from running alongside.
    A lock still held after `blocking_timeout` seconds re-enqueues the job 30 s later. With
    `fence` (turns) the job takes the conversation's fence once it has the lock and runs
    fenced (storage/fences.py): if it loses the lock and another turn takes it, its next
    transaction raises TurnFenced and the job stops there ("fenced"), without sending.
    A database or Redis error (`storage.db.is_outage`) re-enqueues it after OUTAGE_DELAYS
    (`retry_after_outage`); a model call that found its tenant's call slots all taken
    (TenantCallsBusy) re-enqueues it call_slots.DEFER later with the same attempt
    (`defer_busy`); any other error propagates to RQ (its Retry, then failed).
    """
    runtime = get_runtime()
    job = get_current_job()
    prefix = runtime.settings.redis_prefix
    # the catalogue rows the job reads are shared by its steps and dropped when it ends
    with structlog.contextvars.bound_contextvars(conversation_id=conversation_id,
                                                 job_id=job.id if job else None), \
            job_catalogue.job_scope():
        try:
            if job is not None:
                consume_token(runtime.redis, prefix, kind, conversation_id, job.id)
                _next_of_tenant(runtime, job.id)
            with held_lock(runtime, lock_kind or kind, conversation_id,
                           blocking_timeout=blocking_timeout) as held:
                if not held:
                    reenqueue(runtime, conversation_id, clock.now() + LOCKED_RETRY, attempt,
                              outage)
                    return "locked"
                if fence:
                    return _run_fenced(runtime, conversation_id,
                                       lambda: handle(runtime, conversation_id, attempt))
                return handle(runtime, conversation_id, attempt)
        except TurnFenced:
            log.warning("job_fenced_out", kind=kind)  # the turn that took the lock answers
            return "fenced"
        except TenantCallsBusy as exc:
            return defer_busy(runtime, kind, conversation_id, attempt=attempt, outage=outage,
                              exc=exc, reenqueue=reenqueue)
        except Exception as exc:
            if not is_outage(exc):
                raise
            return retry_after_outage(runtime, kind, conversation_id, attempt=attempt,
                                      outage=outage, exc=exc, reenqueue=reenqueue)


def _next_of_tenant(runtime: Runtime, job_id: str) -> None:
    """A tenant-tagged job (storage/jobs.job_id_for) has left the queue: the next due job of
    its tenant may take its place now, not at the keeper's next tick (storage/scheduled.py,
    fair shares). A Redis error leaves it to the keeper."""
    if tenant_of(job_id) is None:
        return
    try:
        enqueue_due(runtime.queue, now=clock.now(), batches=1,
                    prefix=runtime.settings.redis_prefix)
    except (RedisError, WatchError):
        pass


def _run_fenced(runtime: Runtime, conversation_id: int, work: Callable[[], str]) -> str:
    with session_scope(runtime.engine) as session:
        fence = fences.take(session, conversation_id)
    if fence is None:  # no such conversation: nothing to fence
        return work()
    with fences.fenced(conversation_id, fence):
        return work()


@contextmanager
def held_lock(runtime: Runtime, kind: str, conversation_id: int, *,
              blocking_timeout: float) -> Iterator[bool]:
    """Hold the conversation's `kind` lock (`storage.keys.lock_key`) while the body runs;
    yields False, holding nothing, when another job still holds it after `blocking_timeout`
    seconds.

    The lock lives `TURN_LOCK_TIMEOUT` seconds (default 20) and a thread renews it every third
    of that while the body runs, so a job of any length keeps it and the lock of a work horse
    that died (SIGKILL, OOM) is free within those seconds. A body that outlives its lock (the
    horse starved of CPU or paused past the TTL) is logged (`job_lock_lost`); a turn's writes
    are then refused by its fence.
    """
    ttl = runtime.settings.turn_lock_timeout
    lock = runtime.redis.lock(lock_key(runtime.settings.redis_prefix, kind, conversation_id),
                              timeout=ttl, blocking_timeout=blocking_timeout,
                              thread_local=False)  # the renewing thread uses the token too
    if not lock.acquire():
        yield False
        return
    stop = threading.Event()
    beat = functools.partial(heartbeats.beat, runtime.redis, runtime.settings.redis_prefix,
                             kind, conversation_id, _token(lock))
    beat()  # the keeper reaps a job silent for heartbeats.SILENCE_SECONDS
    renewer = threading.Thread(target=contextvars.copy_context().run,
                               args=(_renew, lock, ttl, stop, kind, beat), daemon=True,
                               name=f"{kind}-lock-{conversation_id}")
    renewer.start()
    try:
        yield True
    finally:
        stop.set()
        renewer.join(timeout=5)
        try:
            heartbeats.stop(runtime.redis, runtime.settings.redis_prefix, kind,
                            conversation_id, _token(lock))
        except RedisError:  # reaped later: its lock is released (or expired) by then
            pass
        try:
            lock.release()
        except LockError:
            log.warning("job_lock_lost", kind=kind)
        except RedisError:  # its TTL frees it
            log.warning("job_lock_not_released", kind=kind)


def _token(lock: Lock) -> str:
    token = lock.local.token
    return token.decode() if isinstance(token, bytes) else str(token)


def _renew(lock: Lock, ttl: float, stop: threading.Event, kind: str,
           beat: Callable[[], None]) -> None:
    """Beat every heartbeats.BEAT_SECONDS (or a third of a shorter TTL) and extend the lock
    every third of its TTL."""
    period = min(heartbeats.BEAT_SECONDS, ttl / LOCK_REFRESHES)
    every = max(1, round(ttl / LOCK_REFRESHES / period))  # beats per extension
    beats = 0
    while not stop.wait(period):
        try:
            beat()
            beats += 1
            if beats % every == 0:
                lock.extend(ttl, replace_ttl=True)
        except LockNotOwnedError:  # expired (we were starved) or taken by another job
            log.warning("job_lock_lost", kind=kind)
            return
        except RedisError as exc:  # a blip: try again at the next beat
            log.warning("job_lock_renewal_failed", kind=kind, error=type(exc).__name__)


def retry_after_outage(runtime: Runtime, kind: str, conversation_id: int, *, attempt: int,
                       outage: int, exc: BaseException, reenqueue: Reenqueue) -> str:
    """Enqueue the job again after the next of OUTAGE_DELAYS (`outage` retries so far), with
    the same `attempt` (an outage is not the provider's failure). Past OUTAGE_MAX_RETRIES, or
    when Redis itself is down, nothing is enqueued: the reconciler finds the waiting messages
    once the services are back (workers/maintenance.py, and at once after Redis comes back:
    workers/keeper.py). Logs the error's type only (a database error's text carries the
    statement's parameters)."""
    error = type(exc).__name__
    if outage >= OUTAGE_MAX_RETRIES:
        log.error("job_outage_gave_up", kind=kind, retries=outage, error=error)
        return "outage_gave_up"
    delay = OUTAGE_DELAYS[min(outage, len(OUTAGE_DELAYS) - 1)]
    try:
        reenqueue(runtime, conversation_id, clock.now() + delay, attempt, outage + 1)
    except RedisError:
        log.warning("job_outage_retry_not_enqueued", kind=kind, error=error)
        return "outage"
    log.warning("job_outage_retry_scheduled", kind=kind, retry=outage + 1,
                delay_s=delay.total_seconds(), error=error)
    return "outage_retry_scheduled"


def defer_busy(runtime: Runtime, kind: str, conversation_id: int, *, attempt: int,
               outage: int, exc: TenantCallsBusy, reenqueue: Reenqueue) -> str:
    """Enqueue the job again call_slots.DEFER later, same `attempt` and `outage` (a tenant at
    its cap of calls in flight is neither the provider's failure nor an outage); "deferred".
    A turn deferred mid-turn resumes as a killed one does (its tool rounds are repaired:
    workers/turn_window.dangling_rounds). Redis failing here leaves it to the reconciler."""
    try:
        reenqueue(runtime, conversation_id, clock.now() + DEFER, attempt, outage)
    except RedisError:
        log.warning("job_deferred_not_enqueued", kind=kind)
        return "deferred"
    record(runtime, metrics.inc("wagent_jobs_deferred_total", {"kind": kind}))
    log.info("job_deferred_tenant_calls_busy", kind=kind, tenant_id=exc.tenant_id,
             delay_s=DEFER.total_seconds())
    return "deferred"


def retry_later(runtime: Runtime, kind: str, conversation_id: int, *, attempt: int,
                exc: BaseException, reenqueue: Reenqueue, event: str) -> str:
    """Enqueue attempt `attempt + 1` of the `kind` job after its policy's delay
    (RETRY_POLICIES) and return "retry_scheduled" (logged `{event}_retry_scheduled`); past the
    policy's last attempt enqueue nothing and return "failed" (logged `{event}_gave_up`)."""
    policy, error, cause = RETRY_POLICIES[kind], type(exc).__name__, connection_cause(exc)
    if not policy.may_retry(attempt, runtime):
        log.error(f"{event}_gave_up", attempts=attempt, error=error, cause=cause)
        return "failed"
    delay = policy.delay(attempt)
    reenqueue(runtime, conversation_id, clock.now() + delay, attempt + 1, 0)
    log.warning(f"{event}_retry_scheduled", attempt=attempt, delay_s=delay.total_seconds(),
                error=error, cause=cause, request_id=getattr(exc, "request_id", None))
    return "retry_scheduled"


def pause_tenant(runtime: Runtime, tenant_id: int, exc: BaseException) -> float | None:
    """After an Anthropic 429 (`RateLimitError`) in one of the tenant's turns: hold the tenant's
    other due turns for the `retry-after` it gave (TENANT_PAUSE_DEFAULT without one, at most
    TENANT_PAUSE_MAX seconds; storage/keys.tenant_pause_key, read by the move of due jobs), so
    the backpressure slows that tenant, not every business. Returns the seconds, None for
    another error. A Redis error is left to the turn's own retry."""
    if not isinstance(exc, anthropic.RateLimitError):
        return None
    seconds = _retry_after(exc)
    try:
        runtime.redis.set(tenant_pause_key(runtime.settings.redis_prefix, tenant_id), "1",
                          px=int(seconds * 1000))
    except RedisError:
        return None
    log.warning("tenant_paused_after_429", tenant_id=tenant_id, seconds=seconds)
    return seconds


def _retry_after(exc: anthropic.RateLimitError) -> float:
    raw = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        seconds = float(raw) if raw is not None else TENANT_PAUSE_DEFAULT
    except ValueError:
        seconds = TENANT_PAUSE_DEFAULT
    return min(max(seconds, 1.0), TENANT_PAUSE_MAX)


def record_call_usage(runtime: Runtime, *, tenant_id: int, conversation_id: int | None,
                      response: Any, purpose: str) -> Usage:
    """Store the four usage counters of one Messages API call (and the 1-hour write part),
    even from a turn fenced out meanwhile: the call was made and billed."""
    row = usage_row(tenant_id=tenant_id, conversation_id=conversation_id, response=response,
                    purpose=purpose)
    store_usage(runtime, [row])
    record_usage_metrics(runtime, row)
    return row


def usage_row(*, tenant_id: int, conversation_id: int | None, response: Any,
              purpose: str) -> Usage:
    """The usage row of one Messages API call, costed, not stored yet (`store_usage`, or a
    turn's next transaction: workers/turns.py `_StoreHooks.scope`)."""
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
    row.micro_usd = model_cost_micro_usd(  # fixed now: a later price change keeps the past
        row.model, row.input_tokens, row.cache_creation_input_tokens,
        row.cache_creation_1h_input_tokens, row.cache_read_input_tokens, row.output_tokens)
    return row


def store_usage(runtime: Runtime, rows: list[Usage], *, unless_stored: bool = False) -> None:
    """Store usage rows in a transaction of their own, unfenced (the calls were billed, whoever
    holds the lock now). Fresh copies: a row a rolled-back transaction held may keep its id.

    `unless_stored`: the rows rode a transaction that raised, which may have committed though
    its commit raised (the answer lost on the way back): a row whose `request_id` is stored
    already for its conversation is not stored again (a call is billed once)."""
    if not rows:
        return
    with fences.unfenced(), session_scope(runtime.engine) as session:
        stored = _stored_request_ids(session, rows) if unless_stored else set()
        session.add_all([Usage(**row.model_dump(exclude={"id"})) for row in rows
                         if not row.request_id or row.request_id not in stored])


def _stored_request_ids(session: Session, rows: list[Usage]) -> set[str]:
    """The `request_id`s of `rows` stored already (by conversation: its index)."""
    ids = [row.request_id for row in rows if row.request_id]
    if not ids:
        return set()
    return {str(r) for r in session.exec(select(Usage.request_id).where(
        col(Usage.conversation_id).in_({row.conversation_id for row in rows}),
        col(Usage.request_id).in_(ids))).all()}


def call_model(runtime: Runtime, purpose: str, *, tenant_id: int, **request: Any) -> Any:
    """`messages.create(**request)` with the purpose header, counted, in one of `tenant_id`'s
    call slots (workers/model_calls.create_counted); an answer takes the provider-down mark off
    (workers/outages.provider_answered). Errors are re-raised unchanged; TenantCallsBusy
    (workers/call_slots.py) when the tenant's slots stay taken: `run_coalesced` defers the
    job."""
    response = create_counted(runtime, purpose, tenant_id=tenant_id, **request)
    outages.provider_answered(runtime)
    return response


def connection_cause(exc: BaseException) -> str | None:
    """For a Messages API call that got no answer (`APIConnectionError`, `APITimeoutError`):
    dns, refused, tls, timeout, ... (core/network.py); None for an error the API answered."""
    if isinstance(exc, anthropic.APIConnectionError):
        return network_cause(exc)
    return None


def record_usage_metrics(runtime: Runtime, row: Usage) -> None:
    """The usage counters of one call as metrics (Redis)."""
    purpose = {"purpose": row.purpose}
    context = row.input_tokens + row.cache_creation_input_tokens + row.cache_read_input_tokens
    record(runtime,
           metrics.observe("wagent_context_tokens", context, purpose),
           metrics.set_gauge("wagent_context_tokens_last", context, purpose),
           metrics.inc("wagent_input_tokens_total", {**purpose, "kind": "uncached"},
                       row.input_tokens),
           metrics.inc("wagent_input_tokens_total", {**purpose, "kind": "cache_read"},
                       row.cache_read_input_tokens),
           metrics.inc("wagent_input_tokens_total", {**purpose, "kind": "cache_write"},
                       row.cache_creation_input_tokens),
           metrics.inc("wagent_output_tokens_total", purpose, row.output_tokens),
           metrics.inc("wagent_model_cost_micro_usd_total", {**purpose, "model": row.model},
                       row.micro_usd))


