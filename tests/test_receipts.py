"""Read receipts and "typing…" (issue 26, workers/receipts.py): once per turn that answers,
again past 20 s on the product's clock, never when the turn will not answer, best effort."""

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from replay.environment import ReplayEnvironment
from replay.runner import run_scenario, run_scenario_file
from storage.models import Contact, Conversation
from tests.conftest import START
from tests.factories import ANA, TENANT, scenario, text_body
from whatsapp.errors import GraphTransient
from workers.receipts import TYPING_REFRESH, turn_answers

SCENARIOS = Path(__file__).parent / "scenarios"


def _bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def test_turn_answers_only_inside_the_service_window() -> None:
    contact, conversation = Contact(tenant_id=1, last_inbound_at=START), Conversation()
    assert turn_answers(contact, conversation, START + timedelta(hours=23, minutes=59))
    assert not turn_answers(contact, conversation, START + timedelta(hours=24, seconds=1))
    assert not turn_answers(Contact(tenant_id=1), conversation, START)  # never wrote


def test_turn_answers_never_while_staff_handle_the_conversation() -> None:
    contact = Contact(tenant_id=1, last_inbound_at=START)
    held = Conversation(status="open", staff_until=START + timedelta(hours=2))
    assert not turn_answers(contact, held, START + timedelta(minutes=5))
    assert turn_answers(contact, held, START + timedelta(hours=2, seconds=1))  # staff time over
    closed = Conversation(status="closed", staff_until=START + timedelta(hours=2))
    assert turn_answers(contact, closed, START + timedelta(minutes=5))  # the sweeper ended it


def test_the_scenario_once_per_turn_twice_past_20s_none_when_closed(
        database_url: str | None, redis_url: str | None) -> None:
    result = run_scenario_file(SCENARIOS / "read_typing.json", database_url=database_url,
                               redis_url=redis_url)
    assert result.passed, result.failures
    assert result.transcript.count("   [marked read, typing… shown]") == 3


def test_each_read_names_the_latest_customer_message_and_shows_typing() -> None:
    env = ReplayEnvironment(start=START)
    try:
        env.add_tenant(TENANT)
        env.messages_api.script("turn", [{"text": "Oi!"}])
        for n in (1, 2):  # a burst: one turn, one read, for the latest message
            assert env.post_webhook(_bytes(text_body(f"oi {n}", n))) == 200
        env.drain()
        assert env.graph_api.reads == [{
            "messaging_product": "whatsapp", "status": "read",
            "message_id": f"wamid.TEST{ANA[0][-4:]}000002", "typing_indicator": {"type": "text"}}]
    finally:
        env.close()


def test_a_short_delay_does_not_repeat_the_indicator() -> None:
    env = ReplayEnvironment(start=START)
    try:
        env.add_tenant(TENANT)
        delay = f"{int(TYPING_REFRESH.total_seconds()) - 1}s"
        env.messages_api.script("turn", [
            {"tool": "list_services", "input": {}, "delay": delay}, {"text": "Temos corte."}])
        assert env.post_webhook(_bytes(text_body("quais serviços?", 1))) == 200
        env.drain()
        assert len(env.graph_api.reads) == 1 and len(env.graph_api.accepted) == 1
    finally:
        env.close()


@pytest.mark.parametrize("error", [
    GraphTransient(code=131000, title="Something went wrong", http_status=500),
    RuntimeError("5511999990001 oi 1"),  # an unexpected failure, whose text is not logged
])
def test_a_failed_read_never_fails_the_turn_nor_logs_customer_data(error: Exception) -> None:
    env = ReplayEnvironment(start=START)
    try:
        env.add_tenant(TENANT)
        env.messages_api.script("turn", [{"text": "Oi, Ana!"}])

        def refuse(*_args: Any, **_kwargs: Any) -> None:
            raise error
        env.runtime.graph.mark_read = refuse  # type: ignore[method-assign]
        assert env.post_webhook(_bytes(text_body("oi 1", 1))) == 200
        with capture_logs() as logs:
            env.drain()
        assert [s.body["text"]["body"] for s in env.graph_api.accepted] == ["Oi, Ana!"]
        failed = [entry for entry in logs if entry["event"] == "typing_indicator_failed"]
        assert len(failed) == 1 and failed[0]["error"] == type(error).__name__
        # phone numbers and text may appear at DEBUG only (ARCHITECTURE.md, Authority and safety)
        logged = json.dumps([e for e in logs if e["log_level"] != "debug"], default=str)
        assert ANA[0] not in logged and "wamid.TEST" not in logged and "oi 1" not in logged
    finally:
        env.close()


def test_a_bad_delay_is_refused_before_the_scenario_runs() -> None:
    result = run_scenario(scenario([{"model": [{"text": "Oi", "delay": "soon"}]}]))
    assert not result.passed
    assert "bad duration 'soon'" in result.failures[0]


def test_reads_expectation_fails_on_a_wrong_count() -> None:
    result = run_scenario(scenario([
        {"model": [{"text": "Oi!"}]}, {"webhook": text_body("oi", 1)}, {"drain": True},
        {"expect": {"reads": 2}}]))
    assert result.failures == ["step 3: reads 1, expected 2"]
