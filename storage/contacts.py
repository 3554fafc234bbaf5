"""Contact identity: business-scoped `user_id` first, else `wa_id`; merged, never duplicated."""

from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, or_
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select, update

from storage.facts import dedupe_after_merge
from storage.messages import insert_rows, one_of, prepared, row_values, upsert
from storage.models import Appointment, Contact, ContactFact, Conversation


def find_or_create(session: Session, *, tenant_id: int, wa_id: str | None, user_id: str | None,
                   profile_name: str | None, now: datetime) -> Contact:
    """The contact for these identifiers, creating or merging as needed (ARCHITECTURE.md Identity).

    Both ids known on two different rows → the rows merge into the older one. A known `wa_id`
    whose row carries another `user_id` means the number now belongs to someone else: the
    number moves to a new contact. Raises ValueError when both ids are missing.
    """
    if not wa_id and not user_id:
        raise ValueError("a contact needs a wa_id or a user_id")
    by_user = _get(session, tenant_id, user_id=user_id) if user_id else None
    by_wa = _get(session, tenant_id, wa_id=wa_id) if wa_id else None
    if by_user and by_wa and by_user.id != by_wa.id:
        if by_wa.user_id and by_wa.user_id != user_id:
            by_wa.wa_id = None  # the number was reassigned: it leaves the old contact
            session.add(by_wa)
            session.flush()
            contact = by_user
        else:
            contact = merge(session, keep=min(by_user, by_wa, key=_id),
                            drop=max(by_user, by_wa, key=_id), now=now)
    elif by_wa and user_id and by_wa.user_id and by_wa.user_id != user_id and not by_user:
        by_wa.wa_id = None
        session.add(by_wa)
        session.flush()
        contact = Contact(tenant_id=tenant_id, created_at=now)
    else:
        contact = by_user or by_wa or Contact(tenant_id=tenant_id, created_at=now)
    contact.user_id = user_id or contact.user_id
    contact.wa_id = wa_id or contact.wa_id
    contact.profile_name = profile_name or contact.profile_name
    session.add(contact)
    session.flush()
    return contact


def lookup_for_inbound(session: Session, *, tenant_id: int, wa_id: str | None,
                       user_id: str | None) -> list[Any]:
    """Every contact of the tenant known by `user_id` or by `wa_id`, each with its open
    conversation, in one round trip. Row fields: `id`, `user_id`, `wa_id`, `profile_name`,
    `last_inbound_at`, and `conversation_id`, `last_activity_at`,
    `conversation_last_inbound_at` (None without an open conversation).
    """
    keys = ("user_id",) * bool(user_id) + ("wa_id",) * bool(wa_id)
    if not keys:
        return []
    connection, statement = prepared(session, f"contact_lookup_{'_'.join(keys)}",
                                     lambda _: _build_lookup(keys))
    return list(connection.execute(statement, {
        "tenant_id": tenant_id, "user_id": user_id, "wa_id": wa_id}).all())


def _build_lookup(keys: tuple[str, ...]) -> Any:
    c = Contact.__table__  # type: ignore[attr-defined]
    v = Conversation.__table__  # type: ignore[attr-defined]
    return sa_select(
        c.c.id, c.c.user_id, c.c.wa_id, c.c.profile_name, c.c.last_inbound_at,
        v.c.id.label("conversation_id"), v.c.last_activity_at,
        v.c.last_inbound_at.label("conversation_last_inbound_at"),
    ).select_from(c.outerjoin(v, and_(v.c.contact_id == c.c.id, v.c.status == "open"))).where(
        c.c.tenant_id == bindparam("tenant_id"), or_(*(c.c[k] == bindparam(k) for k in keys)))


def insert_new(session: Session, *, tenant_id: int, wa_id: str | None, user_id: str | None,
               profile_name: str | None, now: datetime,
               last_inbound_at: datetime | None) -> int | None:
    """Create a contact in one round trip (`INSERT … ON CONFLICT DO NOTHING RETURNING id`);
    None when another transaction created one with either id first."""
    table = Contact.__table__  # type: ignore[attr-defined]
    connection, statement = prepared(
        session, "insert_contact",
        lambda dialect: upsert(dialect, table).on_conflict_do_nothing().returning(table.c.id))
    new_id = connection.execute(statement, row_values(Contact(
        tenant_id=tenant_id, wa_id=wa_id, user_id=user_id, profile_name=profile_name,
        last_inbound_at=last_inbound_at, created_at=now))).scalar()
    return None if new_id is None else int(new_id)


def set_fields(session: Session, contact_id: int, values: dict[str, Any]) -> None:
    """One UPDATE of the given columns of a contact (nothing when `values` is empty)."""
    if not values:
        return
    table = Contact.__table__  # type: ignore[attr-defined]
    connection, statement = prepared(
        session, "contact_by_id", lambda _: update(table).where(table.c.id == bindparam("_id")))
    connection.execute(statement, {"_id": contact_id, **values})


