"""A person takes over a conversation: the handoff, staff messages, the way back to the agent.

The staff state is a conversation's own field (`staff_until`, with `staff_by` and
`staff_reason`), never a value of `status`, so the one-open-conversation rule, the sweeper and
identity merges are unchanged; `storage.conversations.with_staff` is the one predicate. While
staff handle a conversation its customer messages wait for staff (`hold_for_staff`, in the turn
job under the conversation's lock: placed in the history, `status_reason` STAFF_HELD, still
unanswered; the reconciler leaves them while staff handle it); a staff message marks every
message before it handled by staff (`answered_by_staff`). When the staff state ends without
one (a hand-back, the timeout), the agent answers what still waits. A staff message (a reply
from the console, the admin API or the CLI, or an echo of what the owner sent from the
WhatsApp Business app) is stored as outbound text led by `[equipe: NAME]`, with its `author`
(`storage/marks.py`), so later turns see who wrote it: `agent/timeline.py` puts it on the user
side of the request as context, where it was sent (never a `system` message: the Messages API
takes none mid-conversation). The staff state ends after the tenant's `staff_timeout_minutes`
without a staff message, by a hand-back, or when the conversation closes.
"""

import unicodedata
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session, col, select

from storage import messages as message_repo
from storage import webhooks
from storage.conversations import inactivity_timeout, touch, with_staff
from storage.marks import staff_author
from storage.models import Conversation, Message, Tenant

STAFF_HANDLED = "handled by staff"  # the status_reason of a customer message staff handled
STAFF_HELD = "waiting for staff"  # ... of one that waits for staff (unanswered until they write)
AGENT = "agent"  # staff_by of a handoff the agent asked for
ECHO_AUTHOR = "WhatsApp Business app"  # the author of an echo (smb_message_echoes)
MAX_STAFF_TEXT = 4096  # characters of one staff message (WhatsApp's text body limit)
MAX_AUTHOR = 100


def staff_label(author: str) -> str:
    """The mark that leads a staff message's stored text: `[equipe: NAME]`."""
    return f"[equipe: {author}]"


def staff_content(author: str, text: str) -> list[dict[str, Any]]:
    """The content blocks of a staff message as the model reads it (assistant side)."""
    return [{"type": "text", "text": f"{staff_label(author)} {text}"}]


def hold_for_staff(session: Session, conversation_id: int, *, now: datetime) -> int:
    """Place the waiting customer messages in the history and mark them waiting for staff
    (STAFF_HELD; still unanswered: the agent answers them if the staff state ends before a
    staff message does); returns how many. Callers hold the conversation's turn lock (the
    turn job): placing outside it could land between a turn's tool_use and its tool_result."""
    top = message_repo.assign_positions(session, conversation_id)
    return message_repo.mark_held(session, conversation_id, up_to_position=top,
                                  reason=STAFF_HELD)


def answered_by_staff(session: Session, conversation_id: int, *, now: datetime) -> int:
    """Mark every customer message received up to `now` and not answered handled by staff (a
    staff message answers them), placed in the history or not: placing is the turn's, under
    its lock. Returns how many."""
    return message_repo.mark_received_answered(session, conversation_id, up_to=now,
                                               reason=STAFF_HANDLED)


def clean_author(author: str) -> str:
    """A staff author's name as it may appear in `[equipe: NAME]` and the console: control and
    format characters (newlines, bidi overrides, escapes) and brackets removed, spaces
    collapsed, at most MAX_AUTHOR characters; "staff" when nothing is left."""
    spaced = "".join(" " if ch.isspace() else ch for ch in author)
    kept = "".join(ch for ch in spaced if unicodedata.category(ch)[0] != "C" and ch not in "[]")
    return " ".join(kept.split())[:MAX_AUTHOR].strip() or "staff"


