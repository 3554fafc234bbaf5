"""What the breaker found, pinned down: crashes mid-round, a model that misbehaves, sends that
keep failing. Each test reproduces the failure first described in its name.
"""

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import select

from agent.loop import run_tool_loop
from core import faults
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import Appointment, Message, Outbound
from tests.conftest import START
from tests.factories import TENANT, text_body
from workers.maintenance import reconcile_pending
from workers.processes import InlineWorker


@pytest.fixture
def env(redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, redis_url=redis_url)
    environment.add_tenant(TENANT)
    yield environment
    environment.close()


def _post(env: ReplayEnvironment, text: str, n: int, sent_at: Any = None) -> None:
    body = text_body(text, n, sent_at=sent_at or env.clock.now())
    assert env.post_webhook(json.dumps(body).encode()) == 200


def test_a_crash_between_a_tool_use_and_its_results_with_a_message_in_between_is_repaired(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [
        {"tool": "book_appointment", "input": {"service": "corte",
                                               "start": "2026-06-02T14:00"}},
        {"text": "Marcado: terça 14:00 com a Júlia."}])
    crashes = iter([True])

    def crash_once() -> None:
        if next(crashes, False):
            raise RuntimeError("worker died while storing the tool results")

    _post(env, "marca amanhã 14h", 1)
    with faults.meanwhile("before_tool_round", crash_once):
        InlineWorker([env.queue], connection=env.redis).work(burst=True, max_jobs=1)
    assert list(crashes) == [], "the worker died between the tool and its results"
    env.clock.advance(timedelta(minutes=2))
    _post(env, "alô?", 2)  # the customer writes before RQ retries the turn
    env.drain()
    assert env.messages_api.api_errors == 0
    sends = [s.body["text"]["body"] for s in env.graph_api.sends]
    assert sends == ["Marcado: terça 14:00 com a Júlia."]
    with session_scope(env.engine) as session:
        assert len(session.exec(select(Appointment)).all()) == 1
        pending = session.exec(select(Message).where(Message.direction == "inbound",
                                                     Message.answered_at == None)).all()  # noqa: E711
        assert pending == []


def test_the_context_window_exceeded_twice_gets_one_apology(env: ReplayEnvironment) -> None:
    exceeded = {"content": [], "stop_reason": "model_context_window_exceeded"}
    env.messages_api.script("turn", [exceeded, exceeded, {"text": "Oi!"}])
    _post(env, "oi", 1)
    env.drain()
    assert [s.body["text"]["body"] for s in env.graph_api.sends] == [
        "Desculpe, estou com uma instabilidade agora e não consegui responder. Pode me mandar "
        "a mensagem de novo daqui a pouco?"]
    _post(env, "oi de novo", 2)
    env.drain()
    assert env.graph_api.sends[-1].body["text"]["body"] == "Oi!"


def test_a_burst_takes_the_order_the_customer_sent_it_in(env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"text": "Anotado."}])
    first = env.clock.now()
    _post(env, "amanhã às 14h", 2, sent_at=first + timedelta(seconds=5))  # arrives first
    _post(env, "quero marcar um corte", 1, sent_at=first)
    env.drain()
    texts = [b["text"] for b in env.messages_api.calls[0].request["messages"][0]["content"]]
    assert [t.split("] ", 1)[1] for t in texts] == ["quero marcar um corte", "amanhã às 14h"]


@pytest.mark.parametrize("bad_input", [["corte"], "corte às 14h", 42])
def test_a_tool_call_with_a_non_object_input_never_poisons_the_history(
        env: ReplayEnvironment, bad_input: Any) -> None:
    env.messages_api.script("turn", [
        {"content": [{"type": "tool_use", "id": "toolu_bad", "name": "book_appointment",
                      "input": bad_input}], "stop_reason": "tool_use"},
        {"text": "Desculpe, qual serviço?"}, {"text": "Temos corte."}])
    _post(env, "marca", 1)
    env.drain()
    _post(env, "corte", 2)
    env.drain()
    assert env.messages_api.api_errors == 0
    assert [s.body["text"]["body"] for s in env.graph_api.sends] == [
        "Desculpe, qual serviço?", "Temos corte."]


