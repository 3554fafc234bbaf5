"""Store parsed webhook updates, in the POST's order: customer messages through one group
store (`intake.group`), every other update in a transaction of its own; one failing update
loses nothing else (`intake.failures.attempt`).

Synchronous (SQLModel sessions); the web handler runs it in a thread. The other steps live
in their own modules: `group` (customer messages), `follow_ups` (edits and deletions),
`statuses`, `rekey` (identity changes), `echoes` (the owner's own messages), `stamp` (the
received-time stamp, pure) and `text` (where a customer's text is normalised).
"""

import json
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import Engine

from intake.echoes import store_echo
from intake.failures import attempt, dead_letter, dump, retry_on_conflict, store_unparsable
from intake.group import store_group
from intake.items import Pending
from intake.rekey import store_identity_change
from intake.result import IngestResult
from intake.stamp import unstamp
from intake.standby import store_agent_echo, store_handover, store_standby_status
from intake.statuses import store_statuses
from whatsapp.inbound import (
    AgentEcho,
    BadItem,
    ErrorNotice,
    Handover,
    IdentityChange,
    InboundMessage,
    StaffEcho,
    StandbyStatus,
    StatusUpdate,
    UnknownPart,
    Update,
    is_envelope,
    parse_update,
)

__all__ = ["UPDATES_PER_TRANSACTION", "count_updates", "inbound_only", "ingest_body",
           "store_messages", "store_updates",
           # its home is intake.stamp; bot/console/app.py and workers/facts.py, changed by
           # others meanwhile, still import it from here
           "unstamp"]

log = structlog.get_logger(__name__)

# a big POST's messages (and statuses) are stored in transactions of at most this many: none
# holds a contact's, conversation's or send's row lock for long
UPDATES_PER_TRANSACTION = 500


def ingest_body(engine: Engine, body: bytes, *, now: datetime) -> IngestResult:
    """Decode, parse and store one signed webhook body (run in a thread: a 3 MB body does not
    block the event loop, and deep nesting meets a fresh stack).

    A body that is not JSON, or JSON that is not a webhook envelope, is kept whole, byte for
    byte, in the dead letters (ARCHITECTURE.md Data flow 1). Raises StoreUnavailable when the
    database is down.
    """
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:
        reason = f"unparsable body: {type(exc).__name__}: {exc}"[:500]
    else:
        if is_envelope(payload):
            return store_updates(engine, parse_update(payload), now=now)
        reason = "not a webhook envelope (no entry[])"
    store_unparsable(engine, body, reason, now=now)
    log.warning("webhook_unparsable_body", size=len(body), reason=reason[:100])
    result = IngestResult()
    result.count("unparsable")
    return result


def store_updates(engine: Engine, updates: list[Update], *, now: datetime) -> IngestResult:
    """Store every update in the POST's order; a failing one goes to the dead letters, the
    others still land. Each run of consecutive customer messages is a group of one POST
    (`store_messages`); each run of statuses shares a transaction too, UPDATES_PER_TRANSACTION
    at a time (`_store_statuses`); an identity change, an error notice or a bad item is stored
    in a transaction of its own.

    Raises StoreUnavailable when the database itself is down (the POST must get a 503).
    """
    result = IngestResult()
    index = 0  # the customer messages' order in the POST (received_at's microseconds)
    for run in _runs(updates):
        if isinstance(run[0], InboundMessage):
            store_messages(engine, _inbound(run), now=now, result=result, offset=index)
            index += len(run)
        elif isinstance(run[0], StatusUpdate):
            for start in range(0, len(run), UPDATES_PER_TRANSACTION):
                _store_statuses(engine, _statuses(run[start:start + UPDATES_PER_TRANSACTION]),
                                now, result)
        else:
            result.count(_store_isolated_update(engine, run[0], now))
    return result


def _runs(updates: list[Update]) -> list[list[Update]]:
    """The updates cut into runs, in the POST's order: consecutive customer messages together,
    consecutive statuses together, any other update alone."""
    runs: list[list[Update]] = []
    for update in updates:
        if isinstance(update, InboundMessage | StatusUpdate) and runs and \
                type(runs[-1][0]) is type(update):
            runs[-1].append(update)
        else:
            runs.append([update])
    return runs


def _inbound(run: list[Update]) -> list[InboundMessage]:
    return [u for u in run if isinstance(u, InboundMessage)]


def _statuses(run: list[Update]) -> list[StatusUpdate]:
    return [u for u in run if isinstance(u, StatusUpdate)]