def start_handoff(session: Session, conversation: Conversation, tenant: Tenant, *, reason: str,
                  summary: str, now: datetime) -> bool:
    """The agent hands the conversation to staff for `staff_timeout_minutes`, and emits
    `handoff.requested` to the tenant's webhooks (storage/webhooks.py) in the same
    transaction; False (a no-op, nothing emitted) when staff already handle it."""
    if with_staff(conversation, now):
        return False
    conversation.staff_until = now + timedelta(minutes=tenant.staff_timeout_minutes)
    conversation.staff_by = AGENT
    conversation.staff_reason = f"{reason.strip()} — {summary.strip()}"[:500]
    conversation.handoff_at = now
    conversation.handoff_alerted_at = None
    session.add(conversation)
    session.flush()
    webhooks.emit(session, conversation.tenant_id, "handoff.requested",
                  {"conversation_id": conversation.id, "contact_id": conversation.contact_id},
                  now=now)  # ids only: the reason and summary are the customer's words
    return True


def record_staff_message(session: Session, conversation: Conversation, tenant: Tenant, *,
                         author: str, text: str, now: datetime, pause: timedelta | None,
                         wamid: str | None = None) -> Message:
    """Store one staff message, to be placed at the end of the history by the next turn (the
    customer messages it follows are marked handled by staff first), and keep staff on the
    conversation for `pause` from now (None: the tenant's `staff_timeout_minutes`; zero: no
    pause, as an echo with `echo_pause_minutes` 0: the message is kept in the history and
    changes nothing else, so the agent still answers every customer message, those before it
    included; issue 36). The handoff waiting, if any, is answered. `author` is cleaned
    (`clean_author`)."""
    assert conversation.id is not None
    if pause is None:
        pause = timedelta(minutes=tenant.staff_timeout_minutes)
    if pause > timedelta(0):  # what came before it is answered (the owner replied to it)
        answered_by_staff(session, conversation.id, now=now)
    author = clean_author(author)
    # placed in the history by the next turn (message_repo.assign_positions, under the
    # conversation's lock), never now: a turn may be between its tool_use and tool_result
    message = Message(tenant_id=conversation.tenant_id, conversation_id=conversation.id,
                      role="assistant", direction="outbound",
                      content=staff_content(author, text), received_at=now,
                      starts_turn=False, answered_at=now, position=None,
                      author=staff_author(author), wamid=wamid)
    session.add(message)
    session.flush()
    if pause > timedelta(0):
        until = now + pause
        if conversation.staff_until is None or conversation.staff_until < until \
                or not with_staff(conversation, now):
            conversation.staff_until = until
        conversation.staff_by = author
    if with_staff(conversation, now):
        conversation.handoff_at = None
    touch(conversation, now=now,
          inactivity_timeout=inactivity_timeout(tenant.inactivity_timeout_minutes))
    session.add(conversation)
    session.flush()
    return message


def hand_back(session: Session, conversation: Conversation, *, now: datetime) -> bool:
    """Back to the agent now; False when staff did not handle the conversation."""
    if not with_staff(conversation, now):
        return False
    conversation.staff_until = now
    conversation.handoff_at = None
    session.add(conversation)
    session.flush()
    return True


def with_staff_conversations(session: Session, tenant_id: int, *, now: datetime,
                             limit: int = 100) -> list[Conversation]:
    """The tenant's open conversations staff handle now, newest activity first."""
    return list(session.exec(select(Conversation).where(
        Conversation.tenant_id == tenant_id, Conversation.status == "open",
        col(Conversation.staff_until) > now,
    ).order_by(col(Conversation.last_activity_at).desc()).limit(limit)).all())


def handoffs_unanswered(session: Session, *, now: datetime, limit: int = 500
                        ) -> list[tuple[Conversation, Tenant]]:
    """Handoffs no staff message answered within the tenant's `handoff_alert_minutes`, not
    alerted again yet (the maintenance pass alerts each once)."""
    rows = session.exec(select(Conversation, Tenant).join(
        Tenant, col(Tenant.id) == col(Conversation.tenant_id)).where(
        Conversation.status == "open", col(Conversation.handoff_at).is_not(None),
        col(Conversation.handoff_alerted_at).is_(None), col(Conversation.staff_until) > now,
    ).order_by(col(Conversation.handoff_at)).limit(limit)).all()
    return [(c, t) for c, t in rows
            if c.handoff_at is not None
            and now - c.handoff_at >= timedelta(minutes=t.handoff_alert_minutes)]
