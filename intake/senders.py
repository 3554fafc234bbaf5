"""Who sent each customer message of a group: a contact found by its ids, created, or (when
the simple case does not hold) merged or re-keyed (ARCHITECTURE.md Identity).

A group finds or creates every contact set-based (`group_contacts`); a message whose identity
is not the simple case, or whose ids disagree with another's in the group (an `IdClaim`
contested), is stored alone (`contact_of`).
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import Session

from intake.items import (
    ID_KINDS,
    ContactRef,
    IdKind,
    Item,
    NewContact,
)
from storage import contacts, messages
from storage.models import Contact
from whatsapp.inbound import InboundMessage


@dataclass(frozen=True)
class IdValue:
    """An id value in a tenant: in a group it must name one contact."""

    tenant_id: int
    kind: IdKind
    value: str


@dataclass(frozen=True)
class IdFill:
    """A known contact's empty id of `kind`: a group's messages must fill it with one value."""

    contact_id: int
    kind: IdKind


# what one message of a group says about an id, and who says it (a contact, or a value);
# two different claimants of one claim send the messages naming it to be stored alone
IdClaim = IdValue | IdFill
Claimant = NewContact | ContactRef | str

# the column defaults of new contacts: a group builds its rows as dicts (building SQLModel
# instances, validated attribute by attribute, cost more than the INSERT)
_CONTACT_DEFAULTS = messages.row_values(Contact(tenant_id=0, created_at=datetime.min))


def group_contacts(session: Session, items: list[Item], rows: list[Any]) -> None:
    """Find or create the contact of every item among the contacts known by its ids (`rows`,
    looked up with the messages: `tenant_id`, `id`, `user_id`, `wa_id`, ...): `contact` a
    known ContactRef with `seen`, or a NewContact then a made ContactRef; an item whose
    identity is not the simple case, or whose claims another item contests, is stored
    alone."""
    if not items:
        return
    index = _index(rows)
    for item in items:
        _find(item, index)
    claims: dict[IdClaim, set[Claimant]] = {}
    for item in items:
        if not item.alone:
            for claim, claimant in _claims(item):
                claims.setdefault(claim, set()).add(claimant)
    contested = {claim for claim, claimants in claims.items() if len(claimants) > 1}
    for item in items:
        if not item.alone and any(claim in contested for claim in _named(item)):
            item.alone = True
    _create(session, [i for i in items if not i.alone and isinstance(i.contact, NewContact)])


def _index(rows: list[Any]) -> dict[IdValue, list[Any]]:
    index: dict[IdValue, list[Any]] = {}
    for row in rows:
        for kind in ID_KINDS:
            if getattr(row, kind):
                index.setdefault(IdValue(row.tenant_id, kind, getattr(row, kind)), []).append(row)
    return index


def _values(item: Item) -> list[IdValue]:
    """The id values `item`'s message names."""
    tenant_id, msg = item.known_tenant.id, item.msg
    return [IdValue(tenant_id, kind, value) for kind in ID_KINDS
            if (value := getattr(msg, kind))]


def _find(item: Item, index: dict[IdValue, list[Any]]) -> None:
    found = {row.id: row for value in _values(item) for row in index.get(value, [])}
    if not found:
        tenant_id = item.known_tenant.id
        item.contact = NewContact(tenant_id, item.msg.user_id, item.msg.wa_id)
    elif len(found) == 1 and same_person(row := next(iter(found.values())), item.msg):
        item.contact, item.seen = ContactRef(int(row.id), known=True), row
    else:
        item.alone = True


def _claims(item: Item) -> list[tuple[IdClaim, Claimant]]:
    """Each id value names this item's contact; ids filled in on a known contact must
    agree."""
    assert item.contact is not None
    made: list[tuple[IdClaim, Claimant]] = [(value, item.contact) for value in _values(item)]
    seen = item.seen
    if seen is not None:
        made += [(IdFill(int(seen.id), value.kind), value.value) for value in _values(item)
                 if not getattr(seen, value.kind)]
    return made


def _named(item: Item) -> list[IdClaim]:
    """The claims whose contest sends `item` alone: its id values, and for a known contact
    the filling of either of its ids."""
    named: list[IdClaim] = list(_values(item))
    if isinstance(item.contact, ContactRef) and item.contact.known:
        named += [IdFill(item.contact.id, kind) for kind in ID_KINDS]
    return named


def _create(session: Session, items: list[Item]) -> None:
    """Create the new contacts of `items` in one INSERT; an item whose contact another
    transaction created meanwhile is stored alone."""
    fresh: dict[NewContact, list[Item]] = {}
    for item in items:
        assert isinstance(item.contact, NewContact)
        fresh.setdefault(item.contact, []).append(item)
    made = contacts.insert_many(session, [{
        **_CONTACT_DEFAULTS, "tenant_id": key.tenant_id, "user_id": key.user_id,
        "wa_id": key.wa_id, "profile_name": last_name(group), "created_at": group[0].now,
        "last_inbound_at": max(i.sent_at for i in group)}
        for key, group in sorted(fresh.items(), key=lambda kv: kv[0].sort_key)])
    made_ids = {NewContact(r.tenant_id, r.user_id, r.wa_id): int(r.id) for r in made}
    for key, group in fresh.items():
        for item in group:
            if key in made_ids:
                item.contact = ContactRef(made_ids[key], known=False)
            else:  # another transaction created it meanwhile
                item.alone = True


def last_name(items: list[Item]) -> str | None:
    """The latest profile name among `items`, as it is stored (`Item.profile_name`)."""
    names = [i.profile_name for i in items]
    return next((n for n in reversed(names) if n), None)


def contact_of(session: Session, msg: InboundMessage, tenant_id: int,
               profile_name: str | None, now: datetime, sent_at: datetime) -> tuple[int, Any]:
    """The contact of `msg` and what is known of it: (id, row) for an existing contact (the row
    carries its open conversation), (id, None) for one created here with every value already
    set. The common cases take one or two statements; merges, a number that changed hands and
    races go through `contacts.find_or_create` (ARCHITECTURE.md Identity; raises ValueError
    when `msg` names neither id).
    """
    rows = contacts.lookup_for_inbound(session, tenant_id=tenant_id, wa_id=msg.wa_id,
                                       user_id=msg.user_id)
    if not rows and (msg.wa_id or msg.user_id):
        new_id = contacts.insert_new(session, tenant_id=tenant_id, wa_id=msg.wa_id,
                                     user_id=msg.user_id, profile_name=profile_name, now=now,
                                     last_inbound_at=sent_at)
        if new_id is not None:
            return new_id, None
    elif len(rows) == 1 and same_person(rows[0], msg):
        return int(rows[0].id), rows[0]
    # merge, re-assigned number, a concurrent first message, or no id at all (ValueError)
    contact = contacts.find_or_create(session, tenant_id=tenant_id, wa_id=msg.wa_id,
                                      user_id=msg.user_id, profile_name=profile_name, now=now)
    assert contact.id is not None
    found = contacts.lookup_for_inbound(session, tenant_id=tenant_id, wa_id=contact.wa_id,
                                        user_id=contact.user_id)
    return contact.id, next(r for r in found if r.id == contact.id)


def same_person(row: Any, msg: InboundMessage) -> bool:
    """The one contact found carries no id that contradicts the message's."""
    return (not msg.user_id or row.user_id in (None, msg.user_id)) and (
        not msg.wa_id or row.wa_id in (None, msg.wa_id))
