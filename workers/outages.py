"""After a provider outage (issue 36): the conversations that got the apology are answered
once the Messages API answers again (storage/failures.py).

The one home of the provider-down mark (storage/keys.provider_down_key, in Redis: every worker
process sees it): `provider_failed` sets it with each failed call of a turn; `provider_answered`
(after every call that answered: workers/jobs.call_model) takes it off and enqueues
`run_recover`, and while it is set `wagent cron`'s `probe` makes one cheap call (purpose `probe`,
one output token) every PROBE_PERIOD_SECONDS. A process-local note of the mark's state spares
the Redis round trip on calls while the provider is known up: it is trusted for
KNOWN_UP (30 s) after this process saw the mark absent, never after this process set it.
`recover` enqueues one turn for each open conversation apologised within RECOVER_WITHIN (2 h)
whose 24-hour window is still open; the turn answers what the customer wrote
(storage/failures.reopen). Outside the window nothing is sent and the conversation stays
listed in the console.
"""

import weakref
from datetime import datetime, timedelta
from typing import Any

import anthropic
import structlog
from redis import Redis
from redis.exceptions import RedisError
from sqlmodel import select

from core import clock
from storage import failures
from storage.db import session_scope
from storage.jobs import enqueue_turn
from storage.keys import provider_down_key
from storage.models import Contact
from whatsapp.window import window_closed
from workers.maintenance import run_once_per_period
from workers.model_calls import create_counted
from workers.runtime import Runtime, get_runtime

log = structlog.get_logger(__name__)

PROBE_PERIOD_SECONDS = 60
PROBE_MODEL = "claude-haiku-4-5"  # the cheapest model the product uses (Tenant.summary_model)


# How long a process trusts having seen the mark absent (less than PROBE_PERIOD_SECONDS: a mark
# another process set is found by this one's next call within it, as soon as by the probe).
KNOWN_UP = timedelta(seconds=30)
# per Redis client and key prefix: until when (the product's clock) the provider is known up here
_known_up: "weakref.WeakKeyDictionary[Redis, dict[str, datetime]]" = weakref.WeakKeyDictionary()


def provider_failed(runtime: Runtime) -> None:
    """A provider call failed: mark the provider down until a call answers (2 h at most)."""
    prefix = runtime.settings.redis_prefix
    _known_up.setdefault(runtime.redis, {}).pop(prefix, None)
    runtime.redis.set(provider_down_key(prefix), "1",
                      ex=int(failures.RECOVER_WITHIN.total_seconds()))


def provider_answered(runtime: Runtime, *, force: bool = False) -> bool:
    """A Messages API call answered: when the provider was marked down, take the mark off and
    enqueue `run_recover` (one caller wins the mark). One Redis DELETE, skipped while this
    process knows the provider up (module docstring) unless `force` (the probe). Returns
    whether it enqueued."""
    prefix, now = runtime.settings.redis_prefix, clock.now()
    known = _known_up.setdefault(runtime.redis, {})
    if not force and prefix in known and known[prefix] > now:
        return False
    try:
        deleted = runtime.redis.delete(provider_down_key(prefix))
        known[prefix] = now + KNOWN_UP
        if not deleted:
            return False
        runtime.queue.enqueue(run_recover, job_timeout=300, result_ttl=0)
    except RedisError as exc:  # the answer stands; the cron's probe finds the mark again
        log.warning("provider_back_recovery_not_enqueued", error=type(exc).__name__)
        return False
    log.info("provider_back_recovery_enqueued")
    return True


def run_recover() -> int:
    """RQ job: `recover` now."""
    return recover(get_runtime(), now=clock.now())


def recover(runtime: Runtime, *, now: datetime) -> int:
    """Enqueue one turn for each conversation apologised within RECOVER_WITHIN whose 24-hour
    window is open; returns how many."""
    with session_scope(runtime.engine) as session:
        rows = failures.to_recover(session, now=now)
        contacts = {c.id: c for c in session.exec(select(Contact).where(
            Contact.id.in_([r.contact_id for r in rows])))} if rows else {}  # type: ignore[union-attr]
        due = {int(r.id): r.tenant_id for r in rows if r.id is not None
               and r.contact_id in contacts
               and not window_closed(contacts[r.contact_id].last_inbound_at, now)}
    for conversation_id, tenant_id in due.items():
        enqueue_turn(runtime.queue, runtime.settings.redis_prefix, conversation_id,
                     job_timeout=runtime.settings.turn_job_timeout, tenant_id=tenant_id)
    log.info("outage_recovery", turns=len(due), outside_window=len(rows) - len(due))
    return len(due)


def run_probe() -> int:
    """`wagent cron` job: `probe`, once per period however many crons run."""
    runtime = get_runtime()
    done = run_once_per_period(runtime, "probe", period_seconds=PROBE_PERIOD_SECONDS,
                               work=lambda: probe(runtime, now=clock.now()))
    return done or 0


def probe(runtime: Runtime, *, now: datetime) -> int:
    """While the provider is marked down: one call of one output token (purpose `probe`). It
    answered: 1 (`provider_answered` then starts the recovery); it failed: 0, stored as a
    failure of no tenant (the console's banner); not marked down: -1, no call."""
    if not runtime.redis.exists(provider_down_key(runtime.settings.redis_prefix)):
        return -1
    request: dict[str, Any] = {
        "model": PROBE_MODEL, "max_tokens": 1,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "ping"}]}]}
    try:
        create_counted(runtime, "probe", **request)
    except anthropic.APIError as exc:
        with session_scope(runtime.engine) as session:
            failures.record(session, tenant_id=None, conversation_id=None,
                            provider="anthropic", purpose="probe",
                            status=getattr(exc, "status_code", None), attempt=1, now=now,
                            outcome="gave_up")
        log.warning("provider_probe_failed", error=type(exc).__name__)
        return 0
    log.info("provider_probe_answered")
    provider_answered(runtime, force=True)
    return 1
