"""Messages, the outbox, delivery statuses and usage rows (dead letters: dead_letters.py)."""

import hashlib
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, any_, bindparam, insert, literal
from sqlalchemy import select as sa_select
from sqlalchemy import text as sa_text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import make_transient_to_detached
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import Session, col, func, or_, select, update

from core import clock
from core.storable import storable, storable_value
from storage import batched, delivery, webhooks
from storage.models import Contact, Conversation, Message, Outbound, Tenant, WamidTombstone


def wamid_hash(wamid: str) -> str:
    return hashlib.sha256(wamid.encode()).hexdigest()


def is_tombstoned(session: Session, wamid: str) -> bool:
    """True when `wamid` belonged to an erased contact (a redelivery must not be answered)."""
    return session.get(WamidTombstone, wamid_hash(wamid)) is not None


def inbound_lookup(session: Session, *, wamid: str, phone_number_id: str) -> Any:
    """What storing an inbound message needs to know first, in one round trip: the tenant of
    `phone_number_id` (`tenant_id`, `timezone`, `inactivity_timeout_minutes`, `keep_cpf`;
    None when unknown), whether the wamid is tombstoned (`tombstoned`), and the stored
    message with this wamid (`message_id`, `conversation_id`, `starts_turn`, `answered_at`,
    `wa_type`; None when new).
    """
    connection, statement = prepared(session, "inbound_lookup", _build_inbound_lookup)
    return connection.execute(statement, {
        "wamid": wamid, "wamid_hash": wamid_hash(wamid), "phone_number_id": phone_number_id,
    }).one()


def _build_inbound_lookup(_: str) -> Any:
    t = Tenant.__table__  # type: ignore[attr-defined]
    m = Message.__table__  # type: ignore[attr-defined]
    w = WamidTombstone.__table__  # type: ignore[attr-defined]
    one = sa_select(literal(1).label("one")).subquery()
    tombstoned = sa_select(w.c.wamid_hash).where(
        w.c.wamid_hash == bindparam("wamid_hash")).exists().label("tombstoned")
    return sa_select(
        t.c.id.label("tenant_id"), t.c.timezone, t.c.inactivity_timeout_minutes, t.c.keep_cpf,
        tombstoned,
        m.c.id.label("message_id"), m.c.conversation_id, m.c.starts_turn, m.c.answered_at,
        m.c.wa_type,
    ).select_from(one.outerjoin(t, t.c.phone_number_id == bindparam("phone_number_id"))
                  .outerjoin(m, m.c.wamid == bindparam("wamid")))


def lookup_many(session: Session, *, wamids: list[str],
                phone_number_ids: list[str]) -> tuple[dict[str, Any], set[str], dict[str, Any]]:
    """For a group of inbound messages, in three round trips: the stored messages by wamid
    (`id`, `conversation_id`, `starts_turn`, `answered_at`, `wa_type`), the tombstoned wamids,
    and the tenants by phone_number_id (`id`, `timezone`, `inactivity_timeout_minutes`,
    `keep_cpf`)."""
    m = Message.__table__  # type: ignore[attr-defined]
    w = WamidTombstone.__table__  # type: ignore[attr-defined]
    t = Tenant.__table__  # type: ignore[attr-defined]
    connection, stored = prepared(session, "messages_by_wamid", lambda dialect: sa_select(
        m.c.wamid, m.c.id, m.c.conversation_id, m.c.starts_turn, m.c.answered_at, m.c.wa_type,
    ).where(one_of(m.c.wamid, "wamids", dialect)))
    _, tombs = prepared(session, "tombstones_by_hash", lambda dialect: sa_select(
        w.c.wamid_hash).where(one_of(w.c.wamid_hash, "hashes", dialect)))
    _, tenants = prepared(session, "tenants_by_number", lambda dialect: sa_select(
        t.c.phone_number_id, t.c.id, t.c.timezone, t.c.inactivity_timeout_minutes, t.c.keep_cpf,
    ).where(one_of(t.c.phone_number_id, "numbers", dialect)))
    by_hash = {wamid_hash(x): x for x in wamids}
    return ({r.wamid: r for r in connection.execute(stored, {"wamids": wamids})},
            {by_hash[h] for h in connection.execute(tombs, {"hashes": list(by_hash)}).scalars()},
            {r.phone_number_id: r for r in connection.execute(
                tenants, {"numbers": phone_number_ids})})


