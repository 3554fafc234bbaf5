"""Data-subject rights (LGPD): export everything about a contact, or erase it from every layer.

Erasure removes messages, summaries, conversations, facts, tool calls, the outbox, usage rows
and dead letters that name the contact (by their indexed identifiers, storage/dead_letters.py);
appointments the business must keep stay, moved to an anonymous placeholder contact; hashed
wamids stay as tombstones so a redelivery of an erased message is not answered again; a receipt
records what was removed, without personal data.
POSTs still waiting in the inbox (storage/inbox.py) are handled too: the contact's messages in
them get tombstones, so the drain drops them, and an entry holding nothing else is deleted.
"""

import json
import uuid
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, delete, select

from storage import dead_letters, media, reminders
from storage.messages import wamid_hash
from storage.models import (
    Appointment,
    Contact,
    ContactFact,
    Conversation,
    ErasureReceipt,
    InboxEntry,
    Message,
    Outbound,
    Service,
    Tenant,
    ToolCall,
    Usage,
    WamidTombstone,
)

ANONYMOUS = "[erased]"


def find_contact(session: Session, tenant_id: int, ref: str) -> Contact | None:
    """A contact of the tenant by phone number (wa_id), business-scoped user id, or our numeric
    id; None if none matches. The one contact lookup of the admin API, the console and the CLI.

    `ref` is tried as the id only when it is fewer than 10 ASCII digits (a wa_id is a full
    international number, country code included, so an id and a phone number do not meet;
    "²" passes `isdigit()` but is no int). Several matches: the lowest id.
    """
    condition = (col(Contact.wa_id) == ref) | (col(Contact.user_id) == ref)
    if ref.isascii() and ref.isdigit() and len(ref) < 10:
        condition = condition | (col(Contact.id) == int(ref))
    return session.exec(select(Contact).where(Contact.tenant_id == tenant_id, condition)
                        .order_by(col(Contact.id))).first()


def export_contact(session: Session, contact: Contact) -> dict[str, Any]:
    """Everything stored about a contact, as JSON-ready data."""
    conversations = session.exec(select(Conversation).where(
        Conversation.contact_id == contact.id).order_by(col(Conversation.id))).all()
    ids = [c.id for c in conversations]
    messages = session.exec(select(Message).where(col(Message.conversation_id).in_(ids))
                            .order_by(col(Message.id))).all()
    facts = session.exec(select(ContactFact).where(ContactFact.contact_id == contact.id)
                         .order_by(col(ContactFact.id))).all()
    appointments = session.exec(select(Appointment, Service).join(
        Service, col(Service.id) == col(Appointment.service_id)).where(
        Appointment.contact_id == contact.id).order_by(col(Appointment.start_at))).all()
    return {
        "contact": _row(contact),
        "conversations": [{**_row(c), "messages": [_row(m) for m in messages
                                                   if m.conversation_id == c.id]}
                          for c in conversations],
        "facts": [_row(f) for f in facts],
        "appointments": [{**_row(a), "service": s.code} for a, s in appointments],
    }


def forget_contact(session: Session, contact: Contact, *, now: datetime) -> dict[str, int]:
    """Erase a contact from every layer (see the module docstring); returns the counts."""
    assert contact.id is not None
    tenant = session.get(Tenant, contact.tenant_id)
    inbox_wamids, inbox_entries = _forget_inbox(session, contact,
                                                tenant.phone_number_id if tenant else "")
    ids = [c for c in session.exec(select(Conversation.id).where(
        Conversation.contact_id == contact.id)).all() if c is not None]
    wamids = [w for w in session.exec(select(Message.wamid).where(
        col(Message.conversation_id).in_(ids), col(Message.wamid).is_not(None))).all() if w]
    for wamid in wamids:
        if session.get(WamidTombstone, wamid_hash(wamid)) is None:
            session.add(WamidTombstone(wamid_hash=wamid_hash(wamid), created_at=now))
    outbound = _delete_outbox(session, ids)
    counts = {
        "tool_calls": _delete(session, ToolCall, col(ToolCall.conversation_id).in_(ids)),
        "outbound": outbound,
        "usage": _delete(session, Usage, col(Usage.conversation_id).in_(ids)),
        "facts": _delete(session, ContactFact, col(ContactFact.contact_id) == contact.id),
        "media_files": media.delete_for_conversations(session, ids),
        "messages": _delete(session, Message, col(Message.conversation_id).in_(ids)),
    }
    counts["dead_letters"] = dead_letters.forget_contact(session, contact)
    counts["inbox_entries"] = inbox_entries
    for wamid in inbox_wamids - set(wamids):
        if session.get(WamidTombstone, wamid_hash(wamid)) is None:
            session.add(WamidTombstone(wamid_hash=wamid_hash(wamid), created_at=now))
    anonymous = _anonymous_contact(session, contact.tenant_id, now)
    kept = session.exec(select(Appointment).where(Appointment.contact_id == contact.id)).all()
    for appointment in kept:
        appointment.contact_id = anonymous.id or 0
        appointment.note = ""  # the customer's own words (issue 21): erased with the rest
        session.add(appointment)
        reminders.cancel_for(session, appointment.id or 0, reason="the contact was erased")
    counts["appointments_kept_anonymised"] = len(kept)
    counts["conversations"] = _delete(session, Conversation, col(Conversation.id).in_(ids))
    subject = _subject(contact)
    session.delete(contact)
    session.flush()
    counts["tombstones"] = len(set(wamids) | inbox_wamids)
    session.add(ErasureReceipt(tenant_id=contact.tenant_id, subject=subject, scope="contact",
                               counts=counts, created_at=now))
    session.flush()
    return counts


