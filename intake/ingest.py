"""Store parsed webhook updates: customer messages through one group store (`store_group`,
for one POST or many), every other update in a transaction of its own; one failing update
loses nothing else.

Synchronous (SQLModel sessions); the web handler runs it in a thread.
"""

import functools
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import structlog
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlmodel import Session, col, select

from intake.echoes import store_echo
from intake.errors import StoreUnavailable
from intake.masking import mask
from storage import (
    contacts,
    conversations,
    dead_letters,
    lookups,
    marks,
    memory,
    messages,
    tenants,
)
from storage.db import session_scope
from storage.models import Contact, Conversation, Message, Outbound, Tenant
from whatsapp.inbound import (
    DELETED,
    FOLLOW_UPS,
    BadItem,
    ErrorNotice,
    IdentityChange,
    InboundMessage,
    StaffEcho,
    StatusUpdate,
    Update,
    edit_text,
    is_envelope,
    parse_update,
)

log = structlog.get_logger(__name__)

WA_TYPE_CHARS = 32  # Message.wa_type (storage/models.py)
PROFILE_NAME_CHARS = 200  # Contact.profile_name


@dataclass
class IngestResult:
    """What one webhook POST did: conversations needing a turn, and counts by outcome."""

    turn_conversation_ids: list[int] = field(default_factory=list)
    closed_conversation_ids: list[int] = field(default_factory=list)  # stale sessions ended
    # open sessions whose summary covers a message the customer deleted: summary re-derived
    rederive_conversation_ids: list[int] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    grouped: bool = False  # stored in a group of POSTs (store_group), or spilled
    spilled: bool = False  # put in the inbox for a worker to store (counts then empty)

    def count(self, outcome: str, amount: int = 1) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + amount

    def merge(self, other: "IngestResult") -> None:
        """Add what `other` (a part of the same POST) did."""
        for outcome, amount in other.counts.items():
            self.count(outcome, amount)
        for mine, theirs in ((self.turn_conversation_ids, other.turn_conversation_ids),
                             (self.closed_conversation_ids, other.closed_conversation_ids),
                             (self.rederive_conversation_ids, other.rederive_conversation_ids)):
            mine.extend(c for c in theirs if c not in mine)


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
            store_messages(engine, run, now=now, result=result,  # type: ignore[arg-type]
                           offset=index)
            index += len(run)
        elif isinstance(run[0], StatusUpdate):
            for start in range(0, len(run), UPDATES_PER_TRANSACTION):
                _store_statuses(engine, run[start:start + UPDATES_PER_TRANSACTION],  # type: ignore[arg-type]
                                now, result)
        else:
            result.count(_store_isolated_update(engine, run[0], now))
    return result


def _store_isolated_update(engine: Engine, update: Update, now: datetime) -> str:
    """Store one update that is not a customer message in a transaction of its own; returns
    its outcome ("dead_letter" when it failed: kept whole). Raises StoreUnavailable when the
    database is down."""
    try:
        return _store_retrying(engine, update, now)
    except (OperationalError, DBAPIError) as exc:
        if is_disconnect(exc):
            raise StoreUnavailable(describe(exc)) from exc
        return _dead_letter(engine, update, exc, now)
    except StoreUnavailable:
        raise
    except Exception as exc:  # one bad update must lose nothing else
        return _dead_letter(engine, update, exc, now)


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


# a big POST's messages (and statuses) are stored in transactions of at most this many: none
# holds a contact's, conversation's or send's row lock for long
UPDATES_PER_TRANSACTION = 500


def store_messages(engine: Engine, msgs: list[InboundMessage], *, now: datetime,
                   result: IngestResult, offset: int = 0) -> None:
    """Store customer messages of one POST received at `now` as groups of at most
    UPDATES_PER_TRANSACTION (`store_group`: one transaction each), adding to `result`.
    `offset`: the place of the first among its POST's messages (`arrival`).

    A chunk the database refuses (a value a column cannot take, a bug) is stored again one
    message at a time, and the message that still fails goes to the dead letters: one bad
    message loses nothing else. Raises StoreUnavailable when the database is down.
    """
    for start in range(0, len(msgs), UPDATES_PER_TRANSACTION):
        chunk = msgs[start:start + UPDATES_PER_TRANSACTION]
        pending = Pending(chunk, now, offset=offset + start)
        if _store_isolated(engine, [pending]) is None:
            result.merge(pending.result)
            continue
        for k, msg in enumerate(chunk):
            one = Pending([msg], now, offset=offset + start + k)
            failure = _store_isolated(engine, [one])
            if failure is None:
                result.merge(one.result)
            else:
                result.count(_dead_letter(engine, msg, failure, now))


def _store_isolated(engine: Engine, group: list["Pending"]) -> Exception | None:
    """`store_group`, once more when a unique index refused it (another web process or a drain
    inserted the same contact, conversation or message between our read and our write: the
    retry reads its committed row). Returns the error that refused the group (nothing of it
    stored), or None; raises StoreUnavailable when the database is down."""
    try:
        try:
            store_group(engine, group)
        except IntegrityError as exc:
            log.info("webhook_update_retried", kind="InboundMessage", error=type(exc).__name__)
            store_group(engine, group)
    except (OperationalError, DBAPIError) as exc:
        if is_disconnect(exc):
            raise StoreUnavailable(describe(exc)) from exc
        return exc
    except StoreUnavailable:
        raise
    except Exception as exc:
        return exc
    return None


