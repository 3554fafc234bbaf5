"""End to end: signed webhooks into the real web app, a real RQ worker (SimpleWorker), the real
anthropic SDK against the Messages API double, the real Graph client against the Graph double.
Redis is the real server when reachable; SQLite and PostgreSQL both.
"""

from pathlib import Path
from typing import Any

from sqlmodel import select

from cli.main import main
from replay.environment import ReplayEnvironment
from replay.runner import run_scenario, run_scenario_file
from storage.db import session_scope
from storage.models import Message, Outbound, ToolCall
from tests.conftest import START
from tests.factories import BRUNO, TENANT, scenario, text_body

BUNDLED = Path(__file__).parent.parent / "replay" / "scenarios"
TESTS = Path(__file__).parent / "scenarios"


def _run(steps: list[dict[str, Any]], database_url: str | None, redis_url: str | None,
         **tenant: Any):  # type: ignore[no-untyped-def]
    result = run_scenario(scenario(steps, **tenant), database_url=database_url,
                          redis_url=redis_url)
    assert result.passed, result.failures
    return result


def test_bundled_demo_books_moves_and_cancels(database_url: str | None,
                                              redis_url: str | None) -> None:
    paths = sorted(BUNDLED.glob("*.json"))
    assert {p.name for p in paths} >= {"salon_book_move_cancel.json", "clinic_cli_setup.json"}
    for path in paths:
        result = run_scenario_file(path, database_url=database_url, redis_url=redis_url,
                                   cli=main)
        assert result.passed, (path.name, result.failures)
        assert result.api_errors == 0 and result.unscripted_calls == 0
        if path.name == "salon_book_move_cancel.json":
            assert any("Prontinho" in (s.get("text") or "") for s in result.sent)


def test_the_documented_example_scenarios_pass(database_url: str | None,
                                              redis_url: str | None) -> None:
    for name in ("readme_example.json", "readme_book.json"):  # the two examples of REPLAY.md
        result = run_scenario_file(TESTS / name, database_url=database_url, redis_url=redis_url)
        assert result.passed, (name, result.failures)


def test_what_the_business_sees_is_what_reached_the_customer(database_url: str | None,
                                                            redis_url: str | None) -> None:
    """Issue 17 from the outside: Graph unreachable, rate-limited, refusing and hanging up;
    what `wagent conversations show` reports each time (tests/scenarios/delivery_truth.json)."""
    result = run_scenario_file(TESTS / "delivery_truth.json", database_url=database_url,
                               redis_url=redis_url, cli=main)
    assert result.passed, result.failures
    assert [s["text"] for s in result.sent if s["type"] == "text"] == [
        "Olá, Ana! Em que posso ajudar?", "Tenho amanhã às 14h e às 16h com a Júlia.",
        "Aceitamos pix, sim.", "Qualquer coisa, é só chamar."]


def test_a_conversation_long_enough_to_compact(database_url: str | None,
                                               redis_url: str | None) -> None:
    result = run_scenario_file(TESTS / "compaction.json", database_url=database_url,
                               redis_url=redis_url)
    assert result.passed, result.failures


def test_burst_of_three_before_the_worker_is_one_turn_and_one_reply(
        database_url: str | None, redis_url: str | None) -> None:
    result = _run([
        {"model": [{"text": "Tenho 14h amanhã. Serve?"}]},
        {"webhook": text_body("oi", 1)},
        {"webhook": text_body("tem horário amanhã", 2)},
        {"webhook": text_body("pra corte?", 3)},
        {"drain": True},
        {"expect": {"sent_count": 1, "sent": [{"text_contains": "14h"}], "api_errors": 0}},
    ], database_url, redis_url)
    assert result.requests == 1