def _names(body: bytes, contact: Contact, phone_number_id: str) -> bool:
    """A raw webhook body that mentions the tenant's number and one of the contact's ids."""
    return phone_number_id.encode() in body and any(
        n.encode() in body for n in (contact.wa_id, contact.user_id) if n)


def _forget_inbox(session: Session, contact: Contact,
                  phone_number_id: str) -> tuple[set[str], int]:
    """The wamids of the contact's messages waiting in the inbox under this tenant's number,
    and how many entries were deleted because they held nothing else."""
    wamids: set[str] = set()
    deleted = 0
    # FOR UPDATE (PostgreSQL): a drain holding an entry finishes storing it first, so the
    # messages it stores are among those erased below
    for entry in session.exec(select(InboxEntry).with_for_update()).all():
        if not phone_number_id or not _names(entry.body, contact, phone_number_id):
            continue
        try:
            payload = json.loads(entry.body)
        except (ValueError, RecursionError):  # the drain dead-letters it as it is
            continue
        theirs, others = _split_updates(payload, contact, phone_number_id)
        wamids |= theirs
        if theirs and not others:
            session.delete(entry)
            deleted += 1
    return wamids, deleted


def _split_updates(payload: Any, contact: Contact, phone_number_id: str) -> tuple[set[str], int]:
    """(wamids of the contact's messages, count of every other update) in a webhook body;
    whatever does not have the expected shape counts as another update."""
    theirs: set[str] = set()
    others = 0
    entries = payload.get("entry") if isinstance(payload, dict) else None
    for item in entries if isinstance(entries, list) else [payload]:
        changes = item.get("changes") if isinstance(item, dict) else None
        for change in changes if isinstance(changes, list) else [item]:
            value = change.get("value") if isinstance(change, dict) else None
            if not isinstance(value, dict):
                others += 1
                continue
            metadata = value.get("metadata")
            ours = isinstance(metadata, dict) and metadata.get(
                "phone_number_id") == phone_number_id
            for key, updates in value.items():
                if key in ("metadata", "contacts", "messaging_product"):
                    continue
                for update in updates if isinstance(updates, list) else [updates]:
                    if ours and key == "messages" and isinstance(update, dict) and isinstance(
                            update.get("id"), str) and (
                            (contact.wa_id and update.get("from") == contact.wa_id)
                            or (contact.user_id
                                and update.get("from_user_id") == contact.user_id)):
                        theirs.add(update["id"])
                    else:
                        others += 1
    return theirs, others


def _anonymous_contact(session: Session, tenant_id: int, now: datetime) -> Contact:
    found = session.exec(select(Contact).where(Contact.tenant_id == tenant_id,
                                               Contact.profile_name == ANONYMOUS,
                                               col(Contact.wa_id).is_(None),
                                               col(Contact.user_id).is_(None))).first()
    if found is not None:
        return found
    anonymous = Contact(tenant_id=tenant_id, profile_name=ANONYMOUS, created_at=now)
    session.add(anonymous)
    session.flush()
    return anonymous


def _delete_outbox(session: Session, conversation_ids: list[int]) -> int:
    """Delete the outbox of these conversations in the order the others lock its rows
    (PostgreSQL), so the erasure waits for them and never they for it in a cycle: the parts
    not sent (no wamid: the outbox's, which locks a part, then its reply), then the replies'
    rows, then the parts sent (Meta's statuses', which lock the reply, then the part:
    storage.messages.apply_status). Returns how many rows were deleted."""
    in_them = col(Outbound.conversation_id).in_(conversation_ids)
    unsent = _delete(session, Outbound, in_them & col(Outbound.wamid).is_(None))
    session.exec(select(Message.id).where(col(Message.conversation_id).in_(conversation_ids))
                 .order_by(col(Message.id)).with_for_update()).all()
    return unsent + _delete(session, Outbound, in_them)


def _delete(session: Session, model: Any, condition: Any) -> int:
    result = session.exec(delete(model).where(condition))
    return int(result.rowcount or 0)


def _subject(contact: Contact) -> str:
    """A random receipt id: a hash of the phone number could be reversed by enumeration."""
    return uuid.uuid4().hex


def _row(row: Any) -> dict[str, Any]:
    return dict(row.model_dump(mode="json"))
