"""Sending the outbox: each part of a reply is claimed, sent at most once, and marked with what
became of it; the reply's delivery state follows (storage/delivery.py).

The delivery rules (docs/ARCHITECTURE.md "How a message is answered"):

- **At most once.** A part is claimed (pending → sending) before the Graph call, so a retried
  job never sends it again; the claim is a transaction of the turn, so a turn that lost its
  lock (its fence, storage/fences.py) claims nothing, while what became of a call already made
  is recorded even then. It goes back to pending only when the call proves Meta did not
  take it: Meta answered with an error (a rate limit, a transient code), or no connection was
  made at all (`GraphUnreachable`: httpx2 ConnectError, which covers DNS failures, refused
  connections and TLS handshake failures, ConnectTimeout, PoolTimeout, ProxyError,
  UnsupportedProtocol: not one byte of the request was written). Any failure after the request
  may have been written (a write error, a read timeout, a dropped connection, a 200 without a
  wamid: `GraphNoAnswer`) leaves the part `unknown`: never resent, since it may have arrived.
- **Retries.** A part Meta may take later (rate limit, transient error, unreachable) waits for
  `retry_at` (`retry_delay`: 30 s, 2 min, 8 min, 32 min, then hourly) and is retried by a flush
  job of its own (`run_flush`), on the same row, at most `MAX_SEND_ATTEMPTS` scheduled Graph
  calls; then it fails. The parts queued behind it wait with it (`storage.messages.
  wait_behind`); a new reply queued since its last try brings the try forward (`flush_outbox`),
  so the customer who writes again gets both, in order, at once. Such an early try is extra:
  when it fails the part keeps its schedule and its count of tries, so a burst of customer
  messages during an outage cannot use up the tries in seconds.
- **Order.** Parts go out oldest first and a later part never overtakes one that waits; every
  flush runs under the conversation's turn lock (a turn job, or a flush job that takes it).
- **Refusals.** Outside the 24-hour customer service window a text is not sent: the part is
  refused with 131047 (what Meta would answer). A part failed for good fails the rest of its
  reply. 190 pauses the tenant and keeps the part pending. Every outcome updates the reply's
  aggregate state, which the console, the admin API and the CLI show.
"""

import json
from datetime import datetime, timedelta
from typing import Any

import structlog

from core import clock, metrics
from core.faults import crash_point
from storage import failures, threads
from storage import messages as message_repo
from storage.db import read_scope, session_scope
from storage.fences import unfenced
from storage.jobs import enqueue_flush
from storage.models import Contact, Outbound, Tenant
from storage.tenants import pause_sending
from whatsapp.errors import (
    GraphAuthError,
    GraphError,
    GraphNoAnswer,
    GraphRateLimited,
    GraphUnreachable,
    GraphWindowClosed,
)
from whatsapp.orders import order_details_button
from whatsapp.window import SERVICE_WINDOW_CLOSED, window_closed
from workers.jobs import run_coalesced
from workers.runtime import Runtime

log = structlog.get_logger(__name__)

FLUSH_RETRY_DELAY = timedelta(seconds=30)
MAX_SEND_ATTEMPTS = 8
WINDOW_CLOSED_CODE = 131047  # what Meta answers a free-form send outside the window
WINDOW_CLOSED_REASON = f"not sent: {SERVICE_WINDOW_CLOSED}"
FLUSH_LOCK_WAIT_SECONDS = 10  # a turn holding the lock flushes when it ends


def run_flush(conversation_id: int, attempt: int = 1, outage: int = 0) -> str:
    """RQ job: send the conversation's due outbox parts (the retry of a rate-limited or
    unreachable send, enqueued by `storage.jobs.enqueue_flush`). Returns "sent N"."""
    return run_coalesced(
        "send", conversation_id, attempt, outage=outage,
        handle=lambda rt, cid, _n: f"sent {flush_outbox(rt, cid)}",
        reenqueue=lambda rt, cid, at, n, out: enqueue_flush(
            rt.queue, rt.settings.redis_prefix, cid, at=at, attempt=n, outage=out),
        lock_kind="turn", blocking_timeout=FLUSH_LOCK_WAIT_SECONDS)