def insert_inbound_many(session: Session, rows: list[dict[str, Any]]) -> dict[str, int]:
    """Insert many inbound messages (each the values of every column but the id) in one
    statement, each once per wamid (`ON CONFLICT (wamid) DO NOTHING`); returns wamid -> new
    id for the rows inserted."""
    table = Message.__table__  # type: ignore[attr-defined]
    return {r.wamid: int(r.id) for r in insert_rows(
        session, table, rows, returning=("id", "wamid"), conflict=("wamid",))}


def get_by_wamid(session: Session, wamid: str) -> Message | None:
    return session.exec(select(Message).where(Message.wamid == wamid)).first()


def inbound_for_update(session: Session, wamid: str) -> tuple[Message, int] | None:
    """The stored customer message `wamid` and the contact id of its conversation, its row
    locked until the transaction ends (FOR UPDATE on PostgreSQL; SQLite's transactions are
    serial already): an edit or a deletion is about to change it. None when not stored."""
    row = session.exec(select(Message).where(Message.wamid == wamid,
                                              Message.direction == "inbound")
                       .with_for_update()).first()
    if row is None:
        return None
    contact_id = session.exec(select(Conversation.contact_id).where(
        Conversation.id == row.conversation_id)).one()
    return row, int(contact_id)


CLAIM = "claim"  # `wa_type` of a row that holds an original's wamid for its edit or deletion


def void_claim(session: Session, wamid: str, contact_id: int) -> bool:
    """Remove the claim (`wa_type` CLAIM) stored under `wamid` when another contact's edit or
    deletion made it: the original now arriving is `contact_id`'s, so the claim was never its
    (a follow-up names any wamid it likes). Returns True when it was removed; False when the
    claim is `contact_id`'s own (the original then is a redelivery: its text never stored) or
    no claim is stored."""
    found = inbound_for_update(session, wamid)
    if found is None or found[0].wa_type != CLAIM or found[1] == contact_id:
        return False
    session.delete(found[0])
    session.flush()
    return True


def edits_of(session: Session, wamid: str, contact_id: int) -> list[Message]:
    """The stored edits of message `wamid` sent by `contact_id` (another contact's edit naming
    it changes nothing of theirs), oldest first, their rows locked."""
    return list(session.exec(select(Message).join(
        Conversation, col(Conversation.id) == Message.conversation_id).where(
        Message.refers_to_wamid == wamid, Message.wa_type == "edit",
        Conversation.contact_id == contact_id,
    ).order_by(col(Message.id)).with_for_update(of=Message)).all())


def insert_inbound(session: Session, message: Message) -> int | None:
    """Store an inbound message once per wamid, in one round trip (`INSERT … ON CONFLICT
    (wamid) DO NOTHING RETURNING id`, PostgreSQL and SQLite). Returns the new row's id, or None
    when the wamid is already stored (a redelivery).

    No savepoint and no IntegrityError: under a race between two web processes the unique
    index decides, and on PostgreSQL the second insert waits for the first to commit and then
    does nothing.
    """
    assert message.wamid
    connection, statement = prepared(session, "insert_inbound", _build_insert_inbound)
    new_id = connection.execute(statement, row_values(message)).scalar()
    if new_id is None:
        return None
    message.id = int(new_id)
    return message.id


def _build_insert_inbound(dialect: str) -> Any:
    table = Message.__table__  # type: ignore[attr-defined]
    return upsert(dialect, table).on_conflict_do_nothing(
        index_elements=["wamid"]).returning(table.c.id)


def one_of(column: Any, name: str, dialect: str) -> Any:
    """`column IN (list bound as name)`: `= ANY(:name)` on PostgreSQL, whose SQL text does not
    change with the list's length (so the driver's statement caches hit), `IN (...)`
    elsewhere."""
    if dialect == "postgresql":
        return column == any_(bindparam(name, type_=postgresql.ARRAY(column.type)))
    return column.in_(bindparam(name, expanding=True))