def test_a_send_left_claimed_by_a_crash_is_settled_as_unknown_never_resent(
        env: ReplayEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    env.messages_api.script("turn", [{"text": "Oi!"}])

    def die(*args: Any, **kwargs: Any) -> str:
        raise SystemExit("worker killed during the Graph call")

    # the worker dies inside its Graph call, before the double sees it: no seam in between
    monkeypatch.setattr(env.runtime.graph, "send_text", die)
    _post(env, "oi", 1)
    InlineWorker([env.queue], connection=env.redis).work(burst=True, max_jobs=1)
    monkeypatch.undo()
    with session_scope(env.engine) as session:
        assert session.exec(select(Outbound)).one().status == "sending"
    env.clock.advance(timedelta(minutes=11))
    reconcile_pending(env.runtime, now=env.clock.now())
    env.drain()
    with session_scope(env.engine) as session:
        (row,) = session.exec(select(Outbound)).all()
        assert row.status == "unknown" and "may not have gone out" in (row.error_reason or "")
    assert env.graph_api.sends == []


def test_graph_rate_limits_back_off_and_give_up_within_a_bound(env: ReplayEnvironment) -> None:
    env.graph_api.fail(130429, times=100)
    env.messages_api.script("turn", [{"text": "Oi!"}])
    _post(env, "oi", 1)
    env.drain()
    attempts_at = [env.clock.now()]
    for _ in range(60):  # bounded: 60 hours of hourly checks at most
        env.clock.advance(timedelta(minutes=30))
        before = len(env.graph_api.sends)
        env.drain()
        if len(env.graph_api.sends) > before:
            attempts_at.append(env.clock.now())
    gaps = [b - a for a, b in zip(attempts_at, attempts_at[1:], strict=False)]
    assert len(env.graph_api.sends) == 8, "eight tries, then it gives up"
    assert gaps == sorted(gaps), "the gaps grow"
    with session_scope(env.engine) as session:
        row = session.exec(select(Outbound)).one()
        assert row.status == "failed" and "gave up" in (row.error_reason or "")


def test_when_a_part_fails_for_good_the_rest_of_the_reply_is_not_sent_later(
        env: ReplayEnvironment) -> None:
    long_reply = "\n\n".join(f"Parágrafo {i}: " + "texto " * 120 for i in range(12))
    env.graph_api.fail(131026, times=1)  # undeliverable: terminal for this message
    env.messages_api.script("turn", [{"text": long_reply}, {"text": "Nova resposta."}])
    _post(env, "me explica tudo", 1)
    env.drain()
    env.clock.advance(timedelta(hours=3))
    _post(env, "oi?", 2)
    env.drain()
    assert [s.body["text"]["body"] for s in env.graph_api.sends if s.wamid] == [
        "Nova resposta."]
    with session_scope(env.engine) as session:
        statuses = [r.status for r in session.exec(select(Outbound).order_by(Outbound.id))]
    assert statuses[0] == "failed" and set(statuses[1:-1]) == {"failed"}


class _JobTimeout(Exception):
    pass


def test_the_jobs_timeout_is_not_swallowed_by_the_tool_loop() -> None:
    def create(**_: Any) -> Any:
        from types import SimpleNamespace
        return SimpleNamespace(stop_reason="tool_use", content=[
            {"type": "tool_use", "id": "t1", "name": "slow", "input": {}}],
            usage=None, model="m")

    def slow_tool(_: Any) -> tuple[str, bool]:
        raise _JobTimeout("job exceeded its timeout")

    class Hooks:
        def on_response(self, response: Any) -> None: ...
        def on_assistant(self, content: Any) -> None: ...
        def tool_round(self, run: Any) -> Any:
            return run()

    with pytest.raises(_JobTimeout):
        run_tool_loop(create, request_for=lambda messages: {"messages": messages},
                      messages=[{"role": "user", "content": [{"type": "text", "text": "x"}]}],
                      execute=slow_tool, hooks=Hooks(), max_rounds=3, fatal=(_JobTimeout,))


def test_an_expired_token_pauses_the_tenant_and_nothing_is_lost(
        env: ReplayEnvironment) -> None:
    from storage.models import Tenant
    from storage.tenants import resume_sending

    env.graph_api.fail(190, times=1)
    env.messages_api.script("turn", [{"text": "Oi!"}, {"text": "Tudo bem?"}])
    _post(env, "oi", 1)
    env.drain()
    _post(env, "alô", 2)
    env.drain()
    assert [s.status for s in env.graph_api.sends] == [401], "one try, then sending stops"
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).one()
        assert "access token" in tenant.sending_paused_reason
        assert [r.status for r in session.exec(select(Outbound))] == ["pending", "pending"]
        waiting = resume_sending(session, tenant.id or 0)
    assert waiting == [1]
    from storage.jobs import enqueue_turn
    enqueue_turn(env.queue, env.namespace, 1)
    env.drain()
    assert [s.body["text"]["body"] for s in env.graph_api.sends if s.wamid] == ["Oi!",
                                                                                 "Tudo bem?"]


