"""An outbound message the product writes on its own (a reminder, a notice, a Pix deposit
request) into the contact's open conversation, with its one outbox part."""

import json
import unicodedata
from datetime import datetime
from typing import Any

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


# -- what a product send says: the declared templates and the customer's name --------------

def declared_template(tenant: Tenant, name: str) -> dict[str, Any] | None:
    return next((t for t in tenant.templates or [] if name and t.get("name") == name), None)


def template_body(spec: dict[str, Any], values: dict[str, str],
                   payloads: dict[str, str], order: dict[str, Any] | None = None) -> str:
    """The outbox body of a declared template (workers/outbox.py): its parameters filled in
    from the reminder fields, its quick replies' payloads by their actions; with `order` (an
    order_details object, whatsapp/orders.py) the payment its ORDER_DETAILS button carries."""
    buttons = [payloads.get(b.get("action", ""), "") for b in spec.get("buttons") or []
               if isinstance(b, dict)]
    body: dict[str, Any] = {"name": spec["name"], "language": spec.get("language", "pt_BR"),
                            "parameters": [values.get(p, "") or "-" for p in
                                           spec.get("parameters") or []],
                            "buttons": buttons}
    if order is not None:
        body["order_details"] = order
    return json.dumps(body, ensure_ascii=False)


def greeting_name(profile_name: str | None) -> str:
    """The first word of a WhatsApp profile name when it reads as a name (letters, with
    inner apostrophes or hyphens, at most 30 characters), else "" (the text then greets
    without one): a profile name is the customer's own text, so brackets, titles with a dot,
    digits or emoji never reach a text the product sends ("[equipe:", "Dra.")."""
    words = (profile_name or "").split()
    first = unicodedata.normalize("NFC", words[0]) if words else ""
    plain = first.replace("'", "").replace("-", "")
    return first if plain.isalpha() and len(first) <= 30 and first[0].isalpha() else ""