def insert_rows(session: Session, table: Any, rows: list[dict[str, Any]], *,
                returning: tuple[str, ...], conflict: tuple[str, ...] = ()) -> list[Any]:
    """INSERT many rows (each the values of every column but the id) in one statement, `ON
    CONFLICT … DO NOTHING`, and return the `returning` columns of the rows inserted.

    PostgreSQL gets one SQL text whatever the number of rows, the rows travelling as one JSON
    document (`jsonb_to_recordset`): the driver prepares it once instead of parsing a new
    multi-row VALUES each time. SQLite gets a multi-row VALUES.
    """
    if not rows:
        return []
    connection, statement = prepared(
        session, f"insert_rows_{table.name}_{'_'.join(returning)}_{'_'.join(conflict)}",
        lambda dialect: _build_insert_rows(dialect, table, returning, conflict))
    if connection.dialect.name == "postgresql":
        return list(connection.execute(statement, {"rows": json.dumps(rows, default=_iso)}))
    return list(connection.execute(statement, rows))


def _build_insert_rows(dialect: str, table: Any, returning: tuple[str, ...],
                       conflict: tuple[str, ...]) -> Any:
    if dialect != "postgresql":
        return upsert(dialect, table).on_conflict_do_nothing(
            index_elements=list(conflict) or None).returning(*(table.c[r] for r in returning))
    pg = postgresql.dialect()  # type: ignore[no-untyped-call]
    quote = pg.identifier_preparer.quote
    columns = [c for c in table.columns if c.name != "id"]
    names = ", ".join(quote(c.name) for c in columns)
    types = ", ".join(f"{quote(c.name)} {c.type.compile(dialect=pg)}" for c in columns)
    target = f"({', '.join(quote(c) for c in conflict)}) " if conflict else ""
    return sa_text(
        f"INSERT INTO {pg.identifier_preparer.format_table(table)} ({names}) "
        f"SELECT {names} FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r({types}) "
        f"ON CONFLICT {target}DO NOTHING RETURNING {', '.join(quote(r) for r in returning)}"
    ).columns(*(table.c[r] for r in returning))


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def row_values(row: Any) -> dict[str, Any]:
    """Every column of a (not yet stored) table model but its id, for a Core INSERT."""
    return {c.name: getattr(row, c.name) for c in row.__table__.columns if c.name != "id"}


def upsert(dialect: str, table: Any) -> Any:
    """The dialect's INSERT that takes `on_conflict_do_nothing` (PostgreSQL or SQLite)."""
    return postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)


_PREPARED: dict[tuple[str, str], Any] = {}


def prepared(session: Session, name: str, build: Callable[[str], Any]) -> tuple[Any, Any]:
    """(the session's connection, the statement `name` built once per dialect by
    `build(dialect_name)`): a statement object built once keeps its cache key, so running it
    again costs no construction and no compilation, only the round trip."""
    connection = session.connection()
    dialect = connection.dialect.name
    statement = _PREPARED.get((dialect, name))
    if statement is None:
        statement = _PREPARED[(dialect, name)] = build(dialect)
    return connection, statement


def append(session: Session, *, tenant_id: int, conversation_id: int, role: str,
           direction: str, content: list[dict[str, Any]], now: datetime,
           author: str | None = None, queued: bool = False) -> Message:
    """Add one history message (assistant content or a user message of tool results) at the
    next position. Callers hold the conversation's turn lock. `author`: None for the agent's
    own, `product:KIND` for a message the product sent (storage/marks.py). Every string of
    `content` (the model's text and tool inputs, tool results) is made storable first
    (core/storable.py: PostgreSQL refuses NUL and lone surrogates). `queued`: a reply whose
    parts the caller queues next (`add_outbound`): stored with the state they give it, so
    no UPDATE follows.
    """
    message = Message(tenant_id=tenant_id, conversation_id=conversation_id, role=role,
                      direction=direction, content=storable_value(content), received_at=now,
                      starts_turn=False, answered_at=now, author=author,
                      delivery_status=_NEW_PARTS_STATE if queued else None)
    return _insert_placed(session, message)[0]