def _store_retrying(engine: Engine, update: Update, now: datetime) -> str:
    """Store one update that is not a customer message; once more when a unique index refused
    it (the refused transaction rolled back whole; the retry reads the other's row)."""
    try:
        return _store_one(engine, update, now)
    except IntegrityError as exc:
        log.info("webhook_update_retried", kind=type(update).__name__, error=type(exc).__name__)
        return _store_one(engine, update, now)


def store_unparsable(engine: Engine, body: bytes, reason: str, *, now: datetime,
                     phone_number_id: str | None = None) -> None:
    """Keep a body that is not JSON (or not a webhook), or one update, whole for inspection;
    `phone_number_id` is the envelope's number when the update came in one.

    Raises StoreUnavailable when the database is down; any other refusal is logged and the
    body dropped (a 503 would only bring the same bad body back for 7 days).
    """
    try:
        with session_scope(engine) as session:
            dead_letters.add_dead_letter(session, body=body,
                                         reason=reason.replace("\x00", ""), now=now,
                                         phone_number_id=phone_number_id)
    except (OperationalError, DBAPIError) as exc:
        if is_disconnect(exc):
            raise StoreUnavailable(describe(exc)) from exc
        log.error("dead_letter_refused", error=type(exc).__name__, size=len(body))


def _store_one(engine: Engine, update: Update, now: datetime) -> str:
    if isinstance(update, StatusUpdate):
        with session_scope(engine) as session:
            return _apply_statuses(session, [update], now)[0]
    if isinstance(update, IdentityChange):
        return _store_identity_change(engine, update, now)
    if isinstance(update, StaffEcho):
        return store_echo(engine, update, now)
    if isinstance(update, ErrorNotice):
        log.warning("webhook_error_notice", code=update.code, title=update.title,
                    phone_number_id=update.phone_number_id)
        return "error_notice"
    assert isinstance(update, BadItem)
    store_unparsable(engine, _dump(update.raw), f"{update.where}: {update.reason}", now=now,
                     phone_number_id=update.phone_number_id)
    log.warning("webhook_bad_item", where=update.where, reason=update.reason)
    return "dead_letter"


def _follow_up(session: Session, msg: InboundMessage, stored: Message, *, contact_id: int,
               timezone: str, now: datetime, sent_at: datetime,
               keep_cpf: bool = False) -> int | None:
    """Apply an edit or a deletion to the message it names (`msg.refers_to`), and set what is
    stored for it (`stored`: content, starts_turn, deleted_at). Returns the id of an open
    conversation whose summary covers the deleted message (the caller enqueues
    `workers.compaction.rederive_summary`, which rewrites it from the history), else None.

    A deletion starts no turn and is stored without content; the original (and each stored
    edit of it) keeps only DELETED in place of its text, so no later request, summary or
    extraction reads it: a message the model already saw changes bytes, so the cached prefix
    breaks once there (the next turn writes it again). One not answered yet never will be. An
    edit starts a turn with its new text, marked as an edit of the original (by when that was
    sent); the original stays as the customer sent it (its bytes, cached, unchanged), and an
    edit of a deleted message is deleted too.

    Meta orders nothing: an original that has not arrived is claimed now, a row under its
    wamid (`starts_turn` false; DELETED for a deletion, empty for an edit), so that when it
    comes it is a redelivery, its text never stored nor answered; on both store paths alike,
    and under a race the unique wamid decides (the claim waits for the original's transaction
    and then finds it). An original of another contact, or erased, is left alone: the edit or
    deletion then stands alone; and a claim made by another contact's follow-up is voided when
    the original comes (`messages.void_claim`): a follow-up may name any wamid. README, How a
    message is answered; the shapes: the fixtures message_edit_text.json and
    message_revoke.json.
    """
    def stamped(text: str, sent: datetime | None = sent_at) -> list[dict[str, Any]]:
        return [{"type": "text", "text": stamp(text, now, timezone, sent_at=sent,
                                               keep_cpf=keep_cpf)}]

    revoke, wamid = msg.wa_type == "revoke", msg.refers_to
    if revoke:
        stored.content, stored.starts_turn = [], False
    else:
        stored.content = stamped(edit_text(msg.text, None))
    if wamid is None or messages.is_tombstoned(session, wamid):
        return None
    claim = Message(tenant_id=stored.tenant_id, conversation_id=stored.conversation_id,
                    role="user", direction="inbound", wamid=wamid, wa_type=messages.CLAIM,
                    received_at=now,
                    content=stamped(DELETED, None) if revoke else [],
                    starts_turn=False, answered_at=now, deleted_at=now if revoke else None)
    if messages.insert_inbound(session, claim) is not None:
        log.info("inbound_original_claimed", wa_type=msg.wa_type)
        return None
    found = messages.inbound_for_update(session, wamid)
    if found is None or found[1] != contact_id:
        log.warning("inbound_follow_up_not_applied", wa_type=msg.wa_type,
                    reason="another contact's message" if found else "not found")
        return None
    original = found[0]
    if revoke:
        rows = [original, *messages.edits_of(session, wamid, contact_id)]
        deleted = _delete(session, rows, timezone, now)
        log.info("inbound_deleted", message_id=original.id, rows=deleted)
        return memory.open_summary_covering(session, rows)
    if original.deleted_at is not None:
        stored.content, stored.starts_turn, stored.deleted_at = [], False, now
    else:
        when = None if original.meta_timestamp is None else local_when(
            customer_sent_at(original.meta_timestamp, original.received_at),
            now.astimezone(_zone(timezone)))
        stored.content = stamped(edit_text(msg.text, when))
    return None