def test_a_message_arriving_mid_turn_is_folded_into_the_answer(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [
        {"tool": "list_services", "input": {}},
        {"text": "Temos corte, e sim, aceitamos pix."}])
    posted = iter([True])

    def customer_writes() -> None:
        if next(posted, False):  # the customer writes again while the tool round ends
            _post(env, "e vocês aceitam pix?", 2)

    _post(env, "quais serviços vocês têm?", 1)
    with faults.meanwhile("before_tool_round", customer_writes):
        env.drain()
    second_call = env.messages_api.calls[1].request["messages"]
    assert [b["type"] for b in second_call[-1]["content"]] == ["tool_result", "text"]
    assert "pix" in second_call[-1]["content"][1]["text"]
    assert [s.body["text"]["body"] for s in env.graph_api.sends] == [
        "Temos corte, e sim, aceitamos pix."]
    assert len(env.messages_api.calls) == 2, "no second turn for the folded message"
    with session_scope(env.engine) as session:
        pending = session.exec(select(Message).where(Message.direction == "inbound",
                                                     Message.answered_at == None)).all()  # noqa: E711
        assert pending == []


def test_a_debounce_lets_a_burst_settle_into_one_turn(redis_url: str | None) -> None:
    environment = ReplayEnvironment(start=START, redis_url=redis_url, turn_debounce_seconds=2)
    try:
        environment.add_tenant(TENANT)
        environment.messages_api.script("turn", [{"text": "Oi! Temos sim."}])
        _post(environment, "oi", 1)
        environment.drain()
        assert environment.messages_api.calls == [], "not due yet"
        environment.clock.advance(timedelta(seconds=1))
        _post(environment, "tem horário amanhã?", 2)
        environment.clock.advance(timedelta(seconds=2))
        environment.drain()
        assert len(environment.messages_api.calls) == 1
        assert len(environment.messages_api.calls[0].request["messages"][0]["content"]) == 2
        assert len(environment.graph_api.sends) == 1
    finally:
        environment.close()


def test_a_turn_whose_messages_were_answered_meanwhile_sends_nothing(
        env: ReplayEnvironment) -> None:
    from storage.messages import mark_answered
    from workers.turns import _finish, _load

    env.messages_api.script("turn", [{"text": "Oi!"}])
    _post(env, "oi", 1)
    env.drain()
    state = _load(env.runtime, 1)
    assert state is not None
    with session_scope(env.engine) as session:  # all answered by the first worker
        assert mark_answered(session, 1, up_to_position=10, now=env.clock.now()) == 0
    assert _finish(env.runtime, state, "Oi de novo!", up_to_position=1) is False
    with session_scope(env.engine) as session:
        assert len(session.exec(select(Outbound)).all()) == 1


def test_two_tenants_with_the_same_customer_number_never_see_each_other(
        env: ReplayEnvironment) -> None:
    other = {**TENANT, "phone_number_id": "200000000000002", "name": "Clínica Exemplo"}
    env.add_tenant(other)
    env.messages_api.script("turn", [
        {"tool": "book_appointment", "input": {"service": "corte",
                                               "start": "2026-06-02T14:00"}},
        {"text": "Marcado no salão."},
        {"tool": "list_my_appointments", "input": {}},
        {"tool": "cancel_appointment", "input": {"appointment_id": 1}},
        {"text": "Você não tem horários aqui."}])
    _post(env, "marca amanhã 14h", 1)
    env.drain()
    body = text_body("quais meus horários? cancela o 1", 2, sent_at=env.clock.now(),
                     phone_number_id="200000000000002")
    assert env.post_webhook(json.dumps(body).encode()) == 200
    env.drain()
    results = [b for c in env.messages_api.calls[3:4] for m in c.request["messages"]
               for b in m["content"] if b.get("type") == "tool_result"]
    assert any("no upcoming appointments" in str(b["content"]) for b in results)
    second_tenant_request = env.messages_api.calls[-1].request
    assert "Marcado no salão" not in json.dumps(second_tenant_request, ensure_ascii=False)
    with session_scope(env.engine) as session:
        (appointment,) = session.exec(select(Appointment)).all()
        assert appointment.status == "booked" and appointment.tenant_id == 1
        from storage.models import Contact, Conversation
        contacts = session.exec(select(Contact)).all()
        assert sorted(c.tenant_id for c in contacts) == [1, 2]
        assert len(session.exec(select(Conversation)).all()) == 2