def append_seeing_waiting(session: Session, *, tenant_id: int, conversation_id: int,
                          role: str, content: list[dict[str, Any]], now: datetime) -> bool:
    """`append` an internal message (a round's tool results) and return whether a message of
    the conversation waits unplaced (no position: arrived since the turn placed its own),
    read by the INSERT itself (RETURNING): the turn's look for it costs no statement of its
    own (issue 43, round trips). It sees what was committed when the INSERT began."""
    message = Message(tenant_id=tenant_id, conversation_id=conversation_id, role=role,
                      direction="internal", content=storable_value(content), received_at=now,
                      starts_turn=False, answered_at=now)
    waiting = Message.__table__.alias("waiting")  # type: ignore[attr-defined]
    look = select(waiting.c.id).where(waiting.c.conversation_id == conversation_id,
                                      waiting.c.position.is_(None)).limit(1).scalar_subquery()
    return _insert_placed(session, message, look)[1] is not None


def _insert_placed(session: Session, message: Message, *extra: Any) -> tuple[Message, Any]:
    """INSERT `message` at the conversation's next position; (it, persistent; the value of
    the `extra` column returned with it, else None)."""
    table = Message.__table__  # type: ignore[attr-defined]
    session.flush()  # what the session holds goes first: the position reads the table
    values = {**row_values(message), "position": select(
        func.coalesce(func.max(Message.position), 0) + 1).where(
        Message.conversation_id == message.conversation_id).scalar_subquery()}
    # one round trip: the next position is read by the INSERT itself (no max() before it)
    row = session.connection().execute(
        insert(table).values(values).returning(table.c.id, table.c.position, *extra)).one()
    message.id, message.position = row[0], row[1]
    make_transient_to_detached(message)
    session.add(message)  # persistent as if loaded: later changes to it are UPDATEs
    return message, row[2] if extra else None


def assign_positions(session: Session, conversation_id: int) -> int:
    """Place every message not yet in the history at its end (`place_waiting`); returns the
    highest position of the history (0 when empty). Callers hold the turn lock."""
    return place_waiting(session, conversation_id)[0]


def place_waiting(session: Session, conversation_id: int) -> tuple[int, list[Message]]:
    """Place every message not yet in the history at its end: the customer's in the order the
    customer sent them, staff messages by arrival among them (`_staff_by_arrival`).

    Returns (the highest position of the history, 0 when empty; the messages placed, in
    history order). Callers hold the turn lock.
    """
    top = select(func.max(Message.position)).where(
        Message.conversation_id == conversation_id).scalar_subquery()
    # Meta orders nothing: a burst takes the order the customer sent it in (Meta's
    # timestamp, seconds), then arrival: the web's receipt time, not the row id, since a
    # group (and the inbox's drain) inserts in wamid order, and a spilled POST is stored
    # after one that came later and was not. The history's end comes with each row.
    found = session.exec(select(Message, top).where(
        Message.conversation_id == conversation_id, col(Message.position).is_(None),
    ).order_by(func.coalesce(Message.meta_timestamp, Message.received_at),
               col(Message.received_at), col(Message.id))).all()
    if not found:
        return _next_position(session, conversation_id) - 1, []
    position = int(found[0][1] or 0)
    placed = _staff_by_arrival([message for message, _ in found])
    for message in placed:
        position += 1
        message.position = position
        session.add(message)
    session.flush()
    return position, placed


def _staff_by_arrival(waiting: list[Message]) -> list[Message]:
    """The customer messages in their order, each staff message (outbound, stored unplaced
    by storage/staff.py) before the first customer message that arrived after it: by arrival,
    not by Meta's timestamp, since a customer message sent before a staff reply but
    delivered after it is one the staff reply did not answer (it stays pending), and the
    history must end on the customer's side for the turn that answers it."""
    customers = [m for m in waiting if m.direction == "inbound"]
    staff = sorted((m for m in waiting if m.direction != "inbound"),
                   key=lambda m: (m.received_at, m.id or 0))
    placed: list[Message] = []
    for message in customers:
        while staff and staff[0].received_at <= message.received_at:
            placed.append(staff.pop(0))
        placed.append(message)
    return placed + staff