def test_the_burst_reaches_the_model_as_one_user_message_with_received_times() -> None:
    env = ReplayEnvironment(start=START)
    try:
        env.add_tenant(TENANT)
        env.messages_api.script("turn", [{"text": "Oi!"}])
        for n, text in enumerate(["oi", "tudo bem?", "quero cortar"], 1):
            assert env.post_webhook(_bytes(text_body(text, n))) == 200
        env.drain()
        request = env.messages_api.calls[0].request
        assert len(request["messages"]) == 1
        texts = [b["text"] for b in request["messages"][0]["content"]]
        assert texts == ["[Mon 2026-06-01 10:00] oi", "[Mon 2026-06-01 10:00] tudo bem?",
                         "[Mon 2026-06-01 10:00] quero cortar"]
        assert "2026" not in request["system"][0]["text"], "no clock in system"
    finally:
        env.close()


def test_a_redelivered_body_gives_one_message_and_one_reply(
        database_url: str | None, redis_url: str | None) -> None:
    _run([
        {"model": [{"text": "Olá!"}]},
        {"webhook": text_body("oi", 1), "repeat": 3},
        {"drain": True},
        {"webhook": text_body("oi", 1)},
        {"drain": True},
        {"expect": {"sent_count": 1}},
    ], database_url, redis_url)


def test_a_booking_is_stored_and_confirmed(database_url: str | None,
                                           redis_url: str | None) -> None:
    _run([
        {"model": [{"tool": "book_appointment",
                    "input": {"service": "corte", "start": "2026-06-02T14:00"}},
                   {"text": "Marcado: terça 14:00 com a Júlia."}]},
        {"webhook": text_body("quero amanhã 14h", 1)},
        {"drain": True},
        {"expect": {"sent": [{"to": "5511999990001", "text_contains": "14:00"}],
                    "appointments": [{"service": "corte", "start": "2026-06-02T14:00",
                                      "status": "booked"}], "tool_errors": 0}},
    ], database_url, redis_url)


def test_a_tool_called_wrongly_becomes_an_error_result_and_the_turn_goes_on(
        database_url: str | None, redis_url: str | None) -> None:
    _run([
        {"model": [{"tool": "book_appointment",
                    "input": {"service": "corte", "start": "2026-05-01T10:00"}},
                   {"tool": "book_appointment", "input": {"service": "unha", "start": "x"}},
                   {"tool": "no_such_tool", "input": {}},
                   {"text": "Esse horário já passou. Quer outro?"}]},
        {"webhook": text_body("quero dia 1 de maio", 1)},
        {"drain": True},
        {"expect": {"tool_errors": 3, "sent_count": 1, "appointments": [], "api_errors": 0}},
    ], database_url, redis_url)


def test_a_customer_cannot_cancel_someone_elses_appointment(
        database_url: str | None, redis_url: str | None) -> None:
    _run([
        {"model": [{"tool": "book_appointment",
                    "input": {"service": "corte", "start": "2026-06-02T14:00"}},
                   {"text": "Marcado."}]},
        {"webhook": text_body("marca 14h amanhã", 1)},
        {"drain": True},
        {"model": [{"tool": "cancel_appointment", "input": {"appointment_id": 1}},
                   {"text": "Não encontrei esse agendamento."}]},
        {"webhook": text_body("cancela o agendamento 1", 2, who=BRUNO, name="Bruno Exemplo")},
        {"drain": True},
        {"expect": {"tool_errors": 1,
                    "appointments": [{"start": "2026-06-02T14:00", "status": "booked"}]}},
    ], database_url, redis_url)


def test_a_truncated_tool_call_is_never_executed() -> None:
    truncated = {"content": [{"type": "text", "text": "Vou marcar"},
                             {"type": "tool_use", "id": "toolu_cut", "name": "book_appointment",
                              "input": {"service": "corte"}}],
                 "stop_reason": "max_tokens"}
    result = _run([
        {"model": [truncated]},
        {"webhook": text_body("marca 14h", 1)},
        {"drain": True},
        {"expect": {"appointments": [], "sent_count": 1, "sent": [{"text_equals": "Vou marcar"}],
                    "tool_errors": 0, "api_errors": 0}},
    ], None, None)
    assert result.requests == 1


