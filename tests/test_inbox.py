"""The inbox: a web process under load stores raw POSTs and answers; a worker stores them.

Every test runs on SQLite and PostgreSQL with real Redis. Storing through the inbox must give
exactly what storing in the request gives: each wamid once, one turn per conversation, nothing
lost when the database, Redis or the code fails on the way.
"""

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from rq import Queue
from rq.registry import ScheduledJobRegistry
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import func, select

from bot.app import create_app
from bot.webhook import GroupCommit
from core import faults
from core.clock import FrozenClock, set_clock
from core.errors import SettingsError
from core.settings import SMALL_BODY_BYTES, Settings
from intake import posts
from storage import inbox
from storage.db import session_scope
from storage.jobs import INBOX_KEY, enqueue_drain, enqueue_turn
from storage.keys import token_key
from storage.messages import assign_positions
from storage.models import Contact, Conversation, DeadLetter, InboxEntry, Message
from storage.rights import find_contact, forget_contact
from storage.tenants import upsert_tenant
from tests import database_faults, redis_faults
from tests.conftest import START
from tests.factories import PHONE_NUMBER_ID, TENANT
from tests.test_group_commit import SECRET, _post, body, status_body, two_messages, workload
from workers import inbox as drainer
from workers.maintenance import reconcile_inbox
from workers.runtime import Runtime, build_runtime, set_runtime
from workers.sweeper import sweep_inactive


def settings(spill_at: int) -> Settings:
    return Settings(whatsapp_app_secret=SECRET, whatsapp_verify_token="v", redis_prefix="t",
                    queue_name="t", webhook_spill_at=spill_at)


def runtime(engine: Engine, redis_client: redis.Redis) -> Runtime:
    return build_runtime(settings(1), engine=engine, redis_client=redis_client)


def count(engine: Engine, model: Any) -> int:
    with session_scope(engine) as session:
        return int(session.exec(select(func.count()).select_from(model)).one())


def job_ids(redis_client: redis.Redis, kind: str) -> list[str]:
    queue = Queue("t", connection=redis_client)
    ids = queue.job_ids + ScheduledJobRegistry(queue=queue).get_job_ids()
    return [i for i in ids if i.startswith(f"{kind}-")]


async def tenant_client(aiohttp_client: Any, engine: Engine, redis_client: redis.Redis,
                        spill_at: int) -> Any:
    """A web app with `WEBHOOK_SPILL_AT=spill_at` over a database holding the test tenant."""
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    return await aiohttp_client(create_app(settings(spill_at), engine=engine,
                                           redis_client=redis_client))


