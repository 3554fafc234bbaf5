"""Property tests of the webhook over generated and mutated payloads (ARCHITECTURE.md Data flow 1).

Once the signature is valid the answer is 200 whatever the body: never a 5xx. Every message that
is still well-formed is stored once (unique on its wamid) and, when it starts a turn, its turn is
queued; a body that does not parse, or is not a webhook, is kept whole in the dead letters. A
wrong or missing signature is 401/403 and stores nothing.

Each test drives the real `create_app` (routing, body reading, signature check, ingest in a
thread, enqueueing) through aiohttp's TestServer/TestClient on an event loop of its own: one
server for all the examples of a test, the tables (except the tenant's) and Redis emptied before
each example. The 2,000-case test runs on a fresh SQLite file only; the signature test also on
PostgreSQL when it is reachable.
"""

import asyncio
import copy
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import structlog
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import event as note_event
from hypothesis import strategies as st
from rq import Queue
from rq.registry import ScheduledJobRegistry
from sqlalchemy import Engine, event, func
from sqlmodel import SQLModel, select

from bot.app import create_app
from core import clock
from core.settings import Settings
from storage.db import create_schema, make_engine, session_scope
from storage.keys import turn_token_key
from storage.models import (
    Contact,
    Conversation,
    DeadLetter,
    DeadLetterRef,
    Message,
    OpeningHours,
    Professional,
    Service,
    Tenant,
    WhatsAppCharge,
)
from storage.tenants import upsert_tenant
from tests.conftest import START, WHATSAPP
from whatsapp.signature import sign

SECRET = "fake_app_secret_0123456789abcdef"
PREFIX = QUEUE = "fz"
PHONE_NUMBER_ID = "109876543210987"
OTHER_PHONE_NUMBER_ID = "100000000000001"  # no tenant: its messages are only dead-lettered
WA_IDS = ("5511999990001", "5511999990002", "5511999990003")
USER_IDS = ("BR.9000000000000000001", "BR.9000000000000000002", "BR.9000000000000000003")
KEPT_TABLES = {model.__tablename__ for model in (Tenant, Service, Professional, OpeningHours)}
WEBHOOK_TABLES = [SQLModel.metadata.tables[str(model.__tablename__)]  # children first
                  for model in (Message, Conversation, Contact, DeadLetterRef, DeadLetter,
                                WhatsAppCharge)]  # a status's pricing: the cost ledger
_SURROGATE = re.compile("[\ud800-\udfff]")
Client = TestClient  # type: ignore[type-arg]

FUZZ_SETTINGS = settings(max_examples=2000, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])


# --- the app, in process ---------------------------------------------------------------------


