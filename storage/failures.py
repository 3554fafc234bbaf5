"""Failed provider calls and a conversation's outage state (issue 36): what the owner sees
when the Messages API or the Graph API fails, from stored rows, never from the log.

A failed attempt is one `ProviderFailure` row per job run of a conversation: attempt 1 adds
it, each later attempt of the same job counts in `tries` (workers/turns.py, workers/outbox.py).
A conversation whose turn gave up gets the apology once (`outage_state` "apologized"); its
later messages while the provider is down are held (status_reason HELD_REASON), and
workers/outages.py answers them all with one real turn when the provider answers again.
"""

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, or_, update
from sqlmodel import Session, col, select

from storage.models import Conversation, Message, ProviderFailure

APOLOGIZED, ANSWERED_LATE = "apologized", "answered_late"
APOLOGY_REASON = "apology: the assistant could not answer (provider outage)"
HELD_REASON = "held: the provider is down and the customer already got the apology"
# a conversation apologised this recently gets one real turn when the provider is back
RECOVER_WITHIN = timedelta(hours=2)
BANNER_MINUTES = 15  # the console's home banner: a provider failure in the last 15 minutes
KINDS = ("rate_limit", "overloaded", "server_error", "connection", "rejected")


def kind_of(status: int | None) -> str:
    """The kind of a failure from its HTTP status (None: no answer): 429 rate_limit, 529
    overloaded, other 5xx server_error, other 4xx rejected."""
    if status is None:
        return "connection"
    if status == 429:
        return "rate_limit"
    if status == 529:
        return "overloaded"
    return "server_error" if status >= 500 else "rejected"


def record(session: Session, *, tenant_id: int | None, conversation_id: int | None,
           provider: str, purpose: str, status: int | None, attempt: int, now: datetime,
           outcome: str = "retrying", kind: str | None = None) -> ProviderFailure:
    """Store attempt `attempt` of a failed call: a new row at attempt 1 (or when there is no
    row of this job yet), else the latest row of the conversation and purpose counts it.
    `kind`: by default `kind_of(status)` (Graph names a rate limit by its error code)."""
    kind = kind or kind_of(status)
    row = None
    if attempt > 1 and conversation_id is not None:
        row = session.exec(select(ProviderFailure).where(
            ProviderFailure.conversation_id == conversation_id,
            ProviderFailure.provider == provider, ProviderFailure.purpose == purpose,
            ProviderFailure.outcome == "retrying",
        ).order_by(col(ProviderFailure.id).desc())).first()
    if row is None:
        row = ProviderFailure(tenant_id=tenant_id, conversation_id=conversation_id,
                              provider=provider, purpose=purpose, kind=kind,
                              status=status, tries=attempt, outcome=outcome, first_at=now,
                              last_at=now)
    else:
        row.kind, row.status, row.tries = kind, status, attempt
        row.outcome, row.last_at = outcome, now
    session.add(row)
    session.flush()
    return row


def settle(session: Session, conversation_id: int, *, provider: str, purpose: str,
           outcome: str) -> int:
    """The conversation's retrying rows of `provider` and `purpose` end with `outcome`
    (recovered: a later attempt answered); returns how many."""
    result = session.exec(update(ProviderFailure).where(
        col(ProviderFailure.conversation_id) == conversation_id,
        col(ProviderFailure.provider) == provider, col(ProviderFailure.purpose) == purpose,
        col(ProviderFailure.outcome) == "retrying").values(outcome=outcome))
    return int(result.rowcount or 0)


def of_conversation(session: Session, conversation_id: int,
                    limit: int = 50) -> list[ProviderFailure]:
    """The conversation's failures, newest first."""
    return list(session.exec(select(ProviderFailure).where(
        ProviderFailure.conversation_id == conversation_id)
        .order_by(col(ProviderFailure.last_at).desc()).limit(limit)))


def recent(session: Session, tenant_id: int, *, now: datetime,
           minutes: int = BANNER_MINUTES) -> list[ProviderFailure]:
    """The tenant's failures (and the cron probe's, of no tenant) in the last `minutes`,
    newest first; a failure a later attempt recovered is left out."""
    return list(session.exec(select(ProviderFailure).where(
        or_(col(ProviderFailure.tenant_id) == tenant_id,
            col(ProviderFailure.tenant_id).is_(None)),
        col(ProviderFailure.last_at) >= now - timedelta(minutes=minutes),
        col(ProviderFailure.outcome) != "recovered",
    ).order_by(col(ProviderFailure.last_at).desc()).limit(20)))


def apologized(session: Session, tenant_id: int, limit: int = 100) -> list[Conversation]:
    """The tenant's open conversations whose customer got the apology and no answer since,
    oldest apology first (the console's Atendimento)."""
    return list(session.exec(select(Conversation).where(
        Conversation.tenant_id == tenant_id, Conversation.status == "open",
        Conversation.outage_state == APOLOGIZED,
    ).order_by(col(Conversation.outage_at)).limit(limit)))


def to_recover(session: Session, *, now: datetime, limit: int = 500) -> list[Conversation]:
    """Open conversations apologised within RECOVER_WITHIN (workers/outages.py)."""
    return list(session.exec(select(Conversation).where(
        Conversation.status == "open", Conversation.outage_state == APOLOGIZED,
        col(Conversation.outage_at) >= now - RECOVER_WITHIN,
    ).order_by(col(Conversation.outage_at)).limit(limit)))


def may_recover(conversation: Conversation, now: datetime) -> bool:
    """An apologised conversation is still answered late when the provider is back."""
    return conversation.outage_state == APOLOGIZED and conversation.outage_at is not None \
        and conversation.outage_at >= now - RECOVER_WITHIN


def reopen(session: Session, conversation: Conversation, *, now: datetime) -> int:
    """Before a real turn of an apologised conversation (within RECOVER_WITHIN): the messages
    the apology covered and those held since are unanswered again, so the turn answers them;
    returns how many. An older apology reopens nothing."""
    if not may_recover(conversation, now):
        return 0
    result = session.exec(update(Message).where(
        col(Message.conversation_id) == conversation.id, col(Message.direction) == "inbound",
        col(Message.status_reason).in_((APOLOGY_REASON, HELD_REASON)),
    ).values(answered_at=None, status_reason=None))
    return int(result.rowcount or 0)


def after_reply(session: Session, conversation: Conversation, *, now: datetime) -> None:
    """A real reply went out: an apologised conversation was answered late."""
    if conversation.outage_state == APOLOGIZED:
        conversation.outage_state, conversation.outage_at = ANSWERED_LATE, now
        session.add(conversation)


def after_reply_values(now: datetime) -> dict[str, Any]:
    """`after_reply` as the values of an UPDATE of the conversation, decided by the row's own
    `outage_state` (a turn that writes the conversation without reading it)."""
    late = col(Conversation.outage_state) == APOLOGIZED
    return {"outage_state": case((late, ANSWERED_LATE), else_=col(Conversation.outage_state)),
            "outage_at": case((late, now), else_=col(Conversation.outage_at))}
