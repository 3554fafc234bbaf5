"""Storing customer messages: the one way, for one POST's or many POSTs' (`store_group`),
in one transaction (docs/ARCHITECTURE.md, How a message is answered)."""

from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import Engine
from sqlmodel import Session

from intake.activity import group_conversations, touch
from intake.failures import dump
from intake.follow_ups import follow_up
from intake.items import (
    WA_TYPE_CHARS,
    ContactRef,
    Item,
    Pending,
    Tenant,
    fit,
)
from intake.result import IngestResult
from intake.senders import contact_of, group_contacts
from intake.stamp import arrival
from intake.standby import record_threads
from intake.text import content, media
from storage import dead_letters, lookups, messages
from storage.db import session_scope
from storage.models import Message
from whatsapp.inbound import FOLLOW_UPS, InboundMessage

log = structlog.get_logger(__name__)

NO_CUSTOMER = "InboundMessage: ValueError: a contact needs a wa_id or a user_id"

# the column defaults of a customer message (a group builds its rows as dicts)
_MESSAGE_DEFAULTS = messages.row_values(Message(
    tenant_id=0, conversation_id=0, role="user", direction="inbound", content=[],
    received_at=datetime.min))


def store_group(engine: Engine, group: list[Pending]) -> None:
    """Store the customer messages of one POST or many in one transaction, and fill each
    Pending's result (anew): the one way a customer message is stored (docs/ARCHITECTURE.md, How a
    message is answered).

    First a set-based pass: one lookup (four SELECTs in one round trip on PostgreSQL), then
    one INSERT each for the new contacts, conversations and messages (`ON CONFLICT DO
    NOTHING`), and one executemany each for the conversations and contacts touched. A message
    that pass cannot take is stored alone afterwards, in the POSTs' order, in the same
    transaction: an edit or a deletion and the messages it names (`intake.follow_ups`), an
    identity that needs a merge or a re-key (`intake.senders`, ARCHITECTURE.md Identity), ids
    that disagree inside the group, a row another transaction created meanwhile, and the
    later copies of those. A message of an unknown number, or naming no customer, goes to the
    dead letters.

    Raises on any database error (IntegrityError: a race the caller retries once,
    `intake.failures.retry_on_conflict`); nothing is then stored.
    """
    for pending in group:
        pending.result = IngestResult()
    items = [Item(p, m, index=p.offset + k, logged=len(group) == 1)
             for p in group for k, m in enumerate(p.messages)]
    with session_scope(engine) as session:
        _store_set_based(session, items)
        for item in items:
            if item.alone:
                _store_alone(session, item)
        record_threads(session, items)  # who holds each thread (issue 45)


def _store_set_based(session: Session, items: list[Item]) -> None:
    """Store every item the set-based pass can take; mark the others `alone`."""
    stored, tombstoned, tenants_by_number, known = lookups.lookup_group(
        session, wamids=list({i.msg.wamid for i in items}),
        phone_number_ids=list({i.msg.phone_number_id for i in items}),
        user_ids=list({i.msg.user_id for i in items if i.msg.user_id}),
        wa_ids=list({i.msg.wa_id for i in items if i.msg.wa_id}))
    # an edit or a deletion, and a message it names, go in order: Meta orders nothing
    named = {i.msg.refers_to for i in items if i.msg.wa_type in FOLLOW_UPS}
    firsts: dict[str, Item] = {}
    new = []
    for item in items:
        row = None if item.msg.wamid in tombstoned else stored.get(item.msg.wamid)
        if _sort(session, item, row, tombstoned=item.msg.wamid in tombstoned, firsts=firsts,
                 tenant=tenants_by_number.get(item.msg.phone_number_id), named=named):
            new.append(item)
    group_contacts(session, new, known)
    inserting = [i for i in new if not i.alone]
    group_conversations(session, inserting)
    inserting = [i for i in inserting if not i.alone]
    # inserted in wamid order: two groups that share a redelivery lock it in one order
    ids = messages.insert_inbound_many(session, [_message_row(i) for i in sorted(
        inserting, key=lambda i: i.msg.wamid)])
    for item in items:
        _count(item, ids)
    touch(session, [i for i in inserting if i.msg.wamid in ids])


