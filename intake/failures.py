"""How storing an update fails, in one place: the database is down (StoreUnavailable, the
POST's 503: Meta redelivers) or it refused this update alone (a value a column cannot take, a
race, a bug: the update goes to the dead letters, nothing else is lost).

`attempt` is that ladder; `retry_on_conflict` the one retry a unique index earns;
`store_unparsable` and `dead_letter` keep what could not be stored, whole.
"""

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import structlog
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from intake.errors import StoreUnavailable
from intake.text import masked_item
from storage import dead_letters
from storage.db import session_scope
from whatsapp.inbound import Update

log = structlog.get_logger(__name__)

T = TypeVar("T")


def describe(exc: DBAPIError) -> str:
    """The driver's error without SQLAlchemy's statement and parameters: those carry phone
    numbers and message text, which reach the logs only at DEBUG (ARCHITECTURE.md Authority)."""
    orig = exc.orig or exc
    first_line = (str(orig).splitlines() or [""])[0]
    return f"{type(orig).__name__}: {first_line}"[:300]


def is_disconnect(exc: DBAPIError) -> bool:
    """Whether the database itself is lost (the connection invalidated, or any
    OperationalError), rather than this statement refused."""
    return bool(getattr(exc, "connection_invalidated", False)) or isinstance(exc, OperationalError)


@dataclass
class Attempt:
    """What an `attempt` block ended with: None, or the error that refused it."""

    error: Exception | None = None


@contextmanager
def attempt(*, database_only: bool = False) -> Iterator[Attempt]:
    """Run a block that stores something: when the database is down, raise StoreUnavailable
    (the driver's error `describe`d); when it refused the block (or the block failed any
    other way, unless `database_only`), keep the error in the yielded `Attempt` and go on.

        with attempt() as tried:
            store(...)
        if tried.error is not None:
            ...  # nothing of the block was kept (its transaction rolled back)
    """
    tried = Attempt()
    try:
        yield tried
    except StoreUnavailable:
        raise
    except DBAPIError as exc:  # OperationalError is one
        if is_disconnect(exc):
            raise StoreUnavailable(describe(exc)) from exc
        tried.error = exc
    except Exception as exc:  # one bad update must lose nothing else
        if database_only:
            raise
        tried.error = exc


def retry_on_conflict(store: Callable[[], T], kind: str) -> T:
    """`store()`, once more when a unique index refused it (another web process or a drain
    inserted the same contact, conversation or message between our read and our write: the
    refused transaction rolled back whole, and the retry reads the other's committed row)."""
    try:
        return store()
    except IntegrityError as exc:
        log.info("webhook_update_retried", kind=kind, error=type(exc).__name__)
        return store()


def store_unparsable(engine: Engine, body: bytes, reason: str, *, now: datetime,
                     phone_number_id: str | None = None) -> None:
    """Keep a body that is not JSON (or not a webhook), or one update, whole for inspection;
    `phone_number_id` is the envelope's number when the update came in one.

    Raises StoreUnavailable when the database is down; any other refusal is logged and the
    body dropped (a 503 would only bring the same bad body back for 7 days).
    """
    with attempt(database_only=True) as tried, session_scope(engine) as session:
        dead_letters.add_dead_letter(session, body=body, reason=reason.replace("\x00", ""),
                                     now=now, phone_number_id=phone_number_id)
    if tried.error is not None:
        log.error("dead_letter_refused", error=type(tried.error).__name__, size=len(body))


def dead_letter(engine: Engine, update: Update, exc: BaseException, now: datetime) -> str:
    """Keep an update that failed (`exc`) whole in the dead letters; returns its outcome."""
    log.error("webhook_update_failed", kind=type(update).__name__, error=type(exc).__name__)
    raw = getattr(update, "raw", None) or update.__dict__
    store_unparsable(engine, dump(raw, masked=True),
                     f"{type(update).__name__}: {type(exc).__name__}: {exc}", now=now,
                     phone_number_id=getattr(update, "phone_number_id", None))
    return "dead_letter"


def dump(raw: object, *, masked: bool = False) -> bytes:
    """An item as JSON bytes for the dead letters; a marker when it cannot be serialised (an
    item nested deeper than the encoder's recursion limit). `masked`: a webhook item's
    customer-written fields with their card and CPF numbers masked (intake/text.py
    `masked_item`)."""
    try:
        return json.dumps(masked_item(raw) if masked else raw, default=str).encode()
    except (RecursionError, ValueError, TypeError) as exc:
        return json.dumps({"unserializable": type(raw).__name__,
                           "error": type(exc).__name__}).encode()