def _next_position(session: Session, conversation_id: int) -> int:
    current = session.exec(select(func.max(Message.position)).where(
        Message.conversation_id == conversation_id)).one()
    return int(current or 0) + 1


def history(session: Session, conversation_id: int, *, after_id: int = 0) -> list[Message]:
    """The history after message `after_id` (the summary's end), in position order."""
    after = 0
    if after_id:
        marker = session.get(Message, after_id)
        after = marker.position or 0 if marker is not None else 0
    return list(session.exec(select(Message).where(
        Message.conversation_id == conversation_id, col(Message.position) > after,
    ).order_by(col(Message.position))).all())


def pending_inbound(session: Session, conversation_id: int) -> list[Message]:
    """Customer messages that start a turn and are not answered yet, oldest first."""
    return list(session.exec(select(Message).where(
        Message.conversation_id == conversation_id, Message.direction == "inbound",
        col(Message.starts_turn).is_(True), col(Message.answered_at).is_(None),
    ).order_by(col(Message.id))).all())


def mark_answered(session: Session, conversation_id: int, *, up_to_position: int,
                  now: datetime, reason: str | None = None) -> int:
    """Mark inbound messages placed at or before `up_to_position` handled (`reason` says why
    when they were not answered); returns how many.
    """
    result = session.exec(update(Message).where(
        col(Message.conversation_id) == conversation_id, col(Message.direction) == "inbound",
        col(Message.position) <= up_to_position, col(Message.answered_at).is_(None),
    ).values(answered_at=now, status_reason=reason))
    return int(result.rowcount or 0)


def mark_held(session: Session, conversation_id: int, *, up_to_position: int,
              reason: str) -> int:
    """Give unanswered inbound messages placed at or before `up_to_position` the
    `status_reason` `reason`, leaving them unanswered (storage/staff.py: waiting for staff);
    returns how many."""
    result = session.exec(update(Message).where(
        col(Message.conversation_id) == conversation_id, col(Message.direction) == "inbound",
        col(Message.position) <= up_to_position, col(Message.answered_at).is_(None),
    ).values(status_reason=reason))
    return int(result.rowcount or 0)


def mark_received_answered(session: Session, conversation_id: int, *, up_to: datetime,
                           reason: str) -> int:
    """Mark unanswered inbound messages received at or before `up_to` handled, placed in the
    history or not (`reason` says by what); returns how many."""
    result = session.exec(update(Message).where(
        col(Message.conversation_id) == conversation_id, col(Message.direction) == "inbound",
        col(Message.received_at) <= up_to, col(Message.answered_at).is_(None),
    ).values(answered_at=up_to, status_reason=reason))
    return int(result.rowcount or 0)


def add_outbound(session: Session, *, message: Message, parts: list[str], to: str | None,
                 recipient: str | None, now: datetime, kind: str = "text") -> list[Outbound]:
    """Queue the parts of a reply in the outbox (one row per part, unique per message); the
    reply becomes `queued`. `kind` "template": each part is an approved template's name.
    Each part is made storable (core/storable.py), as its message's content is (`append`).

    The new parts have no `retry_at`: behind a part still waiting for a retry they make the
    next flush try that part at once, out of its schedule (workers/outbox.flush_outbox), so the
    customer who just wrote gets both replies in order (docs/ARCHITECTURE.md "How a message is
    answered").
    """
    assert message.id is not None
    rows = [Outbound(tenant_id=message.tenant_id, conversation_id=message.conversation_id,
                     message_id=message.id, part=i, kind=kind, to=to, recipient=recipient,
                     body=storable(body), created_at=now) for i, body in enumerate(parts)]
    session.add_all(rows)
    session.flush()
    if message.delivery_status != delivery.fold(row.status for row in rows):  # its parts:
        refresh_delivery(session, message.id)  # these rows (unique per message)
    return rows


_NEW_PARTS_STATE = delivery.fold(["pending"])  # a reply's state when all its parts are new


