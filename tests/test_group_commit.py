"""Group commit (intake/group.py `store_group`, bot/webhook.py `GroupCommit`): concurrent POSTs
stored in one transaction must end exactly as if each had been stored alone, in order.

Each case builds a list of webhook bodies (bursts, redeliveries inside and across groups, a
known contact, a stale session, a re-assigned number, a merge, an unknown number, a tombstone,
a status in the middle), stores them once one by one (`ingest_body`: each POST's messages a
group of one) and once as groups (`store_group` on the POSTs made only of customer messages,
the others one by one after it, as the webhook does), and compares the two databases, ids
aside. Then the HTTP edge: many concurrent POSTs through `create_app`.
"""

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
import redis
from aiohttp.test_utils import TestClient
from rq import Queue
from rq.registry import ScheduledJobRegistry
from sqlalchemy import Engine, text
from sqlmodel import select

from bot.app import create_app
from bot.webhook import stores_of
from core import clock
from core.settings import Settings
from intake import ingest
from intake.group import store_group
from intake.items import Pending
from intake.result import IngestResult
from storage.db import session_scope
from storage.jobs import tenant_of
from storage.messages import wamid_hash
from storage.models import Contact, Conversation, DeadLetter, Message, WamidTombstone
from storage.tenants import upsert_tenant
from tests import database_faults, redis_faults
from tests.conftest import START
from tests.factories import PHONE_NUMBER_ID, TENANT
from whatsapp.inbound import parse_update
from whatsapp.signature import sign

SECRET = "group_commit_secret_0123456789"


def body(wamid: str, text_: str, *, wa_id: str | None, user_id: str | None,
         name: str = "Cliente", ts: int = 1780318800,
         phone_number_id: str = PHONE_NUMBER_ID) -> bytes:
    contact: dict[str, Any] = {"profile": {"name": name}}
    message: dict[str, Any] = {"id": wamid, "timestamp": str(ts), "type": "text",
                               "text": {"body": text_}}
    if wa_id:
        contact["wa_id"], message["from"] = wa_id, wa_id
    if user_id:
        contact["user_id"], message["from_user_id"] = user_id, user_id
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [
        {"field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "5511999990000",
                         "phone_number_id": phone_number_id},
            "contacts": [contact], "messages": [message]}}]}]}).encode()


def status_body(wamid: str) -> bytes:
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [
        {"field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "5511999990000",
                         "phone_number_id": PHONE_NUMBER_ID},
            "statuses": [{"id": wamid, "status": "delivered", "timestamp": "1780318800",
                          "recipient_id": "5511999990009"}]}}]}]}).encode()


def two_messages(first: bytes, second: bytes) -> bytes:
    """One POST carrying both messages (Meta batches)."""
    a, b = json.loads(first), json.loads(second)
    a["entry"][0]["changes"] += b["entry"][0]["changes"]
    return json.dumps(a).encode()


ANA = {"wa_id": "5511900000001", "user_id": "BR.A1"}
BIA = {"wa_id": "5511900000002", "user_id": "BR.B2"}
CAIO = {"wa_id": "5511900000003", "user_id": "BR.C3"}
DORA = {"wa_id": "5511900000004", "user_id": None}
EVA = {"wa_id": None, "user_id": "BR.E5"}

# before the groups, one by one: known contacts, an open session, one gone stale, a pending
# message, a tombstone, a contact known only by its number
SETUP = [
    body("wamid.S1", "oi", **BIA, name="Bia"),
    body("wamid.S2", "sessão velha", **CAIO, name="Caio", ts=1780318800 - 3 * 86400),
    body("wamid.S3", "só número", **DORA, name="Dora"),
    body("wamid.S4", "só username", **EVA, name="Eva"),
    body("wamid.S5", "número de outro", wa_id="5511900000006", user_id="BR.OLD6"),
]

