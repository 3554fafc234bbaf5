"""The HTTP edge through `create_app` with a real client: handshake, signature, body limit,
storage of every update, turn enqueueing, statuses, identity, and 503 when a store is down.

Rules: ARCHITECTURE.md Data flow 1 and Identity; Sources: WhatsApp §1-4;
tests/fixtures/whatsapp/README.md (constants, wire bytes, handshake cases).
"""

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
import structlog
from aiohttp.test_utils import TestClient
from redis.backoff import NoBackoff
from redis.retry import Retry
from rq import Queue
from rq.registry import ScheduledJobRegistry
from sqlalchemy import Engine, func
from sqlalchemy.exc import OperationalError
from sqlmodel import select

import bot.metrics
from bot.app import create_app
from core import clock
from core import metrics as core_metrics
from core.settings import SMALL_BODY_BYTES, Settings
from intake import ingest
from storage import contacts, messages
from storage import facts as fact_repo
from storage.db import make_engine, session_scope
from storage.jobs import tenant_of
from storage.models import Contact, ContactFact, Conversation, DeadLetter, Message, Outbound
from storage.tenants import upsert_tenant
from tests import database_faults
from tests.conftest import START, WHATSAPP
from whatsapp.signature import sign

SECRET = "fake_app_secret_0123456789abcdef"
VERIFY_TOKEN = "fake-verify-token-123"
PHONE_NUMBER_ID = "109876543210987"
ANA_WA, ANA_USER = "5511999990001", "BR.9000000000000000001"
BRUNO_WA, BRUNO_USER = "5511999990002", "BR.9000000000000000002"
OUR_WAMID = "wamid.HBgNNTUxMTk5OTk5MDAwMRUCABEYEkZBS0UwMDAwMDAwMDAwMDEwNAA="
FAILED_WAMID = "wamid.HBgNNTUxMTk5OTk5MDAwMRUCABEYEkZBS0UwMDAwMDAwMDAwMDEwNgA="
DOWN_DATABASE = "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2"

WEBHOOK_FIXTURES = sorted(
    p.name for p in WHATSAPP.glob("*.json") if "entry" in json.loads(p.read_bytes()))

Client = TestClient  # type: ignore[type-arg]


# --- fixtures and helpers --------------------------------------------------------------------


def make_settings(**overrides: Any) -> Settings:
    # every POST stored before its answer, as big as it is and however many come at once
    # (the inbox: tests/test_inbox.py)
    return Settings(whatsapp_app_secret=SECRET, whatsapp_verify_token=VERIFY_TOKEN,
                    redis_prefix="t", queue_name="t",
                    **{"webhook_spill_updates": 0, "webhook_spill_at": 0, **overrides})


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[clock.FrozenClock]:
    frozen = clock.FrozenClock(START)
    previous = clock.set_clock(frozen)
    yield frozen
    clock.set_clock(previous)


@pytest.fixture
def tenant_id(engine: Engine) -> int:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, {"phone_number_id": PHONE_NUMBER_ID,
                                         "name": "Salão Exemplo"}, now=START)
        assert tenant.id is not None
        return tenant.id


@pytest.fixture
async def client(aiohttp_client: Any, engine: Engine, redis_client: redis.Redis,
                 tenant_id: int) -> AsyncIterator[Client]:
    yield await aiohttp_client(create_app(make_settings(), engine=engine,
                                          redis_client=redis_client))


@pytest.fixture
def down_engine() -> Iterator[Engine]:
    eng = make_engine(DOWN_DATABASE)
    yield eng
    eng.dispose()


