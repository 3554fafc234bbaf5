"""Contact facts: current facts per contact, recording with supersession, review decisions."""

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlmodel import Session, col, select

from storage import webhooks
from storage.models import ContactFact

CURRENT = ("confirmed", "suggested", "pending_review", "contested")
# "contested": an unconfirmed value beside a confirmed one; it waits for a person
IN_CONTEXT = ("confirmed", "suggested")
IN_REVIEW = ("suggested", "pending_review", "contested")  # waiting for a person


def current(session: Session, contact_id: int, key: str | None = None) -> list[ContactFact]:
    """The contact's facts not superseded, archived or rejected (optionally one key)."""
    query = select(ContactFact).where(ContactFact.contact_id == contact_id,
                                      col(ContactFact.state).in_(CURRENT))
    if key is not None:
        query = query.where(ContactFact.key == key)
    return list(session.exec(query.order_by(col(ContactFact.key), col(ContactFact.id))).all())


def for_context(session: Session, contact_id: int, now: datetime,
                allowed_keys: Iterable[str] | None = None) -> list[ContactFact]:
    """Valid confirmed and suggested facts of keys the tenant still allows: expired ones and
    those awaiting a person are left out (a high-risk fact stays out until approved)."""
    keys = set(allowed_keys) if allowed_keys is not None else None
    return [f for f in current(session, contact_id) if f.state in IN_CONTEXT
            and (f.valid_until is None or f.valid_until > now)
            and (keys is None or f.key in keys)]


AWAITING = ("suggested", "pending_review")  # shown to the agent labelled as not verified


def awaiting_review(session: Session, contact_id: int, now: datetime,
                    allowed_keys: Iterable[str] | None = None) -> list[ContactFact]:
    """Valid suggested and pending_review facts of keys the tenant still allows (issue 21:
    shown labelled, never as verified); rejected and expired ones never."""
    keys = set(allowed_keys) if allowed_keys is not None else None
    return [f for f in current(session, contact_id) if f.state in AWAITING
            and (f.valid_until is None or f.valid_until > now)
            and (keys is None or f.key in keys)]


def record(session: Session, fact: ContactFact, *, now: datetime) -> tuple[ContactFact, str]:
    """Write `fact`; nothing is silently overwritten. Returns (fact, outcome):

    - the same value again: the existing fact, "duplicate";
    - a value from an older message than the current one's (a late extraction): kept as
      history, already superseded, "stale";
    - a value that is not confirmed (suggested, pending_review) while a confirmed one exists:
      kept beside it as "contested" / "pending_review", "contested" — it replaces nothing
      until a person approves it;
    - otherwise the current facts of the key are superseded (kept, with an end of validity):
      "superseded", or "recorded" when there were none.
    """
    existing = current(session, fact.contact_id, fact.key)
    for old in existing:
        if old.value.casefold() == fact.value.casefold():
            return old, "duplicate"
    if any(_newer(old, fact) for old in existing):
        fact.state, fact.valid_until = "superseded", now
        session.add(fact)
        session.flush()
        return fact, "stale"
    if fact.state != "confirmed" and any(old.state == "confirmed" for old in existing):
        if fact.state == "suggested":
            fact.state = "contested"
        session.add(fact)
        session.flush()
        _review_needed(session, fact, now)
        return fact, "contested"
    session.add(fact)
    session.flush()
    supersede_others(session, fact, now=now)
    _review_needed(session, fact, now)
    return fact, "superseded" if existing else "recorded"


def _review_needed(session: Session, fact: ContactFact, now: datetime) -> None:
    """A fact that went to pending_review emits `fact.review_needed` (its value is not in the
    event: it may be sensitive; the review queue shows it)."""
    if fact.state == "pending_review":
        webhooks.emit(session, fact.tenant_id, "fact.review_needed",
                      {"fact_id": fact.id, "contact_id": fact.contact_id, "key": fact.key,
                       "origin": fact.origin}, now=now)


def supersede_others(session: Session, fact: ContactFact, *, now: datetime) -> None:
    """Every other current fact of the same key ends here, pointing at `fact`."""
    for old in current(session, fact.contact_id, fact.key):
        if old.id != fact.id:
            old.state, old.valid_until, old.superseded_by_id = "superseded", now, fact.id
            session.add(old)
    session.flush()


def _newer(old: ContactFact, new: ContactFact) -> bool:
    """The current fact came from a later customer message than the proposal (ids grow)."""
    return bool(old.source_message_id and new.source_message_id
                and old.source_message_id > new.source_message_id)


def decide(session: Session, fact_id: int, *, approve: bool, by: str, reason: str,
           now: datetime) -> ContactFact | None:
    """A person's decision on a fact in review: confirmed, or rejected (kept for audit).
    Raises ValueError when approving a fact that is not in review (rejected, superseded...)."""
    fact = session.get(ContactFact, fact_id)
    if fact is None:
        return None
    if approve and fact.state not in IN_REVIEW:
        raise ValueError(f"fact #{fact_id} is {fact.state}, not in review")
    fact.state = "confirmed" if approve else "rejected"
    fact.decided_by, fact.decision_reason = by[:64], reason[:500]
    if not approve:
        fact.valid_until = now
    session.add(fact)
    session.flush()
    if approve:  # an approved value replaces the key's other current values now
        supersede_others(session, fact, now=now)
    return fact


def dedupe_after_merge(session: Session, contact_id: int, *, now: datetime) -> int:
    """After two contacts merged (storage/contacts.py `merge`), each key keeps one current
    value, by the rules of `record`: the newest value supersedes the others (they stay as
    history, pointing at it), except that an unreviewed value never displaces a confirmed one:
    the newest confirmed value stays, an unreviewed one newer than it waits beside it for a
    person (suggested becomes contested; pending_review stays), and older ones are
    superseded. "Newest": from the later customer message, then the later row. Returns how
    many facts were superseded."""
    by_key: dict[str, list[ContactFact]] = {}
    for fact in current(session, contact_id):
        by_key.setdefault(fact.key, []).append(fact)
    superseded = 0
    for facts in by_key.values():
        if len(facts) < 2:
            continue
        ordered = sorted(facts, key=_recency)
        confirmed = [f for f in ordered if f.state == "confirmed"]
        kept = (confirmed or ordered)[-1]
        for fact in ordered:
            if fact is kept:
                continue
            if fact.state != "confirmed" and _recency(fact) > _recency(kept) \
                    and fact.value.casefold() != kept.value.casefold():
                fact.state = "contested" if fact.state == "suggested" else fact.state
            else:
                fact.state, fact.valid_until, fact.superseded_by_id = "superseded", now, kept.id
                superseded += 1
            session.add(fact)
    session.flush()
    return superseded


def _recency(fact: ContactFact) -> tuple[int, int]:
    return fact.source_message_id or 0, fact.id or 0


def review_queue(session: Session, tenant_id: int) -> Sequence[ContactFact]:
    return session.exec(select(ContactFact).where(
        ContactFact.tenant_id == tenant_id,
        col(ContactFact.state).in_(IN_REVIEW),
    ).order_by(col(ContactFact.id))).all()
