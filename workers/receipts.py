"""Read receipts and the typing indicator while a turn works (issue 26).

When a turn that will answer starts, the customer's latest message is marked read with the
typing indicator (Sources: WhatsApp §5.2, mark as read [S22], typing indicator [S23]: one
request does both). Meta clears the indicator after 25 s or on the reply, so a turn still
working `TYPING_REFRESH` after the last one sends it again, before its next model call. Time is
the product's clock (core/clock.py), so replays move it (REPLAY.md, the `delay` of a scripted
response).

Best effort: a refused or failed request is logged (its error class and Graph code, never the
wamid, the phone number or any text) and the turn goes on. Never shown when the turn will not
answer (`turn_answers`): Meta says to show it only if a reply follows.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from rq.timeouts import JobTimeoutException
from sqlmodel import col, select

from core import clock
from storage import threads
from storage.conversations import with_staff
from storage.db import read_scope
from storage.errors import TurnFenced
from storage.models import Contact, Conversation, Message, Tenant
from whatsapp.errors import GraphError
from whatsapp.window import window_closed
from workers.runtime import Runtime

log = structlog.get_logger(__name__)

# Meta hides the indicator after 25 s (Sources: WhatsApp §5.2 [S23]); sent again after 20 s,
# before the turn's next model call, so it does not lapse while the model works.
TYPING_REFRESH = timedelta(seconds=20)


def turn_answers(contact: Contact, conversation: Conversation, now: datetime,
                 tenant: Tenant | None = None) -> bool:
    """Whether a turn starting at `now` will answer the customer (so "typing…" may show).

    False when the 24-hour customer service window has closed (whatsapp/window.py: the turn
    then sends a template or nothing) or while staff handle the conversation
    (storage/conversations.py `with_staff`: the turn stores and holds, never answers), nor
    when another sender holds the thread or the customer is not on the tenant's allowlist
    (storage/threads.py `why_not_answered`). The one place this decision is made.
    """
    if tenant is not None and threads.why_not_answered(tenant, contact, now) is not None:
        return False
    return not (window_closed(contact.last_inbound_at, now) or with_staff(conversation, now))


@dataclass
class TypingIndicator:
    """The read receipt and typing indicator of one turn.

    `start()` at turn start, `keep_alive()` before each model call (it sends again once
    `TYPING_REFRESH` has passed since the last one). Both are no-ops when the turn will not
    answer, and neither raises except the job's fatal exceptions (its timeout, a lost fence).
    """

    runtime: Runtime
    tenant: Tenant
    contact: Contact
    conversation: Conversation
    # the latest customer wamid when the turn knows it (it placed that message), else None:
    # then read (`latest_customer_wamid`)
    known_wamid: Callable[[], str | None] = lambda: None
    active: bool = False
    last_sent_at: datetime | None = None
    sent: int = 0

    def start(self) -> None:
        self.active = turn_answers(self.contact, self.conversation, clock.now(), self.tenant)
        if self.active:
            self._send()

    def keep_alive(self) -> None:
        if not self.active:
            return
        if self.last_sent_at is None or clock.now() - self.last_sent_at >= TYPING_REFRESH:
            self._send()

    def _send(self) -> None:
        self.last_sent_at = clock.now()  # a failed try waits as long as a sent one
        try:
            wamid = self.known_wamid() or latest_customer_wamid(self.runtime,
                                                                _id(self.conversation))
            if wamid is None:
                return
            self.runtime.graph.mark_read(self.tenant.phone_number_id, wamid, typing=True)
        except (JobTimeoutException, TurnFenced):
            raise
        except GraphError as exc:
            log.warning("typing_indicator_failed", error=type(exc).__name__, code=exc.code,
                        cause=exc.cause)
            return
        except Exception as exc:  # best effort: nothing here may fail the turn
            log.warning("typing_indicator_failed", error=type(exc).__name__)
            return
        self.sent += 1
        log.info("typing_indicator_sent", count=self.sent)


def latest_customer_wamid(runtime: Runtime, conversation_id: int) -> str | None:
    """The wamid of the conversation's latest customer message in the history (marking it read
    marks the earlier ones too: Sources: WhatsApp §5.2 [S22]); None when there is none.
    One statement in no transaction (`read_scope`): best effort, and a turn fenced out
    meanwhile is stopped by its next write, before it sends anything."""
    with read_scope(runtime.engine) as session:
        return session.exec(select(Message.wamid).where(
            Message.conversation_id == conversation_id, Message.direction == "inbound",
            col(Message.wamid).is_not(None), col(Message.position).is_not(None),
        ).order_by(col(Message.position).desc()).limit(1)).first()


def _id(row: Conversation) -> int:
    assert row.id is not None
    return int(row.id)