DELETED_REASON = "not answered: the customer deleted it"


def _delete(session: Session, rows: list[Message], timezone: str, now: datetime) -> int:
    """The customer deleted these rows' message: DELETED in place of each text (its stamp
    kept), and one no turn has taken yet is never answered. Returns how many changed."""
    changed = 0
    for row in rows:
        if row.deleted_at is not None:
            continue
        if row.content:  # a claim made by an edit has none: it stays empty
            row.content = [{"type": "text", "text": stamp(DELETED, row.received_at, timezone,
                            sent_at=customer_sent_at(row.meta_timestamp, row.received_at))}]
        row.deleted_at = now
        if row.starts_turn and row.answered_at is None and row.position is None:
            row.answered_at, row.status_reason = now, DELETED_REASON
        session.add(row)
        changed += 1
    session.flush()
    return changed


def _contact(session: Session, msg: InboundMessage, tenant_id: int, profile_name: str | None,
             now: datetime, sent_at: datetime) -> tuple[int, Any]:
    """The contact of `msg` and what is known of it: (id, row) for an existing contact (the row
    carries its open conversation), (id, None) for one created here with every value already
    set. The common cases take one or two statements; merges, a number that changed hands and
    races go through `contacts.find_or_create` (ARCHITECTURE.md Identity).
    """
    rows = contacts.lookup_for_inbound(session, tenant_id=tenant_id, wa_id=msg.wa_id,
                                       user_id=msg.user_id)
    if not rows and (msg.wa_id or msg.user_id):
        new_id = contacts.insert_new(session, tenant_id=tenant_id, wa_id=msg.wa_id,
                                     user_id=msg.user_id, profile_name=profile_name, now=now,
                                     last_inbound_at=sent_at)
        if new_id is not None:
            return new_id, None
    elif len(rows) == 1 and _same_person(rows[0], msg):
        return int(rows[0].id), rows[0]
    # merge, re-assigned number, a concurrent first message, or no id at all (ValueError)
    contact = contacts.find_or_create(session, tenant_id=tenant_id, wa_id=msg.wa_id,
                                      user_id=msg.user_id, profile_name=profile_name, now=now)
    assert contact.id is not None
    found = contacts.lookup_for_inbound(session, tenant_id=tenant_id, wa_id=contact.wa_id,
                                        user_id=contact.user_id)
    return contact.id, next(r for r in found if r.id == contact.id)


def _same_person(row: Any, msg: InboundMessage) -> bool:
    """The one contact found carries no id that contradicts the message's."""
    return (not msg.user_id or row.user_id in (None, msg.user_id)) and (
        not msg.wa_id or row.wa_id in (None, msg.wa_id))



def arrival(received_at: datetime, index: int) -> datetime:
    """A customer message's `received_at`: the POST's receipt time plus one microsecond per
    earlier customer message in the same POST. `messages.assign_positions` orders a burst by
    Meta's second, then this, then the row id; a group inserts in wamid order (so that two
    groups lock a shared redelivery in one order), so the row id alone would not keep the
    order of a burst Meta batched in one POST."""
    return received_at + timedelta(microseconds=index)


def _fit(text: str | None, size: int) -> str | None:
    """`text` cut to its column's size: PostgreSQL refuses a longer VARCHAR, and a customer's
    message must not be dead-lettered for a long profile name or a new message type."""
    return text[:size] if text else text


LATE_AFTER = timedelta(minutes=15)  # Meta redelivers after outages, sometimes hours late


def stamp(text: str, received_at: datetime, tenant: Tenant | str, *,
          sent_at: datetime | None = None, keep_cpf: bool = False) -> str:
    """Prefix the received time in the tenant's timezone, e.g. "[Mon 2026-06-01 10:00] oi".

    The time lives in the message itself so `system` stays byte-identical between turns and the
    cached prefix survives (ARCHITECTURE.md: time without cache misses). A message delivered more
    than 15 minutes after the customer sent it says so, so the answer can acknowledge the delay:
    ", delivered late: sent Mon 10:00" on the day it arrived, with the date on any other day
    (", sent Sun 2025-11-30 10:00"). `unstamp` takes it off again (the console, fact
    extraction's length). The customer's text is disarmed (storage/marks.py `disarm`): it can
    never carry the staff mark `[equipe: NAME]`, and its card and CPF numbers are masked
    (intake/masking.py; a CPF kept with `keep_cpf`, the tenant's setting).
    """
    zone = _zone(tenant if isinstance(tenant, str) else tenant.timezone)
    local = received_at.astimezone(zone)
    late = ""
    if sent_at is not None and received_at - sent_at > LATE_AFTER:
        late = f", delivered late: sent {local_when(sent_at, local)}"
    return f"[{local:%a %Y-%m-%d %H:%M}{late}] {marks.disarm(mask(text, keep_cpf))}"


