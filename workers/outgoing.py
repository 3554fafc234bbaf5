"""An outbound message the product writes on its own (a reminder, a notice, a Pix deposit
request) into the contact's open conversation, with its one outbox part."""

from datetime import datetime

from sqlmodel import Session

from agent.timeline import buttons_note
from storage import contacts as contact_repo
from storage import messages as message_repo
from storage.conversations import get_open, inactivity_timeout, open_new
from storage.models import Contact, Message, Tenant


def _conversation(session: Session, tenant: Tenant, contact: Contact, now: datetime) -> int:
    """The contact's open conversation, opened when there is none (no inbound: the sweeper
    closes it and fact extraction finds nothing the customer wrote, workers/facts.py)."""
    assert contact.id is not None and tenant.id is not None
    current = get_open(session, contact.id)
    if current is not None and current.id is not None:
        return current.id
    new_id = open_new(session, tenant_id=tenant.id, contact_id=contact.id, now=now,
                      inactivity_timeout=inactivity_timeout(tenant.inactivity_timeout_minutes),
                      last_inbound_at=contact.last_inbound_at)
    if new_id is None:  # another transaction opened one first
        current = get_open(session, contact.id)
        assert current is not None and current.id is not None
        return current.id
    return new_id


def store(session: Session, tenant: Tenant, contact: Contact, *, shown: str, kind: str,
           body: str, now: datetime, author: str, buttons: list[str] | None = None) -> Message:
    """An outbound message of the contact's open conversation with its one outbox part;
    `buttons` (the titles a reminder offers) are stored as a second text block
    (agent/timeline.py renders both)."""
    assert tenant.id is not None
    conversation_id = _conversation(session, tenant, contact, now)
    content = [{"type": "text", "text": shown}]
    if buttons:
        content.append({"type": "text", "text": buttons_note(buttons)})
    message = message_repo.append(session, tenant_id=tenant.id, conversation_id=conversation_id,
                                  role="assistant", direction="outbound", content=content,
                                  now=now, author=author)
    to, recipient = contact_repo.address(contact)
    message_repo.add_outbound(session, message=message, parts=[body], to=to,
                              recipient=recipient, now=now, kind=kind)
    return message
