"""Which conversation each customer message of a group joins (the contact's open one, or a
new one when there is none or it is stale), and the activity the stored messages record on
their conversations and contacts."""

from datetime import datetime
from typing import Any

from sqlmodel import Session

from intake.items import ContactRef, Item, latest_now, latest_sent
from intake.stamp import latest
from storage import contacts, conversations, messages
from storage.models import Conversation

# the column defaults of new conversations (a group builds its rows as dicts)
_CONVERSATION_DEFAULTS = messages.row_values(Conversation(
    tenant_id=0, contact_id=0, last_activity_at=datetime.min, due_at=datetime.min,
    opened_at=datetime.min))


def group_conversations(session: Session, items: list[Item], *, alone: bool = False) -> None:
    """Set every item's conversation: the contact's open one, or a new one when there is none
    or it is stale (closed here; its facts are extracted). One another transaction opened
    meanwhile is taken as the open one when storing `alone`; else the item is stored alone."""
    if not items:
        return
    by_contact: dict[int, list[Item]] = {}
    for item in items:
        by_contact.setdefault(item.contact_id, []).append(item)
    to_open: dict[int, list[Item]] = {}
    stale: dict[int, int] = {}  # conversation id -> contact id
    for contact_id, group in by_contact.items():
        seen = group[0].seen
        if seen is None or seen.conversation_id is None:
            to_open[contact_id] = group
        elif not _join_if_fresh(group):
            stale[int(seen.conversation_id)] = contact_id
            to_open[contact_id] = group
    for conversation_id in conversations.close_many(session, sorted(stale),
                                                    now=latest_now(items)):
        group = by_contact[stale[conversation_id]]
        group[0].result.closed_conversation_ids.append(conversation_id)
        if group[0].known_tenant.id is not None:  # its facts job's tag
            group[0].result.tenants[conversation_id] = group[0].known_tenant.id
    _open(session, to_open, alone=alone)


def _join_if_fresh(group: list[Item]) -> bool:
    """Put a contact's items in its open conversation (`seen`) unless that is stale; whether
    they joined it."""
    seen = group[0].seen
    timeout = conversations.inactivity_timeout(group[0].known_tenant.inactivity_timeout_minutes)
    if conversations.is_stale(seen.last_activity_at, now=group[0].now,
                              inactivity_timeout=timeout):
        return False
    for item in group:
        item.conversation_id = seen.conversation_id
        item.conversation_seen = seen.conversation_last_inbound_at
    return True


def _open(session: Session, to_open: dict[int, list[Item]], *, alone: bool) -> None:
    """Open a conversation for each contact of `to_open` (one INSERT), and put its items in
    it; one another transaction opened first is taken when storing `alone`, else its items
    are stored alone."""
    opened = conversations.open_many(session, [
        _new_conversation(contact_id, group) for contact_id, group in sorted(to_open.items())])
    for contact_id, group in to_open.items():
        found = None
        if contact_id not in opened and alone:  # another transaction opened it first
            found = conversations.get_open(session, contact_id)
            assert found is not None and found.id is not None
        for item in group:
            if contact_id in opened:
                item.conversation_id = opened[contact_id]
                item.opened_here = True
            elif found is not None:
                item.conversation_id, item.conversation_seen = found.id, found.last_inbound_at
            else:  # another transaction opened one meanwhile
                item.alone = True


def _new_conversation(contact_id: int, group: list[Item]) -> dict[str, Any]:
    now, tenant = latest_now(group), group[0].known_tenant
    return {**_CONVERSATION_DEFAULTS, "tenant_id": tenant.id, "contact_id": contact_id,
            "status": "open", "last_activity_at": now, "opened_at": now,
            "due_at": conversations.due_at(now, conversations.inactivity_timeout(
                tenant.inactivity_timeout_minutes)),
            "last_inbound_at": latest_sent(group)}


def touch(session: Session, stored: list[Item]) -> None:
    """Activity, due time and last inbound time of the conversations that received messages
    (those opened here already carry them), and the ids, name and last inbound time of the
    known contacts."""
    by_conversation: dict[int, list[Item]] = {}
    by_contact: dict[int, list[Item]] = {}
    for item in stored:
        if not item.opened_here:
            assert item.conversation_id is not None
            by_conversation.setdefault(item.conversation_id, []).append(item)
        if isinstance(item.contact, ContactRef) and item.contact.known:
            by_contact.setdefault(item.contact.id, []).append(item)
    conversations.record_inbound_many(session, [
        _conversation_activity(conversation_id, group)
        for conversation_id, group in sorted(by_conversation.items())])
    changes = [change for contact_id, group in sorted(by_contact.items())
               if (change := _contact_change(contact_id, group)) is not None]
    contacts.update_many(session, changes)


def _conversation_activity(conversation_id: int, group: list[Item]) -> dict[str, Any]:
    now = latest_now(group)
    return {"_id": conversation_id, "last_activity_at": now,
            "due_at": conversations.due_at(now, conversations.inactivity_timeout(
                group[0].known_tenant.inactivity_timeout_minutes)),
            "last_inbound_at": latest(group[0].conversation_seen, latest_sent(group))}


def _contact_change(contact_id: int, group: list[Item]) -> dict[str, Any] | None:
    """The new ids, name and last inbound time of a known contact, or None when unchanged."""
    row = group[0].seen
    values = {"user_id": row.user_id, "wa_id": row.wa_id, "profile_name": row.profile_name,
              "last_inbound_at": row.last_inbound_at}
    for item in group:
        values["user_id"] = item.msg.user_id or values["user_id"]
        values["wa_id"] = item.msg.wa_id or values["wa_id"]
        values["profile_name"] = item.profile_name or values["profile_name"]
        values["last_inbound_at"] = latest(values["last_inbound_at"], item.sent_at)
    if any(values[k] != getattr(row, k) for k in values):
        return {"_id": contact_id, **values}
    return None