async def test_spilled_posts_are_stored_once_by_the_drain(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    client = await tenant_client(aiohttp_client, engine, redis_client, 2)
    bodies, messages = workload()
    statuses = await asyncio.gather(*(_post(client, raw) for raw in bodies))
    assert statuses == [200] * len(bodies)
    spilled = count(engine, InboxEntry)
    assert spilled > 0 and count(engine, Message) < messages
    assert len(job_ids(redis_client, "inbox")) == 1  # one drain for every spilled group
    scraped = await (await client.get("/metrics")).text()
    if engine.dialect.name == "postgresql":  # SQLite: left out (bot.metrics.InboxCollector)
        assert metric(scraped, "wagent_inbox_entries") == spilled
    else:
        assert "wagent_inbox_entries" not in scraped

    assert drainer.drain(runtime(engine, redis_client), job_id=None, linger=0) == spilled
    assert count(engine, InboxEntry) == 0
    with session_scope(engine) as session:
        stored = list(session.exec(select(Message)))
    assert len(stored) == len({m.wamid for m in stored}) == messages
    assert count(engine, Contact) == 40
    assert count(engine, Conversation) == 40
    assert count(engine, DeadLetter) == 0
    assert len(job_ids(redis_client, "turn")) == 40
    scraped = await (await client.get("/metrics")).text()
    assert metric(scraped, "wagent_inbox_posts_total") == spilled
    # what the web process stored and what the drain stored add up to every update once
    assert metric(scraped, 'wagent_webhook_updates_total{kind="message"}') == messages
    assert metric(scraped, 'wagent_webhook_updates_total{kind="duplicate"}') == 26
    assert metric(scraped, 'wagent_webhook_updates_total{kind="status_unknown"}') == 1
    if engine.dialect.name == "postgresql":
        assert metric(scraped, "wagent_inbox_entries") == 0
        assert metric(scraped, "wagent_inbox_oldest_seconds") == 0


def metric(scraped: str, name: str) -> float:
    line = next(line for line in scraped.splitlines() if line.startswith(name + " "))
    return float(line.split()[-1])


async def test_a_lone_post_is_stored_before_its_answer(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    """Spilling is for load: below `webhook_spill_at` waiting POSTs nothing goes to the inbox."""
    client = await tenant_client(aiohttp_client, engine, redis_client, 16)
    for k in range(3):
        assert await _post(client, body(f"wamid.L{k}", "oi", wa_id="5511900000001",
                                        user_id=None)) == 200
    assert count(engine, Message) == 3
    assert count(engine, InboxEntry) == 0
    assert job_ids(redis_client, "inbox") == []


def test_spilling_starts_at_the_threshold_and_holds_while_posts_keep_coming() -> None:
    async def decisions() -> list[bool]:
        app = create_app(settings(4), engine=None, redis_client=None)  # type: ignore[arg-type]
        group = GroupCommit(app)
        seen = [group._spill(1), group._spill(3), group._spill(4), group._spill(1),
                group._spill(2)]
        group.spill_until = 0.0  # the hold ran out
        seen.append(group._spill(1))
        group.spill_at = 0  # never
        seen.append(group._spill(500))
        return seen

    assert asyncio.run(decisions()) == [False, False, True, True, True, False, False]


def test_a_negative_spill_threshold_is_refused() -> None:
    with pytest.raises(SettingsError, match="WEBHOOK_SPILL_AT"):
        Settings.from_env({"WEBHOOK_SPILL_AT": "-1"}, require=False)


async def test_a_spill_without_the_database_answers_503(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    client = await tenant_client(aiohttp_client, engine, redis_client, 1)
    raw = body("wamid.D1", "oi", wa_id="5511900000001", user_id=None)
    with database_faults.failing(engine, database_faults.sql_contains("INSERT INTO inbox")):
        assert await _post(client, raw) == 503  # Meta redelivers
    assert job_ids(redis_client, "inbox") == []
    assert await _post(client, raw) == 200
    assert count(engine, InboxEntry) == 1


async def test_a_spill_without_redis_answers_503_and_is_reconciled(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    """Redis down: 503, as for a turn that cannot be enqueued. The committed entry is drained
    once the periodic reconcile finds it a minute old, and Meta's redelivery is a duplicate."""
    no_drain = redis_faults.refusing(redis_client, redis_faults.mentioning(":inbox:"))
    broken = await tenant_client(aiohttp_client, engine, no_drain, 1)
    raw = body("wamid.R1", "oi", wa_id="5511900000001", user_id=None)
    assert await _post(broken, raw) == 503
    no_drain.close()
    client = await tenant_client(aiohttp_client, engine, redis_client, 1)
    assert count(engine, InboxEntry) == 1 and job_ids(redis_client, "inbox") == []
    rt = runtime(engine, redis_client)
    _, oldest = inbox.backlog(engine)
    assert oldest is not None
    assert reconcile_inbox(rt, now=oldest + timedelta(seconds=30)) is False  # not stale yet
    assert reconcile_inbox(rt, now=oldest + timedelta(minutes=2)) is True
    assert len(job_ids(redis_client, "inbox")) == 1
    assert drainer.drain(rt, job_id=None, linger=0) == 1
    assert count(engine, Message) == 1 and len(job_ids(redis_client, "turn")) == 1
    assert await _post(client, raw) == 200  # Meta's redelivery, spilled in turn
    assert drainer.drain(rt, job_id=None, linger=0) == 1
    assert count(engine, Message) == 1 and len(job_ids(redis_client, "turn")) == 1


def test_a_failed_drain_keeps_its_entries(engine: Engine, redis_client: redis.Redis) -> None:
    """Redis refuses the turns: the messages were committed, but the entries stay, and the
    retried drain enqueues their turns (the messages are then redeliveries)."""
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    inbox.add_many(engine, [(body(f"wamid.F{k}", "oi", wa_id=f"551190000000{k}", user_id=None),
                             START) for k in range(3)])
    no_turns = redis_faults.refusing(redis_client, redis_faults.mentioning(":turn:"))
    with pytest.raises(posts.StoreUnavailable):
        drainer.drain_batch(runtime(engine, no_turns))
    no_turns.close()
    assert count(engine, InboxEntry) == 3
    assert job_ids(redis_client, "turn") == []
    rt = runtime(engine, redis_client)
    assert drainer.drain_batch(rt) == 3
    assert count(engine, InboxEntry) == 0
    assert count(engine, Message) == 3
    assert len(job_ids(redis_client, "turn")) == 3


def test_an_entry_that_breaks_storing_is_dead_lettered_whole(
        engine: Engine, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug on one entry must not stop the inbox: it goes to the dead letters byte for byte,
    and the other entries of its batch are stored."""
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    broken = status_body("wamid.OUT1")
    inbox.add_many(engine, [(body("wamid.B1", "oi", wa_id="5511900000001", user_id=None), START),
                            (broken, START),
                            (body("wamid.B2", "oi", wa_id="5511900000002", user_id=None), START)])
    real = posts.ingest_body

    def buggy(engine_: Engine, raw: bytes, *, now: Any) -> Any:
        if raw == broken:
            raise KeyError("a bug")
        return real(engine_, raw, now=now)

    # a bug outside every update's own ladder (a database fault lands inside one): no seam
    monkeypatch.setattr(posts, "ingest_body", buggy)
    assert drainer.drain_batch(runtime(engine, redis_client)) == 3
    assert count(engine, InboxEntry) == 0
    assert count(engine, Message) == 2
    with session_scope(engine) as session:
        letter = session.exec(select(DeadLetter)).one()
    assert letter.body == broken and "KeyError" in letter.reason


def test_the_drain_gives_its_token_back_and_misses_nothing(
        engine: Engine, redis_client: redis.Redis) -> None:
    """A POST spilled while the drain holds the token enqueues nothing; if it lands just as the
    drain finds the inbox empty, the drain looks again after giving the token back."""
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    rt = runtime(engine, redis_client)
    job_id = enqueue_drain(rt.queue, "t")
    assert job_id is not None
    assert enqueue_drain(rt.queue, "t") is None  # coalesced: the token is held
    inbox.add_many(engine, [(body("wamid.T1", "oi", wa_id="5511900000001", user_id=None),
                             START)])
    late = [body("wamid.T2", "oi", wa_id="5511900000002", user_id=None)]

    def spill() -> None:
        if late:  # a spill committed after the last empty claim, having seen the token
            inbox.add_many(engine, [(late.pop(), START)])

    with faults.meanwhile("before_inbox_token_back", spill):
        assert drainer.drain(rt, job_id=job_id, linger=0) == 2
    assert count(engine, InboxEntry) == 0 and count(engine, Message) == 2
    assert redis_client.get(token_key("t", "inbox", INBOX_KEY)) is None
    assert enqueue_drain(rt.queue, "t") is not None  # the next spill enqueues a new drain


@pytest.mark.postgres
@pytest.mark.parametrize("engine", ["postgres"], indirect=True)  # SKIP LOCKED
def test_two_drains_take_different_entries(engine: Engine) -> None:
    inbox.add_many(engine, [(f"b{k}".encode(), START) for k in range(5)])
    with inbox.claim(engine, 3) as first, inbox.claim(engine, 3) as second:
        assert [e.body for e in first] == [b"b0", b"b1", b"b2"]
        assert [e.body for e in second] == [b"b3", b"b4"]
    assert inbox.backlog(engine) == (0, None)


def test_a_claim_that_raises_keeps_its_entries(engine: Engine) -> None:
    inbox.add_many(engine, [(b"kept", START)])
    with pytest.raises(RuntimeError), inbox.claim(engine, 10) as entries:
        assert [e.body for e in entries] == [b"kept"]
        raise RuntimeError("the worker died")
    assert inbox.backlog(engine) == (1, START)


def test_the_drain_goes_ahead_of_queued_turns(redis_client: redis.Redis) -> None:
    """Until a spilled POST is stored it has no turn: its drain must not wait behind turns."""
    queue = Queue("t", connection=redis_client)
    for conversation_id in (1, 2):
        enqueue_turn(queue, "t", conversation_id)
    enqueue_drain(queue, "t")
    assert [i.split("-")[0] for i in queue.job_ids] == ["inbox", "turn", "turn"]


def test_a_long_drain_hands_over_behind_the_waiting_turns(
        engine: Engine, redis_client: redis.Redis) -> None:
    """Under sustained load a drain stops after MAX_SECONDS and queues its successor behind
    the turns that waited meanwhile, so one worker alone still answers customers."""
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    rt = runtime(engine, redis_client)
    first = enqueue_drain(rt.queue, "t")
    rt.queue.remove(first)  # a worker took it
    enqueue_turn(rt.queue, "t", 99)
    inbox.add_many(engine, [(body(f"wamid.H{k}", "oi", wa_id=f"551190000000{k}", user_id=None),
                             START) for k in range(3)])
    assert drainer.drain(rt, job_id=first, linger=0, max_seconds=0) == 3
    successor = redis_client.get(token_key("t", "inbox", INBOX_KEY))
    assert successor is not None and successor.decode() != first
    assert [j.split("-")[0] for j in rt.queue.job_ids] == ["turn", "inbox"]
    assert rt.queue.job_ids[1] == successor.decode()


@pytest.mark.postgres
@pytest.mark.parametrize("engine", ["postgres"], indirect=True)
async def test_a_stalled_inbox_shows_in_the_metrics(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    """With no drain running the oldest entry's age grows at each scrape: what to alert on."""
    clock = FrozenClock(START)
    previous = set_clock(clock)
    try:
        client = await aiohttp_client(create_app(settings(1), engine=engine,
                                                 redis_client=redis_client))
        inbox.add_many(engine, [(b"{}", START)])
        clock.advance(timedelta(minutes=5))
        scraped = await (await client.get("/metrics")).text()
    finally:
        set_clock(previous)
    assert metric(scraped, "wagent_inbox_entries") == 1
    assert metric(scraped, "wagent_inbox_oldest_seconds") == 300


def test_erasing_a_contact_reaches_the_inbox(
        engine: Engine, redis_client: redis.Redis) -> None:
    """LGPD: a message of an erased contact still waiting in the inbox is never stored; an
    entry holding only theirs is deleted, one shared with another customer's is kept for the
    other's message."""
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    ana = {"wa_id": "5511900000001", "user_id": "BR.A1"}
    bia = {"wa_id": "5511900000002", "user_id": "BR.B2"}
    rt = runtime(engine, redis_client)
    posts.store_posts(posts.Stores(engine=engine, settings=rt.settings, queue=rt.queue),
                        [(body("wamid.E0", "oi", **ana), START)])
    inbox.add_many(engine, [(body("wamid.E1", "segredo", **ana), START),
                            (two_messages(body("wamid.E2", "segredo", **ana),
                                          body("wamid.E3", "olá", **bia)), START)])
    with session_scope(engine) as session:
        contact = find_contact(session, 1, ana["wa_id"])
        assert contact is not None
        counts = forget_contact(session, contact, now=START)
    assert counts["inbox_entries"] == 1 and counts["tombstones"] == 3
    assert count(engine, InboxEntry) == 1
    assert drainer.drain(rt, job_id=None, linger=0) == 1
    with session_scope(engine) as session:
        stored = list(session.exec(select(Message)))
        people = list(session.exec(select(Contact)))
    assert [m.wamid for m in stored] == ["wamid.E3"]
    assert [c.wa_id for c in people if c.wa_id] == [bia["wa_id"]]


@pytest.fixture
def runtime_reset() -> Iterator[None]:
    """The process's runtime (workers.runtime.set_runtime) back to none after the test."""
    yield
    set_runtime(None)


@pytest.mark.usefixtures("runtime_reset")
def test_a_failed_drain_gives_its_token_back_without_personal_data(
        engine: Engine, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database fails under a drain job: the next spilled POST must enqueue a new drain
    (not wait a minute for the reconcile), and what RQ logs and keeps of the failure must not
    carry the statement's parameters."""
    rt = runtime(engine, redis_client)
    job_id = enqueue_drain(rt.queue, "t")
    assert job_id is not None

    class Job:
        id = job_id
        retries_left = 1  # RQ will run it again: the retry keeps the token

    def lost(statement: str, _parameters: Any) -> OperationalError:  # the error shows them
        return OperationalError(statement, {"wa_id": "5511912345678"},
                                Exception("server closed the connection"))

    # RQ's own: the job as RQ would hand it to a first, then a last, attempt
    monkeypatch.setattr(drainer, "get_current_job", lambda: Job)
    set_runtime(rt)
    claims = database_faults.sql_contains("FROM inbox")
    with database_faults.failing(engine, claims, error=lost), \
            pytest.raises(posts.StoreUnavailable):
        drainer.drain_inbox()
    assert redis_client.get(token_key("t", "inbox", INBOX_KEY)) == job_id.encode()
    assert enqueue_drain(rt.queue, "t") is None  # one drain at a time
    Job.retries_left = 0  # the last attempt
    with database_faults.failing(engine, claims, error=lost), \
            pytest.raises(posts.StoreUnavailable) as failure:
        drainer.drain_inbox()
    assert failure.value.__cause__ is None and failure.value.__suppress_context__
    assert "5511912345678" not in str(failure.value)
    assert redis_client.get(token_key("t", "inbox", INBOX_KEY)) is None
    assert enqueue_drain(rt.queue, "t") not in (None, job_id)


def test_a_burst_in_one_second_keeps_its_order_through_the_inbox(
        engine: Engine, redis_client: redis.Redis) -> None:
    """Two messages in Meta's same second: the one the web received first comes first, though
    the drain inserts them in wamid order (the later one's wamid sorts first here)."""
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    ana = {"wa_id": "5511900000001", "user_id": None}
    inbox.add_many(engine, [(body("wamid.Z9", "quero às 15h", **ana), START),
                            (body("wamid.A1", "não, às 16h", **ana),
                             START + timedelta(seconds=1))])
    assert drainer.drain(runtime(engine, redis_client), job_id=None, linger=0) == 2
    with session_scope(engine) as session:
        conversation_id = session.exec(select(Conversation.id)).one()
        assert conversation_id is not None
        assign_positions(session, conversation_id)
        texts = [m.content[0]["text"] for m in session.exec(
            select(Message).order_by(Message.position))]
    assert [t.split("] ")[1] for t in texts] == ["quero às 15h", "não, às 16h"]


def test_the_sweeper_leaves_open_a_session_with_a_message_waiting_in_the_inbox(
        engine: Engine, redis_client: redis.Redis) -> None:
    """A message received 5 s before the session was due, still in the inbox 30 s after: the
    sweep must not close the session, so the message lands in it."""
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    ana = {"wa_id": "5511900000001", "user_id": None}
    rt = runtime(engine, redis_client)
    stores = posts.Stores(engine=engine, settings=rt.settings, queue=rt.queue)
    posts.store_posts(stores, [(body("wamid.S1", "oi", **ana), START)])
    with session_scope(engine) as session:
        first = session.exec(select(Conversation)).one()
    assert first.due_at is not None
    inbox.add_many(engine, [(body("wamid.S2", "sim, confirma", **ana),
                             first.due_at - timedelta(seconds=5))])
    clock = FrozenClock(first.due_at + timedelta(seconds=30))
    previous = set_clock(clock)
    set_runtime(rt)
    try:
        assert sweep_inactive() == 0
        assert drainer.drain(rt, job_id=None, linger=0) == 1
    finally:
        set_clock(previous)
        set_runtime(None)
    with session_scope(engine) as session:
        conversations = list(session.exec(select(Conversation)))
        stored = list(session.exec(select(Message)))
    assert len(conversations) == 1 and conversations[0].status == "open"
    assert {m.conversation_id for m in stored} == {first.id}


def test_a_spill_threshold_no_group_can_reach_is_refused() -> None:
    with pytest.raises(SettingsError, match="WEBHOOK_SPILL_AT"):
        Settings.from_env({"WEBHOOK_SPILL_AT": "500"}, require=False)


def test_a_burst_in_one_post_keeps_its_order_through_the_inbox(
        engine: Engine, redis_client: redis.Redis) -> None:
    """Meta batched two messages of one second in one POST: the group inserts in wamid order
    (the second one's sorts first here), and the customer's order must still hold."""
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    ana = {"wa_id": "5511900000001", "user_id": None}
    inbox.add_many(engine, [
        (two_messages(body("wamid.Z9", "quero às 15h", **ana),
                      body("wamid.A1", "não, às 16h", **ana)), START),
        (body("wamid.M5", "oi", wa_id="5511900000002", user_id=None), START)])
    assert drainer.drain(runtime(engine, redis_client), job_id=None, linger=0) == 2
    with session_scope(engine) as session:
        conversation_id = session.exec(select(Message.conversation_id).where(
            Message.wamid == "wamid.Z9")).one()
        assign_positions(session, conversation_id)
        texts = [m.content[0]["text"].split("] ")[1] for m in session.exec(
            select(Message).where(Message.conversation_id == conversation_id)
            .order_by(Message.position))]
    assert texts == ["quero às 15h", "não, às 16h"]


def test_forgetting_survives_an_inbox_body_too_deep_to_parse(
        engine: Engine, redis_client: redis.Redis) -> None:
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
    ana = {"wa_id": "5511900000001", "user_id": None}
    rt = runtime(engine, redis_client)
    posts.store_posts(posts.Stores(engine=engine, settings=rt.settings, queue=rt.queue),
                        [(body("wamid.D0", "oi", **ana), START)])
    deep = (b'{"a":' * 100_000 + b'"' + PHONE_NUMBER_ID.encode() + b" " + ana["wa_id"].encode()
            + b'"' + b"}" * 100_000)
    inbox.add_many(engine, [(deep, START)])
    with session_scope(engine) as session:
        contact = find_contact(session, 1, ana["wa_id"])
        assert contact is not None
        counts = forget_contact(session, contact, now=START)
    assert counts["inbox_entries"] == 0 and count(engine, InboxEntry) == 1


async def test_unreadable_bodies_spilled_under_load_reach_the_dead_letters_whole(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    """A signed body the web process did not read (it was spilling) is still answered 200, and
    the drain keeps it byte for byte in the dead letters, beside the valid POSTs it stores."""
    client = await tenant_client(aiohttp_client, engine, redis_client, 1)
    unreadable = [b"{not json", b"\xff\xfe\x00 invalid utf-8", b'{"object": "page"}',
                  b"[" * 5000 + b"]" * 5000]
    valid = body("wamid.V1", "oi", wa_id="5511900000001", user_id=None)
    statuses = await asyncio.gather(*(_post(client, raw) for raw in [*unreadable, valid]))
    assert statuses == [200] * 5
    assert count(engine, InboxEntry) == 5
    assert drainer.drain(runtime(engine, redis_client), job_id=None, linger=0) == 5
    assert count(engine, InboxEntry) == 0
    with session_scope(engine) as session:
        letters = sorted(letter.body for letter in session.exec(select(DeadLetter)))
        stored = [m.wamid for m in session.exec(select(Message))]
    assert letters == sorted(unreadable)
    assert stored == ["wamid.V1"]


# --- big POSTs: to the inbox at once, never in front of the small ones -------------------------


def statuses_body(count_: int) -> bytes:
    """One POST of `count_` statuses of sends never made (each changes nothing)."""
    raw = json.loads(status_body("wamid.OUT0"))
    value = raw["entry"][0]["changes"][0]["value"]
    value["statuses"] = [{**value["statuses"][0], "id": f"wamid.OUT{n}"} for n in range(count_)]
    return json.dumps(raw).encode()


async def test_a_big_post_goes_to_the_inbox_at_once_and_the_drain_stores_it(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    """More than WEBHOOK_SPILL_UPDATES updates: answered once the raw body is in the inbox,
    whatever the load; at the threshold, stored before the answer."""
    client = await tenant_client(aiohttp_client, engine, redis_client, 16)
    limit = Settings().webhook_spill_updates
    assert await _post(client, statuses_body(limit)) == 200
    assert count(engine, InboxEntry) == 0
    big = two_messages(body("wamid.BIG1", "oi", wa_id="5511900000001", user_id=None),
                       statuses_body(limit))
    assert await _post(client, big) == 200
    assert count(engine, InboxEntry) == 1 and count(engine, Message) == 0
    assert len(job_ids(redis_client, "inbox")) == 1
    assert drainer.drain(runtime(engine, redis_client), job_id=None, linger=0) == 1
    assert count(engine, InboxEntry) == 0 and count(engine, Message) == 1
    assert len(job_ids(redis_client, "turn")) == 1


async def test_a_body_over_the_small_size_goes_to_the_inbox_unparsed(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    client = await tenant_client(aiohttp_client, engine, redis_client, 16)
    long_text = "tem horário amanhã? " * (SMALL_BODY_BYTES // 20)
    raw = body("wamid.LONG1", long_text, wa_id="5511900000001", user_id=None)
    assert len(raw) > SMALL_BODY_BYTES
    assert await _post(client, raw) == 200
    assert count(engine, InboxEntry) == 1 and count(engine, Message) == 0
    drainer.drain(runtime(engine, redis_client), job_id=None, linger=0)
    with session_scope(engine) as session:
        (stored,) = session.exec(select(Message)).all()
    assert long_text.strip() in stored.content[0]["text"]


async def test_a_small_post_is_answered_while_a_large_body_is_still_being_stored(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A large body is handled beside the groups: while its INSERT into the inbox is held,
    a small POST is stored and answered (no head-of-line blocking; bench/head_of_line.py)."""
    client = await tenant_client(aiohttp_client, engine, redis_client, 16)
    held, release = threading.Event(), threading.Event()
    real_add = inbox.add_many

    def slow_add(engine_: Engine, posts: list[Any]) -> None:
        held.set()
        assert release.wait(10)
        real_add(engine_, posts)

    # the held INSERT must not hold SQLite's lock (a statement event would): before it
    monkeypatch.setattr(inbox, "add_many", slow_add)
    large = asyncio.create_task(_post(client, body(
        "wamid.LONG2", "x" * (SMALL_BODY_BYTES + 1), wa_id="5511900000001", user_id=None)))
    assert await asyncio.to_thread(held.wait, 10)
    small = body("wamid.SMALL1", "oi", wa_id="5511900000002", user_id=None)
    assert await _post(client, small) == 200
    assert not large.done() and count(engine, Message) == 1
    release.set()
    assert await large == 200
    assert count(engine, InboxEntry) == 1


def test_a_negative_big_post_threshold_is_refused() -> None:
    with pytest.raises(SettingsError, match="WEBHOOK_SPILL_UPDATES"):
        Settings.from_env({"WEBHOOK_SPILL_UPDATES": "-1"}, require=False)