GROUPS = [
    [  # a new contact's burst with its redeliveries inside the group
        body("wamid.A1", "um", **ANA, name="Ana"),
        body("wamid.A2", "dois", **ANA, name="Ana"),
        body("wamid.A1", "um", **ANA, name="Ana"),
        body("wamid.B1", "de novo", **BIA, name="Bia B."),
        body("wamid.S1", "oi", **BIA, name="Bia"),  # stored and unanswered: its turn again
        body("wamid.C1", "voltei", **CAIO, name="Caio"),  # the stale session closes
        body("wamid.D1", "agora com username", wa_id=DORA["wa_id"], user_id="BR.D4"),
        body("wamid.E1", "agora com número", wa_id="5511900000005", user_id="BR.E5"),
        body("wamid.T1", "apagado", **ANA),  # tombstoned
        body("wamid.U1", "número desconhecido", **ANA, phone_number_id="999"),
        status_body("wamid.OUT1"),
        two_messages(body("wamid.A3", "três", **ANA), body("wamid.B2", "e", **BIA)),
    ],
    [  # identities the group hands to the one-by-one path
        body("wamid.F1", "número reatribuído", wa_id="5511900000006", user_id="BR.NEW6"),
        body("wamid.G1", "junta dois", wa_id=DORA["wa_id"], user_id="BR.E5"),
        body("wamid.H1", "só número", wa_id="5511900000008", user_id=None),
        body("wamid.H2", "com username", wa_id="5511900000008", user_id="BR.H8"),
        body("wamid.A2", "dois", **ANA, name="Ana"),  # redelivery across groups
        body("wamid.A4", "quatro", **ANA, name="Ana Maria"),
        body("wamid.I1", "ei", wa_id=None, user_id="BR.I9"),
        body("wamid.I2", "ei ei", wa_id=None, user_id="BR.I9"),
    ],
]


@pytest.fixture(autouse=True)
def frozen_clock() -> Any:
    previous = clock.set_clock(clock.FrozenClock(START))
    yield
    clock.set_clock(previous)


def _setup(engine: Engine) -> None:
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
        session.add(WamidTombstone(wamid_hash=wamid_hash("wamid.T1"), created_at=START))
    for n, raw in enumerate(SETUP):
        ingest.ingest_body(engine, raw, now=START + timedelta(seconds=n))


def _one_by_one(engine: Engine) -> list[IngestResult]:
    results = []
    for g, group in enumerate(GROUPS):
        for raw in group:
            results.append(ingest.ingest_body(engine, raw, now=START + timedelta(minutes=g + 1)))
    return results


def _grouped(engine: Engine) -> list[IngestResult]:
    """Each group's POSTs of customer messages through one `store_group`, then the others (a
    status) one by one."""
    results = []
    for g, group in enumerate(GROUPS):
        now = START + timedelta(minutes=g + 1)
        pendings = [Pending(found, now) if (found := ingest.inbound_only(raw)) else None
                    for raw in group]
        store_group(engine, [p for p in pendings if p is not None])
        for raw, pending in zip(group, pendings, strict=True):
            if pending is None:
                results.append(ingest.ingest_body(engine, raw, now=now))
            else:
                results.append(pending.result)
    return results


def _state(engine: Engine) -> dict[str, Any]:
    """The database without ids: who each message belongs to, in which session, with what."""
    with session_scope(engine) as session:
        contacts = {c.id: c for c in session.exec(select(Contact))}
        conversations = {c.id: c for c in session.exec(select(Conversation))}

        def who(contact_id: int) -> tuple[Any, ...]:
            c = contacts[contact_id]
            return (c.wa_id or "", c.user_id or "")

        def session_of(conversation_id: int) -> tuple[Any, ...]:
            c = conversations[conversation_id]
            first = min(m.wamid or "" for m in session.exec(select(Message).where(
                Message.conversation_id == conversation_id)))
            return (who(c.contact_id), c.status, first)

        return {
            "messages": sorted((m.wamid, session_of(m.conversation_id), m.content, m.starts_turn,
                                m.answered_at, m.received_at, m.meta_timestamp)
                               for m in session.exec(select(Message))),
            "contacts": sorted((c.wa_id or "", c.user_id or "", c.profile_name or "",
                                str(c.last_inbound_at)) for c in contacts.values()),
            "conversations": sorted((session_of(c.id), str(c.last_activity_at), str(c.due_at),
                                     str(c.last_inbound_at), str(c.closed_at))
                                    for c in conversations.values()),
            "dead_letters": sorted(d.reason for d in session.exec(select(DeadLetter))),
        }