def _sort(session: Session, item: Item, row: Any, *, tombstoned: bool,
          firsts: dict[str, Item], tenant: Any, named: set[str | None]) -> bool:
    """Whether the set-based pass stores `item`: not when it is a redelivery (`row`: its
    stored copy), a later copy in the group, of an unknown number, naming no customer (those
    counted here), or to be stored alone."""
    msg = item.msg
    # a claim made by an edit or deletion may be another contact's: stored alone, it is
    # voided when it is (`_store_alone`), else the original is a redelivery
    claimed = _claims(row, msg)
    if tombstoned or row is not None and not claimed:
        _redelivered(item.result, row)
    elif msg.wamid in firsts:
        item.first = firsts[msg.wamid]
    elif tenant is None:
        _unknown_number(session, msg, item.result, item.now)
    elif not (msg.wa_id or msg.user_id):
        _no_customer(session, msg, item.result, item.now)
    else:
        item.tenant = tenant
        firsts[msg.wamid] = item
        item.alone = msg.wa_type in FOLLOW_UPS or msg.wamid in named or claimed
        return not item.alone
    return False


def _count(item: Item, ids: dict[str, int]) -> None:
    """Count what the set-based pass did with `item` (`ids`: the wamids it inserted); a later
    copy of an item stored alone is stored alone too, after it, where it is a redelivery."""
    if item.first is not None and item.first.alone:
        item.alone = True
    if item.alone or item.tenant is None and item.first is None:
        return
    first = item.first or item
    if item.first is not None or item.msg.wamid not in ids:
        # a redelivery inside the group, or stored meanwhile by another transaction
        log.debug("inbound_duplicate", conversation_id=first.conversation_id)
        item.result.count("duplicate")
        if item.first is not None and first.msg.wamid in ids and first.msg.starts_turn:
            item.result.add_turn(first.conversation_id, first.known_tenant.id)
        return
    _stored(item, ids[item.msg.wamid], item.msg.starts_turn)


def _store_alone(session: Session, item: Item) -> None:
    """Store one message the set-based pass left, as a group of one, in the same transaction:
    looked up again (it sees what the group and the other transactions committed), its
    contact found, created or merged (`intake.senders.contact_of`), its edit or deletion
    applied."""
    msg, result = item.msg, item.result
    head = messages.inbound_lookup(session, wamid=msg.wamid,
                                   phone_number_id=msg.phone_number_id)
    claimed = _claims(head if head.message_id is not None else None, msg)
    if head.tombstoned or head.message_id is not None and not claimed:
        _redelivered(result, None if head.tombstoned else head)
        return
    if head.tenant_id is None:
        _unknown_number(session, msg, result, item.now)
        return
    item.tenant = Tenant(head.tenant_id, head.timezone, head.inactivity_timeout_minutes,
                         bool(head.keep_cpf))
    contact_id, item.seen = contact_of(session, msg, head.tenant_id, item.profile_name,
                                       item.now, item.sent_at)
    item.contact = ContactRef(contact_id, known=item.seen is not None)
    if claimed:
        if not messages.void_claim(session, msg.wamid, contact_id):
            _redelivered(result, head)  # its own edit or deletion claimed it first
            return
        log.warning("inbound_claim_voided", reason="another contact's edit or deletion")
    group_conversations(session, [item], alone=True)
    row = _message_row(item)
    if msg.wa_type in FOLLOW_UPS:
        row = _follow_up_row(session, item, row)
    ids = messages.insert_inbound_many(session, [row])
    if msg.wamid not in ids:  # a concurrent delivery of the same wamid stored it
        log.info("inbound_duplicate", conversation_id=item.conversation_id)
        result.count("duplicate")
        return
    _stored(item, ids[msg.wamid], row["starts_turn"])
    touch(session, [item])


