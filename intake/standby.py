"""Storing what another sender's thread shows us, and who holds each thread (issue 45,
storage/threads.py).

- Customer messages copied on `standby` are stored by the one customer-message path
  (`intake.group`, never a turn: `starts_turn` false); `record_threads` then marks their
  threads as another sender's, and ours for those that came on `messages`.
- An echo of what Meta's agent (or another app) sent (`AgentEcho`) is a message of a third
  author (`storage.marks.other_author`): context for staff and the model, never ours or the
  customer's; never a turn, a read receipt or a typing indicator.
- A standby status counts as a standby event (the banner; its thread another sender's).
- `control_passed` makes the thread ours, its `conversation_context.summary` stored as a
  message of Meta's (`other:handover`) that the next turn reads; `control_taken` makes it the
  taker's.

Every step records the number's first standby event (`threads.note_standby`: the console's
banner).
"""

from collections.abc import Sequence
from datetime import datetime

import structlog
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from intake.echoes import open_conversation
from intake.items import Item
from intake.text import normalise
from storage import contacts, conversations, tenants, threads
from storage.db import session_scope
from storage.marks import other_author
from storage.models import Contact, Message, Outbound, Tenant
from whatsapp.graph import MAX_TEXT_CHARS
from whatsapp.inbound import AgentEcho, Handover, StandbyStatus

log = structlog.get_logger(__name__)


def record_threads(session: Session, items: Sequence[Item]) -> None:
    """After a group of customer messages is stored: each contact's thread is ours when its
    latest stored message came on `messages`, another sender's when it came on `standby`."""
    latest: dict[int, Item] = {}
    for item in items:
        if item.stored:
            latest[item.contact_id] = item
    ours = [cid for cid, item in latest.items() if not item.msg.standby]
    now = max((item.now for item in latest.values()), default=None)
    if now is None:
        return
    threads.set_owner(session, ours, threads.OURS, now=now)
    for contact_id, item in latest.items():
        if item.msg.standby:
            contact = session.get(Contact, contact_id)
            assert contact is not None
            threads.set_owner(session, [contact_id], threads.standby_owner(contact, now),
                              now=now)
            if threads.note_standby(session, item.known_tenant.id, now=now):
                log.warning("standby_first_seen", tenant_id=item.known_tenant.id)


def store_agent_echo(engine: Engine, echo: AgentEcho, now: datetime) -> str:
    """Store one echo of another sender's message; returns its outcome: agent_echo,
    duplicate, own_send or unknown_tenant."""
    with session_scope(engine) as session:
        tenant = tenants.get_by_phone_number_id(session, echo.phone_number_id)
        if tenant is None or tenant.id is None:
            return "unknown_tenant"
        if session.exec(select(Outbound.id).where(Outbound.wamid == echo.wamid)).first():
            return "own_send"
        if session.exec(select(Message.id).where(Message.wamid == echo.wamid)).first():
            return "duplicate"
        contact = contacts.find_or_create(session, tenant_id=tenant.id, wa_id=echo.to,
                                          user_id=echo.to_user_id, profile_name=None, now=now)
        assert contact.id is not None
        sender = threads.standby_owner(contact, now)
        _other_message(session, tenant, contact, sender, echo.text, now, wamid=echo.wamid)
        threads.set_owner(session, [contact.id], sender, now=now)
        _first_standby(session, tenant.id, now)
    log.info("agent_echo_stored", wa_type=echo.wa_type, sender=sender)
    return "agent_echo"


def store_standby_status(engine: Engine, status: StandbyStatus, now: datetime) -> str:
    """A status of another sender's message: a standby event (the banner), nothing of ours
    changes. Returns standby_status or unknown_tenant."""
    with session_scope(engine) as session:
        tenant = tenants.get_by_phone_number_id(session, status.phone_number_id)
        if tenant is None or tenant.id is None:
            return "unknown_tenant"
        _first_standby(session, tenant.id, now)
    return "standby_status"


def store_handover(engine: Engine, handover: Handover, now: datetime) -> str:
    """Apply one `messaging_handovers` event; returns control_passed, control_taken,
    unknown_tenant or handover_stale. Meta does not deliver in order: the event's own
    `timestamp` (else `now`) is the owner's time (`Contact.thread_owner_at`), and an event
    older than the stored owner's time is not applied (handover_stale; its summary is still
    stored). Meta's timestamps are whole seconds: an event of the stored time's second is
    applied, in arrival order."""
    event_at = handover.timestamp or now
    with session_scope(engine) as session:
        tenant = tenants.get_by_phone_number_id(session, handover.phone_number_id)
        if tenant is None or tenant.id is None:
            return "unknown_tenant"
        contact = contacts.find_or_create(session, tenant_id=tenant.id, wa_id=handover.wa_id,
                                          user_id=handover.user_id, profile_name=None, now=now)
        assert contact.id is not None
        owner_at = contact.thread_owner_at
        stale = owner_at is not None and event_at < owner_at.replace(microsecond=0)
        if handover.kind == "control_passed" and handover.summary:
            _other_message(session, tenant, contact, "handover", handover.summary, now,
                           once=True)
        if not stale:
            new_owner = threads.OURS if handover.kind == "control_passed" \
                else threads.role_owner(handover.new_owner_role)
            threads.set_owner(session, [contact.id], new_owner, now=event_at)
    log.info("thread_handover", kind=handover.kind, previous=handover.previous_owner_role,
             new=handover.new_owner_role, summary=handover.summary is not None, stale=stale)
    return "handover_stale" if stale else handover.kind


def _other_message(session: Session, tenant: Tenant, contact: Contact, kind: str, text: str,
                   now: datetime, *, wamid: str | None = None, once: bool = False) -> Message:
    """Store a message another sender wrote in the contact's open conversation: outbound,
    never a turn, placed in the history by the next turn (as a staff message is). Its text
    (Meta's agent paraphrases and quotes the customer) is cut to MAX_TEXT_CHARS and
    normalised as a customer's is (intake/text.normalise: numbers masked, marks disarmed).
    `once` (a handover's summary, which has no id): the same text as the conversation's
    latest message of this kind is not stored again (Meta redelivers a webhook it thinks
    failed, and a routed message's summary comes again with its retried message)."""
    text = normalise(text[:MAX_TEXT_CHARS], keep_cpf=tenant.keep_cpf)
    conversation = open_conversation(session, tenant, contact, now)
    assert conversation.id is not None
    if once:
        latest = session.exec(select(Message).where(
            Message.conversation_id == conversation.id,
            Message.author == other_author(kind)).order_by(col(Message.id).desc())).first()
        if latest is not None and latest.content == [{"type": "text", "text": text}]:
            return latest
    message = Message(tenant_id=tenant.id or 0, conversation_id=conversation.id,
                      role="assistant", direction="outbound",
                      content=[{"type": "text", "text": text}], received_at=now,
                      starts_turn=False, answered_at=now, position=None,
                      author=other_author(kind), wamid=wamid)
    session.add(message)
    conversations.touch(conversation, now=now, inactivity_timeout=conversations
                        .inactivity_timeout(tenant.inactivity_timeout_minutes))
    session.add(conversation)
    session.flush()
    return message


def _first_standby(session: Session, tenant_id: int, now: datetime) -> None:
    if threads.note_standby(session, tenant_id, now=now):
        log.warning("standby_first_seen", tenant_id=tenant_id)