def _turns(engine: Engine, results: list[IngestResult]) -> list[Any]:
    """Which POST asked for which turns and fact extractions, by the sessions' first wamid."""
    with session_scope(engine) as session:
        def first(conversation_id: int) -> str:
            return min(m.wamid or "" for m in session.exec(select(Message).where(
                Message.conversation_id == conversation_id)))

        return [(sorted(first(c) for c in r.turn_conversation_ids),
                 sorted(first(c) for c in r.closed_conversation_ids)) for r in results]


def _wipe(engine: Engine) -> None:
    with engine.begin() as connection:
        for table in ("message", "conversation", "contact", "deadletter", "wamidtombstone",
                      "openinghours", "professional", "service", "tenant"):
            connection.execute(text(f"DELETE FROM {table}"))


def test_a_group_ends_as_one_by_one(engine: Engine) -> None:
    _setup(engine)
    alone = _one_by_one(engine)
    expected, expected_turns = _state(engine), _turns(engine, alone)
    _wipe(engine)
    _setup(engine)
    grouped = _grouped(engine)
    assert _state(engine) == expected
    assert _turns(engine, grouped) == expected_turns
    assert [r.counts for r in grouped] == [r.counts for r in alone]


def test_a_group_that_fails_stores_nothing(engine: Engine) -> None:
    _setup(engine)
    before = _state(engine)
    pendings = [Pending(parse_update(json.loads(raw)), START)  # type: ignore[arg-type]
                for raw in GROUPS[0][:3]]
    with database_faults.failing(engine, database_faults.sql_contains("INSERT INTO message"),
                                 error=database_faults.refused_row), \
            pytest.raises(RuntimeError):
        store_group(engine, pendings)
    assert _state(engine) == before


# --- the HTTP edge ---------------------------------------------------------------------------


def settings() -> Settings:
    # the group commit itself: no POST goes to the inbox (tests/test_inbox.py covers that)
    return Settings(whatsapp_app_secret=SECRET, whatsapp_verify_token="v", redis_prefix="t",
                    queue_name="t", webhook_spill_at=0)


