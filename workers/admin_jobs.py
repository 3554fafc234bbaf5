"""Jobs the admin API enqueues because they call Claude (the web process never does)."""

import structlog

from workers.facts import forget_fact
from workers.runtime import get_runtime

log = structlog.get_logger(__name__)


def reject_fact(fact_id: int, reason: str, by: str) -> str:
    """Finish a review rejection (`bot.admin.service.reject_fact`, from the API, the console
    or `wagent facts reject`): every summary of the contact is re-derived without the value,
    the open session closes, a receipt blocks the value (workers/facts.py `forget_fact`).
    Raises on a failed model call, so RQ's Retry runs again; the rejection itself was already
    written."""
    counts = forget_fact(get_runtime(), fact_id, reason=reason, by=by, keep_rejected=True)
    log.info("fact_rejection_applied", fact_id=fact_id, found=counts is not None)
    return "done" if counts is not None else "no such fact"
