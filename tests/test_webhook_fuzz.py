"""Property tests of the webhook over generated and mutated payloads (DESIGN.md Data flow 1).

Once the signature is valid the answer is 200 whatever the body: never a 5xx. Every message that
is still well-formed is stored once (unique on its wamid) and, when it starts a turn, its turn is
queued; a body that does not parse, or is not a webhook, is kept whole in the dead letters. A
wrong or missing signature is 401/403 and stores nothing.

Each test drives the real `create_app` (routing, body reading, signature check, ingest in a
thread, enqueueing) through aiohttp's TestServer/TestClient on an event loop of its own: one
server for all the examples of a test, the tables (except the tenant's) and Redis emptied before
each example. The 2,000-example tests run on a fresh SQLite file only; the signature test also
on PostgreSQL when it is reachable.
"""

import asyncio
import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rq import Queue
from rq.registry import ScheduledJobRegistry
from sqlalchemy import Engine, func
from sqlmodel import SQLModel, select

from bot.app import create_app
from bot.signature import sign
from core import clock
from core.settings import Settings
from storage.db import create_schema, make_engine, session_scope
from storage.jobs import turn_token_key
from storage.models import (
    Contact,
    Conversation,
    DeadLetter,
    Message,
    OpeningHours,
    Professional,
    Service,
    Tenant,
)
from storage.tenants import upsert_tenant
from tests.conftest import START, WHATSAPP

SECRET = "fake_app_secret_0123456789abcdef"
PREFIX = QUEUE = "fz"
PHONE_NUMBER_ID = "109876543210987"
OTHER_PHONE_NUMBER_ID = "100000000000001"  # no tenant: its messages are only dead-lettered
WA_IDS = ("5511999990001", "5511999990002", "5511999990003")
USER_IDS = ("BR.9000000000000000001", "BR.9000000000000000002", "BR.9000000000000000003")
KEPT_TABLES = {model.__tablename__ for model in (Tenant, Service, Professional, OpeningHours)}
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
        settings = Settings(whatsapp_app_secret=SECRET, whatsapp_verify_token="fz-token",
                            redis_prefix=PREFIX, queue_name=QUEUE)
        app = create_app(settings, engine=engine, redis_client=redis_client)
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(self._start(app))

    @staticmethod
    async def _start(app: Any) -> Client:
        client = Client(TestServer(app))
        await client.start_server()
        return client

    def post(self, raw: bytes, signature: str | None = "valid") -> int:
        """POST `raw` to /webhook signed as Meta would (or with `signature`, or none)."""
        headers = {"Content-Type": "application/json"}
        if signature == "valid":
            headers["X-Hub-Signature-256"] = sign(raw, SECRET)
        elif signature is not None:
            headers["X-Hub-Signature-256"] = signature
        return self.loop.run_until_complete(self._post(raw, headers))

    async def _post(self, raw: bytes, headers: dict[str, str]) -> int:
        async with self.client.post("/webhook", data=raw, headers=headers) as response:
            await response.read()
            return response.status

    def reset(self) -> None:
        """Empty every table but the tenant's, and Redis: each example starts clean (SQLite
        reuses row ids, so a stale coalescing token would hide a missing turn)."""
        with self.engine.begin() as connection:
            for table in reversed(SQLModel.metadata.sorted_tables):
                if table.name not in KEPT_TABLES:
                    connection.execute(table.delete())
        self.redis.flushdb()

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


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    """A fresh SQLite file per test function (the 2,000-example tests run on SQLite only)."""
    eng = make_engine(f"sqlite:///{tmp_path}/fuzz.db")
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
    refuses both; bot/inbound.py `_str`)."""
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
    A `system` item is an identity change, not a message (DESIGN.md Identity)."""
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
    assert not missing, (missing, webhook.dead_letter_reasons())
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