STAMP = re.compile(r"^\[[A-Z][a-z]{2} \d{4}-\d{2}-\d{2} \d{2}:\d{2}[^\]\n]*\] ?", re.MULTILINE)


def unstamp(text: str) -> str:
    """`text` without the stamps `stamp` wrote: one at the start of each line that begins with
    one (texts of several stored blocks are joined by newlines), text elsewhere untouched.
    "[Mon 2026-06-01 10:00] oi" -> "oi"; "[nota] oi" stays as it is.
    """
    return STAMP.sub("", text)


def local_when(moment: datetime, reference: datetime) -> str:
    """`moment` in the zone of `reference` (aware, local): "Mon 10:00" on the same local day,
    "Sun 2025-11-30 10:00" on any other (a weekday alone is ambiguous past a week)."""
    local = moment.astimezone(reference.tzinfo)
    if local.date() == reference.date():
        return f"{local:%a %H:%M}"
    return f"{local:%a %Y-%m-%d %H:%M}"


@functools.lru_cache(maxsize=64)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def customer_sent_at(meta_timestamp: datetime | None, now: datetime) -> datetime:
    """When the customer sent it: Meta's timestamp, never in the future. It starts the 24-hour
    customer service window (Sources: WhatsApp §6), not our receipt time.
    """
    return min(meta_timestamp, now) if meta_timestamp is not None else now


def _latest(current: datetime | None, candidate: datetime) -> datetime:
    return candidate if current is None or candidate > current else current


def _store_statuses(engine: Engine, statuses: list[StatusUpdate], now: datetime,
                    result: IngestResult) -> None:
    """Store a run of statuses of one POST in one transaction (a status costs a few indexed
    statements; a commit of its own cost more than those); when that transaction is refused
    for anything but a lost database, each again in a transaction of its own, so that one bad
    status loses nothing else. Raises StoreUnavailable when the database is down."""
    try:
        with session_scope(engine) as session:
            outcomes = _apply_statuses(session, statuses, now)
    except (OperationalError, DBAPIError) as exc:
        if is_disconnect(exc):
            raise StoreUnavailable(describe(exc)) from exc
    except Exception:
        pass
    else:
        for outcome in outcomes:
            result.count(outcome)
        return
    for status in statuses:
        result.count(_store_isolated_update(engine, status, now))


def _apply_statuses(session: Session, statuses: list[StatusUpdate], now: datetime) -> list[str]:
    """Advance the delivery state of our sends by `statuses`, each only under the tenant that
    sent it (the status names its `phone_number_id`); an unknown wamid or number changes
    nothing. Returns each status's outcome ("status" or "status_unknown"), in order.

    Set-based: one query for the run's tenants and one for which of its wamids are our sends,
    whatever its length (at most UPDATES_PER_TRANSACTION); only a status of one of our sends
    costs statements of its own (messages.apply_status). Unknown ones are logged once per run.
    """
    numbers = {status.phone_number_id for status in statuses}
    tenant_of = dict(session.exec(select(Tenant.phone_number_id, Tenant.id).where(
        col(Tenant.phone_number_id).in_(numbers))).all())
    wamids = {status.wamid for status in statuses}
    ours = set(session.exec(select(Outbound.wamid, Outbound.tenant_id).where(
        col(Outbound.wamid).in_(wamids))).all()) if tenant_of else set()
    outcomes: list[str] = []
    for status in statuses:
        row = None
        if (status.wamid, tenant_of.get(status.phone_number_id)) in ours:
            row = messages.apply_status(session, wamid=status.wamid, status=status.status,
                                        error_code=status.error_code,
                                        error_reason=status.error_reason, now=now)
        if row is None:
            outcomes.append("status_unknown")
            continue
        if status.status == "failed":
            log.warning("outbound_failed", conversation_id=row.conversation_id,
                        error_code=status.error_code)
        outcomes.append("status")
    unknown = outcomes.count("status_unknown")
    if unknown:
        log.info("status_unknown_wamid", statuses=unknown)
    return outcomes


def _store_identity_change(engine: Engine, change: IdentityChange, now: datetime) -> str:
    with session_scope(engine) as session:
        tenant = tenants.get_by_phone_number_id(session, change.phone_number_id)
        if tenant is None or tenant.id is None:
            return "unknown_tenant"
        contact = contacts.rekey(session, tenant_id=tenant.id, kind=change.kind,
                                 old_wa_id=change.old_wa_id,
                                 old_user_id=change.old_user_id, new_wa_id=change.new_wa_id,
                                 new_user_id=change.new_user_id, now=now)
    log.info("contact_rekeyed", kind=change.kind, found=contact is not None)
    return "identity_change"


