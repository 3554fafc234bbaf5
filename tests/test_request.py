"""The turn's request is built in one place: every round the loop sends what
`context.build_request` returns for that round's messages, breakpoints included.
"""

import json
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

from sqlmodel import select

from agent import catalogue
from agent.context import TenantPrompt, build_request, opaque_user_id
from agent.loop import run_tool_loop
from agent.tools.registry import REGISTRY
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.fact_keys import resolve_keys
from storage.models import Conversation, Tenant
from tests.conftest import START
from tests.factories import text_body

TAIL = {"type": "ephemeral", "ttl": "1h"}


def _without_cache_control(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "content": [{k: v for k, v in b.items() if k != "cache_control"}
                              for b in m["content"]]} for m in messages]


def _cache_control_sites(request: dict[str, Any]) -> list[str]:
    sites = [f"system[{i}]" for i, b in enumerate(request["system"]) if "cache_control" in b]
    sites += [f"tools[{i}]" for i, t in enumerate(request["tools"]) if "cache_control" in t]
    return sites + [f"messages[{i}].content[{j}]" for i, m in enumerate(request["messages"])
                    for j, b in enumerate(m["content"]) if "cache_control" in b]


def test_every_round_sends_the_builders_request_with_the_tail_breakpoint_moving(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [
        {"tool": "list_services", "input": {}},
        {"tool": "find_available_slots", "input": {"service": "corte", "date": "2026-06-02"}},
        {"text": "Tenho 9h ou 10h."}])
    body = text_body("tem horário amanhã?", 1, sent_at=env.clock.now())
    assert env.post_webhook(json.dumps(body).encode()) == 200
    env.drain()
    rounds = [c.request for c in env.messages_api.calls]
    assert len(rounds) == 3 and env.messages_api.api_errors == 0
    with session_scope(env.engine) as session:
        tenant = session.get(Tenant, 1)
        conversation = session.exec(select(Conversation)).one()
        assert tenant is not None
        prompt = TenantPrompt(name=tenant.name, timezone=tenant.timezone,
                              language=tenant.language, instructions=tenant.instructions,
                              model=tenant.agent_model,
                              fact_keys=tuple(sorted(resolve_keys(tenant.fact_keys))),
                              catalogue=catalogue.catalogue_text(catalogue.load(
                                  session, tenant, START.astimezone(ZoneInfo(tenant.timezone))
                                  .date())))
        context = conversation.context_block
        assert "- julia: Júlia; does corte" in prompt.catalogue
    for request in rounds:
        expected = build_request(tenant=prompt, tools=REGISTRY, context=context,
                                 messages=_without_cache_control(request["messages"]),
                                 max_tokens=env.settings.max_output_tokens,
                                 metadata_user_id=opaque_user_id(1, 1))
        assert request == expected, "system, tools, messages and breakpoints: the builder's"
    # issue 41: the tail sits on the last block the next turn sends unchanged: the last one,
    # then the block before the first lookup result (list_services' is pruned next turn)
    assert [_cache_control_sites(r) for r in rounds] == [
        ["system[0]", "messages[0].content[0]"], ["system[0]", "messages[1].content[0]"],
        ["system[0]", "messages[1].content[0]"]]
    assert rounds[0]["messages"][-1]["content"][-1]["cache_control"] == TAIL
    assert rounds[2]["messages"][1]["content"][0]["cache_control"] == TAIL
    assert [len(r["messages"]) for r in rounds] == [1, 3, 5], "the tail moves each round"
    assert rounds[0]["system"] == rounds[2]["system"] and rounds[0]["tools"] == rounds[2]["tools"]


def test_the_loop_asks_the_builder_for_each_rounds_request_and_sends_it_as_is() -> None:
    built: list[list[dict[str, Any]]] = []
    sent: list[dict[str, Any]] = []
    replies = iter([
        SimpleNamespace(stop_reason="tool_use", usage=None, content=[
            {"type": "tool_use", "id": "t1", "name": "list_services", "input": {}}]),
        SimpleNamespace(stop_reason="end_turn", usage=None, content=[
            {"type": "text", "text": "Feito."}])])

    def request_for(messages: list[dict[str, Any]]) -> dict[str, Any]:
        built.append(json.loads(json.dumps(messages)))  # as they were at this round
        return {"round": len(built), "messages": [*messages]}

    def create(**request: Any) -> Any:
        sent.append(request)
        return next(replies)

    class Hooks:
        def on_response(self, response: Any) -> None: ...
        def on_assistant(self, content: Any) -> None: ...
        def tool_round(self, run: Any) -> Any:
            return run()
        def fold_new_messages(self) -> list[dict[str, Any]]:
            return []

    messages = [{"role": "user", "content": [{"type": "text", "text": "oi"}]}]
    outcome = run_tool_loop(create, request_for=request_for, messages=messages,
                            execute=lambda block: ("Services: corte", False), hooks=Hooks(),
                            max_rounds=4)
    assert outcome.kind == "answered" and outcome.rounds == 2
    assert [r["round"] for r in sent] == [1, 2], "one build per round, sent unchanged"
    assert [len(m) for m in built] == [1, 3]
    assert built[1][2]["content"][0]["type"] == "tool_result"
    assert all("cache_control" not in b for m in messages for b in m["content"]), \
        "the loop adds nothing to the messages"
