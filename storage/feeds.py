"""Calendar feed tokens (issue 46; models.CalendarFeed): one live token per scope (a
professional, or the business: `professional_id` None); issuing revokes the scope's previous
one; a revoked or unknown token finds nothing (the web answers 404)."""

import secrets
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from storage.models import CalendarFeed

TOKEN_BYTES = 32  # 256 bits: the URL is the only secret


def live(session: Session, tenant_id: int) -> list[CalendarFeed]:
    """The tenant's live feeds, the business's first, then by professional id."""
    rows = session.exec(select(CalendarFeed).where(
        CalendarFeed.tenant_id == tenant_id, col(CalendarFeed.revoked_at).is_(None))).all()
    return sorted(rows, key=lambda f: (f.professional_id is not None, f.professional_id or 0))


def _scope(tenant_id: int, professional_id: int | None) -> tuple[Any, ...]:
    return (CalendarFeed.tenant_id == tenant_id, col(CalendarFeed.revoked_at).is_(None),
            col(CalendarFeed.professional_id).is_(None) if professional_id is None
            else CalendarFeed.professional_id == professional_id)


def revoke(session: Session, tenant_id: int, professional_id: int | None, *,
           now: datetime) -> int:
    """Revoke the scope's live feed; how many were (0 or 1)."""
    rows = session.exec(select(CalendarFeed).where(*_scope(tenant_id, professional_id))).all()
    for row in rows:
        row.revoked_at = now
        session.add(row)
    session.flush()
    return len(rows)


def issue(session: Session, tenant_id: int, professional_id: int | None, *,
          now: datetime) -> CalendarFeed:
    """A new token for the scope (its previous one revoked)."""
    revoke(session, tenant_id, professional_id, now=now)
    row = CalendarFeed(tenant_id=tenant_id, professional_id=professional_id,
                       token=secrets.token_urlsafe(TOKEN_BYTES), created_at=now)
    session.add(row)
    session.flush()
    return row


def by_token(session: Session, token: str) -> CalendarFeed | None:
    """The live feed of `token`; None when unknown or revoked (one indexed read)."""
    if not 20 <= len(token) <= 64:
        return None
    return session.exec(select(CalendarFeed).where(
        CalendarFeed.token == token, col(CalendarFeed.revoked_at).is_(None))).first()