def flush_outbox(runtime: Runtime, conversation_id: int) -> int:
    """Send the conversation's due pending parts, oldest first; returns how many were sent.

    The caller holds the conversation's turn lock. Stops at the first part that waits for its
    `retry_at` (and makes sure a flush job runs then), or whose send must be retried. A part
    queued since the waiting one's last try (no `retry_at` yet: a newer reply) brings that try
    forward to now; such an early try is not one of the scheduled ones (docs/ARCHITECTURE.md
    "Retries").
    """
    with read_scope(runtime.engine) as session:  # a look: each claim below is fenced
        unsent = message_repo.unsent_outbound(session, conversation_id)
        session.expunge_all()  # kept as read: read_scope's rollback (SQLite) expires them
    if not unsent:  # the usual case at a turn's start: one statement, no transaction
        return 0
    rows = [row for row, _, _ in unsent]
    _, tenant, contact = unsent[0]
    if tenant.sending_paused_reason:  # 190: no send until an operator resumes the tenant
        log.warning("send_paused_for_tenant", tenant_id=tenant.id, waiting=len(rows))
        return 0
    sent = 0
    for index, row in enumerate(rows):
        early = row.retry_at is not None and row.retry_at > clock.now()
        if early and not any(r.retry_at is None for r in rows[index + 1:]):
            assert row.retry_at is not None
            _schedule_flush(runtime, conversation_id, row.retry_at)
            break
        outcome = _send_one(runtime, tenant, contact, row, early=early)
        if outcome == "sent":
            sent += 1
        elif outcome in ("retry", "stop"):
            break
        elif outcome == "skipped":  # another flush claimed or tried it since this look:
            # the later parts are its to send after it (sending them here could put them
            # before it); the parts queued after its look go with a later flush
            _schedule_flush(runtime, conversation_id, clock.now() + FLUSH_RETRY_DELAY)
            break
    return sent


def _send_one(runtime: Runtime, tenant: Tenant, contact: Contact, row: Outbound, *,
              early: bool = False) -> str:
    assert row.id is not None
    with session_scope(runtime.engine) as session:
        if not message_repo.claim_outbound(session, row.id, now=clock.now(),
                                           attempts=row.attempts, retry_at=row.retry_at):
            return "skipped"
    now = clock.now()
    if not threads.may_send(tenant, contact, row.kind, now):  # issue 45: never into a
        # thread another sender holds (what was queued before it changed hands)
        _mark(runtime, row, status="refused", code=None, cause="thread_held",
              reason=threads.SKIPPED_HELD)
        log.warning("send_refused_thread_held", outbound_id=row.id)
        return "refused"
    # only templates may go out (Meta: 131047): texts, lists and buttons are refused
    if row.kind != "template" and window_closed(contact.last_inbound_at, now):
        _mark(runtime, row, status="refused", code=WINDOW_CLOSED_CODE, cause="window_closed",
              reason=WINDOW_CLOSED_REASON)
        log.warning("send_refused_window_closed", outbound_id=row.id)
        return "refused"
    try:
        if row.kind == "template" and row.body.startswith("{"):  # a declared template
            wamid = _send_declared_template(runtime, tenant, row)
        elif row.kind == "template":
            wamid = runtime.graph.send_template(
                tenant.phone_number_id, name=row.body, language=tenant.followup_template_language,
                to=row.to, recipient=row.recipient)
        elif row.kind == "interactive":  # a list or reply buttons (workers/choices.py)
            wamid = runtime.graph.send_interactive(
                tenant.phone_number_id, interactive=json.loads(row.body), to=row.to,
                recipient=row.recipient)
        else:
            wamid = runtime.graph.send_text(tenant.phone_number_id, body=row.body, to=row.to,
                                            recipient=row.recipient)
    except GraphError as exc:
        _record(runtime, metrics.inc("wagent_graph_errors_total", {"code": error_code(exc)}))
        with unfenced():  # the call was made: its outcome is recorded by a stale turn too
            return _on_error(runtime, row, exc, early=early)
    _record(runtime, metrics.inc("wagent_graph_sends_total", {"kind": row.kind}))
    crash_point("after_send_before_mark")
    with unfenced():  # it went out: recorded even by a turn that lost its lock meanwhile
        _mark(runtime, row, status="sent", wamid=wamid, attempts=row.attempts + 1)
        if row.attempts:  # a retried send went out: its failure row says so
            with session_scope(runtime.engine) as session:
                failures.settle(session, row.conversation_id, provider="graph",
                                purpose="send", outcome="recovered")
    log.info("reply_sent", outbound_id=row.id, part=row.part)
    return "sent"


