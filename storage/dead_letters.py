"""Dead letters: webhook bodies or updates kept whole, what they name indexed, erased and expired
by indexed queries (never by reading every body).

A dead letter records its tenant when known and one `DeadLetterRef` row per identifier it
names, found when it is written: in the parsed JSON when the body parses (any depth), and in the
raw bytes as `"key": "value"` pairs (a body that does not parse, or is cut short, still names
its numbers this way; an identifier spelled with JSON escapes in such a body is not found).
"""

import json
import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, insert, or_
from sqlmodel import Session, col, delete, select

from storage.db import session_scope
from storage.models import Contact, DeadLetter, DeadLetterRef, Tenant

# Every field of a stored body that names a number or a person, and the name it is indexed
# under, in one place (Sources: WhatsApp §3, and the shared fixtures' README): metadata.
# phone_number_id; messages[].from / from_user_id; message_echoes[].from (the business) / to /
# to_user_id (the customer, issue 35); contacts[].wa_id / user_id, and a shared contact card's
# phones[].phone / wa_id; system.wa_id / user_id; statuses[].recipient_id / recipient_user_id.
# Any other field whose name ends in "user_id" is a user id too (USER_ID_SUFFIX).
REF_NAMES = {"phone_number_id": "phone_number_id", "from": "wa_id", "to": "wa_id",
             "wa_id": "wa_id", "recipient_id": "wa_id", "phone": "wa_id",
             "from_user_id": "user_id", "to_user_id": "user_id", "user_id": "user_id",
             "recipient_user_id": "user_id"}
USER_ID_SUFFIX = "user_id"
DIGITS_ONLY = frozenset({"phone"})  # as a person typed it ("+55 11 98765-4321"): its digits
REF_CHARS = 160  # DeadLetterRef.value
REASON_CHARS = 2000
BATCH = 500  # dead letters deleted per transaction by the retention purge
_RAW_PAIR = re.compile(rb'"(' + b"|".join(k.encode() for k in REF_NAMES) +
                       rb'|[A-Za-z_]*' + USER_ID_SUFFIX.encode() +
                       rb')"\s*:\s*"?([^"\\,}\]\s]{1,160})')


def ref_name(key: str) -> str | None:
    """The name field `key` of a body is indexed under, or None when it names nobody."""
    if key in REF_NAMES:
        return REF_NAMES[key]
    return "user_id" if key.endswith(USER_ID_SUFFIX) else None


def _ref_value(key: str, value: str) -> str:
    return re.sub(r"\D", "", value) if key in DIGITS_ONLY else _text(value)


def identifiers(body: bytes) -> set[tuple[str, str]]:
    """(name, value) of every identifier `body` names; see the module docstring."""
    found = set()
    for key, value in _RAW_PAIR.findall(body):
        name = ref_name(key.decode())
        if name is not None:
            found.add((name, _ref_value(key.decode(), value.decode("utf-8", "replace"))))
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        payload = None
    stack: list[Any] = [payload]
    while stack:  # iterative: a body nested deeper than the interpreter's stack is fine
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                name = ref_name(key) if isinstance(key, str) else None
                if name is not None and isinstance(value, str | int) and \
                        not isinstance(value, bool) and str(value):
                    found.add((name, _ref_value(key, str(value))))
                elif isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return {(name, value) for name, value in found if value}


def _text(value: str) -> str:
    """Storable in a VARCHAR on PostgreSQL (no NUL, no lone surrogate), cut to REF_CHARS."""
    return value.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")[:REF_CHARS]


def add_dead_letter(session: Session, *, body: bytes, reason: str, now: datetime,
                    phone_number_id: str | None = None) -> DeadLetter:
    """Keep `body` whole with what it names. `phone_number_id` is the number of the envelope an
    update came in (an item dead-lettered alone does not carry it); the tenant is the one that
    number, or the only number the body names, belongs to (none for a number not onboarded)."""
    refs = identifiers(body)
    if phone_number_id:
        refs.add(("phone_number_id", _text(phone_number_id)))
    numbers = sorted({value for name, value in refs if name == "phone_number_id"})
    tenant_ids = session.exec(select(Tenant.id).where(
        col(Tenant.phone_number_id).in_(numbers))).all() if numbers else []
    letter = DeadLetter(received_at=now, reason=reason[:REASON_CHARS], body=body,
                        tenant_id=tenant_ids[0] if len(tenant_ids) == 1 else None)
    session.add(letter)
    session.flush()
    if refs:
        session.exec(insert(DeadLetterRef), params=[
            {"dead_letter_id": letter.id, "name": name, "value": value}
            for name, value in sorted(refs)])
    return letter


def forget_contact(session: Session, contact: Contact) -> int:
    """Delete the dead letters naming one of the contact's ids that belong to its tenant or to
    none (a number not onboarded yet, no number, or several tenants' numbers); another
    tenant's stay. One indexed statement; no body is read. Returns how many."""
    ids = [i for i in (contact.wa_id, contact.user_id) if i]
    if not ids:
        return 0
    naming = select(DeadLetterRef.dead_letter_id).where(
        col(DeadLetterRef.value).in_(ids), col(DeadLetterRef.name).in_(("wa_id", "user_id")))
    result = session.exec(delete(DeadLetter).where(
        col(DeadLetter.id).in_(naming),
        or_(col(DeadLetter.tenant_id) == contact.tenant_id, col(DeadLetter.tenant_id).is_(None))))
    return int(result.rowcount or 0)


def purge_expired(engine: Engine, *, now: datetime, retention_days: int,
                  batch: int = BATCH) -> int:
    """Delete dead letters received more than `retention_days` ago, `batch` per transaction
    (indexed on received_at; their refs go with them). Returns how many."""
    cutoff, purged = now - timedelta(days=retention_days), 0
    while True:
        with session_scope(engine) as session:
            ids = _ids(session.exec(select(DeadLetter.id).where(
                col(DeadLetter.received_at) < cutoff).limit(batch)).all())
            if ids:
                session.exec(delete(DeadLetter).where(col(DeadLetter.id).in_(ids)))
        purged += len(ids)
        if len(ids) < batch:
            return purged


def _ids(rows: Iterable[int | None]) -> list[int]:
    return [int(i) for i in rows if i is not None]
