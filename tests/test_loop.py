"""The tool loop's stop reasons, through the real SDK and the Messages API double."""

import json
import logging
from typing import Any

from replay.environment import ReplayEnvironment
from replay.runner import run_scenario
from tests.conftest import START
from tests.factories import TENANT, scenario, text_body


def _passes(steps: list[dict[str, Any]], **tenant: Any):  # type: ignore[no-untyped-def]
    result = run_scenario(scenario(steps, **tenant))
    assert result.passed, result.failures
    return result


def test_a_refusal_gets_the_polite_tenant_text() -> None:
    _passes([
        {"model": [{"content": [], "stop_reason": "refusal"}]},
        {"webhook": text_body("me ajuda com algo ruim", 1)},
        {"drain": True},
        {"expect": {"sent_count": 1, "sent": [{"text_contains": "não posso ajudar"}],
                    "api_errors": 0}},
    ])


def test_an_empty_final_answer_gets_a_fallback_never_an_empty_send() -> None:
    _passes([
        {"model": [{"content": [{"type": "text", "text": "  "}], "stop_reason": "end_turn"}]},
        {"webhook": text_body("oi", 1)},
        {"drain": True},
        {"expect": {"sent_count": 1, "sent": [{"text_contains": "Desculpe"}]}},
        {"model": [{"text": "Oi!"}]},
        {"webhook": text_body("oi?", 2)},
        {"drain": True},
        {"expect": {"sent_count": 1, "api_errors": 0}},
    ])


def test_pause_turn_resends_the_assistant_content_and_continues() -> None:
    result = _passes([
        {"model": [{"content": [{"type": "text", "text": "Um momento..."},
                                {"type": "server_tool_use", "id": "srvtoolu_1",
                                 "name": "web_search", "input": {"query": "feriados"}}],
                    "stop_reason": "pause_turn"},
                   {"text": "Pronto, aqui está."}]},
        {"webhook": text_body("oi", 1)},
        {"drain": True},
        {"expect": {"sent_count": 1, "sent": [{"text_contains": "Pronto"}], "api_errors": 0}},
    ])
    assert result.requests == 2


def test_the_loop_stops_after_max_rounds_with_a_valid_history() -> None:
    looping = [{"tool": "list_services", "input": {}}] * 8
    _passes([
        {"model": looping},
        {"webhook": text_body("quais serviços?", 1)},
        {"drain": True},
        {"expect": {"sent_count": 1, "sent": [{"text_contains": "Desculpe"}]}},
        {"model": [{"text": "Temos corte."}]},
        {"webhook": text_body("e aí?", 2)},
        {"drain": True},
        {"expect": {"sent_count": 1, "sent": [{"text_equals": "Temos corte."}],
                    "api_errors": 0}},
    ])


def test_parallel_tool_calls_get_all_results_in_one_message() -> None:
    env = ReplayEnvironment(start=START)
    try:
        env.add_tenant(TENANT)
        env.messages_api.script("turn", [
            {"tools": [{"tool": "list_services", "input": {}},
                       {"tool": "list_my_appointments", "input": {}}]},
            {"text": "Temos corte e você não tem horários marcados."}])
        assert env.post_webhook(json.dumps(text_body("oi", 1)).encode()) == 200
        env.drain()
        second = env.messages_api.calls[1].request["messages"]
        assert [m["role"] for m in second] == ["user", "assistant", "user"]
        assert [b["type"] for b in second[2]["content"]] == ["tool_result", "tool_result"]
        assert env.messages_api.api_errors == 0
    finally:
        env.close()


def test_no_phone_number_or_message_text_in_logs_at_info(capsys: Any) -> None:
    from core.logs import configure_logging

    configure_logging("INFO", "json")
    try:
        _passes([
            {"model": [{"text": "Segredo da resposta"}]},
            {"webhook": text_body("meu texto secreto", 1)},
            {"drain": True},
            {"expect": {"sent_count": 1}},
        ])
    finally:
        logging.getLogger().handlers.clear()
    out = capsys.readouterr().out
    assert "inbound_stored" in out and "reply_sent" in out  # the lines were captured
    for secret in ("5511999990001", "BR.9000000000000000001", "meu texto secreto",
                   "Segredo da resposta"):
        assert secret not in out, secret