def _send_declared_template(runtime: Runtime, tenant: Tenant, row: Outbound) -> str:
    """Send a part whose body is one of the tenant's `templates` as JSON ({"name",
    "language", "parameters", "buttons"?}: operations/staff.py, workers/reminders.py), its
    `buttons` as its quick replies' payloads, its parameters as the body's text
    parameters (Sources: WhatsApp §5.2)."""
    spec = json.loads(row.body)
    params = [str(p) for p in spec.get("parameters") or []]
    components = [{"type": "body", "parameters": [{"type": "text", "text": p}
                                                  for p in params]}] if params else []
    # its quick replies' payloads, in the template's button order (a reminder's: issue 25)
    components += [{"type": "button", "sub_type": "quick_reply", "index": str(i),
                    "parameters": [{"type": "payload", "payload": str(payload)}]}
                   for i, payload in enumerate(spec.get("buttons") or []) if payload]
    if spec.get("order_details"):  # an order-details template (issue 48, workers/deposits.py)
        components.append(order_details_button(spec["order_details"]))
    return runtime.graph.send_template(
        tenant.phone_number_id, name=str(spec["name"]),
        language=str(spec.get("language") or tenant.followup_template_language),
        to=row.to, recipient=row.recipient, components=components or None)


def _on_error(runtime: Runtime, row: Outbound, exc: GraphError, *, early: bool = False) -> str:
    """What a failed Graph call makes of the part (the rules in the module docstring).
    `early`: a try brought forward by a newer reply, before the part's `retry_at`."""
    assert row.id is not None
    tries = row.attempts + 1
    log.warning("send_failed", outbound_id=row.id, code=exc.code, http_status=exc.http_status,
                cause=exc.cause, error=type(exc).__name__, tries=tries, early=early)
    fields: dict[str, Any] = {"code": exc.code, "cause": exc.cause, "reason": str(exc),
                              "attempts": tries}
    if isinstance(exc, GraphNoAnswer):  # it may have reached Meta: never sent twice
        _graph_failed(runtime, row, exc, tries, "unknown")
        _mark(runtime, row, status="unknown", **fields)
        log.error("send_outcome_unknown", outbound_id=row.id, cause=exc.cause)
        return "unknown"
    if exc.retryable:  # Meta did not take it (an answer said so, or nothing reached it)
        if early:  # not a scheduled try: it keeps its schedule and its count
            assert row.retry_at is not None
            retry_at, fields["attempts"] = row.retry_at, row.attempts
        elif tries >= MAX_SEND_ATTEMPTS:
            _graph_failed(runtime, row, exc, tries, "gave_up")
            _fail(runtime, row, **{**fields, "reason": f"gave up after {tries} tries: {exc}"})
            log.error("send_gave_up", outbound_id=row.id, tries=tries, code=exc.code,
                      cause=exc.cause)
            return "failed"
        else:
            retry_at = clock.now() + retry_delay(tries)
            _graph_failed(runtime, row, exc, tries, "retrying")
        _mark(runtime, row, status="pending", retry_at=retry_at, **fields)
        with session_scope(runtime.engine) as session:
            message_repo.wait_behind(session, row, retry_at)
        _schedule_flush(runtime, row.conversation_id, retry_at)
        return "retry"
    if isinstance(exc, GraphAuthError):  # not this message's fault: keep it, stop the tenant
        _mark(runtime, row, status="pending", **{**fields, "attempts": row.attempts})
        with session_scope(runtime.engine) as session:
            pause_sending(session, row.tenant_id, f"Graph API rejected the access token: {exc}")
        log.error("graph_token_rejected_alert_sending_paused", tenant_id=row.tenant_id,
                  code=exc.code)
        return "stop"
    _fail(runtime, row, status="refused" if isinstance(exc, GraphWindowClosed) else "failed",
          **fields)
    return "failed"


