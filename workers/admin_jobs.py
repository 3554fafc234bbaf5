"""Jobs the admin API enqueues because they call Claude (the web process never does)."""

import structlog

from storage.db import session_scope
from storage.models import ContactFact
from workers.facts import forget_fact
from workers.runtime import get_runtime

log = structlog.get_logger(__name__)


def reject_fact(fact_id: int, reason: str | None = None, by: str | None = None) -> str:
    """Finish a review rejection (`operations.service.reject_fact`, from the API, the console
    or `wagent facts reject`): every summary of the contact is re-derived without the value,
    the open session closes, a receipt blocks the value (workers/facts.py `forget_fact`).
    Raises on a failed model call, so RQ's Retry runs again; the rejection itself was already
    written.

    The reason and who decided are read from the fact's decision (`reason` and `by` are
    taken from jobs enqueued before they stopped carrying them)."""
    runtime = get_runtime()
    with session_scope(runtime.engine) as session:
        fact = session.get(ContactFact, fact_id)
        decided = (fact.decision_reason, fact.decided_by) if fact else (None, None)
    reason = reason if reason is not None else decided[0] or ""
    by = by if by is not None else decided[1] or "operator"
    counts = forget_fact(runtime, fact_id, reason=reason, by=by, keep_rejected=True)
    log.info("fact_rejection_applied", fact_id=fact_id, found=counts is not None)
    return "done" if counts is not None else "no such fact"