def unsent_outbound(session: Session, conversation_id: int
                    ) -> list[tuple[Outbound, Tenant, Contact]]:
    """The conversation's pending parts, oldest first (the order they must go out in), each
    with the tenant and contact its send needs (as read now: a sending pause, the service
    window, the thread's owner), in one query."""
    return list(session.exec(select(Outbound, Tenant, Contact).join(
        Conversation, col(Conversation.id) == col(Outbound.conversation_id)).join(
        Tenant, col(Tenant.id) == col(Conversation.tenant_id)).join(
        Contact, col(Contact.id) == col(Conversation.contact_id)).where(
        Outbound.conversation_id == conversation_id, Outbound.status == "pending",
    ).order_by(col(Outbound.id))).all())


def wait_behind(session: Session, row: Outbound, retry_at: datetime) -> int:
    """The conversation's pending parts queued after `row` wait for its next try (`retry_at`)
    too: a later part never overtakes one that waits. Returns how many rows changed."""
    result = session.exec(update(Outbound).where(
        col(Outbound.conversation_id) == row.conversation_id, col(Outbound.id) > row.id,
        col(Outbound.status) == "pending",
        or_(col(Outbound.retry_at).is_(None), col(Outbound.retry_at) < retry_at),
    ).values(retry_at=retry_at).execution_options(synchronize_session=False))
    return int(result.rowcount or 0)


def skip_rest_of_reply(session: Session, row: Outbound, reason: str) -> int:
    """After a part failed for good, the later parts of the same reply are not sent (they would
    arrive later, out of context)."""
    result = session.exec(update(Outbound).where(
        col(Outbound.message_id) == row.message_id, col(Outbound.part) > row.part,
        col(Outbound.status) == "pending",
    ).values(status="failed", error_cause="previous_part", error_reason=reason))
    refresh_delivery(session, row.message_id)
    return int(result.rowcount or 0)


def claim_outbound(session: Session, outbound_id: int, *, now: datetime, attempts: int,
                   retry_at: datetime | None) -> bool:
    """pending → sending, atomically, stamping `claimed_at`; False when someone else claimed it
    (never send twice), or while an earlier part of the same reply is being sent (another
    flush's: the parts reach the customer in order; a part a crash left `sending` holds the
    rest until the reconciler settles it, workers/maintenance.settle_stale_sends).

    `attempts` and `retry_at` are the part as the caller read it: False too when either
    changed since (another flush tried it, or a part before it began to wait), so a send never
    goes out on a stale count of tries or ahead of its schedule."""
    earlier = sa_select(col(Outbound.id)).where(
        col(Outbound.message_id) == sa_select(col(Outbound.message_id)).where(
            col(Outbound.id) == outbound_id).scalar_subquery(),
        col(Outbound.id) < outbound_id, col(Outbound.status) == "sending")
    claimed = session.exec(update(Outbound).where(
        col(Outbound.id) == outbound_id, col(Outbound.status) == "pending",
        col(Outbound.attempts) == attempts,
        col(Outbound.retry_at).is_not_distinct_from(retry_at), ~earlier.exists(),
    ).values(status="sending", claimed_at=now).returning(col(Outbound.message_id))).first()
    if claimed is None:
        return False
    refresh_delivery(session, int(claimed[0]))
    return True


def mark_outbound(session: Session, outbound_id: int, *, status: str, now: datetime,
                  wamid: str | None = None, code: int | None = None, cause: str | None = None,
                  reason: str | None = None, attempts: int | None = None,
                  retry_at: datetime | None = None,
                  claimed_before: datetime | None = None) -> Outbound | None:
    """Record what became of one part (the outbox's only writer of a part's outcome) and the
    reply's new aggregate: two statements (this `UPDATE ... RETURNING`, `refresh_delivery`).
    `code`, `cause`, `reason` and `retry_at` replace the previous ones; `wamid` also stamps
    `sent_at`.

    `claimed_before`: a compare-and-set for the reconciler, which settles a send a crash left
    claimed: it writes only while the part is still `sending` under a claim made before that
    time (a claim older than the column counts by `created_at`), and returns None when not (the
    send finished meanwhile, or the part was claimed again). The outbox's own outcome is
    written unconditionally: its Graph call is the truth, so `sent` wins over a settlement.
    """
    values: dict[str, Any] = {"status": status, "error_code": code, "error_cause": cause,
                              "error_reason": reason, "retry_at": retry_at}
    if attempts is not None:
        values["attempts"] = attempts
    if wamid is not None:
        values.update(wamid=wamid, sent_at=now)
    where = [col(Outbound.id) == outbound_id]
    if claimed_before is not None:
        where += [col(Outbound.status) == "sending",
                  func.coalesce(Outbound.claimed_at, Outbound.created_at) <= claimed_before]
    row = session.scalars(update(Outbound).where(*where).values(**values).returning(Outbound)
                          .execution_options(synchronize_session=False,
                                             populate_existing=True)).first()
    if row is None:
        assert claimed_before is not None, f"outbound {outbound_id} does not exist"
        return None
    refresh_delivery(session, row.message_id)
    return row