class Webhook:
    """`create_app` behind a real TestServer on a private event loop, driven synchronously (a
    hypothesis test is synchronous; one server serves every example of the test)."""

    def __init__(self, engine: Engine, redis_client: redis.Redis) -> None:
        self.engine, self.redis = engine, redis_client
        self.queue = Queue(QUEUE, connection=redis_client)
        self.logs: list[dict[str, Any]] = []
        # every POST stored before its answer, however big (the inbox: tests/test_inbox.py)
        settings = Settings(whatsapp_app_secret=SECRET, whatsapp_verify_token="fz-token",
                            redis_prefix=PREFIX, queue_name=QUEUE, webhook_spill_updates=0)
        app = create_app(settings, engine=engine, redis_client=redis_client)
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(self._start(app))

    @staticmethod
    async def _start(app: Any) -> Client:
        client = Client(TestServer(app))
        await client.start_server()
        return client

    def post(self, raw: bytes, *, signed: bool = True, header: str | None = None) -> int:
        """POST `raw` to /webhook signed as Meta would, or else with `header` (None: none)."""
        headers = {"Content-Type": "application/json"}
        signature = sign(raw, SECRET) if signed else header
        if signature is not None:
            headers["X-Hub-Signature-256"] = signature
        with structlog.testing.capture_logs() as self.logs:  # printing them costs more
            return self.loop.run_until_complete(self._post(raw, headers))

    def complaints(self) -> list[dict[str, Any]]:
        """The warnings and errors the last POST logged (for a failure's message)."""
        return [e for e in self.logs if e.get("log_level") in ("warning", "error", "critical")]

    async def _post(self, raw: bytes, headers: dict[str, str]) -> int:
        async with self.client.post("/webhook", data=raw, headers=headers) as response:
            await response.read()
            return response.status

    def reset(self) -> None:
        """Empty the tables the webhook writes, and Redis: each example starts clean (SQLite
        reuses row ids, so a stale coalescing token would hide a missing turn)."""
        with self.engine.begin() as connection:
            for table in WEBHOOK_TABLES:
                connection.execute(table.delete())
        self.redis.flushdb()

    def assert_wrote_only_webhook_tables(self) -> None:
        """`reset` empties only WEBHOOK_TABLES: the webhook must have written nothing else."""
        with self.engine.connect() as connection:
            for table in SQLModel.metadata.sorted_tables:
                if table.name not in KEPT_TABLES and table not in WEBHOOK_TABLES:
                    rows = connection.execute(select(func.count()).select_from(table)).scalar()
                    assert rows == 0, table.name

    def messages(self) -> dict[str, Message]:
        with session_scope(self.engine) as session:
            return {m.wamid: m for m in session.exec(select(Message)).all() if m.wamid}

    def dead_letter_reasons(self) -> list[str]:
        with session_scope(self.engine) as session:
            return list(session.exec(select(DeadLetter.reason)).all())

    def dead_letters_with_body(self, raw: bytes) -> int:
        with session_scope(self.engine) as session:
            return int(session.exec(select(func.count()).select_from(DeadLetter)
                                    .where(DeadLetter.body == raw)).one())

    def count(self, model: Any) -> int:
        with session_scope(self.engine) as session:
            return int(session.exec(select(func.count()).select_from(model)).one())

    def queued_turns(self) -> set[int]:
        """Conversations whose coalescing token names a turn job waiting to run: in the queue,
        or scheduled a moment ahead (a debounce lets a burst settle into one turn)."""
        waiting = {*self.queue.job_ids, *ScheduledJobRegistry(queue=self.queue).get_job_ids()}
        queued = set()
        pattern = turn_token_key(PREFIX, 0).removesuffix("0") + "*"
        for key in self.redis.scan_iter(match=pattern):
            job_id = self.redis.get(key)
            if job_id is not None and job_id.decode() in waiting:
                queued.add(int(key.decode().rsplit(":", 1)[1]))
        return queued

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[clock.FrozenClock]:
    frozen = clock.FrozenClock(START)
    previous = clock.set_clock(frozen)
    yield frozen
    clock.set_clock(previous)


def _no_fsync(dbapi_connection: Any, _: Any) -> None:
    dbapi_connection.execute("PRAGMA synchronous=OFF")


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    """A fresh SQLite file per test function (the 2,000-case test runs on SQLite only).

    The product's engine, but no fsync per commit (`synchronous=OFF`): every update is its own
    transaction, and thousands of examples would otherwise wait on the disk. Durability after a
    power cut is not what these tests are about.
    """
    eng = make_engine(f"sqlite:///{tmp_path}/fuzz.db")
    event.listen(eng, "connect", _no_fsync)
    create_schema(eng)
    yield eng
    eng.dispose()


def _serve(engine: Engine, redis_client: redis.Redis) -> Iterator[Webhook]:
    with session_scope(engine) as session:
        upsert_tenant(session, {"phone_number_id": PHONE_NUMBER_ID, "name": "Salão Exemplo"},
                      now=START)
    webhook = Webhook(engine, redis_client)
    try:
        yield webhook
        webhook.assert_wrote_only_webhook_tables()
    finally:
        webhook.close()


@pytest.fixture
def fuzz_webhook(sqlite_engine: Engine, redis_client: redis.Redis) -> Iterator[Webhook]:
    yield from _serve(sqlite_engine, redis_client)


@pytest.fixture
def any_db_webhook(engine: Engine, redis_client: redis.Redis) -> Iterator[Webhook]:
    yield from _serve(engine, redis_client)


# --- what the product must do, read off a body -----------------------------------------------


def clean(text: str) -> str:
    """A string as the product stores it: NUL dropped, a lone surrogate replaced (PostgreSQL
    refuses both; whatsapp/inbound.py `_str`)."""
    return _SURROGATE.sub("\ufffd", text.replace("\x00", ""))


