"""Sessions: the inactivity sweeper, per-tenant timeouts, the 24-hour window, retention and the
reconciler. Real worker, real Redis when reachable, SQLite and PostgreSQL.
"""

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import select

from intake.stamp import stamp, unstamp
from replay.environment import ReplayEnvironment
from replay.runner import run_scenario
from storage.db import session_scope
from storage.models import Conversation, Message, Outbound, ToolCall
from tests.conftest import START
from tests.factories import TENANT, scenario, text_body
from workers.facts import customer_text_length
from workers.maintenance import purge_expired, reconcile_pending, run_once_per_period
from workers.sweeper import close_due, find_due


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    yield environment
    environment.close()


def _post(env: ReplayEnvironment, text: str, n: int, **kwargs: Any) -> None:
    """The customer sends it now (Meta's timestamp = the product's clock) unless told."""
    kwargs.setdefault("sent_at", env.clock.now())
    assert env.post_webhook(json.dumps(text_body(text, n, **kwargs)).encode()) == 200


def _conversations(env: ReplayEnvironment) -> list[Conversation]:
    with session_scope(env.engine) as session:
        return list(session.exec(select(Conversation).order_by(Conversation.id)).all())


def test_after_25_hours_the_sweeper_closes_and_the_next_message_starts_clean(
        database_url: str | None, redis_url: str | None) -> None:
    result = run_scenario(scenario([
        {"model": [{"text": "Oi! Tenho 14h amanhã."}]},
        {"webhook": text_body("oi, tem horário amanhã?", 1)},
        {"drain": True},
        {"advance": "25h"},
        {"sweep": True},
        {"expect": {"conversation": {"status": "closed", "count": 1}}},
        {"model": [{"text": "Olá de novo!"}]},
        {"webhook": text_body("voltei", 2, sent_at=START + timedelta(hours=25))},
        {"drain": True},
        {"expect": {"conversation": {"status": "open", "count": 2}, "sent_count": 1}},
    ]), database_url=database_url, redis_url=redis_url)
    assert result.passed, result.failures