def _fold_update(message_id: int) -> Any:
    """The UPDATE of `refresh_delivery`: the reply's state from its parts, RETURNING its
    tenant, conversation and new state."""
    parts = sa_select(delivery.fold_sql(col(Outbound.status)).label("state")).where(
        col(Outbound.message_id) == message_id).subquery()
    return update(Message).where(
        col(Message.id) == message_id, parts.c.state.is_not(None),
        col(Message.delivery_status).is_distinct_from(parts.c.state),
    ).values(delivery_status=parts.c.state).returning(
        col(Message.tenant_id), col(Message.conversation_id), col(Message.delivery_status),
    ).execution_options(synchronize_session=False)


_ANY_REPLY = 9_007_199_254_740_993  # no reply's id: where the text of `_fold_text` puts one
_FOLD_TEXTS: dict[str, str] = {}  # dialect → `_fold_update(_ANY_REPLY)` as text


def _fold_text(session: Session) -> str:
    """`_fold_update` as text for one round trip (batched.literal_sql), written once per
    dialect (a statement written as text costs about 2 ms of CPU) with `_ANY_REPLY` where
    the reply's id goes."""
    dialect = session.get_bind().dialect.name
    if dialect not in _FOLD_TEXTS:
        text = batched.literal_sql(session, _fold_update(_ANY_REPLY))
        assert text.count(str(_ANY_REPLY)) == 2, "the reply's id, in the UPDATE and the fold"
        _FOLD_TEXTS[dialect] = text
    return _FOLD_TEXTS[dialect]


def refresh_delivery(session: Session, message_id: int) -> str | None:
    """Set the reply's `delivery_status` to the fold of its parts (`delivery.fold_sql`) in one
    statement, which writes only when the state changes; returns the new state then, else None
    (unchanged, or a message without parts). Emits `message.failed` when it became failed."""
    if session.get_bind().dialect.name == "postgresql":  # the reply's row locked, then the
        # fold reads its parts in a snapshot of its own: a change to another part (the
        # outbox's mark, Meta's status) is committed first, so the last writer folds every
        # part's latest status (storage/batched.py); SQLite runs one writer at a time
        session.flush()
        changed = batched.last_row(session, [
            f"SELECT 1 FROM {Message.__tablename__} WHERE id = {int(message_id)} FOR UPDATE",
            _fold_text(session).replace(str(_ANY_REPLY), str(int(message_id)))])
    else:
        changed = session.exec(_fold_update(message_id)).first()
    if changed is None:
        return None
    tenant_id, conversation_id, state = changed
    held = session.identity_map.get(session.identity_key(Message, message_id))
    if held is not None:  # the caller's copy of the reply (add_outbound's) shows it too
        set_committed_value(held, "delivery_status", state)
    if state == "failed":  # the one place a reply ends failed (outbox or Meta's status)
        _emit_failed(session, message_id, tenant_id, conversation_id)
    return str(state)


def _emit_failed(session: Session, message_id: int, tenant_id: int,
                 conversation_id: int) -> None:
    """`message.failed`: ids and Meta's error code, never the text."""
    parts = session.exec(select(Outbound).where(Outbound.message_id == message_id)).all()
    failed = next((p for p in parts if delivery.state_of(p.status) == "failed"), None)
    webhooks.emit(session, tenant_id, "message.failed",
                  {"message_id": message_id, "conversation_id": conversation_id,
                   "error_code": failed.error_code if failed else None,
                   "error_cause": failed.error_cause if failed else None},
                  now=clock.now())