def parse(raw: bytes) -> Any:
    """The body as JSON, or None when it does not parse (it must then be dead-lettered)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def is_envelope(payload: Any) -> bool:
    return isinstance(payload, dict) and isinstance(payload.get("entry"), list)


def message_items(payload: Any) -> Iterator[tuple[Any, Any]]:
    """(metadata.phone_number_id, item) for every item of every `messages[]` nested the way
    Meta nests them (entry[] → changes[] → value); parts that do not nest are skipped."""
    if not is_envelope(payload):
        return
    for entry in payload["entry"]:
        changes = entry.get("changes") if isinstance(entry, dict) else None
        for change in changes if isinstance(changes, list) else []:
            value = change.get("value") if isinstance(change, dict) else None
            if not isinstance(value, dict):
                continue
            metadata = value.get("metadata")
            phone_number_id = metadata.get("phone_number_id") if isinstance(
                metadata, dict) else None
            items = value.get("messages")
            for item in items if isinstance(items, list) else []:
                yield phone_number_id, item


def nonempty(value: Any) -> bool:
    return isinstance(value, str) and bool(clean(value))


def well_formed_wamid(phone_number_id: Any, item: Any) -> str | None:
    """The stored wamid of a message that must be stored: a string id, a `from` or
    `from_user_id`, a `text` object with a string `body`, under the tenant's phone_number_id.
    A `system` item is an identity change, not a message (ARCHITECTURE.md Identity)."""
    if phone_number_id != PHONE_NUMBER_ID or not isinstance(item, dict):
        return None
    if not nonempty(item.get("id")):
        return None
    if not (nonempty(item.get("from")) or nonempty(item.get("from_user_id"))):
        return None
    text = item.get("text")
    if not isinstance(text, dict) or not isinstance(text.get("body"), str):
        return None
    if isinstance(item.get("type"), str) and clean(item["type"]) == "system":
        return None
    return clean(item["id"])


def stored_text(message: Message) -> str:
    text: str = message.content[0]["text"]
    return text


def check_stored_and_queued(webhook: Webhook, wamids: set[str]) -> dict[str, Message]:
    """Each wamid stored once; each stored message that starts a turn and is not answered has
    its conversation's turn waiting in the queue."""
    stored = webhook.messages()
    missing = sorted(wamids - stored.keys())
    assert not missing, (missing, webhook.dead_letter_reasons(), webhook.complaints())
    queued = webhook.queued_turns()
    for wamid in wamids:
        message = stored[wamid]
        if message.starts_turn and message.answered_at is None:
            assert message.conversation_id in queued, (wamid, message.conversation_id, queued)
    return stored


# --- strategy 1: valid envelopes built from parts --------------------------------------------


def _fixture_payloads() -> dict[str, dict[str, Any]]:
    payloads = {}
    for path in sorted(WHATSAPP.glob("*.json")):
        payload = json.loads(path.read_bytes())
        if is_envelope(payload):
            payloads[path.name] = payload
    return payloads


FIXTURES = _fixture_payloads()
FIXTURE_RAW = {name: (WHATSAPP / name).read_bytes() for name in FIXTURES}
TEMPLATES = [item for payload in FIXTURES.values() for _, item in message_items(payload)]
STATUS_TEMPLATES = [item for payload in FIXTURES.values() for entry in payload["entry"]
                    for change in entry["changes"] for item in change["value"].get("statuses", [])]
assert {t["type"] for t in TEMPLATES} >= {"text", "image", "audio", "location", "reaction",
                                         "interactive", "button", "unsupported"}
assert STATUS_TEMPLATES

# Each a single alphabet, so hypothesis draws a whole string at once (a `one_of` alphabet costs a
# draw per character); their mixes below give every kind its share.
ANY_CHAR = st.characters(exclude_characters="\x00")  # every plane; no surrogates by default
CONTROL_CHARS = st.characters(categories=["Cc"], exclude_characters="\x00")  # not NUL
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)  # lone: "\udXXX" in JSON
SPECIAL_CHARS = st.characters(categories=[], include_characters=(
    "😊👍🏽☕🇧🇷\u200d\u200e\u202e\ufeff\ufffd\u2028\u2029\u0301"))  # emoji, ZWJ, bidi, BOM
