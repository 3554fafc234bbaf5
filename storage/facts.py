"""Contact facts: current facts per contact, recording with supersession, review decisions."""

from collections.abc import Sequence
from datetime import datetime

from sqlmodel import Session, col, select

from storage.models import ContactFact

CURRENT = ("confirmed", "suggested", "pending_review", "contested")
IN_CONTEXT = ("confirmed", "suggested")


def current(session: Session, contact_id: int, key: str | None = None) -> list[ContactFact]:
    """The contact's facts not superseded, archived or rejected (optionally one key)."""
    query = select(ContactFact).where(ContactFact.contact_id == contact_id,
                                      col(ContactFact.state).in_(CURRENT))
    if key is not None:
        query = query.where(ContactFact.key == key)
    return list(session.exec(query.order_by(col(ContactFact.key), col(ContactFact.id))).all())


def for_context(session: Session, contact_id: int, now: datetime) -> list[ContactFact]:
    """Valid confirmed and suggested facts: expired ones and those awaiting a person are left
    out (a high-risk fact stays out of requests until approved)."""
    return [f for f in current(session, contact_id) if f.state in IN_CONTEXT
            and (f.valid_until is None or f.valid_until > now)]


def record(session: Session, fact: ContactFact, *, now: datetime) -> tuple[ContactFact, str]:
    """Write `fact`; the current fact of the same key is superseded (kept, with an end of
    validity), never overwritten. The same value again refreshes nothing and returns
    ("duplicate"). Returns (the current fact, "recorded" | "superseded" | "duplicate").
    """
    existing = current(session, fact.contact_id, fact.key)
    for old in existing:
        if old.value.casefold() == fact.value.casefold():
            return old, "duplicate"
    session.add(fact)
    session.flush()
    for old in existing:
        old.state, old.valid_until, old.superseded_by_id = "superseded", now, fact.id
        session.add(old)
    session.flush()
    return fact, "superseded" if existing else "recorded"


def decide(session: Session, fact_id: int, *, approve: bool, by: str, reason: str,
           now: datetime) -> ContactFact | None:
    """A person's decision on a fact in review: confirmed, or rejected (kept for audit)."""
    fact = session.get(ContactFact, fact_id)
    if fact is None:
        return None
    fact.state = "confirmed" if approve else "rejected"
    fact.decided_by, fact.decision_reason = by[:64], reason[:500]
    if not approve:
        fact.valid_until = now
    session.add(fact)
    session.flush()
    return fact


def review_queue(session: Session, tenant_id: int) -> Sequence[ContactFact]:
    return session.exec(select(ContactFact).where(
        ContactFact.tenant_id == tenant_id,
        col(ContactFact.state).in_(("suggested", "pending_review")),
    ).order_by(col(ContactFact.id))).all()
