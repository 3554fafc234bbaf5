"""Storing delivery statuses of our sends (sent, delivered, read, failed): a run of them in
one transaction, set-based."""

from datetime import datetime

import structlog
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from storage import messages
from storage.db import session_scope
from storage.models import Outbound, Tenant
from whatsapp.inbound import StatusUpdate

log = structlog.get_logger(__name__)


def store_statuses(engine: Engine, statuses: list[StatusUpdate], now: datetime) -> list[str]:
    """Store a run of statuses of one POST in one transaction (a status costs a few indexed
    statements; a commit of its own cost more than those); returns each one's outcome
    (`apply_statuses`). Raises on any database error: nothing is then stored (the caller,
    `intake.ingest`, stores each again alone)."""
    with session_scope(engine) as session:
        return apply_statuses(session, statuses, now)


def apply_statuses(session: Session, statuses: list[StatusUpdate], now: datetime) -> list[str]:
    """Advance the delivery state of our sends by `statuses`, each only under the tenant that
    sent it (the status names its `phone_number_id`); an unknown wamid or number changes
    nothing. Returns each status's outcome ("status" or "status_unknown"), in order.

    Set-based: one query for the run's tenants and one for which of its wamids are our sends,
    whatever its length (at most UPDATES_PER_TRANSACTION); only a status of one of our sends
    costs statements of its own (messages.apply_status). Unknown ones are logged once per run.
    """
    numbers = {status.phone_number_id for status in statuses}
    tenant_of = dict(session.exec(select(Tenant.phone_number_id, Tenant.id).where(
        col(Tenant.phone_number_id).in_(numbers))).all())
    wamids = {status.wamid for status in statuses}
    ours = set(session.exec(select(Outbound.wamid, Outbound.tenant_id).where(
        col(Outbound.wamid).in_(wamids))).all()) if tenant_of else set()
    outcomes: list[str] = []
    for status in statuses:
        row = None
        if (status.wamid, tenant_of.get(status.phone_number_id)) in ours:
            row = messages.apply_status(session, wamid=status.wamid, status=status.status,
                                        error_code=status.error_code,
                                        error_reason=status.error_reason, now=now)
        if row is None:
            outcomes.append("status_unknown")
            continue
        if status.status == "failed":
            log.warning("outbound_failed", conversation_id=row.conversation_id,
                        error_code=status.error_code)
        outcomes.append("status")
    unknown = outcomes.count("status_unknown")
    if unknown:
        log.info("status_unknown_wamid", statuses=unknown)
    return outcomes
