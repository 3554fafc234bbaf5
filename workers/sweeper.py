"""The inactivity sweeper: close conversations idle for longer than their tenant's timeout.

`find_inactive` is the choice (one indexed query, in batches); `sweep_inactive` the job shell.
Closing never deletes messages; the contact's next message opens a fresh conversation.
"""

from datetime import datetime, timedelta

import structlog
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from core import clock
from storage.db import session_scope
from storage.models import Conversation, Tenant

log = structlog.get_logger(__name__)
BATCH = 500


def find_inactive(session: Session, *, now: datetime, limit: int = BATCH) -> list[int]:
    """Ids of open conversations whose last activity is older than their tenant's timeout."""
    rows = session.exec(select(Conversation.id, Conversation.last_activity_at,
                               Tenant.inactivity_timeout_minutes)
                        .join(Tenant, col(Tenant.id) == col(Conversation.tenant_id))
                        .where(Conversation.status == "open")
                        .order_by(col(Conversation.last_activity_at)).limit(limit * 4)).all()
    return [cid for cid, last, minutes in rows
            if cid is not None and now - last > timedelta(minutes=minutes)][:limit]


def close_inactive(engine: Engine, *, now: datetime) -> int:
    """Close every inactive conversation (compare-and-set on status and activity time)."""
    closed = 0
    while True:
        with session_scope(engine) as session:
            ids = find_inactive(session, now=now)
            for cid in ids:
                conversation = session.get(Conversation, cid)
                if conversation is None or conversation.status != "open":
                    continue
                conversation.status, conversation.closed_at = "closed", now
                session.add(conversation)
                closed += 1
        if len(ids) < BATCH:
            return closed


def sweep_inactive() -> int:
    """RQ job: close idle conversations at the product's clock; returns how many closed."""
    from workers.runtime import get_runtime

    closed = close_inactive(get_runtime().engine, now=clock.now())
    log.info("sweep_done", closed=closed)
    return closed
