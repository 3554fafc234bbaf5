"""The inbox: signed webhook POSTs accepted under load, kept until a worker processes them.

Under load the web process does not parse a POST: it stores the raw body with one INSERT
for a whole group, answers 200 once that is committed, and `workers.inbox.drain_inbox` stores
the updates later (ARCHITECTURE.md Data flow 1; Sources: WhatsApp "Answer fast": verify the
signature, enqueue, return 200, process). A row lives from the 200 until its updates are stored.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Engine, delete, func, insert, select

from storage.models import InboxEntry

INBOX = InboxEntry.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Entry:
    """One stored POST: its row id, the raw signed body and when the web process got it."""

    id: int
    body: bytes
    received_at: datetime


def add_many(engine: Engine, posts: list[tuple[bytes, datetime]]) -> None:
    """Store `(body, received_at)` POSTs, committed (one INSERT statement: SQLAlchemy's
    insertmanyvalues). A POST may be answered 200 once this returns.

    On PostgreSQL the statement runs in autocommit: one round trip instead of three (BEGIN,
    INSERT, COMMIT), and a single statement is atomic by itself. Raises sqlalchemy.exc.
    OperationalError / DBAPIError when the database refuses or is down.
    """
    rows = [{"body": body, "received_at": received_at} for body, received_at in posts]
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(insert(INBOX), rows)
        return
    with engine.begin() as connection:
        connection.execute(insert(INBOX), rows)


@contextmanager
def claim(engine: Engine, limit: int) -> Iterator[list[Entry]]:
    """The oldest `limit` entries, oldest first, deleted when the block ends without an error
    (left in place when it raises, for the next drain).

    PostgreSQL: `FOR UPDATE SKIP LOCKED` in a transaction held open for the block, so two
    drains take different rows, and a drain that dies mid-block leaves its rows to the next.
    SQLite (one writer): read in one short transaction and deleted in another after the block,
    since an open write transaction would block the block's own writes; two drains there may
    process a row twice, which storing tolerates (each wamid is stored once).
    """
    query = select(INBOX.c.id, INBOX.c.body, INBOX.c.received_at).order_by(
        INBOX.c.id).limit(limit)
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection, connection.begin():
            rows = connection.execute(query.with_for_update(skip_locked=True)).all()
            entries = [Entry(int(r.id), bytes(r.body), r.received_at) for r in rows]
            yield entries
            _delete(connection, entries)
        return
    with engine.begin() as connection:
        rows = connection.execute(query).all()
    entries = [Entry(int(r.id), bytes(r.body), r.received_at) for r in rows]
    yield entries
    if entries:  # an empty poll takes no write lock
        with engine.begin() as connection:
            _delete(connection, entries)


def _delete(connection: Connection, entries: list[Entry]) -> None:
    if entries:
        connection.execute(delete(INBOX).where(INBOX.c.id.in_([e.id for e in entries])))


def backlog(engine: Engine) -> tuple[int, datetime | None]:
    """How many entries wait, and when the oldest was received (None when empty)."""
    with engine.connect() as connection:
        count, oldest = connection.execute(
            select(func.count(), func.min(INBOX.c.received_at))).one()
    return int(count), oldest