def _dead_letter(engine: Engine, update: Update, exc: Exception, now: datetime) -> str:
    log.error("webhook_update_failed", kind=type(update).__name__, error=type(exc).__name__)
    raw = getattr(update, "raw", None) or update.__dict__
    store_unparsable(engine, _dump(raw),
                     f"{type(update).__name__}: {type(exc).__name__}: {exc}", now=now,
                     phone_number_id=getattr(update, "phone_number_id", None))
    return "dead_letter"


def _dump(raw: object) -> bytes:
    """An item as JSON bytes for the dead letters; a marker when it cannot be serialised (an
    item nested deeper than the encoder's recursion limit)."""
    try:
        return json.dumps(raw, default=str).encode()
    except (RecursionError, ValueError, TypeError) as exc:
        return json.dumps({"unserializable": type(raw).__name__,
                           "error": type(exc).__name__}).encode()


def describe(exc: DBAPIError) -> str:
    """The driver's error without SQLAlchemy's statement and parameters: those carry phone
    numbers and message text, which reach the logs only at DEBUG (ARCHITECTURE.md Authority)."""
    orig = exc.orig or exc
    first_line = (str(orig).splitlines() or [""])[0]
    return f"{type(orig).__name__}: {first_line}"[:300]


def is_disconnect(exc: DBAPIError) -> bool:
    return bool(getattr(exc, "connection_invalidated", False)) or isinstance(exc, OperationalError)


# -- storing customer messages: one implementation, for one POST or many ------------------------


@dataclass
class Pending:
    """The customer messages of one signed POST (or of a run of it), to be stored in a group
    with others (`store_group` fills `result`). `offset`: the first message's place among its
    POST's messages (`arrival`)."""

    messages: list[InboundMessage]
    now: datetime
    result: IngestResult = field(default_factory=IngestResult)
    offset: int = 0


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
        return updates  # type: ignore[return-value]
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
                total += sum(len(_list(value.get(key)))
                             for key in ("messages", "statuses", "errors"))
    return total


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class _Tenant:
    id: int
    timezone: str
    inactivity_timeout_minutes: int
    keep_cpf: bool = False


@dataclass
class _Item:
    pending: Pending
    msg: InboundMessage
    index: int = 0  # its place among its POST's messages
    tenant: Any = None  # `id`, `timezone`, `inactivity_timeout_minutes`
    contact_key: tuple[Any, ...] = ()
    seen: Any = None  # the known contact's row (with its open conversation)
    conversation_id: int | None = None
    conversation_seen: datetime | None = None  # its open conversation's last inbound time
    opened_here: bool = False  # its conversation was opened by this group
    first: "_Item | None" = None  # the earlier delivery of the same wamid in this group
    alone: bool = False  # stored by itself, in order, after the set-based pass
    # "inbound_stored" at INFO: one POST's messages; a group of POSTs is summed up by the
    # web process's own line (bot.webhook: webhook_group_stored)
    logged: bool = False


def store_group(engine: Engine, group: list[Pending]) -> None:
    """Store the customer messages of one POST or many in one transaction, and fill each
    Pending's result (anew): the one way a customer message is stored (README, How a message
    is answered).

    First a set-based pass: one lookup (four SELECTs in one round trip on PostgreSQL), then
    one INSERT each for the new contacts, conversations and messages (`ON CONFLICT DO
    NOTHING`), and one executemany each for the conversations and contacts touched. A message
    that pass cannot take is stored alone afterwards, in the POSTs' order, in the same
    transaction: an edit or a deletion and the messages it names (`_follow_up`), an identity
    that needs a merge or a re-key (`_contact`, ARCHITECTURE.md Identity), ids that disagree inside
    the group, a row another transaction created meanwhile, and the later copies of those.
    A message of an unknown number, or naming no customer, goes to the dead letters.

    Raises on any database error (IntegrityError: a race the caller retries once,
    `_store_isolated`); nothing is then stored.
    """
    for pending in group:
        pending.result = IngestResult()
    items = [_Item(p, m, index=p.offset + k, logged=len(group) == 1)
             for p in group for k, m in enumerate(p.messages)]
    with session_scope(engine) as session:
        _store_set_based(session, items)
        for item in items:
            if item.alone:
                _store_alone(session, item)


