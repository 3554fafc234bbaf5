"""A handoff nobody picks up: within the tenant's `handoff_alert_minutes` no staff message
answered it (storage/staff.handoffs_unanswered). The business is alerted again (a warning log
and the `wagent_handoffs_unanswered_total` counter, what monitoring pages on; the Atendimento
page flags it) and the customer is told someone is still being called, once per handoff.
Run by the reconciler's periodic pass (workers/maintenance.reconcile_pending).
"""

from datetime import datetime

import structlog

from agent.tools.handoff import text
from core import metrics
from storage import contacts as contact_repo
from storage import marks, staff
from storage import messages as message_repo
from storage.db import session_scope
from storage.jobs import enqueue_flush
from storage.models import Contact, Conversation
from whatsapp.window import window_closed
from workers.runtime import Runtime

log = structlog.get_logger(__name__)


def alert_unanswered(runtime: Runtime, *, now: datetime) -> int:
    """Alert each unanswered handoff once; returns how many were alerted."""
    alerted: list[int] = []
    with session_scope(runtime.engine) as session:
        for conversation, tenant in staff.handoffs_unanswered(session, now=now):
            row = session.get(Conversation, conversation.id)
            contact = session.get(Contact, conversation.contact_id)
            if row is None or contact is None or row.handoff_alerted_at is not None:
                continue
            row.handoff_alerted_at = now
            session.add(row)
            if not window_closed(contact.last_inbound_at, now):
                waiting = text(tenant.language, "waiting")
                message = message_repo.append(
                    session, tenant_id=row.tenant_id, conversation_id=int(row.id or 0),
                    role="assistant", direction="outbound",
                    content=[{"type": "text", "text": waiting}], now=now,
                    author=marks.product_author("alert"))
                to, recipient = contact_repo.address(contact)
                message_repo.add_outbound(session, message=message, parts=[waiting], to=to,
                                          recipient=recipient, now=now)
            log.warning("handoff_unanswered", conversation_id=row.id, tenant_id=row.tenant_id,
                        waited_minutes=tenant.handoff_alert_minutes)
            alerted.append(int(row.id or 0))
    for conversation_id in alerted:
        enqueue_flush(runtime.queue, runtime.settings.redis_prefix, conversation_id)
    if alerted:
        metrics.record(runtime.redis, runtime.settings.redis_prefix,
                       metrics.inc("wagent_handoffs_unanswered_total", {}, len(alerted)))
    return len(alerted)