@pytest.fixture
def down_redis() -> Iterator[redis.Redis]:
    client = redis.Redis(port=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    yield client
    client.close()


def fixture_bytes(name: str) -> bytes:
    return (WHATSAPP / name).read_bytes()


def fixture_json(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(fixture_bytes(name))
    return loaded


def envelope(value: dict[str, Any], *, phone_number_id: str = PHONE_NUMBER_ID) -> dict[str, Any]:
    """A webhook body around one `value`, in Meta's shape."""
    metadata = {"display_phone_number": "5511999990000", "phone_number_id": phone_number_id}
    return {"object": "whatsapp_business_account", "entry": [{"id": "102030405060708", "changes": [
        {"value": {"messaging_product": "whatsapp", "metadata": metadata, **value},
         "field": "messages"}]}]}


def text_message(wamid: str, body: str = "oi", *, wa_id: str | None = None,
                 user_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    """A text message body; `contacts[]` carries the ids given, as Meta sends them."""
    item: dict[str, Any] = {"id": wamid, "timestamp": "1780318800", "type": "text",
                            "text": {"body": body}}
    contact: dict[str, Any] = {"profile": {"name": name or "Cliente"}}
    if wa_id:
        item["from"] = contact["wa_id"] = wa_id
    if user_id:
        item["from_user_id"] = contact["user_id"] = user_id
    return envelope({"contacts": [contact], "messages": [item]})


def status_body(wamid: str, status: str, **extra: Any) -> dict[str, Any]:
    return envelope({"statuses": [{"id": wamid, "status": status, "timestamp": "1780318830",
                                   "recipient_id": ANA_WA, **extra}]})


async def post(client: Client, body: bytes | dict[str, Any], *, signature: str | None = "valid",
               **kwargs: Any) -> tuple[int, str]:
    """POST `body` to /webhook signed as Meta would (or with `signature` as given, or none)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if signature == "valid":
        headers["X-Hub-Signature-256"] = sign(raw, SECRET)
    elif signature is not None:
        headers["X-Hub-Signature-256"] = signature
    response = await client.post("/webhook", data=raw, headers=headers, **kwargs)
    return response.status, await response.text()


def count(engine: Engine, model: Any) -> int:
    with session_scope(engine) as session:
        return int(session.exec(select(func.count()).select_from(model)).one())


def rows(engine: Engine, model: Any) -> list[Any]:
    with session_scope(engine) as session:
        return list(session.exec(select(model).order_by(model.id)).all())


def turn_jobs(redis_client: redis.Redis) -> int:
    """Turn jobs queued or waiting out the debounce (scheduled a moment ahead)."""
    queue = Queue("t", connection=redis_client)
    return queue.count + ScheduledJobRegistry(queue=queue).count


def message_text(message: Message) -> str:
    text: str = message.content[0]["text"]
    return text


# --- GET handshake ---------------------------------------------------------------------------


async def test_handshake_echoes_the_challenge_as_plain_text(client: Client) -> None:
    case = fixture_json("verification_get.json")
    response = await client.get("/webhook", params=case["request"]["query"])
    expected = case["expected_response"]
    assert response.status == expected["status"]
    assert response.content_type == expected["content_type"]
    assert await response.text() == expected["body"]


@pytest.mark.parametrize("index", range(4))
async def test_handshake_negative_cases_from_the_fixture(client: Client, index: int) -> None:
    case = fixture_json("verification_get.json")["negative_cases"][index]
    response = await client.get("/webhook", params=case["query"])
    body = await response.text()
    assert response.status == case["expected_status"]
    if "expected_body" in case:
        assert body == case["expected_body"]
        assert response.content_type == "text/plain"
    if "body_must_not_contain" in case:
        assert case["body_must_not_contain"] not in body


@pytest.mark.parametrize("token", ["tokén-ünïcode", "", "fake-verify-token-1234"])
async def test_handshake_wrong_tokens_are_403_never_5xx(client: Client, token: str) -> None:
    response = await client.get("/webhook", params={
        "hub.mode": "subscribe", "hub.challenge": "42", "hub.verify_token": token})
    assert response.status == 403
    assert "42" not in await response.text()


async def test_handshake_refused_when_no_verify_token_is_configured(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    app = create_app(Settings(whatsapp_app_secret=SECRET, queue_name="t"), engine=engine,
                     redis_client=redis_client)
    client = await aiohttp_client(app)
    response = await client.get("/webhook", params={
        "hub.mode": "subscribe", "hub.challenge": "42", "hub.verify_token": ""})
    assert response.status == 403


# --- signature -------------------------------------------------------------------------------


async def test_missing_signature_is_401(client: Client, engine: Engine) -> None:
    assert (await post(client, fixture_bytes("message_text.json"), signature=None))[0] == 401
    assert (await post(client, fixture_bytes("message_text.json"), signature=""))[0] == 401
    assert count(engine, Message) == 0


@pytest.mark.parametrize("header", [
    "sha256=" + "0" * 64,
    "sha1=0123",
    "garbage",
    "sha256=" + "é" * 64,
])
async def test_wrong_signature_is_403(client: Client, engine: Engine, header: str) -> None:
    status, _ = await post(client, fixture_bytes("message_text.json"), signature=header)
    assert status == 403
    assert count(engine, Message) == 0


async def test_wire_bytes_verify_and_keep_unicode(client: Client, engine: Engine) -> None:
    case = fixture_json("wire_text_unicode.signature.json")
    raw = fixture_bytes(case["body_file"])
    assert len(raw) == case["body_length_bytes"]
    status, _ = await post(client, raw, signature=case["expected"]["valid_signature"])
    assert status == case["expected"]["status_when_valid"]
    (stored,) = rows(engine, Message)
    assert message_text(stored).endswith(
        "Olá! Meu e-mail é ana@example.com e o pedido é 12/34 — café ☕ 👍🏽")


async def test_signatures_over_reserialized_json_are_rejected(
        client: Client, engine: Engine) -> None:
    case = fixture_json("wire_text_unicode.signature.json")
    raw = fixture_bytes(case["body_file"])
    wrong = [c["header_value"] for c in case["negative_cases"] if c["header_value"]]
    assert len(wrong) == 2
    for header in wrong:
        assert (await post(client, raw, signature=header))[0] == 403
    bare = case["policy_choices"][0]["header_value"]  # policy: the prefix is required
    assert (await post(client, raw, signature=bare))[0] == 403
    assert count(engine, Message) == 0


# --- body size -------------------------------------------------------------------------------


async def test_body_over_3_mb_is_413(client: Client, engine: Engine) -> None:
    raw = b" " * (3 * 1024 * 1024 + 1)
    assert (await post(client, raw))[0] == 413
    assert count(engine, DeadLetter) == 0


async def test_a_signed_body_of_almost_3_mb_is_read_whole(client: Client, engine: Engine) -> None:
    """A large body arrives in many TCP chunks: every byte must reach the signature check."""
    payload = text_message("wamid.BIG", "x" * (3 * 1024 * 1024 - 2000), wa_id=ANA_WA)
    raw = json.dumps(payload).encode()
    assert len(raw) <= 3 * 1024 * 1024
    assert (await post(client, raw))[0] == 200
    assert count(engine, Message) == 1


async def test_a_large_body_signed_for_other_bytes_is_403(client: Client,
                                                          engine: Engine) -> None:
    """A body over SMALL_BODY_BYTES is hashed on a thread (bot.webhook._signature_holds): a
    signature of other bytes is still refused there, and nothing is stored."""
    payload = text_message("wamid.BIG", "x" * (SMALL_BODY_BYTES * 2), wa_id=ANA_WA)
    raw = json.dumps(payload).encode()
    assert len(raw) > SMALL_BODY_BYTES
    assert (await post(client, raw, signature=sign(raw[:-1] + b" ", SECRET)))[0] == 403
    assert (await post(client, raw))[0] == 200
    assert count(engine, Message) == 1
    assert count(engine, DeadLetter) == 0


async def test_the_limit_is_the_setting(aiohttp_client: Any, engine: Engine,
                                        redis_client: redis.Redis, tenant_id: int) -> None:
    app = create_app(make_settings(max_body_bytes=2000), engine=engine, redis_client=redis_client)
    client = await aiohttp_client(app)
    small = json.dumps(text_message("wamid.S", wa_id=ANA_WA)).encode()
    fits = small + b" " * (2000 - len(small))
    assert (await post(client, fits))[0] == 200
    assert (await post(client, fits + b" "))[0] == 413

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: the limit still holds
        for _ in range(3):
            yield b" " * 1000

    headers = {"X-Hub-Signature-256": sign(b" " * 3000, SECRET)}
    response = await client.post("/webhook", data=chunked(), headers=headers)
    assert response.status == 413
    assert count(engine, Message) == 1


# --- bodies that do not parse ----------------------------------------------------------------


@pytest.mark.parametrize("raw", [b"{not json", b"", b"\xff\xfe\x00garbage", b"[" * 100_000,
                                 b'{"entry": ' + b"[" * 100_000])
async def test_unparsable_body_is_200_and_kept_whole(client: Client, engine: Engine,
                                                     raw: bytes) -> None:
    assert (await post(client, raw))[0] == 200
    (letter,) = rows(engine, DeadLetter)
    assert letter.body == raw
    assert letter.reason


@pytest.mark.parametrize("raw", [b"[]", b'"hello"', b"{}", b'{"entry": {}}', b"null"])
async def test_json_that_is_not_a_webhook_is_200_and_kept_whole(client: Client, engine: Engine,
                                                                raw: bytes) -> None:
    assert (await post(client, raw))[0] == 200
    (letter,) = rows(engine, DeadLetter)
    assert letter.body == raw


async def test_deep_nesting_that_parses_is_not_a_5xx(client: Client, engine: Engine) -> None:
    for depth in (200, 900, 990):
        raw = (b'{"object":"x","entry":[{"changes":[{"value":{"metadata":{"phone_number_id":"'
               + PHONE_NUMBER_ID.encode() + b'"},"messages":[{"id":"wamid.D' + str(depth).encode()
               + b'","from":"1","type":"text","text":{"body":' + b"[" * depth + b"]" * depth
               + b"}}]}}]}]}")
        status, _ = await post(client, raw)
        assert status == 200, depth


@pytest.mark.parametrize("name", WEBHOOK_FIXTURES)
async def test_every_fixture_webhook_is_200(client: Client, name: str) -> None:
    assert (await post(client, fixture_bytes(name)))[0] == 200


@pytest.mark.parametrize("name", WEBHOOK_FIXTURES)
async def test_every_fixture_webhook_is_200_for_an_unknown_tenant(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis, name: str) -> None:
    client = await aiohttp_client(create_app(make_settings(), engine=engine,
                                             redis_client=redis_client))
    assert (await post(client, fixture_bytes(name)))[0] == 200


# --- messages --------------------------------------------------------------------------------


async def test_text_is_stored_stamped_in_tenant_time_and_a_turn_is_queued(
        client: Client, engine: Engine, redis_client: redis.Redis) -> None:
    assert (await post(client, fixture_bytes("message_text.json")))[0] == 200
    (stored,) = rows(engine, Message)
    assert stored.direction == "inbound" and stored.role == "user" and stored.wa_type == "text"
    assert message_text(stored) == "[Mon 2026-06-01 10:00] Oi! Vocês abrem no sábado? 😊"
    assert stored.received_at == START
    assert stored.answered_at is None and stored.starts_turn
    (contact,) = rows(engine, Contact)
    assert (contact.wa_id, contact.user_id, contact.profile_name) == (
        ANA_WA, ANA_USER, "Ana Teste")
    # the 24-hour window runs from when the customer sent it (Meta's timestamp), not receipt
    assert contact.last_inbound_at == stored.meta_timestamp == START.replace(second=0)
    (conversation,) = rows(engine, Conversation)
    assert conversation.contact_id == contact.id and conversation.status == "open"
    assert stored.conversation_id == conversation.id
    queue = Queue("t", connection=redis_client)
    (job_id,) = ScheduledJobRegistry(queue=queue).get_job_ids()  # waits out the debounce
    job = queue.fetch_job(job_id)
    assert job is not None and job.func_name == "workers.turns.run_turn"
    due = ScheduledJobRegistry(queue=queue).get_scheduled_time(job)
    assert timedelta(seconds=1) < due - START <= timedelta(seconds=3), "a 2 s debounce"
    assert job.args == () and job.kwargs["conversation_id"] == conversation.id
    assert tenant_of(job_id) == conversation.tenant_id, "tagged for the fair move"
    assert "Oi!" not in json.dumps(job.kwargs) and ANA_WA not in json.dumps(job.kwargs)


async def test_same_body_twice_is_one_message_and_one_turn(
        client: Client, engine: Engine, redis_client: redis.Redis) -> None:
    raw = fixture_bytes("message_text.json")
    assert (await post(client, raw))[0] == 200
    assert (await post(client, raw))[0] == 200
    assert count(engine, Message) == 1
    assert count(engine, Contact) == 1
    assert turn_jobs(redis_client) == 1


async def test_several_entries_and_changes_all_land(client: Client, engine: Engine,
                                                    redis_client: redis.Redis) -> None:
    first = text_message("wamid.E1", "um", wa_id=ANA_WA)
    second = text_message("wamid.E2", "dois", wa_id=BRUNO_WA)
    third = fixture_json("status_read.json")
    first["entry"][0]["changes"] += third["entry"][0]["changes"]
    first["entry"] += second["entry"]
    assert (await post(client, first))[0] == 200
    assert count(engine, Message) == 2
    assert count(engine, Contact) == 2
    assert turn_jobs(redis_client) == 2


async def test_a_burst_from_one_contact_is_one_conversation_and_one_turn(
        client: Client, engine: Engine, redis_client: redis.Redis) -> None:
    payload = text_message("wamid.B1", "oi", wa_id=ANA_WA)
    items = payload["entry"][0]["changes"][0]["value"]["messages"]
    items += [{**items[0], "id": "wamid.B2", "text": {"body": "quero marcar"}},
              {**items[0], "id": "wamid.B1"},  # the same wamid twice in one body
              {**items[0], "id": "wamid.B3", "text": {"body": "corte"}}]
    assert (await post(client, payload))[0] == 200
    assert (await post(client, text_message("wamid.B4", "amanhã", wa_id=ANA_WA)))[0] == 200
    assert count(engine, Message) == 4
    assert count(engine, Conversation) == 1
    assert turn_jobs(redis_client) == 1


async def test_batch_of_two_senders(client: Client, engine: Engine,
                                    redis_client: redis.Redis) -> None:
    payload = fixture_json("batch_two_messages_two_contacts.json")
    payload["entry"][0]["changes"][0]["value"]["contacts"].reverse()  # ids, not positions
    assert (await post(client, payload))[0] == 200
    by_id = {c.id: c for c in rows(engine, Contact)}
    assert len(by_id) == 2
    conversations = {c.id: c for c in rows(engine, Conversation)}
    assert len(conversations) == 2
    owner = {message_text(m).split("] ", 1)[1]: by_id[conversations[m.conversation_id].contact_id]
             for m in rows(engine, Message)}
    assert (owner["Quero remarcar"].wa_id, owner["Quero remarcar"].user_id,
            owner["Quero remarcar"].profile_name) == (ANA_WA, ANA_USER, "Ana Teste")
    assert (owner["Qual o endereço?"].wa_id, owner["Qual o endereço?"].user_id,
            owner["Qual o endereço?"].profile_name) == (BRUNO_WA, BRUNO_USER, "Bruno Exemplo")
    assert turn_jobs(redis_client) == 2


async def test_one_malformed_item_is_dead_lettered_and_the_other_stored(
        client: Client, engine: Engine, redis_client: redis.Redis) -> None:
    payload = fixture_json("batch_two_messages_two_contacts.json")
    bad = payload["entry"][0]["changes"][0]["value"]["messages"][0]
    del bad["from"], bad["from_user_id"]
    assert (await post(client, payload))[0] == 200
    (stored,) = rows(engine, Message)
    assert message_text(stored).endswith("Qual o endereço?")
    (letter,) = rows(engine, DeadLetter)
    assert json.loads(letter.body) == bad
    assert "messages[0]" in letter.reason
    assert turn_jobs(redis_client) == 1


async def test_a_message_without_sender_is_answered_as_the_changes_only_contact(
        client: Client, engine: Engine, redis_client: redis.Redis) -> None:
    payload = fixture_json("message_text.json")
    item = payload["entry"][0]["changes"][0]["value"]["messages"][0]
    del item["from"], item["from_user_id"]
    assert (await post(client, payload))[0] == 200
    assert count(engine, DeadLetter) == 0
    (stored,) = rows(engine, Message)
    (contact,) = rows(engine, Contact)
    assert (contact.wa_id, contact.user_id) == ("5511999990001", "BR.9000000000000000001")
    assert stored.starts_turn and message_text(stored).endswith("Vocês abrem no sábado? 😊")
    assert turn_jobs(redis_client) == 1


async def test_unknown_phone_number_id_is_200_and_kept_only_as_a_dead_letter(
        client: Client, engine: Engine, redis_client: redis.Redis) -> None:
    payload = fixture_json("message_text.json")
    payload["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = "999"
    assert (await post(client, payload))[0] == 200
    for model in (Message, Contact, Conversation):
        assert count(engine, model) == 0
    (letter,) = rows(engine, DeadLetter)  # a number being onboarded loses nothing
    assert "unknown phone_number_id 999" in letter.reason and b"wamid." in letter.body
    assert turn_jobs(redis_client) == 0


async def test_reaction_is_stored_answered_and_starts_no_turn(
        client: Client, engine: Engine, redis_client: redis.Redis) -> None:
    assert (await post(client, fixture_bytes("message_reaction.json")))[0] == 200
    (stored,) = rows(engine, Message)
    assert stored.wa_type == "reaction" and "👍" in message_text(stored)
    assert stored.starts_turn is False and stored.answered_at == START
    assert turn_jobs(redis_client) == 0


async def test_unsupported_type_asks_politely_and_starts_a_turn(
        client: Client, engine: Engine, redis_client: redis.Redis) -> None:
    assert (await post(client, fixture_bytes("message_unsupported.json")))[0] == 200
    (stored,) = rows(engine, Message)
    assert "ask politely for a text message" in message_text(stored)
    assert turn_jobs(redis_client) == 1


@pytest.mark.parametrize("name, expected", [
    ("message_image_caption.json", ["Foto do produto com defeito"]),
    ("message_location.json", ["Padaria Exemplo", "Rua Ficticia, 123", "-23.55052"]),
    ("message_interactive_button_reply.json", ["Horários", "menu:hours"]),
    ("message_interactive_list_reply.json", ["Ter 02/06 09:00", "slot:2026-06-02T09:00"]),
    ("message_button_template_quick_reply.json", ["Confirmar", "CONFIRM_APPT_123"]),
    ("message_audio_voice.json", ["voice note"]),
])
async def test_non_text_types_become_readable_text(
        client: Client, engine: Engine, redis_client: redis.Redis, name: str,
        expected: list[str]) -> None:
    assert (await post(client, fixture_bytes(name)))[0] == 200
    (stored,) = rows(engine, Message)
    for part in expected:
        assert part in message_text(stored)
    assert turn_jobs(redis_client) == 1


@pytest.mark.parametrize("body", ["oi\x00tudo bem", "oi \ud83d", "x" * 70_000])
async def test_odd_text_is_stored_not_dead_lettered(client: Client, engine: Engine,
                                                    body: str) -> None:
    assert (await post(client, text_message("wamid.ODD", body, wa_id=ANA_WA)))[0] == 200
    assert count(engine, DeadLetter) == 0
    assert count(engine, Message) == 1


async def test_long_type_and_profile_name_are_stored(client: Client, engine: Engine) -> None:
    payload = text_message("wamid.LONG", wa_id=ANA_WA, name="N" * 500)
    item = payload["entry"][0]["changes"][0]["value"]["messages"][0]
    item["type"] = "a_future_message_type_with_a_long_name"
    assert (await post(client, payload))[0] == 200
    assert count(engine, DeadLetter) == 0
    (stored,) = rows(engine, Message)
    assert "ask politely" in message_text(stored)


async def test_a_message_after_the_inactivity_timeout_opens_a_new_conversation(
        client: Client, engine: Engine, frozen_clock: clock.FrozenClock) -> None:
    assert (await post(client, text_message("wamid.A", wa_id=ANA_WA)))[0] == 200
    frozen_clock.advance(timedelta(hours=23))
    assert (await post(client, text_message("wamid.B", wa_id=ANA_WA)))[0] == 200
    assert count(engine, Conversation) == 1
    frozen_clock.advance(timedelta(hours=25))
    assert (await post(client, text_message("wamid.C", wa_id=ANA_WA)))[0] == 200
    first, second = rows(engine, Conversation)
    assert first.status == "closed" and second.status == "open"
    assert [m.conversation_id for m in rows(engine, Message)] == [first.id, first.id, second.id]


# --- statuses --------------------------------------------------------------------------------


def add_outbound(engine: Engine, wamid: str) -> int:
    """An assistant reply whose one part was sent and got `wamid` back; returns the Outbound id."""
    with session_scope(engine) as session:
        conversation = session.exec(select(Conversation)).one()
        assert conversation.id is not None
        reply = messages.append(session, tenant_id=conversation.tenant_id,
                                conversation_id=conversation.id, role="assistant",
                                direction="outbound", content=[{"type": "text", "text": "Olá"}],
                                now=START)
        (row,) = messages.add_outbound(session, message=reply, parts=["Olá"], to=ANA_WA,
                                       recipient=None, now=START)
        row.status, row.wamid = "sent", wamid
        session.add(row)
        session.flush()
        assert row.id is not None
        return row.id


@pytest.fixture
async def outbound_id(client: Client, engine: Engine) -> int:
    assert (await post(client, fixture_bytes("message_text.json")))[0] == 200
    return add_outbound(engine, OUR_WAMID)


def outbound(engine: Engine, row_id: int) -> tuple[Outbound, Message]:
    with session_scope(engine) as session:
        row = session.get(Outbound, row_id)
        assert row is not None
        message = session.get(Message, row.message_id)
        assert message is not None
        return row, message


async def test_statuses_are_monotonic(client: Client, engine: Engine, outbound_id: int) -> None:
    for name in ("status_sent.json", "status_read.json", "status_delivered.json"):
        assert (await post(client, fixture_bytes(name)))[0] == 200
    row, message = outbound(engine, outbound_id)
    assert row.status == "read"
    assert message.delivery_status == "read"
    assert (await post(client, fixture_bytes("status_sent.json")))[0] == 200
    assert outbound(engine, outbound_id)[0].status == "read"


async def test_played_counts_as_read(client: Client, engine: Engine, outbound_id: int) -> None:
    assert (await post(client, status_body(OUR_WAMID, "played")))[0] == 200
    assert outbound(engine, outbound_id)[0].status == "read"
    assert (await post(client, fixture_bytes("status_delivered.json")))[0] == 200
    assert outbound(engine, outbound_id)[0].status == "read"


async def test_failed_status_sets_code_and_reason(client: Client, engine: Engine,
                                                  outbound_id: int) -> None:
    with session_scope(engine) as session:
        row = session.get(Outbound, outbound_id)
        assert row is not None
        row.wamid = FAILED_WAMID
        session.add(row)
    assert (await post(client, fixture_bytes("status_failed_131047_outside_window.json")))[0] == 200
    row, message = outbound(engine, outbound_id)
    assert (row.status, row.error_code) == ("failed", 131047)
    assert row.error_reason and "24 hours" in row.error_reason
    assert message.delivery_status == "failed"
    assert (await post(client, fixture_bytes("status_failed_131047_outside_window.json")))[0] == 200
    assert (await post(client, status_body(FAILED_WAMID, "sent")))[0] == 200
    assert outbound(engine, outbound_id)[0].status == "failed", "a late sent changes nothing"


async def test_status_for_unknown_wamid_changes_nothing(
        client: Client, engine: Engine, outbound_id: int, redis_client: redis.Redis) -> None:
    before = outbound(engine, outbound_id)[0]
    assert (await post(client, status_body("wamid.NOT_OURS", "read")))[0] == 200
    after = outbound(engine, outbound_id)[0]
    assert (after.status, after.status_at) == (before.status, before.status_at)
    assert count(engine, DeadLetter) == 0
    assert count(engine, Message) == 2
    assert turn_jobs(redis_client) == 1  # only the inbound message's turn


async def test_status_under_another_phone_number_id_changes_nothing(
        client: Client, engine: Engine, outbound_id: int) -> None:
    payload = status_body(OUR_WAMID, "read")
    payload["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = "999"
    assert (await post(client, payload))[0] == 200
    assert outbound(engine, outbound_id)[0].status == "sent"


# --- identity --------------------------------------------------------------------------------


async def test_wa_id_first_then_user_id_is_one_contact(client: Client, engine: Engine) -> None:
    assert (await post(client, text_message("wamid.1", wa_id=ANA_WA)))[0] == 200
    assert (await post(client, text_message("wamid.2", wa_id=ANA_WA, user_id=ANA_USER)))[0] == 200
    (contact,) = rows(engine, Contact)
    assert (contact.wa_id, contact.user_id) == (ANA_WA, ANA_USER)
    (conversation,) = rows(engine, Conversation)
    assert {m.conversation_id for m in rows(engine, Message)} == {conversation.id}


async def test_user_id_first_then_wa_id_is_one_contact(client: Client, engine: Engine) -> None:
    assert (await post(client, text_message("wamid.1", user_id=ANA_USER)))[0] == 200
    assert (await post(client, text_message("wamid.2", wa_id=ANA_WA, user_id=ANA_USER)))[0] == 200
    assert (await post(client, text_message("wamid.3", wa_id=ANA_WA)))[0] == 200
    (contact,) = rows(engine, Contact)
    assert (contact.wa_id, contact.user_id) == (ANA_WA, ANA_USER)
    assert count(engine, Conversation) == 1


async def test_contact_known_only_by_user_id_is_stored(
        client: Client, engine: Engine, redis_client: redis.Redis) -> None:
    payload = envelope({
        "contacts": [{"profile": {"name": "Ana", "username": "@ana"}, "user_id": ANA_USER}],
        "messages": [{"from_user_id": ANA_USER, "id": "wamid.U", "timestamp": "1780318800",
                      "type": "text", "text": {"body": "oi"}}],
    })
    assert (await post(client, payload))[0] == 200
    (contact,) = rows(engine, Contact)
    assert (contact.wa_id, contact.user_id, contact.profile_name) == (None, ANA_USER, "Ana")
    assert contacts.address(contact) == (None, ANA_USER)
    assert count(engine, Message) == 1
    assert turn_jobs(redis_client) == 1


async def test_two_rows_merge_when_a_message_carries_both_ids(
        client: Client, engine: Engine) -> None:
    assert (await post(client, text_message("wamid.1", wa_id=ANA_WA)))[0] == 200
    assert (await post(client, text_message("wamid.2", user_id=ANA_USER)))[0] == 200
    assert count(engine, Contact) == 2
    assert (await post(client, text_message("wamid.3", wa_id=ANA_WA, user_id=ANA_USER)))[0] == 200
    assert count(engine, DeadLetter) == 0
    (contact,) = rows(engine, Contact)
    assert (contact.wa_id, contact.user_id) == (ANA_WA, ANA_USER)
    conversations = rows(engine, Conversation)
    assert {c.contact_id for c in conversations} == {contact.id}
    (open_one,) = [c for c in conversations if c.status == "open"]
    assert rows(engine, Message)[-1].conversation_id == open_one.id


async def test_merged_contacts_keep_one_current_value_per_fact_key(
        client: Client, engine: Engine) -> None:
    """A wa_id contact and a user-id contact turn out to be one person: per key the newest
    value stays current, the other is superseded (history kept, pointing at it), and an
    unreviewed value waits beside a confirmed one instead of displacing it."""
    assert (await post(client, text_message("wamid.1", wa_id=ANA_WA)))[0] == 200
    assert (await post(client, text_message("wamid.2", user_id=ANA_USER)))[0] == 200
    by_wa, by_user = sorted(rows(engine, Contact), key=lambda c: c.id or 0)
    source = {m.conversation_id: m.id for m in rows(engine, Message)}
    with session_scope(engine) as session:
        conversation_of = {c.contact_id: c.id for c in session.exec(select(Conversation))}
        for contact, key, value, state in (
                (by_wa, "preferred_name", "Ana", "confirmed"),
                (by_user, "preferred_name", "Aninha", "confirmed"),  # said later: stays
                (by_wa, "preferred_period", "manhã", "confirmed"),
                (by_user, "preferred_period", "tarde", "suggested"),  # a person decides
                (by_wa, "usual_service", "corte", "suggested"),
                (by_user, "usual_service", "escova", "suggested")):
            session.add(ContactFact(
                tenant_id=contact.tenant_id, contact_id=contact.id or 0, key=key, value=value,
                state=state, source_message_id=source[conversation_of[contact.id]],
                created_at=START))
    assert (await post(client, text_message("wamid.3", wa_id=ANA_WA, user_id=ANA_USER)))[0] == 200
    (contact,) = rows(engine, Contact)
    facts = {(f.key, f.value): f for f in rows(engine, ContactFact)}
    assert {f.contact_id for f in facts.values()} == {contact.id}
    assert {k: f.state for k, f in facts.items()} == {
        ("preferred_name", "Ana"): "superseded", ("preferred_name", "Aninha"): "confirmed",
        ("preferred_period", "manhã"): "confirmed", ("preferred_period", "tarde"): "contested",
        ("usual_service", "corte"): "superseded", ("usual_service", "escova"): "suggested"}
    assert facts[("preferred_name", "Ana")].superseded_by_id == \
        facts[("preferred_name", "Aninha")].id
    assert facts[("usual_service", "corte")].valid_until is not None
    with session_scope(engine) as session:
        assert [(f.key, f.value) for f in fact_repo.for_context(session, contact.id or 0, START)] \
            == [("preferred_name", "Aninha"), ("preferred_period", "manhã"),
                ("usual_service", "escova")]


def number_change(old_wa_id: str, new_wa_id: str, *, old_user_id: str | None = None,
                  new_user_id: str | None = None) -> dict[str, Any]:
    """A `system` message of type user_changed_number (no contacts array)."""
    system = {"body": f"\u200eAna changed from {old_wa_id} to {new_wa_id}", "wa_id": new_wa_id,
              "type": "user_changed_number"}
    item: dict[str, Any] = {"from": old_wa_id, "id": f"wamid.SYS{new_wa_id}",
                            "timestamp": "1780318900", "type": "system", "system": system}
    if old_user_id:
        item["from_user_id"] = old_user_id
    if new_user_id:
        system["user_id"] = new_user_id
    return envelope({"messages": [item]})


NEW_WA, NEW_USER = "5511999990009", "BR.9000000000000000009"


@pytest.mark.parametrize("later_ids", [
    {"wa_id": NEW_WA},
    {"wa_id": NEW_WA, "user_id": NEW_USER},  # Meta regenerates the user id with the number
])
async def test_user_changed_number_rekeys_the_contact(
        client: Client, engine: Engine, later_ids: dict[str, str]) -> None:
    assert (await post(client, text_message("wamid.1", wa_id=ANA_WA, user_id=ANA_USER)))[0] == 200
    assert (await post(client, number_change(ANA_WA, NEW_WA)))[0] == 200
    assert (await post(client, text_message("wamid.2", **later_ids)))[0] == 200
    assert count(engine, DeadLetter) == 0
    (contact,) = rows(engine, Contact)
    assert contact.wa_id == NEW_WA
    (conversation,) = rows(engine, Conversation)
    assert conversation.status == "open"
    assert [m.conversation_id for m in rows(engine, Message)] == [conversation.id] * 2


async def test_user_changed_number_with_new_user_id(client: Client, engine: Engine) -> None:
    assert (await post(client, text_message("wamid.1", wa_id=ANA_WA, user_id=ANA_USER)))[0] == 200
    change = number_change(ANA_WA, NEW_WA, old_user_id=ANA_USER, new_user_id=NEW_USER)
    assert (await post(client, change))[0] == 200
    assert (await post(client, text_message("wamid.2", user_id=NEW_USER)))[0] == 200
    (contact,) = rows(engine, Contact)
    assert (contact.wa_id, contact.user_id) == (NEW_WA, NEW_USER)
    assert count(engine, Conversation) == 1


async def test_user_changed_user_id_rekeys_the_user_id(client: Client, engine: Engine) -> None:
    assert (await post(client, text_message("wamid.1", wa_id=ANA_WA, user_id=ANA_USER)))[0] == 200
    change = envelope({"messages": [{
        "from": ANA_WA, "from_user_id": ANA_USER, "id": "wamid.SYSU", "timestamp": "1780318900",
        "type": "system", "system": {"body": "user id changed", "wa_id": ANA_WA,
                                     "user_id": NEW_USER, "type": "user_changed_user_id"}}]})
    assert (await post(client, change))[0] == 200
    assert (await post(client, text_message("wamid.2", wa_id=ANA_WA, user_id=NEW_USER)))[0] == 200
    (contact,) = rows(engine, Contact)
    assert (contact.wa_id, contact.user_id) == (ANA_WA, NEW_USER)
    assert count(engine, Conversation) == 1
    assert count(engine, Message) == 2  # the system message itself is not a customer message


async def test_number_change_arriving_after_the_new_numbers_message(
        client: Client, engine: Engine) -> None:
    """Meta orders nothing: the new number spoke first, then the change explains it."""
    assert (await post(client, text_message("wamid.1", wa_id=ANA_WA, user_id=ANA_USER)))[0] == 200
    assert (await post(client, text_message("wamid.2", wa_id=NEW_WA, user_id=NEW_USER)))[0] == 200
    assert count(engine, Contact) == 2
    assert (await post(client, number_change(ANA_WA, NEW_WA)))[0] == 200
    (contact,) = rows(engine, Contact)
    assert (contact.wa_id, contact.user_id) == (NEW_WA, NEW_USER)
    assert [c.status for c in rows(engine, Conversation)].count("open") == 1
    assert (await post(client, text_message("wamid.3", wa_id=NEW_WA, user_id=NEW_USER)))[0] == 200
    assert count(engine, Contact) == 1


async def test_number_change_for_an_unknown_contact_is_harmless(
        client: Client, engine: Engine) -> None:
    assert (await post(client, number_change("5511000000000", NEW_WA)))[0] == 200
    assert count(engine, Contact) == 0
    assert count(engine, DeadLetter) == 0


async def test_contact_race_loses_no_message(client: Client, engine: Engine,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Another web process creates the contact between our read and our insert: the unique
    index refuses our row; the update is retried and lands on the other process's contact.
    """
    assert (await post(client, text_message("wamid.1", wa_id=ANA_WA)))[0] == 200
    real_get = contacts._get
    misses = iter([True])

    def stale_get(*args: Any, **kwargs: Any) -> Contact | None:
        return None if next(misses, False) else real_get(*args, **kwargs)

    # the race needs a stale read; another connection's insert would wait on SQLite's lock
    monkeypatch.setattr(contacts, "_get", stale_get)
    assert (await post(client, text_message("wamid.2", wa_id=ANA_WA)))[0] == 200
    assert count(engine, DeadLetter) == 0
    assert count(engine, Contact) == 1
    assert count(engine, Message) == 2


async def test_concurrent_first_messages_of_one_contact(
        client: Client, engine: Engine, redis_client: redis.Redis) -> None:
    """Meta delivers concurrently: eight POSTs from a new contact race through the thread pool
    to create one contact and one open conversation; nothing is dead-lettered."""
    bodies = [text_message(f"wamid.R{i}", f"m{i}", wa_id=ANA_WA, user_id=ANA_USER)
              for i in range(8)]
    statuses = await asyncio.gather(*(post(client, body) for body in bodies))
    assert [status for status, _ in statuses] == [200] * 8
    assert count(engine, DeadLetter) == 0
    assert count(engine, Message) == 8
    assert count(engine, Contact) == 1
    assert count(engine, Conversation) == 1
    assert turn_jobs(redis_client) == 1


# --- stores down -----------------------------------------------------------------------------


async def test_database_down_is_503(aiohttp_client: Any, down_engine: Engine,
                                    redis_client: redis.Redis) -> None:
    client = await aiohttp_client(create_app(make_settings(), engine=down_engine,
                                             redis_client=redis_client))
    for raw in (fixture_bytes("message_text.json"), fixture_bytes("status_read.json"),
                b"{not json"):
        assert (await post(client, raw))[0] == 503
    assert turn_jobs(redis_client) == 0


async def test_database_failing_mid_request_is_503_then_redelivery_lands(
        client: Client, engine: Engine, redis_client: redis.Redis) -> None:
    raw = fixture_bytes("batch_two_messages_two_contacts.json")
    with database_faults.failing(engine) as failed:
        assert (await post(client, raw))[0] == 503
    assert failed
    assert (await post(client, raw))[0] == 200
    assert count(engine, Message) == 2
    assert count(engine, DeadLetter) == 0
    assert turn_jobs(redis_client) == 2


async def test_database_lost_midway_through_a_batch(
        client: Client, engine: Engine, redis_client: redis.Redis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first update landed, the second could not: 503; the redelivery stores the second
    and queues both turns (the first message is still unanswered). A POST's messages share a
    transaction up to UPDATES_PER_TRANSACTION; here one each, as in a big POST's chunks."""
    # a knob of intake/ingest.py no setting reaches: one update a transaction
    monkeypatch.setattr(ingest, "UPDATES_PER_TRANSACTION", 1)
    raw = fixture_bytes("batch_two_messages_two_contacts.json")
    with database_faults.failing(engine, database_faults.sql_contains("INSERT INTO message"),
                                 skip=1):
        assert (await post(client, raw))[0] == 503
    assert count(engine, Message) == 1
    assert turn_jobs(redis_client) == 0
    assert (await post(client, raw))[0] == 200
    assert count(engine, Message) == 2
    assert turn_jobs(redis_client) == 2


async def test_store_failure_logs_carry_no_message_text_or_phone(
        client: Client, engine: Engine) -> None:
    def lost(statement: str, _parameters: Any) -> OperationalError:  # the error shows both
        return OperationalError(statement, {"content": "Oi! Vocês abrem", "wa_id": ANA_WA},
                                Exception("server closed the connection unexpectedly"))

    with database_faults.failing(engine, database_faults.sql_contains("INSERT INTO message"),
                                 error=lost), structlog.testing.capture_logs() as logs:
        assert (await post(client, fixture_bytes("message_text.json")))[0] == 503
    loud = [e for e in logs if e["log_level"] not in ("debug",)]
    assert loud
    assert not [e for e in loud if "Vocês" in repr(e) or ANA_WA in repr(e)]


async def test_redis_down_is_503_and_redelivery_enqueues_once(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis,
        down_redis: redis.Redis, tenant_id: int) -> None:
    broken = await aiohttp_client(create_app(make_settings(), engine=engine,
                                             redis_client=down_redis))
    raw = fixture_bytes("message_text.json")
    assert (await post(broken, raw))[0] == 503
    healthy = await aiohttp_client(create_app(make_settings(), engine=engine,
                                              redis_client=redis_client))
    assert (await post(healthy, raw))[0] == 200
    assert (await post(healthy, raw))[0] == 200
    assert count(engine, Message) == 1
    assert turn_jobs(redis_client) == 1


# --- health ----------------------------------------------------------------------------------


async def test_health_ok(client: Client) -> None:
    response = await client.get("/health")
    assert response.status == 200
    assert await response.json() == {"ok": True, "problems": []}


async def test_health_names_redis_when_down(aiohttp_client: Any, engine: Engine,
                                            down_redis: redis.Redis) -> None:
    client = await aiohttp_client(create_app(make_settings(), engine=engine,
                                             redis_client=down_redis))
    response = await client.get("/health")
    assert response.status == 503
    assert (await response.json())["problems"] == ["redis"]


async def test_health_names_the_database_when_down(
        aiohttp_client: Any, down_engine: Engine, redis_client: redis.Redis) -> None:
    client = await aiohttp_client(create_app(make_settings(), engine=down_engine,
                                             redis_client=redis_client))
    response = await client.get("/health")
    assert response.status == 503
    assert (await response.json())["problems"] == ["database"]


# --- metrics buffer --------------------------------------------------------------------------


async def test_the_apps_cleanup_writes_the_counts_and_leaves_no_timed_flush_on_the_loop(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis, tenant_id: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A timed flush left on the loop fires while it closes and leaves a flush_updates
    coroutine never awaited (a RuntimeWarning): the cleanup cancels it and writes itself."""
    monkeypatch.setattr(bot.metrics, "FLUSH_AFTER_SECONDS", 3600.0)  # only the cleanup writes
    loop, timed = asyncio.get_running_loop(), []
    schedule = loop.call_later

    def recording_call_later(delay: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        handle = schedule(delay, *args, **kwargs)
        if delay == 3600.0:
            timed.append(handle)
        return handle

    monkeypatch.setattr(loop, "call_later", recording_call_later)
    client = await aiohttp_client(create_app(make_settings(), engine=engine,
                                             redis_client=redis_client))
    assert (await post(client, fixture_bytes("message_text.json")))[0] == 200
    assert len(timed) == 1 and not timed[0].cancelled()
    assert not core_metrics.parse(redis_client.hgetall(core_metrics.metrics_key("t")))
    await client.close()
    assert timed[0].cancelled()
    written = core_metrics.parse(redis_client.hgetall(core_metrics.metrics_key("t")))
    assert written["wagent_webhook_updates_total"][(("kind", "message"),)][""] == 1
