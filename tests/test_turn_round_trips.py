"""What a turn costs the database (issue 43 item 1), and the usage rows that ride its
transactions (workers/turns.py `_StoreHooks.scope`): a later 3-call turn stays under the
statements and commits counted after the round trips were cut, and a call's usage row is
stored even when the transaction that was to carry it is fenced out. Real worker, SQLite and
PostgreSQL."""

import json
from typing import Any

import pytest
from sqlalchemy import event
from sqlmodel import col, func, select

from replay.environment import ReplayEnvironment
from storage import fences
from storage.db import session_scope
from storage.models import Appointment, Message, Outbound, ToolCall, Usage
from tests.factories import text_body
from workers import turns

# counted on a later turn (bench/round_trips.py's three calls, the worker only) once the
# turn's own round trips were cut; before: 154 statements on SQLite (its BEGINs are
# statements), 130 on PostgreSQL, 23 commits on both; after round 1: 59 on PostgreSQL, 11
# commits; after a tool round became one transaction (workers/turns.py `tool_round`): 9; a
# booking reads the catalogue again in its own transaction (job_catalogue.forget): +2 on
# SQLite; the tenant row in the catalogue's round trip and `take` in one: 40 on PostgreSQL
# (counted as the driver's round trips: the fence checks, `take`, the catalogue and the
# booking's locks each send several statements in one)
MAX_STATEMENTS = {"sqlite": 60, "postgresql": 40}
MAX_COMMITS = 9


def _three_calls(hour: str) -> list[dict[str, Any]]:
    return [{"tool": "find_available_slots", "input": {"service": "corte",
                                                       "date": "2026-06-02"}},
            {"tool": "book_appointment", "input": {"service": "corte",
                                                   "start": f"2026-06-02T{hour}"}},
            {"text": f"Marcado: {hour} com a Júlia."}]


def _turn(env: ReplayEnvironment, n: int, hour: str) -> dict[str, int]:
    """Post customer message `n`, drain its turn; the worker's statements and commits."""
    env.messages_api.script("turn", _three_calls(hour))
    assert env.post_webhook(json.dumps(text_body(f"quero corte terça {hour}", n)).encode()) \
        == 200
    counts = {"statements": 0, "commits": 0}

    def statement(*_: Any) -> None:
        counts["statements"] += 1

    def commit(*_: Any) -> None:
        counts["commits"] += 1

    event.listen(env.engine, "before_cursor_execute", statement)
    event.listen(env.engine, "commit", commit)
    try:
        env.drain()
    finally:
        event.remove(env.engine, "before_cursor_execute", statement)
        event.remove(env.engine, "commit", commit)
    return counts


def test_a_later_three_call_turn_stays_under_its_counted_round_trips(
        env: ReplayEnvironment) -> None:
    _turn(env, 1, "09:00")  # the first turn creates the contact and the conversation
    counts = _turn(env, 2, "11:00")
    dialect = env.engine.dialect.name
    assert counts["statements"] <= MAX_STATEMENTS[dialect], counts
    assert counts["commits"] <= MAX_COMMITS, counts
    assert [s.body["text"]["body"] for s in env.graph_api.sends] == [
        "Marcado: 09:00 com a Júlia.", "Marcado: 11:00 com a Júlia."]
    with session_scope(env.engine) as session:
        assert session.exec(select(func.count()).select_from(Usage)).one() == 6, \
            "every call's usage row, carried by the turn's next transaction"
        positions = session.exec(select(Message.position).where(
            Message.conversation_id == 1).order_by(col(Message.position))).all()
    assert positions == list(range(1, len(positions) + 1)), "one place per message, no gap"


@pytest.mark.parametrize("script", [
    [{"tool": "find_available_slots", "input": {"service": "corte", "date": "2026-06-02"}},
     {"text": "Tenho 09:00."}],  # the row was to ride the tool_use message's transaction
    [{"text": "Olá!"}],  # the row was to ride the reply's transaction (`_finish`)
], ids=["tool_round", "reply"])
def test_a_usage_row_is_stored_alone_when_the_transaction_carrying_it_is_fenced(
        env: ReplayEnvironment, monkeypatch: pytest.MonkeyPatch,
        script: list[dict[str, Any]]) -> None:
    env.messages_api.script("turn", script)
    real_metrics = turns.record_usage_metrics  # type: ignore[attr-defined]

    def another_turn_takes_over(runtime: Any, row: Usage) -> None:
        with fences.unfenced(), session_scope(env.engine) as session:
            fences.take(session, 1)  # between the model's answer and the turn's next store
        real_metrics(runtime, row)

    monkeypatch.setattr(turns, "record_usage_metrics", another_turn_takes_over)
    assert env.post_webhook(json.dumps(text_body("oi", 1)).encode()) == 200
    env.drain()
    with session_scope(env.engine) as session:
        assert session.exec(select(func.count()).select_from(Usage)).one() == 1, \
            "the call was billed: its row is stored though the turn was fenced out"
        assert session.exec(select(func.count()).select_from(Message).where(
            Message.direction != "inbound")).one() == 0
        assert session.exec(select(func.count()).select_from(Outbound)).one() == 0
    assert env.graph_api.sends == []


def test_a_tool_round_with_a_failed_call_keeps_only_what_the_slow_way_did(
        env: ReplayEnvironment) -> None:
    """The round's transaction (workers/turns.py `tool_round`) is rolled back when a call
    fails: the second booking of the same slot fails after the first booked in it, so the
    round runs again, each call alone; one booking, each call recorded once, both results
    in the round's message."""
    booking = {"tool": "book_appointment", "input": {"service": "corte",
                                                     "start": "2026-06-02T14:00"}}
    env.messages_api.script("turn", [{"tools": [booking, booking]},
                                     {"text": "Marcado: 14:00."}])
    assert env.post_webhook(json.dumps(text_body("marca 14h", 1)).encode()) == 200
    env.drain()
    assert [s.body["text"]["body"] for s in env.graph_api.sends] == ["Marcado: 14:00."]
    with session_scope(env.engine) as session:
        assert session.exec(select(func.count()).select_from(Appointment)).one() == 1
        calls = session.exec(select(ToolCall).order_by(col(ToolCall.id))).all()
        assert [c.is_error for c in calls] == [False, True]
        results = session.exec(select(Message.content).where(
            Message.role == "user", Message.direction == "internal")).all()
    assert [[b.get("is_error", False) for b in r] for r in results] == [[False, True]]