def store_messages(engine: Engine, msgs: list[InboundMessage], *, now: datetime,
                   result: IngestResult, offset: int = 0) -> None:
    """Store customer messages of one POST received at `now` as groups of at most
    UPDATES_PER_TRANSACTION (`store_group`: one transaction each), adding to `result`.
    `offset`: the place of the first among its POST's messages (`intake.stamp.arrival`).

    A chunk the database refuses (a value a column cannot take, a bug) is stored again one
    message at a time, and the message that still fails goes to the dead letters: one bad
    message loses nothing else. Raises StoreUnavailable when the database is down.
    """
    for start in range(0, len(msgs), UPDATES_PER_TRANSACTION):
        chunk = msgs[start:start + UPDATES_PER_TRANSACTION]
        pending = Pending(chunk, now, offset=offset + start)
        if _store_isolated(engine, pending) is None:
            result.merge(pending.result)
            continue
        for k, msg in enumerate(chunk):
            one = Pending([msg], now, offset=offset + start + k)
            failure = _store_isolated(engine, one)
            if failure is None:
                result.merge(one.result)
            else:
                result.count(dead_letter(engine, msg, failure, now))


def _store_isolated(engine: Engine, pending: Pending) -> Exception | None:
    """`store_group` of one POST's messages, retried once on a conflict; returns the error
    that refused it (nothing of it stored), or None. Raises StoreUnavailable when the
    database is down."""
    with attempt() as tried:
        retry_on_conflict(lambda: store_group(engine, [pending]), "InboundMessage")
    return tried.error


def _store_statuses(engine: Engine, statuses: list[StatusUpdate], now: datetime,
                    result: IngestResult) -> None:
    """A run of statuses in one transaction (`intake.statuses`); when that transaction is
    refused for anything but a lost database, each again in a transaction of its own, so
    that one bad status loses nothing else. Raises StoreUnavailable when the database is
    down."""
    outcomes: list[str] = []
    costs: dict[str, int] = {}
    with attempt() as tried:
        outcomes = store_statuses(engine, statuses, now, costs)
    if tried.error is None:
        result.merge(IngestResult(whatsapp_micro_usd=costs))
    else:
        outcomes = [_store_isolated_update(engine, status, now) for status in statuses]
    for outcome in outcomes:
        result.count(outcome)


def _store_isolated_update(engine: Engine, update: Update, now: datetime) -> str:
    """Store one update that is not a customer message in a transaction of its own, retried
    once on a conflict; returns its outcome ("dead_letter" when it failed: kept whole).
    Raises StoreUnavailable when the database is down."""
    outcome = "dead_letter"
    with attempt() as tried:
        outcome = retry_on_conflict(lambda: _store_one(engine, update, now),
                                    type(update).__name__)
    if tried.error is not None:
        return dead_letter(engine, update, tried.error, now)
    return outcome


def _store_one(engine: Engine, update: Update, now: datetime) -> str:
    if isinstance(update, StatusUpdate):
        return store_statuses(engine, [update], now)[0]
    if isinstance(update, IdentityChange):
        return store_identity_change(engine, update, now)
    if isinstance(update, StaffEcho):
        return store_echo(engine, update, now)
    if isinstance(update, AgentEcho):
        return store_agent_echo(engine, update, now)
    if isinstance(update, StandbyStatus):
        return store_standby_status(engine, update, now)
    if isinstance(update, Handover):
        return store_handover(engine, update, now)
    if isinstance(update, UnknownPart):  # its name only: a value may hold customer data
        log.warning("webhook_unknown_field", field=update.field, where=update.where)
        return "unknown_field"
    if isinstance(update, ErrorNotice):
        log.warning("webhook_error_notice", code=update.code, title=update.title,
                    phone_number_id=update.phone_number_id)
        return "error_notice"
    assert isinstance(update, BadItem)
    # a message item Meta sent malformed still holds the customer's words: masked (issue 42)
    store_unparsable(engine, dump(update.raw, masked=True), f"{update.where}: {update.reason}",
                     now=now, phone_number_id=update.phone_number_id)
    log.warning("webhook_bad_item", where=update.where, reason=update.reason)
    return "dead_letter"


def inbound_only(body: bytes) -> list[InboundMessage] | None:
    """The body's updates when it parses and every one is a customer message (the case a group
    of POSTs takes), else None."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not is_envelope(payload):
        return None
    updates = parse_update(payload)
    if updates and all(isinstance(u, InboundMessage) for u in updates):
        return _inbound(updates)
    return None


def count_updates(body: bytes) -> int:
    """How many messages, statuses and errors the webhook body carries (0 when it is not a
    webhook envelope): what decides that a POST is big (WEBHOOK_SPILL_UPDATES). Reads the
    envelope only; nothing is parsed into updates."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return 0
    if not is_envelope(payload):
        return 0
    total = 0
    for entry in _list(payload["entry"]):
        for change in _list(entry.get("changes") if isinstance(entry, dict) else None):
            value = change.get("value") if isinstance(change, dict) else None
            if isinstance(value, dict):
                standby = value.get("standby")
                for part in (value, standby if isinstance(standby, dict) else {}):
                    total += sum(len(_list(part.get(key)))
                                 for key in ("messages", "statuses", "errors"))
    return total


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