def lookup_many(session: Session, *, tenant_ids: list[int], user_ids: list[str],
                wa_ids: list[str]) -> list[Any]:
    """Every contact of these tenants known by one of these ids, each with its open
    conversation (the fields of `lookup_for_inbound`, and `tenant_id`), in one round trip."""
    c = Contact.__table__  # type: ignore[attr-defined]
    v = Conversation.__table__  # type: ignore[attr-defined]
    connection, statement = prepared(session, "contacts_lookup_many", lambda dialect: sa_select(
        c.c.tenant_id, c.c.id, c.c.user_id, c.c.wa_id, c.c.profile_name, c.c.last_inbound_at,
        v.c.id.label("conversation_id"), v.c.last_activity_at,
        v.c.last_inbound_at.label("conversation_last_inbound_at"),
    ).select_from(c.outerjoin(v, and_(v.c.contact_id == c.c.id, v.c.status == "open"))).where(
        one_of(c.c.tenant_id, "tenant_ids", dialect),
        or_(one_of(c.c.user_id, "user_ids", dialect), one_of(c.c.wa_id, "wa_ids", dialect))))
    return list(connection.execute(statement, {"tenant_ids": tenant_ids, "user_ids": user_ids,
                                               "wa_ids": wa_ids}))


def insert_many(session: Session, rows: list[dict[str, Any]]) -> list[Any]:
    """Insert contacts (each the values of every column but the id) in one statement (`ON
    CONFLICT DO NOTHING`); returns (`id`, `tenant_id`, `user_id`, `wa_id`) of the rows
    inserted (one that collided is missing)."""
    return insert_rows(session, Contact.__table__,  # type: ignore[attr-defined]
                       rows, returning=("id", "tenant_id", "user_id", "wa_id"))


def update_many(session: Session, values: list[dict[str, Any]]) -> None:
    """Set `user_id`, `wa_id`, `profile_name` and `last_inbound_at` of many contacts (each
    dict names its contact as `_id`), in one executemany."""
    if not values:
        return
    table = Contact.__table__  # type: ignore[attr-defined]
    connection, statement = prepared(
        session, "contact_by_id", lambda _: update(table).where(table.c.id == bindparam("_id")))
    connection.execute(statement, values)


def rekey(session: Session, *, tenant_id: int, kind: str, old_wa_id: str | None,
          old_user_id: str | None, new_wa_id: str | None, new_user_id: str | None,
          now: datetime) -> Contact | None:
    """Apply a `user_changed_number` / `user_changed_user_id` system message.

    The contact found by the old ids takes the new ones; a contact already known by a new id
    (its message came before the system message: Meta orders nothing) merges into it. A number
    change regenerates the business-scoped user id (Sources: WhatsApp §3.3): without a new
    one in the message, the old one is dropped, so the next message (new number, new user id)
    lands on this contact. Returns the re-keyed contact, or None when no contact is known by the
    old ids.
    """
    old = (_get(session, tenant_id, user_id=old_user_id) if old_user_id else None) or (
        _get(session, tenant_id, wa_id=old_wa_id) if old_wa_id else None)
    if old is None:
        return None
    if kind == "user_changed_number" and not new_user_id and new_wa_id != old.wa_id:
        old.user_id = None
    for key, value in (("wa_id", new_wa_id), ("user_id", new_user_id)):
        if not value or getattr(old, key) == value:
            continue
        other = _get(session, tenant_id, **{key: value})
        if other is not None and other.id != old.id:
            old = merge(session, keep=old, drop=other, now=now)
        setattr(old, key, value)
    session.add(old)
    session.flush()
    return old


def merge(session: Session, *, keep: Contact, drop: Contact, now: datetime) -> Contact:
    """Move everything of `drop` to `keep`, delete `drop`; keep's ids win, drop's fill gaps.

    When both have an open conversation, drop's closes (at most one open per contact).
    Facts move too, and each key is left with one current value (`facts.dedupe_after_merge`:
    the newest supersedes, history kept, a confirmed value never displaced by an unreviewed
    one). `drop` is deleted before its ids move to `keep` (the unique indexes on wa_id and
    user_id would refuse two rows carrying one id, even inside the transaction).
    """
    assert keep.id is not None and drop.id is not None
    keep_open = session.exec(select(Conversation).where(
        Conversation.contact_id == keep.id, Conversation.status == "open")).first()
    if keep_open is not None:
        session.exec(update(Conversation).where(
            col(Conversation.contact_id) == drop.id, col(Conversation.status) == "open",
        ).values(status="closed", closed_at=now))
    for model in (Conversation, Appointment, ContactFact):
        session.exec(update(model).where(col(model.contact_id) == drop.id)
                     .values(contact_id=keep.id))
    wa_id, user_id, profile_name = drop.wa_id, drop.user_id, drop.profile_name
    last_inbound_at = drop.last_inbound_at
    session.delete(drop)
    session.flush()
    keep.wa_id = keep.wa_id or wa_id
    keep.user_id = keep.user_id or user_id
    keep.profile_name = keep.profile_name or profile_name
    keep.last_inbound_at = max((t for t in (keep.last_inbound_at, last_inbound_at) if t),
                               default=None)
    session.add(keep)
    session.flush()
    dedupe_after_merge(session, keep.id, now=now)
    return keep


def _get(session: Session, tenant_id: int, *, wa_id: str | None = None,
         user_id: str | None = None) -> Contact | None:
    query = select(Contact).where(Contact.tenant_id == tenant_id)
    if wa_id:
        return session.exec(query.where(Contact.wa_id == wa_id)).first()
    return session.exec(query.where(Contact.user_id == user_id)).first()


def _id(contact: Contact) -> int:
    assert contact.id is not None
    return contact.id


def address(contact: Contact) -> tuple[str | None, str | None]:
    """(to, recipient) for a send: the phone number when known, else the user id (Meta, 2026)."""
    return (contact.wa_id, None) if contact.wa_id else (None, contact.user_id)