TRICKY_TEXT = st.sampled_from([
    "", " ", "\t\n", "\\ud83d", "\\u0000", "ol\\u00e1", "\\", '"', "\\\"", "</script>", "null",
    "%s %(x)s {0} {}", "Oi! Vocês abrem no sábado? 😊", "a\r\nb", "\u0301",
])
TEXT_PIECES = st.one_of(st.text(ANY_CHAR, max_size=20), st.text(CONTROL_CHARS, max_size=4),
                        st.text(SURROGATES, min_size=1, max_size=2),
                        st.text(SPECIAL_CHARS, max_size=6), TRICKY_TEXT)
TEXT = st.one_of(st.text(ANY_CHAR, max_size=40), TRICKY_TEXT,
                 st.lists(TEXT_PIECES, min_size=1, max_size=4).map("".join),
                 st.integers(4000, 6000).map(lambda n: "x" * n))
TEXT_CHARS = st.one_of(ANY_CHAR, CONTROL_CHARS, SURROGATES, SPECIAL_CHARS)  # for short strings
WAMID_TAIL = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-.",
                     max_size=16)
# "-62135596800" (0001-01-01T00:00Z) once lost a message: `stamp` overflowed converting it to
# a timezone behind UTC. Timestamps outside 2009..2100 now count as missing (whatsapp/inbound.py).
TIMESTAMPS = st.one_of(
    st.integers(1_700_000_000, 1_900_000_000).map(str),
    st.integers(-(2**40), 2**40),
    st.sampled_from(["", "abc", "0", "-1", "1e9", "1780318800.5", "253402300799",
                     "99999999999999999999", "-62135582400", "-62135596800"]),
)
UNKNOWN_TYPES = st.one_of(
    st.sampled_from(["poll_creation", "ephemeral", "request_welcome", "edit", "revoke",
                     "a_future_message_type_with_a_long_name_over_32_chars", "TEXT", ""]),
    st.text(st.characters(codec="ascii", categories=["L", "N", "P"]), min_size=1, max_size=40),
).filter(lambda name: name not in ("system", "text"))  # those two have their own rules
SMALL_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT),
    lambda kids: st.one_of(st.lists(kids, max_size=3),
                           st.dictionaries(st.text(max_size=6), kids, max_size=3)),
    max_leaves=6)


PROFILE_NAMES = st.one_of(st.sampled_from(("Ana Teste", "Bruno Exemplo", "", "N" * 500, None)),
                         TEXT)
MESSAGE_KINDS = st.sampled_from(("template",) * 4 + ("text",) * 4 + ("unknown", "system"))
MESSAGE_TEMPLATES = st.sampled_from(TEMPLATES)  # one of every type in the fixtures


