"""A turn's transaction boundaries after issue 43's round-trip cuts, probed where they can
break: a turn's usage rows across a crash, a fence or a lost commit; the job's catalogue rows
against a change made by another process mid-turn; a customer writing mid-turn; two flushes of
one reply's parts. SQLite and PostgreSQL."""

import json
from datetime import date, timedelta
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, func, select

from core import faults
from replay.environment import ReplayEnvironment
from storage import delivery, fences
from storage.appointments import number_of
from storage.db import session_scope
from storage.models import Appointment, HoursException, Message, Outbound, Tenant, ToolCall, Usage
from tests.factories import text_body
from tests.test_outbox import _answered_conversation, _queue_reply
from workers import maintenance, outbox, turns
from workers.outbox import flush_outbox
from workers.processes import InlineWorker


def _post(env: ReplayEnvironment, text: str, n: int) -> None:
    assert env.post_webhook(json.dumps(text_body(text, n)).encode()) == 200


def _count(env: ReplayEnvironment, model: Any) -> int:
    with session_scope(env.engine) as session:
        return int(session.exec(select(func.count()).select_from(model)).one())


def test_a_day_closed_by_another_process_mid_turn_is_not_booked(env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [
        {"tool": "book_appointment", "input": {"service": "corte",
                                               "start": "2026-06-02T14:00"}},
        {"text": "Certo."}])
    closed = iter([True])

    def the_console_closes_the_day() -> None:  # another process: this job's scope unseen
        if next(closed, False):
            with fences.unfenced(), session_scope(env.engine) as session:
                tenant = session.exec(select(Tenant)).one()
                assert tenant.id is not None
                session.add(HoursException(tenant_id=tenant.id, day=date(2026, 6, 2),
                                           hours=[], note="feriado"))

    _post(env, "marca amanhã 14h", 1)
    with faults.meanwhile("before_model_call", the_console_closes_the_day):
        env.drain()
    assert _count(env, Appointment) == 0, "booked on a day closed before the booking ran"


def test_a_move_onto_a_day_closed_by_another_process_mid_turn_is_refused(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [
        {"tool": "book_appointment", "input": {"service": "corte",
                                               "start": "2026-06-02T14:00"}},
        {"text": "Marcado."}])
    _post(env, "marca terça 14h", 1)
    env.drain()
    with session_scope(env.engine) as session:
        booked = session.exec(select(Appointment)).one()
    env.messages_api.script("turn", [
        {"tool": "reschedule_appointment", "input": {"appointment_id": number_of(booked),
                                                     "start": "2026-06-03T14:00"}},
        {"text": "Certo."}])
    closed = iter([True])

    def the_console_closes_the_day() -> None:
        if next(closed, False):
            with fences.unfenced(), session_scope(env.engine) as session:
                session.add(HoursException(tenant_id=booked.tenant_id, day=date(2026, 6, 3),
                                           hours=[], note="feriado"))

    _post(env, "muda pra quarta 14h", 2)
    with faults.meanwhile("before_model_call", the_console_closes_the_day):
        env.drain()
    with session_scope(env.engine) as session:
        starts = [a.start_at for a in session.exec(select(Appointment).where(
            Appointment.status == "booked")).all()]
        moved = session.exec(select(ToolCall).where(
            ToolCall.name == "reschedule_appointment")).one()
    assert moved.is_error, moved.result
    assert len(starts) == 1 and starts[0].day == 2


def test_every_model_call_of_a_turn_crashed_at_its_tool_round_keeps_one_usage_row(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [
        {"tool": "find_available_slots", "input": {"service": "corte", "date": "2026-06-02"}},
        {"text": "Tenho 09:00."}])
    crashes = iter([True])

    def crash_once() -> None:
        if next(crashes, False):
            raise RuntimeError("worker died as its tool round began")

    _post(env, "tem horário amanhã?", 1)
    with faults.meanwhile("before_tool_round", crash_once):
        InlineWorker([env.queue], connection=env.redis).work(burst=True, max_jobs=1)
    assert next(crashes, None) is None, "the turn never reached its tool round"
    env.drain()
    calls = len(env.messages_api.calls)
    assert calls >= 2
    assert _count(env, Usage) == calls, "one usage row per model call, none lost or doubled"


