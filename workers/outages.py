"""After a provider outage (issue 36): the conversations that got the apology are answered
once the Messages API answers again (storage/failures.py).

`provider_failed` sets a Redis mark (storage/keys.provider_down_key) with each failed call of a
turn; the next successful call of any purpose takes the mark off and enqueues `run_recover`
(workers/jobs.call_model, `provider_answered`), and while the mark is set `wagent cron`'s
`probe` makes one cheap call (purpose `probe`, one output token) every PROBE_PERIOD_SECONDS.
`recover` enqueues one turn for each open conversation apologised within RECOVER_WITHIN (2 h)
whose 24-hour window is still open; the turn answers what the customer wrote
(storage/failures.reopen). Outside the window nothing is sent and the conversation stays
listed in the console.
"""

from datetime import datetime
from typing import Any

import anthropic
import structlog
from sqlmodel import select

from core import clock
from storage import failures
from storage.db import session_scope
from storage.jobs import enqueue_turn
from storage.keys import provider_down_key
from storage.models import Contact
from whatsapp.window import window_closed
from workers.jobs import call_model
from workers.maintenance import run_once_per_period
from workers.runtime import Runtime, get_runtime

log = structlog.get_logger(__name__)

PROBE_PERIOD_SECONDS = 60
PROBE_MODEL = "claude-haiku-4-5"  # the cheapest model the product uses (Tenant.summary_model)


def provider_failed(runtime: Runtime) -> None:
    """A provider call failed: mark the provider down until a call answers (2 h at most)."""
    runtime.redis.set(provider_down_key(runtime.settings.redis_prefix), "1",
                      ex=int(failures.RECOVER_WITHIN.total_seconds()))


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
        due = [int(r.id) for r in rows if r.id is not None and r.contact_id in contacts
               and not window_closed(contacts[r.contact_id].last_inbound_at, now)]
    for conversation_id in due:
        enqueue_turn(runtime.queue, runtime.settings.redis_prefix, conversation_id,
                     job_timeout=runtime.settings.turn_job_timeout)
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
    answered: 1 (call_model then starts the recovery); it failed: 0, stored as a failure of no
    tenant (the console's banner); not marked down: -1, no call."""
    if not runtime.redis.exists(provider_down_key(runtime.settings.redis_prefix)):
        return -1
    request: dict[str, Any] = {
        "model": PROBE_MODEL, "max_tokens": 1,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "ping"}]}]}
    try:
        call_model(runtime, "probe", **request)
    except anthropic.APIError as exc:
        with session_scope(runtime.engine) as session:
            failures.record(session, tenant_id=None, conversation_id=None,
                            provider="anthropic", purpose="probe",
                            status=getattr(exc, "status_code", None), attempt=1, now=now,
                            outcome="gave_up")
        log.warning("provider_probe_failed", error=type(exc).__name__)
        return 0
    log.info("provider_probe_answered")
    return 1