TEXT_CHARS = st.one_of(
    st.characters(exclude_characters="\x00"),  # every plane; hypothesis leaves out surrogates
    st.characters(categories=["Cc"], exclude_characters="\x00"),  # control chars, not NUL
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),  # lone surrogates (\udXXX)
    st.sampled_from("😊👍🏽☕🇧🇷\u200d\u200e\u202e\ufeff\ufffd\u2028\u2029"),
)
TRICKY_TEXT = st.sampled_from([
    "", " ", "\t\n", "\\ud83d", "\\u0000", "ol\\u00e1", "\\", '"', "\\\"", "</script>", "null",
    "%s %(x)s {0} {}", "Oi! Vocês abrem no sábado? 😊", "a\r\nb", "\u0301",
])
TEXT = st.one_of(st.text(TEXT_CHARS, max_size=60), TRICKY_TEXT,
                 st.integers(4000, 6000).map(lambda n: "x" * n),
                 st.lists(st.one_of(TRICKY_TEXT, st.text(TEXT_CHARS, max_size=5)), max_size=4)
                 .map("".join))
WAMID_TAIL = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-.",
                     max_size=48)
TIMESTAMPS = st.one_of(
    st.integers(1_700_000_000, 1_900_000_000).map(str),
    st.integers(-(2**40), 2**40),
    st.sampled_from(["", "abc", "0", "-1", "1e9", "1780318800.5", "253402300799",
                     "99999999999999999999"]),
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


@st.composite
def senders(draw: st.DrawFn) -> tuple[str | None, str | None]:
    """(from, from_user_id): mostly one customer's pair, sometimes two ids that disagree (a
    number now owned by someone else); at least one present."""
    i = draw(st.integers(0, len(WA_IDS) - 1))
    j = draw(st.one_of(st.just(i), st.integers(0, len(USER_IDS) - 1)))
    which = draw(st.sampled_from(["both", "both", "wa_id", "user_id"]))
    return (WA_IDS[i] if which != "user_id" else None,
            USER_IDS[j] if which != "wa_id" else None)


@st.composite
def message_item(draw: st.DrawFn, wamid: str) -> dict[str, Any]:
    wa_id, user_id = draw(senders())
    kind = draw(st.sampled_from(["template"] * 4 + ["text"] * 4 + ["unknown", "system"]))
    if kind == "system":  # a number change: an identity change, stored as no message
        new_wa_id = draw(st.sampled_from(WA_IDS))
        item: dict[str, Any] = {"type": "system", "system": {
            "body": f"changed to {new_wa_id}", "wa_id": new_wa_id,
            "type": draw(st.sampled_from(["user_changed_number", "user_changed_user_id"]))}}
        if draw(st.booleans()):
            item["system"]["user_id"] = draw(st.sampled_from(USER_IDS))
    elif kind == "unknown":
        name = draw(UNKNOWN_TYPES)
        item = {"type": name, name: draw(SMALL_JSON)}
    else:
        item = copy.deepcopy(draw(st.sampled_from(TEMPLATES)))
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
    keys = draw(st.permutations(list(item)))
    return {key: item[key] for key in keys}


@st.composite
def contacts_for(draw: st.DrawFn, items: list[dict[str, Any]]) -> list[Any] | None:
    """`contacts[]` for the senders of `items`: absent, empty, partial, shuffled, with strangers."""
    shape = draw(st.sampled_from(["all", "all", "absent", "empty", "some"]))
    if shape == "absent":
        return None
    if shape == "empty":
        return []
    contacts = []
    for item in items:
        if shape == "some" and draw(st.booleans()):
            continue
        contact: dict[str, Any] = {"profile": {"name": draw(st.one_of(
            TEXT, st.just("N" * 500), st.none()))}}
        if "from" in item:
            contact["wa_id"] = item["from"]
        if "from_user_id" in item:
            contact["user_id"] = item["from_user_id"]
        contacts.append(contact)
    if draw(st.booleans()):
        contacts.append({"profile": {"name": "Estranho"}, "wa_id": "5511999990099"})
    return draw(st.permutations(contacts))


@st.composite
def envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """A webhook body Meta could send: 1-3 entries of 1-3 changes, each with 0-3 messages of
    any type, 0-2 statuses, 0-1 errors; a few changes under a number with no tenant; wamids
    unique except for deliberate duplicates."""
    serial = iter(range(1000))
    entries = []
    previous: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        changes = []
        for _ in range(draw(st.integers(1, 3))):
            items = [draw(message_item(f"wamid.HBgN{next(serial):03d}{draw(WAMID_TAIL)}"))
                     for _ in range(draw(st.integers(0, 3)))]
            if previous and draw(st.integers(0, 4)) == 0:  # a redelivered item in one body
                items.insert(draw(st.integers(0, len(items))), draw(st.sampled_from(previous)))
            previous += items
            value: dict[str, Any] = {"messaging_product": "whatsapp", "metadata": {
                "display_phone_number": "5511999990000",
                "phone_number_id": draw(st.sampled_from([PHONE_NUMBER_ID] * 5
                                                        + [OTHER_PHONE_NUMBER_ID]))}}
            contacts = draw(contacts_for(items))
            if contacts is not None:
                value["contacts"] = contacts
            if items:
                value["messages"] = items
            statuses = [{**copy.deepcopy(draw(st.sampled_from(STATUS_TEMPLATES))),
                         "id": "wamid.OURS" + draw(WAMID_TAIL),
                         "status": draw(st.sampled_from(
                             ["sent", "delivered", "read", "played", "failed", "deleted"]))}
                        for _ in range(draw(st.integers(0, 2)))]
            if statuses:
                value["statuses"] = statuses
            if draw(st.integers(0, 5)) == 0:
                value["errors"] = [{"code": 131000, "title": "Something went wrong",
                                    "message": "Something went wrong",
                                    "error_data": {"details": draw(TEXT)}}]
            keys = draw(st.permutations(list(value)))
            changes.append({"value": {key: value[key] for key in keys}, "field": "messages"})
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


@FUZZ_SETTINGS
@given(payload=envelopes(), style=ENCODINGS)
def test_generated_envelopes_store_every_message_once_and_queue_its_turn(
        fuzz_webhook: Webhook, payload: dict[str, Any], style: str) -> None:
    fuzz_webhook.reset()
    raw = encode(payload, style)
    assert fuzz_webhook.post(raw) == 200

    expected: dict[str, dict[str, Any]] = {}  # wamid → its first item under the tenant
    elsewhere: set[str] = set()
    for phone_number_id, item in message_items(payload):
        if item["type"] == "system":
            continue
        if phone_number_id == PHONE_NUMBER_ID:
            expected.setdefault(item["id"], item)
        else:
            elsewhere.add(item["id"])
    stored = check_stored_and_queued(fuzz_webhook, set(expected))
    assert len(stored) == len(expected)  # nothing else, nothing twice
    for wamid, item in expected.items():
        message = stored[wamid]
        assert message.starts_turn is (item["type"] != "reaction")
        if item["type"] == "text":
            body = clean(item["text"]["body"])
            assert (body if body.strip() else "[empty text message]") in stored_text(message)
    assert not (elsewhere - expected.keys()) & stored.keys()  # routed by phone_number_id
    reasons = fuzz_webhook.dead_letter_reasons()
    assert all(r.startswith("unknown phone_number_id") for r in reasons), reasons
    assert len(reasons) >= len(elsewhere - expected.keys())


# --- strategy 2: mutations of the fixture bodies ---------------------------------------------


HUGE_STRINGS = st.tuples(st.text(TEXT_CHARS, min_size=1, max_size=4),
                         st.integers(1000, 20_000)).map(lambda t: (t[0] * t[1])[:t[1]])
PLAUSIBLE = st.sampled_from([
    None, "", "text", "system", "reaction", PHONE_NUMBER_ID, int(PHONE_NUMBER_ID),
    OTHER_PHONE_NUMBER_ID, WA_IDS[1], USER_IDS[1], "wamid.MUTATED", 0, -1, 1780318800,
    "-62135596800", True, [], {}, {"body": "oi"}, "\x00", "\ud83d",
])


def nest(value: Any, depth: int, in_lists: bool) -> Any:
    for _ in range(depth):
        value = [value] if in_lists else {"a": value}
    return value


RANDOM_JSON = st.one_of(
    PLAUSIBLE,
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
    for _ in range(draw(st.integers(1, 5))):
        path = ("", *draw(st.sampled_from(list(paths(root[""])))))
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
            node[draw(st.sampled_from(["id", "from", "text", "type", "body", "x"]))
                 if draw(st.booleans()) else draw(st.text(max_size=8))] = draw(RANDOM_JSON)
        else:
            parent[key] = draw(RANDOM_JSON)
    return root[""]


INVALID_UTF8 = st.sampled_from([b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80",
                                b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe2\x82"])


@st.composite
def mutated_bytes(draw: st.DrawFn, raw: bytes) -> bytes:
    """`raw` truncated, with bytes flipped, invalid UTF-8 or junk spliced in (0-2 times)."""
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["truncate", "flip", "invalid_utf8", "splice"]))
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


@st.composite
def mutated_bodies(draw: st.DrawFn) -> bytes:
    name = draw(st.sampled_from(sorted(FIXTURES)))
    if draw(st.integers(0, 9)) == 0:  # the wire bytes themselves, cut or corrupted
        return draw(mutated_bytes(FIXTURE_RAW[name]))
    payload = draw(mutated_json(FIXTURES[name]))
    return draw(mutated_bytes(encode(payload, draw(ENCODINGS))))


@FUZZ_SETTINGS
@given(raw=mutated_bodies())
def test_mutated_fixture_bodies_are_200_and_lose_no_well_formed_message(
        fuzz_webhook: Webhook, raw: bytes) -> None:
    fuzz_webhook.reset()
    assert fuzz_webhook.post(raw) == 200
    payload = parse(raw)
    if not is_envelope(payload):  # unreadable: kept whole, byte for byte
        assert fuzz_webhook.dead_letters_with_body(raw) == 1
        assert fuzz_webhook.count(Message) == 0
        return
    wamids = {wamid for pnid, item in message_items(payload)
              if (wamid := well_formed_wamid(pnid, item)) is not None}
    check_stored_and_queued(fuzz_webhook, wamids)


# --- signature -------------------------------------------------------------------------------


HEADER_CHARS = st.characters(exclude_categories=["Cc", "Cs", "Zl", "Zp"])


@st.composite
def unsigned_posts(draw: st.DrawFn) -> tuple[bytes, str | None, int]:
    """(body, X-Hub-Signature-256 or None, the status it must get)."""
    raw = draw(st.one_of(
        st.sampled_from(sorted(FIXTURE_RAW.values())),
        st.builds(encode, envelopes(), ENCODINGS),
        st.binary(max_size=64),
    ))
    good = sign(raw, SECRET)
    header = draw(st.one_of(
        st.none(),
        st.just(""),
        st.just(good.upper()),
        st.just(good.removeprefix("sha256=")),
        st.just("sha1=" + good.removeprefix("sha256=")[:40]),
        st.builds(sign, st.binary(max_size=16).filter(lambda other: other != raw), st.just(SECRET)),
        st.builds(sign, st.just(raw), st.text(min_size=1, max_size=40).filter(
            lambda secret: secret != SECRET)),
        st.integers(7, len(good) - 1).flatmap(lambda i: st.sampled_from("0123456789abcdef").filter(
            lambda c: c != good[i]).map(lambda c: good[:i] + c + good[i + 1:])),
        st.just(good[:-1]),
        st.just(good + "0"),
        st.text(HEADER_CHARS, max_size=80).filter(lambda text: text.strip() != good),
    ))
    return raw, header, 401 if header is None or not header.strip(" \t") else 403


@settings(max_examples=200, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=unsigned_posts())
def test_wrong_or_missing_signature_is_401_or_403_and_stores_nothing(
        any_db_webhook: Webhook, case: tuple[bytes, str | None, int]) -> None:
    raw, header, status = case
    assert any_db_webhook.post(raw, header) == status
    for model in (Message, DeadLetter, Contact, Conversation):
        assert any_db_webhook.count(model) == 0, model
    assert any_db_webhook.redis.dbsize() == 0