def _graph_failed(runtime: Runtime, row: Outbound, exc: GraphError, tries: int,
                  outcome: str) -> None:
    """A Graph outage, stored where the owner looks (storage/failures.py): a rate limit, a
    transient error, no connection or no answer; not a refusal of this one message."""
    kind = "rate_limit" if isinstance(exc, GraphRateLimited) else "connection" \
        if isinstance(exc, GraphNoAnswer | GraphUnreachable) or not exc.http_status \
        else "server_error"  # a transient error Meta answered
    with session_scope(runtime.engine) as session:
        failures.record(session, tenant_id=row.tenant_id, conversation_id=row.conversation_id,
                        provider="graph", purpose="send", status=exc.http_status or None,
                        attempt=tries, now=clock.now(), outcome=outcome, kind=kind)


def error_code(exc: GraphError) -> str:
    """Graph's `error.code`; `http_<status>` when the answer had none; `unreachable` when no
    connection was made (the send is retried); `network` when no answer came after the request
    may have been written (the send is `unknown`)."""
    if exc.code is not None:
        return str(exc.code)
    if isinstance(exc, GraphUnreachable):
        return "unreachable"
    return f"http_{exc.http_status}" if exc.http_status else "network"


def retry_delay(attempt: int) -> timedelta:
    """30 s, 2 min, 8 min, 32 min, then hourly: Meta asks for 4^X back-off on pair limits."""
    delay: timedelta = FLUSH_RETRY_DELAY * 4 ** (attempt - 1)
    return min(delay, timedelta(hours=1))


def _schedule_flush(runtime: Runtime, conversation_id: int, at: datetime) -> None:
    enqueue_flush(runtime.queue, runtime.settings.redis_prefix, conversation_id, at=at)


def _record(runtime: Runtime, *updates: list[metrics.Op]) -> None:
    metrics.record(runtime.redis, runtime.settings.redis_prefix, *updates)


def _fail(runtime: Runtime, row: Outbound, *, status: str = "failed", code: int | None,
          cause: str | None, reason: str, attempts: int) -> None:
    _mark(runtime, row, status=status, code=code, cause=cause, reason=reason, attempts=attempts)
    with session_scope(runtime.engine) as session:
        skipped = message_repo.skip_rest_of_reply(
            session, row, f"not sent: part {row.part} of this reply failed")
    if skipped:
        log.warning("reply_rest_skipped", outbound_id=row.id, parts=skipped)


def _mark(runtime: Runtime, row: Outbound, *, status: str, wamid: str | None = None,
          code: int | None = None, cause: str | None = None, reason: str | None = None,
          attempts: int | None = None, retry_at: datetime | None = None) -> None:
    assert row.id is not None
    with session_scope(runtime.engine) as session:
        message_repo.mark_outbound(session, row.id, status=status, now=clock.now(), wamid=wamid,
                                   code=code, cause=cause, reason=reason, attempts=attempts,
                                   retry_at=retry_at)