def test_positions_stay_gapless_when_the_customer_writes_mid_turn(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [
        {"tool": "find_available_slots", "input": {"service": "corte", "date": "2026-06-02"}},
        {"text": "Tenho 09:00."}, {"text": "Anotado."}])
    wrote = iter([True])

    def customer_writes() -> None:
        if next(wrote, False):
            _post(env, "e às 10?", 2)

    _post(env, "tem horário amanhã?", 1)
    with faults.meanwhile("before_tool_round", customer_writes):
        env.drain()
    assert next(wrote, None) is None, "the customer never wrote mid-turn"
    env.drain()
    with session_scope(env.engine) as session:
        positions = [p for p in session.exec(select(Message.position).order_by(
            Message.position)).all()]
        unanswered = session.exec(select(func.count()).select_from(Message).where(
            Message.direction == "inbound", Message.answered_at == None)).one()  # noqa: E711
    assert None not in positions
    assert positions == list(range(positions[0], positions[0] + len(positions)))
    assert unanswered == 0
    assert len(env.graph_api.sends) == 1, [s.body for s in env.graph_api.sends]
    assert _count(env, Usage) == len(env.messages_api.calls)


def test_a_second_flush_between_a_claim_and_its_send_never_sends_a_later_part_first(
        env: ReplayEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    conversation_id = _answered_conversation(env)
    _queue_reply(env, conversation_id, ["Primeira parte", "Segunda parte"])
    real_may_send, others = outbox.threads.may_send, iter([True])

    def another_process_flushes(*args: Any) -> bool:  # after the first claim, before its send
        if next(others, False):
            flush_outbox(env.runtime, conversation_id)
        return bool(real_may_send(*args))

    monkeypatch.setattr(outbox.threads, "may_send", another_process_flushes)
    before = len(env.graph_api.accepted)
    flush_outbox(env.runtime, conversation_id)
    assert [s.body["text"]["body"] for s in env.graph_api.accepted[before:]] == [
        "Primeira parte", "Segunda parte"], "each part once, in order"


@pytest.mark.parametrize("failure", ["gateway_503", "transient_131000"])
def test_a_graph_5xx_then_duplicate_flushes_send_each_part_once_in_order(
        env: ReplayEnvironment, failure: str) -> None:
    conversation_id = _answered_conversation(env)
    reply_id = _queue_reply(env, conversation_id, ["Primeira parte", "Segunda parte"])
    before = len(env.graph_api.accepted)
    if failure == "gateway_503":  # Meta took it and a proxy answered: its fate is unknown
        env.graph_api.gateway_error(503)
    else:  # Meta answered an error of its own side: not taken, tried again
        env.graph_api.fail(131000)
    flush_outbox(env.runtime, conversation_id)
    env.clock.advance(timedelta(minutes=10))
    flush_outbox(env.runtime, conversation_id)
    flush_outbox(env.runtime, conversation_id)
    assert [s.body["text"]["body"] for s in env.graph_api.accepted[before:]] == [
        "Primeira parte", "Segunda parte"], "each part reached Meta once, in order"
    with session_scope(env.engine) as session:
        reply = session.get(Message, reply_id)
        parts = session.exec(select(Outbound.status).where(Outbound.message_id == reply_id)
                             .order_by(Outbound.part)).all()
    assert reply is not None and reply.delivery_status == delivery.fold(parts)
    assert reply.delivery_status == ("unknown" if failure == "gateway_503" else "sent")


def test_a_flush_dying_between_send_and_mark_never_resends_and_the_rest_follows_settled(
        env: ReplayEnvironment) -> None:
    conversation_id = _answered_conversation(env)
    reply_id = _queue_reply(env, conversation_id, ["Primeira parte", "Segunda parte"])
    before = len(env.graph_api.accepted)
    dies = iter([True])

    def die_once() -> None:
        if next(dies, False):
            raise RuntimeError("the flush died after Graph took the part")

    with faults.meanwhile("after_send_before_mark", die_once), pytest.raises(RuntimeError):
        flush_outbox(env.runtime, conversation_id)
    flush_outbox(env.runtime, conversation_id)  # another process, while the part is claimed
    assert [s.body["text"]["body"] for s in env.graph_api.accepted[before:]] == [
        "Primeira parte"], "never sent twice; the second part waits behind the first"
    env.clock.advance(maintenance.STALE_SENDING + timedelta(minutes=1))
    assert maintenance.settle_stale_sends(env.engine, now=env.clock.now()) == 1
    flush_outbox(env.runtime, conversation_id)
    assert [s.body["text"]["body"] for s in env.graph_api.accepted[before:]] == [
        "Primeira parte", "Segunda parte"]
    with session_scope(env.engine) as session:
        reply = session.get(Message, reply_id)
    assert reply is not None and reply.delivery_status == "unknown"


def test_a_day_closed_between_two_jobs_is_seen_by_the_next_ones_slots(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"text": "Oi!"}])
    _post(env, "oi", 1)
    env.drain()  # a first job read the catalogue
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).one()
        assert tenant.id is not None
        session.add(HoursException(tenant_id=tenant.id, day=date(2026, 6, 2), hours=[],
                                   note="feriado"))
    env.messages_api.script("turn", [
        {"tool": "find_available_slots", "input": {"service": "corte", "date": "2026-06-02"}},
        {"text": "Nesse dia não abrimos."}])
    _post(env, "tem horário terça?", 2)
    env.drain()
    with session_scope(env.engine) as session:
        result = session.exec(select(ToolCall.result)).one()
    assert "09:00" not in result, result


