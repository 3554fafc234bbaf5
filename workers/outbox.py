"""Sending the outbox: each part of a reply is claimed, sent once, and marked with its wamid.

At most once: a row is claimed (pending → sending) before the Graph call, so a retried job never
sends it again; the claim is a transaction of the turn, so a turn that lost its lock (its fence,
storage/fences.py) claims nothing. A rate limit or a Meta-side error with an answer puts it back
to pending and schedules a later flush; a call with no answer at all (timeout) may have been
accepted, so it is marked `unknown` rather than sent twice. Outside the 24-hour customer service
window nothing is sent: the row is `refused` with the reason (Meta would fail it with 131047).
"""

from datetime import timedelta

import structlog

from core import clock, metrics
from core.faults import crash_point
from storage import messages as message_repo
from storage.db import session_scope
from storage.fences import unfenced
from storage.jobs import enqueue_turn
from storage.models import Contact, Conversation, Outbound, Tenant
from storage.tenants import pause_sending
from workers.errors import GraphAuthError, GraphError, GraphWindowClosed
from workers.runtime import Runtime

log = structlog.get_logger(__name__)

SERVICE_WINDOW = timedelta(hours=24)
FLUSH_RETRY_DELAY = timedelta(seconds=30)
MAX_SEND_ATTEMPTS = 8
WINDOW_CLOSED_REASON = "not sent: more than 24 hours since the customer's last message"


def flush_outbox(runtime: Runtime, conversation_id: int) -> int:
    """Send every pending part of this conversation, oldest first; returns how many were sent."""
    with session_scope(runtime.engine) as session:
        rows = message_repo.unsent_outbound(session, conversation_id)
        conversation = session.get(Conversation, conversation_id)
        if not rows or conversation is None:
            return 0
        tenant = session.get(Tenant, conversation.tenant_id)
        contact = session.get(Contact, conversation.contact_id)
    assert tenant is not None and contact is not None
    if tenant.sending_paused_reason:  # 190: no send until an operator resumes the tenant
        log.warning("send_paused_for_tenant", tenant_id=tenant.id, waiting=len(rows))
        return 0
    sent = 0
    for row in rows:
        outcome = _send_one(runtime, tenant, contact, row)
        if outcome == "sent":
            sent += 1
        elif outcome in ("retry", "stop"):
            break
    return sent


def _send_one(runtime: Runtime, tenant: Tenant, contact: Contact, row: Outbound) -> str:
    assert row.id is not None
    with session_scope(runtime.engine) as session:
        if not message_repo.claim_outbound(session, row.id):
            return "skipped"
    now = clock.now()
    window_closed = contact.last_inbound_at is None or \
        now - contact.last_inbound_at > SERVICE_WINDOW
    if row.kind == "text" and window_closed:  # only templates may go out (Meta: 131047)
        _mark(runtime, row.id, status="refused", reason=WINDOW_CLOSED_REASON)
        log.warning("send_refused_window_closed", outbound_id=row.id)
        return "refused"
    try:
        if row.kind == "template":
            wamid = runtime.graph.send_template(
                tenant.phone_number_id, name=row.body, language=tenant.followup_template_language,
                to=row.to, recipient=row.recipient)
        else:
            wamid = runtime.graph.send_text(tenant.phone_number_id, body=row.body, to=row.to,
                                            recipient=row.recipient)
    except GraphError as exc:
        _record(runtime, metrics.inc("wagent_graph_errors_total", {"code": error_code(exc)}))
        return _on_error(runtime, row, exc)
    _record(runtime, metrics.inc("wagent_graph_sends_total", {"kind": row.kind}))
    crash_point("after_send_before_mark")
    with unfenced():  # it went out: recorded even by a turn that lost its lock meanwhile
        _mark(runtime, row.id, status="sent", wamid=wamid)
    log.info("reply_sent", outbound_id=row.id, part=row.part)
    log.debug("reply_text", text=row.body, to=row.to)
    return "sent"


def _on_error(runtime: Runtime, row: Outbound, exc: GraphError) -> str:
    assert row.id is not None
    log.warning("send_failed", outbound_id=row.id, code=exc.code, http_status=exc.http_status,
                retryable=exc.retryable)
    if exc.retryable and exc.http_status and row.attempts + 1 < MAX_SEND_ATTEMPTS:
        _mark(runtime, row.id, status="pending", code=exc.code, reason=str(exc),
              attempts=row.attempts + 1)
        enqueue_turn(runtime.queue, runtime.settings.redis_prefix, row.conversation_id,
                     at=clock.now() + retry_delay(row.attempts + 1))
        return "retry"
    if exc.retryable and exc.http_status:
        _fail(runtime, row, code=exc.code, reason=f"gave up after {MAX_SEND_ATTEMPTS} tries: "
              f"{exc}")
        return "failed"
    if exc.retryable:
        _mark(runtime, row.id, status="unknown", code=exc.code, reason=str(exc))
        log.error("send_outcome_unknown", outbound_id=row.id)
        return "stop"
    if isinstance(exc, GraphWindowClosed):
        _fail(runtime, row, code=exc.code, reason=str(exc), status="refused")
        return "refused"
    if isinstance(exc, GraphAuthError):  # not this message's fault: keep it, stop the tenant
        _mark(runtime, row.id, status="pending", code=exc.code, reason=str(exc))
        with session_scope(runtime.engine) as session:
            pause_sending(session, row.tenant_id, f"Graph API rejected the access token: {exc}")
        log.error("graph_token_rejected_alert_sending_paused", tenant_id=row.tenant_id,
                  code=exc.code)
        return "stop"
    _fail(runtime, row, code=exc.code, reason=str(exc))
    return "failed"


def error_code(exc: GraphError) -> str:
    """Graph's `error.code`; `http_<status>` when the answer had none, `network` with no answer."""
    if exc.code is not None:
        return str(exc.code)
    return f"http_{exc.http_status}" if exc.http_status else "network"


def _record(runtime: Runtime, *updates: list[metrics.Op]) -> None:
    metrics.record(runtime.redis, runtime.settings.redis_prefix, *updates)


def retry_delay(attempt: int) -> timedelta:
    """30 s, 2 min, 8 min, 32 min, then hourly: Meta asks for 4^X back-off on pair limits."""
    return min(FLUSH_RETRY_DELAY * 4 ** (attempt - 1), timedelta(hours=1))


def _fail(runtime: Runtime, row: Outbound, *, code: int | None, reason: str,
          status: str = "failed") -> None:
    assert row.id is not None
    _mark(runtime, row.id, status=status, code=code, reason=reason)
    with session_scope(runtime.engine) as session:
        skipped = message_repo.skip_rest_of_reply(
            session, row, f"not sent: part {row.part} of this reply failed")
    if skipped:
        log.warning("reply_rest_skipped", outbound_id=row.id, parts=skipped)


def _mark(runtime: Runtime, outbound_id: int, *, status: str, wamid: str | None = None,
          code: int | None = None, reason: str | None = None,
          attempts: int | None = None) -> None:
    with session_scope(runtime.engine) as session:
        row = session.get(Outbound, outbound_id)
        assert row is not None
        row.status, row.error_code, row.error_reason = status, code, reason
        if attempts is not None:
            row.attempts = attempts
        if wamid is not None:
            row.wamid, row.sent_at = wamid, clock.now()
        session.add(row)