def _follow_up_row(session: Session, item: Item, row: dict[str, Any]) -> dict[str, Any]:
    """The INSERT values of an edit or a deletion, once applied (`intake.follow_ups`)."""
    stored = Message(**row)
    rederive = follow_up(session, item.msg, stored, contact_id=item.contact_id,
                         timezone=item.known_tenant.timezone, now=item.now,
                         sent_at=item.sent_at,
                         keep_cpf=bool(item.known_tenant.keep_cpf))
    if rederive is not None:
        item.result.rederive_conversation_ids.append(rederive)
        if item.known_tenant.id is not None:  # its job's tag
            item.result.tenants[rederive] = item.known_tenant.id
    stored.answered_at = None if stored.starts_turn else item.now
    return messages.row_values(stored)


def _claims(row: Any, msg: InboundMessage) -> bool:
    """Whether the stored `row` under `msg`'s wamid is a claim (an edit or deletion that came
    first) and `msg` the original it holds the place of (docs/ARCHITECTURE.md, How a message is
    answered)."""
    return row is not None and row.wa_type == messages.CLAIM and msg.wa_type not in FOLLOW_UPS


def _redelivered(result: IngestResult, row: Any) -> None:
    """A wamid stored before (`row`: its `conversation_id`, `starts_turn`, `answered_at`), or
    tombstoned (`row` None: an erased contact's redelivery): counted, and its turn asked for
    again while it waits for an answer."""
    if row is None:
        log.info("inbound_erased_redelivery")
    else:
        log.debug("inbound_duplicate", conversation_id=row.conversation_id)
        if row.starts_turn and row.answered_at is None:
            result.add_turn(row.conversation_id)
    result.count("duplicate")


def _stored(item: Item, message_id: int, starts_turn: bool) -> None:
    item.stored = True
    (log.info if item.logged else log.debug)(
        "inbound_stored", tenant_id=item.known_tenant.id, conversation_id=item.conversation_id,
        wa_type=item.msg.wa_type, message_id=message_id)
    item.result.count("message")
    if starts_turn:
        item.result.add_turn(item.conversation_id, item.known_tenant.id)


def _unknown_number(session: Session, msg: InboundMessage, result: IngestResult,
                    now: datetime) -> None:
    """Kept for inspection: a number being onboarded loses nothing but the card and CPF
    numbers of what the customer wrote (`masked_item`: no tenant says to keep a CPF)."""
    log.warning("unknown_phone_number_id", phone_number_id=msg.phone_number_id)
    dead_letters.add_dead_letter(
        session, body=dump(msg.raw, masked=True),
        reason=f"unknown phone_number_id {msg.phone_number_id}", now=now,
        phone_number_id=msg.phone_number_id)
    result.count("unknown_tenant")


def _no_customer(session: Session, msg: InboundMessage, result: IngestResult,
                 now: datetime) -> None:
    """A message naming neither a `wa_id` nor a `user_id` has no contact: kept whole but its
    card and CPF numbers (`dump` masked)."""
    log.error("webhook_update_failed", kind="InboundMessage", error="ValueError")
    dead_letters.add_dead_letter(session, body=dump(msg.raw, masked=True), reason=NO_CUSTOMER,
                                 now=now, phone_number_id=msg.phone_number_id)
    result.count("dead_letter")


def _message_row(item: Item) -> dict[str, Any]:
    """The INSERT values of a customer message (every column but the id)."""
    msg, now, tenant = item.msg, item.now, item.known_tenant
    return {**_MESSAGE_DEFAULTS,
            "tenant_id": tenant.id, "conversation_id": item.conversation_id,
            "content": content(msg.text, now, tenant.timezone, sent_at=item.sent_at,
                               keep_cpf=bool(tenant.keep_cpf)),
            "wamid": msg.wamid, "wa_type": fit(msg.wa_type, WA_TYPE_CHARS),
            "meta_timestamp": msg.timestamp, "received_at": arrival(now, item.index),
            "starts_turn": msg.starts_turn, "answered_at": None if msg.starts_turn else now,
            "refers_to_wamid": msg.refers_to,
            # the caption and file name are the customer's words (intake/text.py `media`)
            "media": {**(media(msg.media, keep_cpf=bool(tenant.keep_cpf)) or {}),
                      "state": "pending"} if msg.media else None}