def test_a_new_session_sends_no_summary_and_no_earlier_messages(env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    env.messages_api.script("turn", [{"text": "Oi!"}, {"text": "Olá de novo!"}])
    _post(env, "primeira conversa", 1)
    env.drain()
    with session_scope(env.engine) as session:  # pretend it had been compacted
        first = session.exec(select(Conversation)).one()
        first.summary, first.context_block = "Old record.", "<customer_context>Old record."
        session.add(first)
    env.clock.advance(timedelta(hours=25))  # no sweep: the message itself opens a new session
    _post(env, "segunda conversa", 2)
    env.drain()
    request = env.messages_api.calls[-1].request
    texts = [b["text"] for m in request["messages"] for b in m["content"] if "text" in b]
    assert len(texts) == 1 and "segunda conversa" in texts[0]
    block = request["system"][1]["text"]
    assert "Old record" not in block and "summary" not in block, "a fresh session: no summary"
    assert "whatsapp_profile_name: Ana Teste" in block
    assert [c.status for c in _conversations(env)] == ["closed", "open"]


@pytest.mark.parametrize("minutes, closed", [(29, False), (31, True)])
def test_a_30_minute_tenant_closes_after_31_minutes_not_29(
        env: ReplayEnvironment, minutes: int, closed: bool) -> None:
    env.add_tenant({**TENANT, "inactivity_timeout_minutes": 30})
    env.messages_api.script("turn", [{"text": "Oi!"}])
    _post(env, "oi", 1)
    env.drain()
    env.clock.advance(timedelta(minutes=minutes))
    assert env.sweep() == int(closed)
    assert _conversations(env)[0].status == ("closed" if closed else "open")


def test_a_new_timeout_applies_to_open_conversations(env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    env.messages_api.script("turn", [{"text": "Oi!"}])
    _post(env, "oi", 1)
    env.drain()
    env.clock.advance(timedelta(minutes=45))
    assert env.sweep() == 0
    env.add_tenant({**TENANT, "inactivity_timeout_minutes": 30})  # `wagent tenant update`
    assert env.sweep() == 1


def test_a_turn_25_hours_late_sends_nothing_and_records_why(env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    _post(env, "oi", 1)
    env.clock.advance(timedelta(hours=25))
    env.drain()
    assert env.graph_api.sends == [] and env.messages_api.calls == []
    with session_scope(env.engine) as session:
        inbound = session.exec(select(Message).where(Message.direction == "inbound")).one()
        assert inbound.answered_at is not None
        assert "24 hours" in (inbound.status_reason or "")


def test_outside_the_window_the_followup_template_goes_instead(env: ReplayEnvironment) -> None:
    env.add_tenant({**TENANT, "followup_template": "retorno_atendimento"})
    _post(env, "oi", 1)
    env.clock.advance(timedelta(hours=25))
    env.drain()
    (send,) = env.graph_api.sends
    assert send.body["type"] == "template"
    assert send.body["template"]["name"] == "retorno_atendimento"
    assert send.body["template"]["language"] == {"code": "pt_BR"}


def test_a_late_redelivery_is_stamped_late_and_answered_within_its_window(
        env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    env.messages_api.script("turn", [{"text": "Desculpe a demora!"}])
    sent = env.clock.now()
    env.clock.advance(timedelta(hours=3))  # Meta redelivers 3 h after the customer sent it
    _post(env, "tem horário hoje?", 1, sent_at=sent)
    env.drain()
    text = env.messages_api.calls[0].request["messages"][0]["content"][0]["text"]
    assert text.startswith("[Mon 2026-06-01 13:00, delivered late: sent Mon 10:00]")
    assert len(env.graph_api.sends) == 1


def test_a_late_stamp_names_the_day_when_it_is_not_the_day_received(
        env: ReplayEnvironment) -> None:
    """"sent Mon 10:00" for a message six months old would read as this morning."""
    env.add_tenant(TENANT)
    env.messages_api.script("turn", [{"text": "Desculpe a demora!"}])
    _post(env, "ainda tem horário?", 1, sent_at=env.clock.now() - timedelta(hours=20))
    _post(env, "oi, lembra de mim?", 2, sent_at=env.clock.now() - timedelta(days=183))
    env.drain()
    with session_scope(env.engine) as session:
        texts = [m.content[0]["text"] for m in session.exec(select(Message).where(
            Message.direction == "inbound").order_by(Message.id))]
    assert texts == [
        "[Mon 2026-06-01 10:00, delivered late: sent Sun 2026-05-31 14:00] ainda tem horário?",
        "[Mon 2026-06-01 10:00, delivered late: sent Sun 2025-11-30 10:00] oi, lembra de mim?"]
    assert stamp("oi", START, "America/Sao_Paulo", sent_at=START - timedelta(hours=2)) == \
        "[Mon 2026-06-01 10:00, delivered late: sent Mon 08:00] oi", "the same day: no date"
    # the stamp's readers still find where the customer's words begin
    assert unstamp(texts[1]) == "oi, lembra de mim?"
    rows = [Message(tenant_id=1, conversation_id=1, role="user", direction="inbound",
                    content=[{"type": "text", "text": t}], received_at=START) for t in texts]
    assert customer_text_length(rows) == len("ainda tem horário?") + len("oi, lembra de mim?")


def test_a_redelivery_older_than_the_window_is_not_answered(env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    sent = env.clock.now()
    env.clock.advance(timedelta(hours=30))
    _post(env, "oi", 1, sent_at=sent)  # sent 30 h ago, delivered now
    env.drain()
    assert env.graph_api.sends == [] and env.messages_api.calls == []


def test_a_131047_status_marks_the_message_failed(env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    env.messages_api.script("turn", [{"text": "Oi!"}])
    _post(env, "oi", 1)
    env.drain()
    wamid = env.graph_api.sends[0].wamid
    status = {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [
        {"field": "messages", "value": {"messaging_product": "whatsapp", "metadata": {
            "phone_number_id": TENANT["phone_number_id"]}, "statuses": [{
                "id": wamid, "status": "failed", "timestamp": "1780320000",
                "recipient_id": "5511999990001", "errors": [{
                    "code": 131047, "title": "Re-engagement message",
                    "error_data": {"details": "more than 24 hours"}}]}]}}]}]}
    assert env.post_webhook(json.dumps(status).encode()) == 200
    with session_scope(env.engine) as session:
        outbound = session.exec(select(Outbound)).one()
        reply = session.get(Message, outbound.message_id)
        assert (outbound.status, outbound.error_code) == ("failed", 131047)
        assert reply is not None and reply.delivery_status == "failed"


def test_with_redis_flushed_the_reconciler_gets_the_message_answered_once(
        env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    env.messages_api.script("turn", [{"text": "Oi! Como posso ajudar?"}])
    _post(env, "oi", 1)
    for key in env.redis.scan_iter(f"*{env.namespace}*"):  # Redis lost everything
        env.redis.delete(key)
    env.drain()
    assert env.graph_api.sends == []
    assert reconcile_pending(env.runtime, now=env.clock.now()) == 0, "not yet overdue"
    env.clock.advance(timedelta(minutes=3))
    assert reconcile_pending(env.runtime, now=env.clock.now()) == 1
    assert reconcile_pending(env.runtime, now=env.clock.now()) == 0  # coalesced: no 2nd job
    env.drain()
    assert len(env.graph_api.sends) == 1
    assert reconcile_pending(env.runtime, now=env.clock.now()) == 0
    env.drain()
    assert len(env.graph_api.sends) == 1


def test_two_schedulers_at_once_close_each_conversation_once(env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    env.messages_api.script("turn", [{"text": "Oi!"}] * 30)
    for n in range(30):
        _post(env, "oi", n, who=(f"55119999{n:05d}", f"BR.{n:019d}"))
    env.drain()
    env.clock.advance(timedelta(hours=25))
    totals: list[int] = []
    threads = [threading.Thread(target=lambda: totals.append(close_due(
        env.engine, now=env.clock.now()))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(totals) == 30
    assert all(c.status == "closed" for c in _conversations(env))


def test_a_periodic_job_runs_once_per_period(env: ReplayEnvironment) -> None:
    runs: list[int] = []
    for _ in range(3):
        run_once_per_period(env.runtime, "sweep", period_seconds=300,
                            work=lambda: runs.append(1) or 1)
    env.clock.advance(timedelta(minutes=5))
    run_once_per_period(env.runtime, "sweep", period_seconds=300, work=lambda: runs.append(1) or 1)
    assert len(runs) == 2


def test_the_sweeper_skips_a_conversation_whose_turn_is_running(env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    env.messages_api.script("turn", [{"text": "Oi!"}])
    _post(env, "oi", 1)
    env.drain()
    env.clock.advance(timedelta(hours=25))
    assert close_due(env.engine, now=env.clock.now(), is_busy=lambda _cid: True) == 0
    assert close_due(env.engine, now=env.clock.now()) == 1


def test_nothing_due_means_nothing_read(env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    env.messages_api.script("turn", [{"text": "Oi!"}])
    _post(env, "oi", 1)
    env.drain()
    with session_scope(env.engine) as session:
        assert find_due(session, now=env.clock.now()) == []
        assert find_due(session, now=env.clock.now() + timedelta(hours=24, seconds=1)) == [1]


def test_retention_purges_old_closed_conversations_and_keeps_appointments(
        env: ReplayEnvironment) -> None:
    env.add_tenant({**TENANT, "retention_days": 30})
    env.messages_api.script("turn", [
        {"tool": "book_appointment", "input": {"service": "corte",
                                               "start": "2026-06-02T14:00"}},
        {"text": "Marcado!"}])
    _post(env, "marca amanhã 14h", 1)
    env.drain()
    env.clock.advance(timedelta(hours=25))
    env.sweep()
    assert purge_expired(env.engine, now=env.clock.now()) == 0, "closed, not yet expired"
    env.clock.advance(timedelta(days=31))
    assert purge_expired(env.engine, now=env.clock.now()) == 1
    assert purge_expired(env.engine, now=env.clock.now()) == 0
    with session_scope(env.engine) as session:
        assert session.exec(select(Message)).all() == []
        assert session.exec(select(ToolCall)).all() == []
        conversation = session.exec(select(Conversation)).one()
        assert conversation.purged_at is not None and conversation.summary == ""
        from storage.models import Appointment
        assert len(session.exec(select(Appointment)).all()) == 1


def test_a_purged_message_redelivered_is_not_answered_again(env: ReplayEnvironment) -> None:
    env.add_tenant({**TENANT, "retention_days": 1})
    env.messages_api.script("turn", [{"text": "Oi!"}])
    body = json.dumps(text_body("oi", 1, sent_at=env.clock.now())).encode()
    assert env.post_webhook(body) == 200
    env.drain()
    env.clock.advance(timedelta(hours=25))
    env.sweep()
    env.clock.advance(timedelta(days=2))
    assert purge_expired(env.engine, now=env.clock.now()) == 1
    assert env.post_webhook(body) == 200
    env.drain()
    assert len(env.graph_api.sends) == 1
    with session_scope(env.engine) as session:
        assert session.exec(select(Message)).all() == []