@st.composite
def shuffled_keys(draw: st.DrawFn, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as is, or with its keys in another order (Meta promises no order)."""
    if not draw(st.booleans()):
        return obj
    return {key: obj[key] for key in draw(st.permutations(list(obj)))}


@st.composite
def senders(draw: st.DrawFn) -> tuple[str | None, str | None]:
    """(from, from_user_id): mostly one customer's pair, sometimes two ids that disagree (a
    number now owned by someone else); at least one present."""
    i = draw(st.integers(0, len(WA_IDS) - 1))
    j = draw(st.one_of(st.just(i), st.integers(0, len(USER_IDS) - 1)))
    which = draw(st.sampled_from(("both", "both", "wa_id", "user_id")))
    return (WA_IDS[i] if which != "user_id" else None,
            USER_IDS[j] if which != "wa_id" else None)


@st.composite
def message_item(draw: st.DrawFn, wamid: str) -> dict[str, Any]:
    wa_id, user_id = draw(senders())
    kind = draw(MESSAGE_KINDS)
    if kind == "system":  # a number change: an identity change, stored as no message
        new_wa_id = draw(st.sampled_from(WA_IDS))
        item: dict[str, Any] = {"type": "system", "system": {
            "body": f"changed to {new_wa_id}", "wa_id": new_wa_id,
            "type": draw(st.sampled_from(("user_changed_number", "user_changed_user_id")))}}
        if draw(st.booleans()):
            item["system"]["user_id"] = draw(st.sampled_from(USER_IDS))
    elif kind == "unknown":
        name = draw(UNKNOWN_TYPES)
        item = {"type": name, name: draw(SMALL_JSON)}
    else:
        item = copy.deepcopy(draw(MESSAGE_TEMPLATES))
        if kind == "text" or item["type"] == "text":
            item["type"], item["text"] = "text", {"body": draw(TEXT)}
        if draw(st.integers(0, 4)) == 0:
            item["context"] = {"from": "5511999990000", "id": "wamid.OURS" + draw(WAMID_TAIL)}
    for key in ("id", "from", "from_user_id", "timestamp"):
        item.pop(key, None)
    item["id"] = wamid
    if wa_id:
        item["from"] = wa_id
    if user_id:
        item["from_user_id"] = user_id
    if draw(st.integers(0, 9)):
        item["timestamp"] = draw(TIMESTAMPS)
    return draw(shuffled_keys(item))


@st.composite
def contacts_for(draw: st.DrawFn, items: list[dict[str, Any]]) -> list[Any] | None:
    """`contacts[]` for the senders of `items`: absent, empty, partial, shuffled, with strangers."""
    shape = draw(st.sampled_from(("all", "all", "absent", "empty", "some")))
    if shape == "absent":
        return None
    if shape == "empty":
        return []
    contacts = []
    for item in items:
        if shape == "some" and draw(st.booleans()):
            continue
        contact: dict[str, Any] = {"profile": {"name": draw(PROFILE_NAMES)}}
        if "from" in item:
            contact["wa_id"] = item["from"]
        if "from_user_id" in item:
            contact["user_id"] = item["from_user_id"]
        contacts.append(contact)
    if draw(st.booleans()):
        contacts.append({"profile": {"name": "Estranho"}, "wa_id": "5511999990099"})
    return draw(st.permutations(contacts)) if draw(st.booleans()) else contacts


# Mostly small bodies: storing one message costs the product a few ms, and 2,000 cases must fit
# well under a minute. Every shape still comes up hundreds of times.
SOME_1_TO_3 = st.sampled_from((1, 1, 1, 1, 1, 2, 3))
SOME_0_TO_3 = st.sampled_from((0, 0, 0, 1, 1, 2, 3))
SOME_0_TO_2 = st.sampled_from((0, 0, 0, 1, 2))
PHONE_NUMBER_IDS = st.sampled_from((PHONE_NUMBER_ID,) * 5 + (OTHER_PHONE_NUMBER_ID,))
STATUS_ITEMS = st.sampled_from(STATUS_TEMPLATES)
STATUSES = st.sampled_from(("sent", "delivered", "read", "played", "failed", "deleted"))


@st.composite
def envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """A webhook body Meta could send: 1-3 entries of 1-3 changes, each with 0-3 messages of
    any type, 0-2 statuses, 0-1 errors; a few changes under a number with no tenant; wamids
    unique except for deliberate duplicates."""
    serial = iter(range(1000))
    entries = []
    previous: list[dict[str, Any]] = []
    for _ in range(draw(SOME_1_TO_3)):
        changes = []
        for _ in range(draw(SOME_1_TO_3)):
            items = [draw(message_item(f"wamid.HBgN{next(serial):03d}{draw(WAMID_TAIL)}"))
                     for _ in range(draw(SOME_0_TO_3))]
            if previous and draw(st.integers(0, 4)) == 0:  # a redelivered item in one body
                items.insert(draw(st.integers(0, len(items))), draw(st.sampled_from(previous)))
            previous += items
            value: dict[str, Any] = {"messaging_product": "whatsapp", "metadata": {
                "display_phone_number": "5511999990000",
                "phone_number_id": draw(PHONE_NUMBER_IDS)}}
            contacts = draw(contacts_for(items))
            if contacts is not None:
                value["contacts"] = contacts
            if items:
                value["messages"] = items
            statuses = [{**copy.deepcopy(draw(STATUS_ITEMS)),
                         "id": "wamid.OURS" + draw(WAMID_TAIL), "status": draw(STATUSES)}
                        for _ in range(draw(SOME_0_TO_2))]
            if statuses:
                value["statuses"] = statuses
            if draw(st.integers(0, 5)) == 0:
                value["errors"] = [{"code": 131000, "title": "Something went wrong",
                                    "message": "Something went wrong",
                                    "error_data": {"details": draw(TEXT)}}]
            changes.append({"value": draw(shuffled_keys(value)), "field": "messages"})
        entries.append({"id": "102030405060708", "changes": changes})
    return {"object": "whatsapp_business_account", "entry": entries}


def encode(payload: Any, style: str) -> bytes:
    """JSON bytes as Meta sends them (escaped unicode and `\\/`) or otherwise valid."""
    if style == "utf8":
        try:
            return json.dumps(payload, ensure_ascii=False).encode()
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8: send it escaped
            pass
    if style == "meta":
        return json.dumps(payload, separators=(",", ":")).replace("/", "\\/").encode()
    if style == "pretty":
        return json.dumps(payload, indent=2).encode()
    return json.dumps(payload).encode()


ENCODINGS = st.sampled_from(["ascii", "meta", "utf8", "pretty"])


def claims(items: Iterable[dict[str, Any]]) -> set[str]:
    """The wamids that edits and deletions among `items` name (intake/follow_ups.py `follow_up`
    stores a row under each one not stored yet)."""
    named = set()
    for item in items:
        body = item.get(item["type"]) if item["type"] in ("edit", "revoke") else None
        original = body.get("original_message_id") if isinstance(body, dict) else None
        if nonempty(original) and clean(original) != item["id"]:
            named.add(clean(original))
    return named


def check_generated(webhook: Webhook, payload: dict[str, Any], style: str) -> None:
    """Every message under the tenant stored once, with its text; its turn queued unless it
    is a reaction; the messages under an unknown number only dead-lettered, nothing else."""
    raw = encode(payload, style)
    assert webhook.post(raw) == 200

    expected: dict[str, dict[str, Any]] = {}  # wamid → its first item under the tenant
    elsewhere: set[str] = set()
    for phone_number_id, item in message_items(payload):
        if item["type"] == "system":
            continue
        if phone_number_id == PHONE_NUMBER_ID:
            expected.setdefault(item["id"], item)
        else:
            elsewhere.add(item["id"])
    stored = check_stored_and_queued(webhook, set(expected))
    claimed = claims(expected.values()) - expected.keys()
    assert stored.keys() - expected.keys() == claimed  # nothing else, nothing twice
    for wamid in claimed:  # an original that has not arrived, claimed by its edit or deletion
        assert stored[wamid].starts_turn is False
    for wamid, item in expected.items():
        message = stored[wamid]
        if item["type"] != "edit":  # an edit starts a turn unless its original was deleted
            assert message.starts_turn is (item["type"] not in ("reaction", "revoke"))
        if item["type"] == "text":  # as JSON carries it: two adjacent halves make one pair
            body = clean(json.loads(json.dumps(item["text"]["body"])))
            assert (body if body.strip() else "[empty text message]") in stored_text(message)
    assert not (elsewhere - expected.keys()) & stored.keys()  # routed by phone_number_id
    reasons = webhook.dead_letter_reasons()
    assert all(r.startswith("unknown phone_number_id") for r in reasons), (
        reasons, webhook.complaints())
    assert len(reasons) >= len(elsewhere - expected.keys())


# --- strategy 2: mutations of the fixture bodies ---------------------------------------------


HUGE_STRINGS = st.tuples(st.text(TEXT_CHARS, min_size=1, max_size=4),
                         st.integers(1000, 20_000)).map(lambda t: (t[0] * t[1])[:t[1]])
PLAUSIBLE = st.sampled_from([
    None, "", "text", "system", "reaction", PHONE_NUMBER_ID, int(PHONE_NUMBER_ID),
    OTHER_PHONE_NUMBER_ID, WA_IDS[1], USER_IDS[1], "wamid.MUTATED", 0, -1, 1780318800,
    "-62135582400", True, [], {}, {"body": "oi"}, "\x00", "\ud83d",
])


def nest(value: Any, depth: int, in_lists: bool) -> Any:
    for _ in range(depth):
        value = [value] if in_lists else {"a": value}
    return value


RANDOM_JSON = st.one_of(
    PLAUSIBLE.map(copy.deepcopy),  # a fresh `{}` each time: later edits must not touch the list
    SMALL_JSON,
    HUGE_STRINGS,
    st.floats(),  # NaN and ±Infinity too: Python's parser reads them back
    st.integers(min_value=-(2**70), max_value=2**70),
    st.builds(nest, SMALL_JSON, st.integers(1, 50), st.booleans()),
)
MUTATIONS = ("delete", "replace", "replace", "duplicate", "shuffle", "add_key")


def paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if len(path) > 60:
        return
    if isinstance(node, dict):
        for key, child in node.items():
            yield from paths(child, (*path, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from paths(child, (*path, index))


def at(root: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        root = root[key]
    return root


@st.composite
def mutated_json(draw: st.DrawFn, payload: Any) -> Any:
    """`payload` after 1-5 random edits at random places of its tree."""
    root = {"": copy.deepcopy(payload)}  # a parent for the top level, so it can be replaced
    for _ in range(draw(st.sampled_from((1, 1, 1, 2, 2, 3, 4, 5)))):
        inner, top = list(paths(root[""]))[1:], ()  # the top last: hypothesis favours index 0
        path = ("", *draw(st.sampled_from([*inner, top])))
        parent, key, node = at(root, path[:-1]), path[-1], at(root, path)
        op = draw(st.sampled_from(MUTATIONS))
        if op == "delete" and len(path) > 1:
            del parent[key]
        elif op == "duplicate" and isinstance(node, list) and node:
            node.insert(draw(st.integers(0, len(node))), copy.deepcopy(draw(st.sampled_from(node))))
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(node))
        elif op == "shuffle" and isinstance(node, list):
            node[:] = draw(st.permutations(node))
        elif op == "shuffle" and isinstance(node, dict):
            order = draw(st.permutations(list(node)))
            parent[key] = {k: node[k] for k in order}
        elif op == "add_key" and isinstance(node, dict):
            node[draw(st.sampled_from(("id", "from", "text", "type", "body", "x")))
                 if draw(st.booleans()) else draw(st.text(max_size=8))] = draw(RANDOM_JSON)
        else:
            parent[key] = draw(RANDOM_JSON)
    return root[""]


INVALID_UTF8 = st.sampled_from([b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80",
                                b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe2\x82"])


@st.composite
def mutated_bytes(draw: st.DrawFn, raw: bytes) -> bytes:
    """`raw` truncated, with bytes flipped, invalid UTF-8 or junk spliced in (0-2 times; mostly
    not at all, so that most bodies still parse and reach the store)."""
    for _ in range(draw(st.sampled_from((0, 0, 0, 0, 0, 0, 1, 2)))):
        op = draw(st.sampled_from(("truncate", "flip", "invalid_utf8", "splice")))
        i = draw(st.integers(0, len(raw)))
        if op == "truncate":
            raw = raw[:i]
        elif op == "flip" and raw:
            i = min(i, len(raw) - 1)
            raw = raw[:i] + bytes([raw[i] ^ draw(st.integers(1, 255))]) + raw[i + 1:]
        elif op == "invalid_utf8":
            raw = raw[:i] + draw(INVALID_UTF8) + raw[i:]
        else:
            raw = raw[:i] + draw(st.binary(max_size=8)) + raw[i + draw(st.integers(0, 8)):]
    return raw


# every webhook fixture; those carrying text messages three times (the oracle follows those)
MUTATION_BASES = sorted(FIXTURES) + 2 * sorted(
    name for name, payload in FIXTURES.items()
    if any(item.get("type") == "text" for _, item in message_items(payload)))


@st.composite
def mutated_bodies(draw: st.DrawFn) -> bytes:
    name = draw(st.sampled_from(MUTATION_BASES))
    if draw(st.sampled_from((False,) * 9 + (True,))):  # the wire bytes, cut or corrupted
        return draw(mutated_bytes(FIXTURE_RAW[name]))
    payload = draw(mutated_json(FIXTURES[name]))
    return draw(mutated_bytes(encode(payload, draw(ENCODINGS))))


def check_mutated(webhook: Webhook, raw: bytes) -> None:
    """200; an unreadable body kept whole, byte for byte; every message still well-formed
    stored once, its turn queued."""
    assert webhook.post(raw) == 200
    payload = parse(raw)
    if not is_envelope(payload):
        note_event("mutated: unreadable, dead-lettered")
        assert webhook.dead_letters_with_body(raw) == 1
        assert webhook.count(Message) == 0
        return
    wamids = {wamid for pnid, item in message_items(payload)
              if (wamid := well_formed_wamid(pnid, item)) is not None}
    note_event(f"mutated: envelope, well-formed messages: {min(len(wamids), 2)}"
               f"{'+' if len(wamids) >= 2 else ''}")
    check_stored_and_queued(webhook, wamids)


# --- the 2,000 cases -------------------------------------------------------------------------


GENERATED = st.tuples(st.just("generated"), envelopes(), ENCODINGS)
MUTATED = st.tuples(st.just("mutated"), mutated_bodies(), st.none())
# About 1/3 generated (they cost twice as much to run; hypothesis's mutator also favours their
# bigger examples, so the odds drawn here are not quite the odds seen).
CASES = st.sampled_from(("mutated",) * 3 + ("generated",)).flatmap(
    lambda kind: MUTATED if kind == "mutated" else GENERATED)


@pytest.mark.fuzz  # 2,000 examples, about 80 s of CPU: the README's fuzz-command
@FUZZ_SETTINGS
@given(case=CASES)
def test_no_5xx_and_no_lost_message_over_generated_and_mutated_payloads(
        fuzz_webhook: Webhook, case: tuple[str, Any, str | None]) -> None:
    kind, body, style = case
    fuzz_webhook.reset()
    note_event(kind)
    if kind == "generated":
        assert style is not None
        check_generated(fuzz_webhook, body, style)
    else:
        check_mutated(fuzz_webhook, body)


# --- signature -------------------------------------------------------------------------------


HEADER_CHARS = st.characters(exclude_categories=["Cc", "Cs", "Zl", "Zp"])
HEADER_KINDS = st.sampled_from((
    "missing", "empty", "blank", "uppercase", "no_prefix", "sha1", "other_body", "other_secret",
    "one_digit_changed", "one_short", "one_long", "random"))
HEX = "0123456789abcdef"
UNSIGNED_BODIES = st.one_of(
    st.sampled_from(sorted(FIXTURE_RAW.values())),
    st.builds(encode, envelopes(), ENCODINGS),
    st.binary(max_size=64),
)


@st.composite
def unsigned_posts(draw: st.DrawFn) -> tuple[bytes, str | None, int]:
    """(body, X-Hub-Signature-256 or None, the status it must get: 401 missing, 403 wrong)."""
    raw = draw(UNSIGNED_BODIES)
    good = sign(raw, SECRET)
    kind = draw(HEADER_KINDS)
    header: str | None
    if kind == "missing":
        header = None
    elif kind == "empty":
        header = ""
    elif kind == "blank":  # HTTP drops the spaces around a value: what is left is empty
        header = draw(st.sampled_from((" ", "\t", " \t  ")))
    elif kind == "uppercase":
        header = good.upper()
    elif kind == "no_prefix":
        header = good.removeprefix("sha256=")
    elif kind == "sha1":
        header = "sha1=" + good.removeprefix("sha256=")[:40]
    elif kind == "other_body":
        header = sign(raw + draw(st.binary(min_size=1, max_size=8)), SECRET)
    elif kind == "other_secret":
        header = sign(raw, SECRET + draw(st.text(min_size=1, max_size=8)))
    elif kind == "one_digit_changed":
        i = draw(st.integers(len("sha256="), len(good) - 1))
        digit = HEX[(HEX.index(good[i]) + draw(st.integers(1, 15))) % 16]
        header = good[:i] + digit + good[i + 1:]
    elif kind == "one_short":
        header = good[:-1]
    elif kind == "one_long":
        header = good + draw(st.sampled_from(HEX))
    else:
        header = draw(st.text(HEADER_CHARS, max_size=80))
    assume(header is None or header.strip(" \t") != good)  # all hex digits: upper() is good
    return raw, header, 401 if header is None or not header.strip(" \t") else 403


@settings(max_examples=200, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=unsigned_posts())
def test_wrong_or_missing_signature_is_401_or_403_and_stores_nothing(
        any_db_webhook: Webhook, case: tuple[bytes, str | None, int]) -> None:
    raw, header, status = case
    assert any_db_webhook.post(raw, signed=False, header=header) == status
    for model in (Message, DeadLetter, Contact, Conversation):
        assert any_db_webhook.count(model) == 0, model
    assert any_db_webhook.redis.dbsize() == 0