def parts_of(session: Session, message_ids: list[int]) -> dict[int, list[Outbound]]:
    """The outbox rows of these replies, part order, by message id."""
    found: dict[int, list[Outbound]] = {m: [] for m in message_ids}
    if not message_ids:
        return found
    for row in session.exec(select(Outbound).where(col(Outbound.message_id).in_(message_ids))
                            .order_by(col(Outbound.message_id), col(Outbound.part))).all():
        found[row.message_id].append(row)
    return found


def last_replies(session: Session, conversation_ids: list[int]) -> dict[int, Message]:
    """Each conversation's latest reply (outbound message), by conversation id."""
    if not conversation_ids:
        return {}
    latest = select(func.max(Message.id)).where(
        col(Message.conversation_id).in_(conversation_ids), Message.direction == "outbound",
    ).group_by(col(Message.conversation_id))
    rows = session.exec(select(Message).where(col(Message.id).in_(latest))).all()
    return {m.conversation_id: m for m in rows}


def undelivered_open_conversations(engine: Engine) -> dict[str, int]:
    """How many open conversations have a latest reply that did not reach the customer, by
    state (failed, unknown), for /metrics: one query, indexed by conversation.

    On SQLite it runs on the bare driver connection, outside any transaction: a read of the
    WAL snapshot takes no lock, where the engine's BEGIN IMMEDIATE (storage/db.py) would make
    a scrape wait behind every writer.
    """
    m, c = Message.__table__, Conversation.__table__  # type: ignore[attr-defined]
    reply = m.alias("reply")
    last = sa_select(func.max(reply.c.id)).where(
        reply.c.conversation_id == c.c.id, reply.c.direction == "outbound",
    ).correlate(c).scalar_subquery()
    statement = sa_select(m.c.delivery_status, func.count()).select_from(
        c.join(m, m.c.id == last)).where(
        c.c.status == "open", m.c.delivery_status.in_(delivery.NOT_DELIVERED)).group_by(
        m.c.delivery_status)
    if engine.dialect.name == "sqlite":
        sql = str(statement.compile(dialect=engine.dialect,
                                    compile_kwargs={"literal_binds": True}))
        raw = engine.raw_connection()
        try:
            rows = list(raw.cursor().execute(sql).fetchall())
        finally:
            raw.close()
    else:
        with engine.connect() as connection:
            rows = list(connection.execute(statement).all())
    counts = dict.fromkeys(delivery.NOT_DELIVERED, 0)
    counts.update({str(state): int(n) for state, n in rows})
    return counts


def apply_status(session: Session, *, wamid: str, status: str, error_code: int | None,
                 error_reason: str | None, now: datetime) -> Outbound | None:
    """Advance the delivery state of our send `wamid` by what Meta's status proves, in any
    order of arrival (`delivery.supersedes`: sent < failed < delivered < read): a failed status
    never undoes delivered or read, and a delivered or read one replaces failed and clears its
    error. Returns the row, or None for an unknown wamid.

    Two statuses of one reply are stored one after the other: the reply's row is locked,
    then the part's (PostgreSQL: `FOR UPDATE OF message, outbound` locks in that order), so a
    status never holds a part while it waits for the reply's row, which a run of statuses
    holds from an earlier part's fold (`refresh_delivery`) while it goes on to this part (a
    deadlock). The outbox locks a part, then its reply (`claim_outbound`, `mark_outbound`),
    never a part that has a wamid: the two never wait for each other in a cycle.
    """
    row = session.exec(select(Outbound).join(Message, col(Message.id) == Outbound.message_id)
                       .where(Outbound.wamid == wamid).with_for_update(of=[Message, Outbound])
                       .execution_options(populate_existing=True)).first()
    if row is None:
        return None
    if not delivery.supersedes(status, row.status):
        return row
    if status == "failed":
        row.status, row.error_code, row.error_reason = "failed", error_code, error_reason
    else:
        row.status = "read" if status == "played" else status
        row.error_code = row.error_reason = None
    row.status_at = now
    session.add(row)
    session.flush()
    refresh_delivery(session, row.message_id)
    return row