async def _post(client: TestClient, raw: bytes) -> int:  # type: ignore[type-arg]
    response = await client.post("/webhook", data=raw, headers={
        "Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, SECRET)})
    await response.read()
    return response.status


def workload() -> tuple[list[bytes], int]:
    """40 contacts, 1 to 3 messages each (79), the second one POSTed twice (26 times), and a
    status; returns the bodies and the number of distinct messages."""
    bodies = []
    for contact in range(40):
        who = {"wa_id": f"55119{contact:08d}", "user_id": f"BR.X{contact}"}
        for k in range(1 + contact % 3):
            raw = body(f"wamid.X{contact}.{k}", f"m{k}", **who)
            bodies += [raw, raw] if k == 1 else [raw]
    bodies.append(status_body("wamid.OUT9"))
    return bodies, sum(1 + c % 3 for c in range(40))


async def test_concurrent_posts_store_every_message_once(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    client = await aiohttp_client(create_app(settings(), engine=engine,
                                             redis_client=redis_client))
    bodies, messages = workload()
    statuses = await asyncio.gather(*(_post(client, raw) for raw in bodies))
    assert statuses == [200] * len(bodies)
    with session_scope(engine) as session:
        stored = list(session.exec(select(Message)))
        assert len(stored) == len({m.wamid for m in stored}) == messages
        assert len(list(session.exec(select(Contact)))) == 40
        assert len(list(session.exec(select(Conversation)))) == 40
        assert not list(session.exec(select(DeadLetter)))
    queue = Queue("t", connection=redis_client)
    assert queue.count + ScheduledJobRegistry(queue=queue).count == 40
    tenant_id = stored[0].tenant_id  # every turn tagged with its tenant: the fair move's key
    assert {tenant_of(i) for i in ScheduledJobRegistry(queue=queue).get_job_ids()} == {tenant_id}


async def test_concurrent_posts_get_503_when_the_database_is_down(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:

    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    client = await aiohttp_client(create_app(settings(), engine=engine,
                                             redis_client=redis_client))

    bodies = [body(f"wamid.Y{i}", "oi", wa_id=f"55118{i:08d}", user_id=None) for i in range(12)]
    with database_faults.failing(engine):
        assert await asyncio.gather(*(_post(client, raw) for raw in bodies)) == [503] * 12
    assert await asyncio.gather(*(_post(client, raw) for raw in bodies)) == [200] * 12
    with session_scope(engine) as session:
        assert len(list(session.exec(select(Message)))) == 12


@pytest.mark.parametrize("grouped", [True, False])
def test_a_failed_turn_enqueue_still_enqueues_the_closed_sessions_facts(
        engine: Engine, redis_client: redis.Redis, grouped: bool) -> None:
    """A message that closes a stale session, whose turn cannot be enqueued (Redis refuses,
    or its token keeps changing): the POST answers 503 so Meta redelivers, but the facts of
    the session it closed are enqueued first, because the close is committed and the
    redelivery, a duplicate, would not report it again."""
    from intake import posts
    from intake.errors import StoreUnavailable
    from storage.keys import token_key

    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    caio = {"wa_id": "5511900000003", "user_id": "BR.C3"}
    ingest.ingest_body(engine, body("wamid.old", "oi", **caio), now=START)
    no_turns = redis_faults.refusing(redis_client, redis_faults.mentioning(":turn:"))
    app = create_app(settings(), engine=engine, redis_client=no_turns)
    later = START + timedelta(days=2)  # past the 24-hour inactivity timeout
    bodies = [(body("wamid.new", "voltei", **caio), later)]
    if grouped:
        bodies.append((body("wamid.other", "olá", wa_id="5511900000009", user_id="BR.Z9"),
                       later))
    outcomes = posts.store_posts(stores_of(app), bodies)
    no_turns.close()

    assert all(isinstance(o, StoreUnavailable) for o in outcomes)
    with session_scope(engine) as session:
        closed = session.exec(select(Conversation).where(
            Conversation.status == "closed")).one()
    assert redis_client.get(token_key("t", "facts", int(closed.id or 0))) is not None


def test_a_big_post_is_stored_in_chunks_and_a_bad_message_loses_nothing_else(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A POST's messages go UPDATES_PER_TRANSACTION to a transaction (here 2): a redelivery
    across chunks is a duplicate, and a message the database refuses is dead-lettered alone
    while the rest of its chunk lands."""
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    # a knob of intake/ingest.py no setting reaches: two updates a transaction
    monkeypatch.setattr(ingest, "UPDATES_PER_TRANSACTION", 2)
    raw = body("wamid.K0", "m0", **ANA)
    for wamid in ("wamid.K1", "wamid.K2", "wamid.K3", "wamid.K0", "wamid.K4"):
        raw = two_messages(raw, body(wamid, wamid[-2:], **ANA))
    with database_faults.failing(engine, database_faults.inserts_mentioning("message", "K3"),
                                 error=database_faults.refused_row):
        result = ingest.ingest_body(engine, raw, now=START)
    assert result.counts == {"message": 4, "duplicate": 1, "dead_letter": 1}
    assert len(result.turn_conversation_ids) == 1
    with session_scope(engine) as session:
        stored = sorted(str(m.wamid) for m in session.exec(select(Message)))
        (letter,) = session.exec(select(DeadLetter)).all()
    assert stored == ["wamid.K0", "wamid.K1", "wamid.K2", "wamid.K4"]
    assert b"wamid.K3" in letter.body
