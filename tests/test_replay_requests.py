"""The replay's `expect.requests` (docs/REPLAY.md, replay/seen.py): what the model saw."""

from pathlib import Path

from replay import seen
from replay.runner import _beside, run_scenario
from tests.factories import scenario, text_body

TURN = [{"model": [{"tool": "list_services", "input": {}}, {"text": "Temos corte, sim."}]},
        {"webhook": text_body("vocês fazem corte?", 1)},
        {"drain": True}]


def test_requests_checks_pass_on_what_the_turn_sent(database_url: str | None,
                                                    redis_url: str | None) -> None:
    result = run_scenario(scenario([*TURN, {"expect": {"requests": {
        "purpose": "turn", "calls": 2, "system_contains": ["Salão Exemplo"],
        "system_excludes": ["ignore your rules"],
        "messages_contain": ["vocês fazem corte?", "Services:"],
        "messages_excludes": ["[equipe:"],
        "tools_include": ["list_services", "book_appointment"]}}},
        {"expect": {"requests": {"calls": 0}, "comment": "nothing since the previous expect"}},
        {"expect": {"requests": {"purpose": "summary", "calls": 0}}}]),
        database_url=database_url, redis_url=redis_url)
    assert result.passed, result.failures


def test_requests_checks_fail_naming_what_was_missing(database_url: str | None,
                                                      redis_url: str | None) -> None:
    result = run_scenario(scenario([*TURN, {"label": "seen", "expect": {"requests": {
        "calls": 3, "system_contains": ["alérgica"], "system_excludes": ["Salão Exemplo"],
        "messages_contain": ["pix"], "messages_excludes": ["fazem corte"],
        "tools_include": ["add_everything"]}}}]),
        database_url=database_url, redis_url=redis_url)
    assert result.failures == [
        'step 3 "seen": requests: 2 turn call(s), expected 3',
        "step 3 \"seen\": requests: no turn call's system contains 'alérgica'",
        "step 3 \"seen\": requests: the system of turn call(s) [0, 1] (since the previous "
        "expect, from 0) contains 'Salão Exemplo'",
        "step 3 \"seen\": requests: no turn call's messages contain 'pix'",
        "step 3 \"seen\": requests: the messages of turn call(s) [0, 1] (since the previous "
        "expect, from 0) contain 'fazem corte'",
        "step 3 \"seen\": requests: no turn call lists the tool 'add_everything'"]


def test_a_malformed_requests_expectation_fails_before_anything_runs() -> None:
    result = run_scenario(scenario([{"expect": {"requests": {
        "purpose": "chat", "calls": "2", "system_contain": ["x"], "tools_include": "list",
        "messages_contain": [""]}}}]))
    assert result.failures == [
        "invalid scenario: step 0: requests: unknown key 'system_contain' (known: block_types, "
        "calls, messages_contain, messages_excludes, purpose, system_contains, system_excludes, "
        "tools_include)",
        "invalid scenario: step 0: requests.purpose must be one of turn, summary, facts, "
        "probe",
        "invalid scenario: step 0: requests.calls must be a whole number, 0 or more",
        "invalid scenario: step 0: requests.messages_contain must be a list of non-empty strings",
        "invalid scenario: step 0: requests.tools_include must be a list of non-empty strings"]
    assert seen.problems([]) == ["requests must be an object"]


def test_the_texts_compared_are_system_blocks_text_and_tool_results() -> None:
    body = {"system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "tools": [{"name": "t1"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]},
                         {"role": "assistant", "content": [
                             {"type": "tool_use", "id": "x", "name": "t1", "input": {"q": "in"}}]},
                         {"role": "user", "content": [
                             {"type": "tool_result", "tool_use_id": "x", "content": "out"},
                             {"type": "tool_result", "tool_use_id": "y",
                              "content": [{"type": "text", "text": "inner"}]}]}]}
    assert seen.system_text(body) == "a\nb"
    assert seen.messages_text(body) == "hello\nout\ninner"
    assert seen.tool_names(body) == ["t1"]
    assert seen.failures({"messages_contain": ["inner"]}, [body]) == [], "nested text found"
    assert seen.failures({"messages_contain": ["'q'"]}, [body]), "tool_use input is not text"
    assert seen.failures({"system_contains": ["a"]}, []) == [
        "requests: no turn call's system contains 'a'"]


def test_a_long_argument_of_a_wagent_step_is_text_not_a_crash(tmp_path: Path) -> None:
    """An argument no file can be named by (5,000 characters) reaches the CLI as text."""

    assert not _beside(tmp_path, "x" * 5000) and not _beside(tmp_path, "a\0b")
    (tmp_path / "body.json").write_text("{}")
    assert _beside(tmp_path, "body.json")