def _store_set_based(session: Session, items: list[_Item]) -> None:
    stored, tombstoned, tenants_by_number, known = lookups.lookup_group(
        session, wamids=list({i.msg.wamid for i in items}),
        phone_number_ids=list({i.msg.phone_number_id for i in items}),
        user_ids=list({i.msg.user_id for i in items if i.msg.user_id}),
        wa_ids=list({i.msg.wa_id for i in items if i.msg.wa_id}))
    # an edit or a deletion, and a message it names, go in order: Meta orders nothing
    named = {i.msg.refers_to for i in items if i.msg.wa_type in FOLLOW_UPS}
    new: list[_Item] = []
    firsts: dict[str, _Item] = {}
    for item in items:
        msg, result = item.msg, item.pending.result
        row = None if msg.wamid in tombstoned else stored.get(msg.wamid)
        # a claim made by an edit or deletion may be another contact's: stored alone, it is
        # voided when it is (`_store_alone`), else the original is a redelivery
        claimed = _claims(row, msg)
        if msg.wamid in tombstoned or row is not None and not claimed:
            _redelivered(result, row)
        elif msg.wamid in firsts:
            item.first = firsts[msg.wamid]
        elif (tenant := tenants_by_number.get(msg.phone_number_id)) is None:
            _unknown_number(session, msg, result, item.pending.now)
        elif not (msg.wa_id or msg.user_id):
            _no_customer(session, msg, result, item.pending.now)
        else:
            item.tenant = tenant
            firsts[msg.wamid] = item
            item.alone = msg.wa_type in FOLLOW_UPS or msg.wamid in named or claimed
            if not item.alone:
                new.append(item)
    _group_contacts(session, new, known)
    _group_conversations(session, [i for i in new if not i.alone])
    inserting = [i for i in new if not i.alone]
    # inserted in wamid order: two groups that share a redelivery lock it in one order
    ids = messages.insert_inbound_many(session, [_message_row(i) for i in sorted(
        inserting, key=lambda i: i.msg.wamid)])
    for item in items:
        if item.first is not None and item.first.alone:
            item.alone = True  # after its first copy, where it is a redelivery
        if item.alone or item.tenant is None and item.first is None:
            continue
        first = item.first or item
        if item.first is not None or item.msg.wamid not in ids:
            # a redelivery inside the group, or stored meanwhile by another transaction
            log.debug("inbound_duplicate", conversation_id=first.conversation_id)
            item.pending.result.count("duplicate")
            if item.first is not None and first.msg.wamid in ids and first.msg.starts_turn:
                _add_turn(item.pending.result, first.conversation_id)
            continue
        _stored(item, ids[item.msg.wamid], item.msg.starts_turn)
    _group_touch(session, [i for i in inserting if i.msg.wamid in ids])


def _store_alone(session: Session, item: _Item) -> None:
    """Store one message the set-based pass left, as a group of one, in the same transaction:
    looked up again (it sees what the group and the other transactions committed), its
    contact found, created or merged by `_contact`, its edit or deletion applied."""
    msg, result, now = item.msg, item.pending.result, item.pending.now
    head = messages.inbound_lookup(session, wamid=msg.wamid,
                                   phone_number_id=msg.phone_number_id)
    claimed = _claims(head if head.message_id is not None else None, msg)
    if head.tombstoned or head.message_id is not None and not claimed:
        _redelivered(result, None if head.tombstoned else head)
        return
    if head.tenant_id is None:
        _unknown_number(session, msg, result, item.pending.now)
        return
    item.tenant = _Tenant(head.tenant_id, head.timezone, head.inactivity_timeout_minutes,
                          bool(head.keep_cpf))
    sent_at = customer_sent_at(msg.timestamp, now)
    contact_id, item.seen = _contact(session, msg, head.tenant_id,
                                     _fit(msg.profile_name, PROFILE_NAME_CHARS), now, sent_at)
    item.contact_key = ("known" if item.seen is not None else "made", contact_id)
    if claimed:
        if not messages.void_claim(session, msg.wamid, contact_id):
            _redelivered(result, head)  # its own edit or deletion claimed it first
            return
        log.warning("inbound_claim_voided", reason="another contact's edit or deletion")
    _group_conversations(session, [item], alone=True)
    row = _message_row(item)
    if msg.wa_type in FOLLOW_UPS:
        stored = Message(**row)
        rederive = _follow_up(session, msg, stored, contact_id=contact_id,
                              timezone=head.timezone, now=now, sent_at=sent_at,
                              keep_cpf=bool(head.keep_cpf))
        if rederive is not None:
            result.rederive_conversation_ids.append(rederive)
        stored.answered_at = None if stored.starts_turn else now
        row = messages.row_values(stored)
    ids = messages.insert_inbound_many(session, [row])
    if msg.wamid not in ids:  # a concurrent delivery of the same wamid stored it
        log.info("inbound_duplicate", conversation_id=item.conversation_id)
        result.count("duplicate")
        return
    _stored(item, ids[msg.wamid], row["starts_turn"])
    _group_touch(session, [item])


def _claims(row: Any, msg: InboundMessage) -> bool:
    """Whether the stored `row` under `msg`'s wamid is a claim (an edit or deletion that came
    first) and `msg` the original it holds the place of (README, How a message is answered)."""
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
            _add_turn(result, row.conversation_id)
    result.count("duplicate")


def _stored(item: _Item, message_id: int, starts_turn: bool) -> None:
    (log.info if item.logged else log.debug)(
        "inbound_stored", tenant_id=item.tenant.id, conversation_id=item.conversation_id,
        wa_type=item.msg.wa_type, message_id=message_id)
    item.pending.result.count("message")
    if starts_turn:
        _add_turn(item.pending.result, item.conversation_id)