def test_overload_is_retried_on_the_product_clock_then_answered_once(
        database_url: str | None, redis_url: str | None) -> None:
    _run([
        {"model_fail": {"status": 529, "times": 2}},
        {"model": [{"text": "Oi! Como posso ajudar?"}]},
        {"webhook": text_body("oi", 1)},
        {"drain": True},
        {"expect": {"sent_count": 0}},
        {"advance": "10s"}, {"drain": True},
        {"expect": {"sent_count": 0}},
        {"advance": "40s"}, {"drain": True},
        {"expect": {"sent_count": 1, "sent": [{"text_contains": "ajudar"}], "api_errors": 0}},
    ], database_url, redis_url)


def test_a_provider_down_for_good_gets_one_apology_and_the_conversation_continues(
        database_url: str | None, redis_url: str | None) -> None:
    _run([
        {"model_fail": {"status": 529, "times": 4}},
        {"webhook": text_body("oi", 1)},
        {"drain": True}, {"advance": "10s"}, {"drain": True}, {"advance": "40s"},
        {"drain": True}, {"advance": "2m"}, {"drain": True},
        {"expect": {"sent_count": 1, "sent": [{"text_contains": "instabilidade"}]}},
        {"model": [{"text": "Agora sim! Como posso ajudar?"}]},
        {"webhook": text_body("oi de novo", 2)},
        {"drain": True},
        {"expect": {"sent_count": 1, "sent": [{"text_contains": "Agora sim"}],
                    "api_errors": 0}},
    ], database_url, redis_url)


def test_a_graph_rate_limit_is_retried_and_sent_once(database_url: str | None,
                                                     redis_url: str | None) -> None:
    _run([
        {"graph_fail": {"code": 130429, "times": 1}},
        {"model": [{"text": "Olá!"}]},
        {"webhook": text_body("oi", 1)},
        {"drain": True},
        {"expect": {"sent_count": 0}},
        {"advance": "30s"}, {"drain": True},
        {"expect": {"sent_count": 1, "sent": [{"text_equals": "Olá!"}]}},
    ], database_url, redis_url)


def test_a_turn_delayed_past_the_service_window_sends_nothing() -> None:
    env = ReplayEnvironment(start=START)
    try:
        env.add_tenant(TENANT)
        assert env.post_webhook(_bytes(text_body("oi", 1))) == 200
        env.clock.advance(__import__("datetime").timedelta(hours=25))
        env.drain()
        assert env.graph_api.sends == [] and env.messages_api.calls == []
        with session_scope(env.engine) as session:
            inbound = session.exec(select(Message).where(Message.direction == "inbound")).one()
            assert inbound.answered_at is not None
            assert session.exec(select(Outbound)).all() == []
    finally:
        env.close()


def test_a_retried_turn_replays_stored_tool_results_without_a_second_booking() -> None:
    env = ReplayEnvironment(start=START)
    try:
        env.add_tenant(TENANT)
        env.messages_api.script("turn", [
            {"tool": "book_appointment", "input": {"service": "corte",
                                                   "start": "2026-06-02T14:00"}},
            {"text": "Marcado."}])
        assert env.post_webhook(_bytes(text_body("marca", 1))) == 200
        env.drain()
        with session_scope(env.engine) as session:
            call = session.exec(select(ToolCall)).one()
        from agent.tools.base import ToolContext
        from agent.tools.registry import execute_tool
        ctx = ToolContext(engine=env.engine, tenant_id=1, contact_id=1, conversation_id=1,
                          timezone=__import__("zoneinfo").ZoneInfo("America/Sao_Paulo"),
                          now=env.clock.now(), tool_use_id=call.tool_use_id)
        again = execute_tool(ctx, "book_appointment",
                             {"service": "corte", "start": "2026-06-02T15:00"})
        assert again == (call.result, False)
        with session_scope(env.engine) as session:
            from storage.models import Appointment
            assert len(session.exec(select(Appointment)).all()) == 1
    finally:
        env.close()


