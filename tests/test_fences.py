"""A turn that lost its conversation's lock can neither write nor send (storage/fences.py), and
the lock itself is short and renewed while a job runs (workers/jobs.held_lock). Real worker,
real Redis when reachable, SQLite and PostgreSQL."""

import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, text
from sqlmodel import func, select
from structlog.testing import capture_logs

from core import faults
from core.settings import Settings
from replay.environment import ReplayEnvironment
from storage import fences
from storage.db import session_scope
from storage.errors import TurnFenced
from storage.jobs import enqueue_turn
from storage.keys import lock_key
from storage.models import Appointment, Contact, Conversation, Message, Outbound, Tenant, Usage
from tests.conftest import START
from tests.factories import text_body
from workers.jobs import held_lock


def test_a_turn_whose_lock_another_turn_took_writes_nothing_more_and_sends_nothing(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [
        {"tool": "book_appointment", "input": {"service": "corte",
                                               "start": "2026-06-02T14:00"}},
        {"text": "Marcado: terça 14:00 com a Júlia."}])
    starved = iter([True])

    def starved_past_the_lock() -> None:
        if next(starved, False):  # while this horse waited for CPU, another turn took over
            with fences.unfenced(), session_scope(env.engine) as session:
                fences.take(session, 1)

    # between the tool_use's store and the tool round's transaction (workers/turns.py
    # `tool_round`), which checks the fence before the tool runs (issue 40 item 2)
    assert env.post_webhook(json.dumps(text_body("marca amanhã às 14h", 1)).encode()) == 200
    with capture_logs() as logs, faults.meanwhile("before_tool_round", starved_past_the_lock):
        env.drain()
    assert [e["kind"] for e in logs if e["event"] == "job_fenced_out"] == ["turn"]

    with session_scope(env.engine) as session:
        assert session.exec(select(func.count()).select_from(Appointment)).one() == 0
        assert session.exec(select(func.count()).select_from(Outbound)).one() == 0
        assert session.exec(select(func.count()).select_from(Usage)).one() == 1, \
            "the call it made is still billed and recorded"
        pending = session.exec(select(Message).where(Message.direction == "inbound")).one()
        assert pending.answered_at is None
    assert env.graph_api.sends == []

    enqueue_turn(env.queue, env.namespace, 1)  # the turn holding the lock now
    env.drain()
    assert [s.body["text"]["body"] for s in env.graph_api.sends] == [
        "Marcado: terça 14:00 com a Júlia."]
    assert env.messages_api.api_errors == 0
    with session_scope(env.engine) as session:
        assert session.exec(select(func.count()).select_from(Appointment)).one() == 1


def _conversation(engine: Engine) -> int:
    with session_scope(engine) as session:
        tenant = Tenant(phone_number_id="109876543210987", name="Salão", created_at=START)
        session.add(tenant)
        session.flush()
        contact = Contact(tenant_id=tenant.id or 0, wa_id="5511999990001", created_at=START)
        session.add(contact)
        session.flush()
        conversation = Conversation(tenant_id=tenant.id or 0, contact_id=contact.id or 0,
                                    last_activity_at=START, due_at=START, opened_at=START)
        session.add(conversation)
        session.flush()
        return int(conversation.id or 0)


def test_taking_the_fence_waits_for_an_open_transaction_of_the_old_turn_then_refuses_it(
        engine: Engine) -> None:
    conversation_id = _conversation(engine)
    with session_scope(engine) as session:
        old = fences.take(session, conversation_id)
    assert old == 1
    in_transaction, commit = threading.Event(), threading.Event()
    taken: list[int | None] = []

    def old_turn() -> None:
        with fences.fenced(conversation_id, 1), session_scope(engine) as session:
            in_transaction.set()  # past its check
            commit.wait(10)
            row = session.get(Conversation, conversation_id)
            assert row is not None
            row.last_input_tokens = 777
            session.add(row)

    def new_turn() -> None:
        with session_scope(engine) as session:
            taken.append(fences.take(session, conversation_id))

    writer = threading.Thread(target=old_turn)
    writer.start()
    assert in_transaction.wait(10)
    taker = threading.Thread(target=new_turn)
    taker.start()
    taker.join(timeout=0.5)
    assert taker.is_alive(), "the new turn waits for the old turn's open transaction"
    commit.set()
    writer.join(10)
    taker.join(10)
    assert taken == [2]
    with pytest.raises(TurnFenced):
        with fences.fenced(conversation_id, 1), session_scope(engine) as session:
            row = session.get(Conversation, conversation_id)
            assert row is not None
            row.last_input_tokens = 999
            session.add(row)
    with session_scope(engine) as session:
        row = session.get(Conversation, conversation_id)
        assert row is not None and row.last_input_tokens == 777
    with fences.fenced(conversation_id, 2), session_scope(engine) as session:
        assert session.get(Conversation, conversation_id) is not None


def test_the_lock_outlives_its_ttl_while_renewed_and_a_lost_one_is_logged(
        redis_client: redis.Redis) -> None:
    runtime: Any = SimpleNamespace(redis=redis_client, settings=Settings(
        redis_prefix="fence-test", turn_lock_timeout=1))  # a 1 s lock, renewed every 1/3 s
    key = lock_key("fence-test", "turn", 5)
    with held_lock(runtime, "turn", 5, blocking_timeout=0) as held:
        assert held
        time.sleep(1.5)  # past the TTL: only the renewals keep it
        assert 0 < redis_client.pttl(key) <= 1000
        with held_lock(runtime, "turn", 5, blocking_timeout=0) as second:
            assert not second, "one job at a time"
    assert redis_client.exists(key) == 0, "released at the end"

    with capture_logs() as logs:
        with held_lock(runtime, "turn", 6, blocking_timeout=0) as held:
            redis_client.set(lock_key("fence-test", "turn", 6), "another job", ex=5)
            time.sleep(0.5)  # a renewal finds it taken
    assert [e["event"] for e in logs].count("job_lock_lost") == 2  # renewal, then release
    assert redis_client.get(lock_key("fence-test", "turn", 6)) == b"another job"


def test_a_fenced_read_takes_no_transaction_id_and_holds_the_fence_key(engine: Engine) -> None:
    """Issue 43: the check holds a shared advisory lock, not a row lock, so a read-only
    transaction of a turn commits without a transaction id (no WAL flush to wait for)."""
    conversation_id = _conversation(engine)
    with session_scope(engine) as session:
        fence = fences.take(session, conversation_id)
    assert fence == 1
    with fences.fenced(conversation_id, 1), session_scope(engine) as session:
        assert session.get(Conversation, conversation_id) is not None
        if engine.dialect.name == "postgresql":
            assert session.exec(text("SELECT txid_current_if_assigned()")).scalar() is None
            held = session.exec(text(
                "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND classid = :lock "
                "AND objid = :key AND pid = pg_backend_pid()"),
                params={"lock": fences.FENCE_LOCK, "key": conversation_id}).scalars().all()
            assert held == ["ShareLock"]