def _unknown_number(session: Session, msg: InboundMessage, result: IngestResult,
                    now: datetime) -> None:
    """Kept for inspection: a number being onboarded loses nothing."""
    log.warning("unknown_phone_number_id", phone_number_id=msg.phone_number_id)
    dead_letters.add_dead_letter(
        session, body=json.dumps(msg.raw, default=str).encode(),
        reason=f"unknown phone_number_id {msg.phone_number_id}", now=now,
        phone_number_id=msg.phone_number_id)
    result.count("unknown_tenant")


NO_CUSTOMER = "InboundMessage: ValueError: a contact needs a wa_id or a user_id"


def _no_customer(session: Session, msg: InboundMessage, result: IngestResult,
                 now: datetime) -> None:
    """A message naming neither a `wa_id` nor a `user_id` has no contact: kept whole."""
    log.error("webhook_update_failed", kind="InboundMessage", error="ValueError")
    dead_letters.add_dead_letter(session, body=_dump(msg.raw), reason=NO_CUSTOMER, now=now,
                                 phone_number_id=msg.phone_number_id)
    result.count("dead_letter")


def _message_row(item: _Item) -> dict[str, Any]:
    """The INSERT values of a customer message (every column but the id)."""
    msg, now = item.msg, item.pending.now
    return {**_MESSAGE_DEFAULTS,
            "tenant_id": item.tenant.id, "conversation_id": item.conversation_id,
            "content": [{"type": "text", "text": stamp(
                msg.text, now, item.tenant.timezone, keep_cpf=bool(item.tenant.keep_cpf),
                sent_at=customer_sent_at(msg.timestamp, now))}],
            "wamid": msg.wamid, "wa_type": _fit(msg.wa_type, WA_TYPE_CHARS),
            "meta_timestamp": msg.timestamp, "received_at": arrival(now, item.index),
            "starts_turn": msg.starts_turn, "answered_at": None if msg.starts_turn else now,
            "refers_to_wamid": msg.refers_to,
            "media": {**msg.media, "state": "pending"} if msg.media else None}
_MESSAGE_DEFAULTS = messages.row_values(Message(
    tenant_id=0, conversation_id=0, role="user", direction="inbound", content=[],
    received_at=datetime.min))
# the column defaults of new contacts and conversations: a group builds its rows as dicts
# (building SQLModel instances, validated attribute by attribute, cost more than the INSERT)
_CONTACT_DEFAULTS = messages.row_values(Contact(tenant_id=0, created_at=datetime.min))
_CONVERSATION_DEFAULTS = messages.row_values(Conversation(
    tenant_id=0, contact_id=0, last_activity_at=datetime.min, due_at=datetime.min,
    opened_at=datetime.min))


def _add_turn(result: IngestResult, conversation_id: int | None) -> None:
    if conversation_id is not None and conversation_id not in result.turn_conversation_ids:
        result.turn_conversation_ids.append(conversation_id)


def _group_contacts(session: Session, items: list[_Item], rows: list[Any]) -> None:
    """Find or create the contact of every item among the contacts known by its ids (`rows`,
    looked up with the messages): `contact_key` ("known", id) with `seen`, or ("new",
    tenant_id, user_id, wa_id) then ("made", id); an item whose identity is not the simple
    case is stored alone."""
    if not items:
        return
    index: dict[tuple[int, str, str], list[Any]] = {}
    for row in rows:
        for kind in ("user_id", "wa_id"):
            if getattr(row, kind):
                index.setdefault((row.tenant_id, kind, getattr(row, kind)), []).append(row)
    claims: dict[tuple[int, str, str], set[tuple[Any, ...]]] = {}
    for item in items:
        msg = item.msg
        found = {r.id: r for kind in ("user_id", "wa_id") if getattr(msg, kind)
                 for r in index.get((item.tenant.id, kind, getattr(msg, kind)), [])}
        if not found:
            item.contact_key = ("new", item.tenant.id, msg.user_id, msg.wa_id)
        elif len(found) == 1 and _same_person(row := next(iter(found.values())), msg):
            item.contact_key, item.seen = ("known", row.id), row
        else:
            item.alone = True
            continue
        for kind in ("user_id", "wa_id"):  # one id value must name one contact in the group
            if getattr(msg, kind):
                claims.setdefault((item.tenant.id, kind, getattr(msg, kind)),
                                  set()).add(item.contact_key)
            if item.seen is not None and getattr(msg, kind) and not getattr(item.seen, kind):
                # ids filled in on a known contact must agree
                claims.setdefault((item.tenant.id, f"fill-{kind}", str(item.seen.id)),
                                  set()).add((getattr(msg, kind),))
    contested = {k for k, v in claims.items() if len(v) > 1}
    for item in items:
        if item.alone:
            continue
        msg = item.msg
        keys = [(item.tenant.id, kind, getattr(msg, kind)) for kind in ("user_id", "wa_id")
                if getattr(msg, kind)]
        if item.contact_key[0] == "known":
            keys += [(item.tenant.id, f"fill-{k}", str(item.contact_key[1]))
                     for k in ("user_id", "wa_id")]
        if any(k in contested for k in keys):
            item.alone = True
    fresh: dict[tuple[Any, ...], list[_Item]] = {}
    for item in items:
        if not item.alone and item.contact_key[0] == "new":
            fresh.setdefault(item.contact_key, []).append(item)
    made = contacts.insert_many(session, [{
        **_CONTACT_DEFAULTS, "tenant_id": key[1], "user_id": key[2], "wa_id": key[3],
        "profile_name": _last_name(group), "created_at": group[0].pending.now,
        "last_inbound_at": max(customer_sent_at(i.msg.timestamp, i.pending.now)
                               for i in group)}
        for key, group in sorted(fresh.items(), key=lambda kv: str(kv[0]))])
    made_ids = {("new", r.tenant_id, r.user_id, r.wa_id): int(r.id) for r in made}
    for key, group in fresh.items():
        for item in group:
            if key in made_ids:
                item.contact_key = ("made", made_ids[key])
            else:  # another transaction created it meanwhile
                item.alone = True