def _bytes(body: dict[str, Any]) -> bytes:
    import json
    return json.dumps(body).encode()


def test_steps_and_expectations_carry_labels_and_comments_shown_in_failures(
        database_url: str | None, redis_url: str | None) -> None:
    result = run_scenario(scenario([
        {"label": "the agent offers a time", "comment": "one scripted reply",
         "model": [{"text": "Tenho 14h amanhã. Serve?"}]},
        {"label": "ana asks", "webhook": text_body("tem horário amanhã?", 1)},
        {"drain": True, "comment": "the turn runs"},
        {"label": "offer sent", "expect": {
            "label": "after the first turn", "comment": "16h was never offered",
            "sent_count": 1,
            "sent": [{"label": "the offer", "comment": "wrong on purpose", "text_contains": "16h"}],
            "conversation": {"label": "still open", "status": "closed"},
            "appointments": [{"label": "nothing booked yet", "service": "corte",
                              "start": "2026-06-02T14:00"}],
            "facts": [{"label": "no name yet", "key": "preferred_name"}]}},
    ]), database_url=database_url, redis_url=redis_url)
    assert not result.passed and len(result.failures) == 4, result.failures
    where = 'step 3 "offer sent" "after the first turn" (16h was never offered): '
    sent, conversation, appointments, facts = result.failures
    assert sent.startswith(where + 'no send matching sent "the offer" (wrong on purpose) '
                           "{'text_contains': '16h'}")
    assert conversation.startswith(where + 'conversation "still open" status open')
    assert appointments.startswith(where + "appointments [], expected [{'service'")
    assert appointments.endswith('[appointments[0] "nothing booked yet"]')
    assert facts.startswith(where + 'no fact matching facts[0] "no name yet"')


def test_other_unknown_keys_of_steps_expectations_and_matchers_stay_errors() -> None:
    result = run_scenario(scenario([
        {"lable": "typo", "drain": True},
        {"label": "a list", "comment": ["not", "text"], "drain": True},
        {"label": "checks", "expect": {"sent_count": 0, "sent_cuont": 1, "label": 3,
                                       "sent": [{"text_contains": "x", "txt": "y"}],
                                       "conversation": {"status": "open", "state": "open"}}},
    ]))
    assert result.failures == [
        "invalid scenario: step 0: unknown option 'lable' for drain",
        'invalid scenario: step 1 "a list" ([\'not\', \'text\']): comment must be a string',
        "invalid scenario: step 2 \"checks\": unknown expectation 'sent_cuont'",
        'invalid scenario: step 2 "checks": expect label must be a string',
        "invalid scenario: step 2 \"checks\": sent[0]: unknown key 'txt' (known: options, "
        "text_contains, text_equals, to, type)",
        "invalid scenario: step 2 \"checks\": conversation: unknown key 'state' (known: "
        "contact, count, status, summary_contains, with_staff)",
    ], "nothing ran: every problem listed"



def test_graph_fail_and_wagent_output_options_are_checked(redis_url: str | None) -> None:
    bad = run_scenario(scenario([{"graph_fail": {"network": "down"}},
                                 {"graph_fail": {"code": 131056, "network": "refused"}},
                                 {"wagent": ["tenant", "list"], "output_contains": "x"}]))
    assert not bad.passed
    assert any("network must be one of" in f for f in bad.failures)
    assert any('{"code": N, "times": n}' in f for f in bad.failures)
    assert any("output_contains takes a list" in f for f in bad.failures)
    missing = run_scenario(scenario([{"wagent": ["tenant", "list"],
                                      "output_contains": ["Salão Exemplo", "Oficina"]}]),
                           redis_url=redis_url, cli=main)
    assert missing.failures == ["step 0: wagent tenant list printed no 'Oficina'"]