def test_a_usage_row_whose_commit_was_lost_on_the_way_back_is_not_stored_twice(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"text": "Olá!"}])
    carrying: set[int] = set()
    lost = iter([True])

    def before_flush(session: Session, *_: Any) -> None:
        if any(isinstance(row, Usage) for row in session.new):
            carrying.add(id(session))

    def after_commit(session: Session) -> None:  # committed; the answer never came back
        if id(session) in carrying and next(lost, False):
            raise OperationalError("COMMIT", {}, Exception("server closed the connection"))

    event.listen(Session, "before_flush", before_flush)
    event.listen(Session, "after_commit", after_commit)
    try:
        _post(env, "oi", 1)
        env.drain()
    finally:
        event.remove(Session, "before_flush", before_flush)
        event.remove(Session, "after_commit", after_commit)
    assert list(lost) == [], "the carrying transaction's commit was lost"
    assert _count(env, Usage) == len(env.messages_api.calls) == 1


@pytest.mark.parametrize("database_url", [pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)  # SQLite's checks hold the write lock: the POST waits
def test_a_message_stored_while_the_turn_start_reads_is_answered_once_in_order(
        env: ReplayEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    env.messages_api.script("turn", [{"text": "Oi! Às 10 tenho."}])
    real, writes = turns.history_after_summary, iter([True])

    def customer_writes(*args: Any) -> Any:  # between the pending read and the placing
        if next(writes, False):
            _post(env, "e às 10?", 2)
        return real(*args)

    monkeypatch.setattr(turns, "history_after_summary", customer_writes)
    _post(env, "tem horário amanhã?", 1)
    env.drain()
    texts = [b.get("text") for m in env.messages_api.calls[0].request["messages"]
             for b in m["content"] if isinstance(b, dict)]
    said = " | ".join(str(t) for t in texts)
    assert 0 <= said.find("tem horário amanhã?") < said.find("e às 10?"), said
    with session_scope(env.engine) as session:
        rows = session.exec(select(Message).order_by(Message.position)).all()
    assert [m.position for m in rows] == list(range(1, len(rows) + 1))
    assert all(m.answered_at is not None for m in rows if m.direction == "inbound")
    assert len(env.graph_api.sends) == 1