def _last_name(items: list[_Item]) -> str | None:
    names = [_fit(i.msg.profile_name, PROFILE_NAME_CHARS) for i in items]
    return next((n for n in reversed(names) if n), None)


def _group_conversations(session: Session, items: list[_Item], *, alone: bool = False) -> None:
    """Set every item's conversation: the contact's open one, or a new one when there is none
    or it is stale (closed here; its facts are extracted). One another transaction opened
    meanwhile is taken as the open one when storing `alone`; else the item is stored alone."""
    if not items:
        return
    by_contact: dict[int, list[_Item]] = {}
    for item in items:
        by_contact.setdefault(item.contact_key[1], []).append(item)
    to_open: dict[int, list[_Item]] = {}
    stale: dict[int, int] = {}  # conversation id -> contact id
    for contact_id, group in by_contact.items():
        seen = group[0].seen
        timeout = conversations.inactivity_timeout(group[0].tenant.inactivity_timeout_minutes)
        if seen is not None and seen.conversation_id is not None:
            if not conversations.is_stale(seen.last_activity_at, now=group[0].pending.now,
                                          inactivity_timeout=timeout):
                for item in group:
                    item.conversation_id = seen.conversation_id
                    item.conversation_seen = seen.conversation_last_inbound_at
                continue
            stale[seen.conversation_id] = contact_id
        to_open[contact_id] = group
    for conversation_id in conversations.close_many(session, sorted(stale),
                                                    now=_latest_now(items)):
        group = by_contact[stale[conversation_id]]
        group[0].pending.result.closed_conversation_ids.append(conversation_id)
    opened = conversations.open_many(session, [{
        **_CONVERSATION_DEFAULTS, "tenant_id": group[0].tenant.id, "contact_id": contact_id,
        "status": "open", "last_activity_at": _latest_now(group),
        "opened_at": _latest_now(group),
        "due_at": conversations.due_at(_latest_now(group), conversations.inactivity_timeout(
            group[0].tenant.inactivity_timeout_minutes)),
        "last_inbound_at": max(customer_sent_at(i.msg.timestamp, i.pending.now)
                               for i in group)}
        for contact_id, group in sorted(to_open.items())])
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


def _latest_now(items: list[_Item]) -> datetime:
    return max(i.pending.now for i in items)


def _group_touch(session: Session, stored: list[_Item]) -> None:
    """Activity, due time and last inbound time of the conversations that received messages
    (those opened here already carry them), and the ids, name and last inbound time of the
    known contacts."""
    by_conversation: dict[int, list[_Item]] = {}
    by_contact: dict[int, list[_Item]] = {}
    for item in stored:
        if not item.opened_here:
            assert item.conversation_id is not None
            by_conversation.setdefault(item.conversation_id, []).append(item)
        if item.contact_key[0] == "known":
            by_contact.setdefault(item.contact_key[1], []).append(item)
    updates = []
    for conversation_id, group in sorted(by_conversation.items()):
        latest = max(customer_sent_at(i.msg.timestamp, i.pending.now) for i in group)
        now = _latest_now(group)
        updates.append({
            "_id": conversation_id, "last_activity_at": now,
            "due_at": conversations.due_at(now, conversations.inactivity_timeout(
                group[0].tenant.inactivity_timeout_minutes)),
            "last_inbound_at": _latest(group[0].conversation_seen, latest)})
    conversations.record_inbound_many(session, updates)
    changes = []
    for contact_id, group in sorted(by_contact.items()):
        row = group[0].seen
        values = {"user_id": row.user_id, "wa_id": row.wa_id, "profile_name": row.profile_name,
                  "last_inbound_at": row.last_inbound_at}
        for item in group:
            values["user_id"] = item.msg.user_id or values["user_id"]
            values["wa_id"] = item.msg.wa_id or values["wa_id"]
            values["profile_name"] = _fit(item.msg.profile_name,
                                          PROFILE_NAME_CHARS) or values["profile_name"]
            values["last_inbound_at"] = _latest(values["last_inbound_at"], customer_sent_at(
                item.msg.timestamp, item.pending.now))
        if any(values[k] != getattr(row, k) for k in values):
            changes.append({"_id": contact_id, **values})
    contacts.update_many(session, changes)
