"""The tool registry: a tool is one object, offered by the request builder and run by name.

A tool added to the registry reaches the model's request and is dispatched in a real turn
(web app, RQ worker, the SDK against the Messages API double); remember_fact is a tool like
the others, offered with the tenant's fact keys.
"""

import json
from typing import Any

import pytest
from sqlmodel import Session, select

from agent.context import TenantPrompt, build_request
from agent.tools.base import Tool, ToolContext
from agent.tools.facts import REMEMBER_FACT
from agent.tools.registry import REGISTRY
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import ToolCall
from tests.factories import text_body
from workers import turns

PROMPT = TenantPrompt(name="Salão", timezone="America/Sao_Paulo", language="pt-BR",
                      instructions="", model="claude-sonnet-5-5")
RAN: list[tuple[int, int, dict[str, Any]]] = []


def _ping(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    RAN.append((ctx.tenant_id, ctx.contact_id, args))
    return f"pong {args.get('word')}"


PING = Tool(name="check_ping", description="Answer pong.",
            input_schema={"type": "object", "properties": {"word": {"type": "string"}}},
            handler=_ping)


def _tools(fact_keys: tuple[str, ...], tools: tuple[Tool, ...] = REGISTRY) -> list[Any]:
    prompt = TenantPrompt(**{**PROMPT.__dict__, "fact_keys": fact_keys})
    return build_request(tenant=prompt, tools=tools, context="", messages=[], max_tokens=64,
                         metadata_user_id="x")["tools"]


def test_the_request_lists_every_registered_tool_sorted_by_name() -> None:
    names = [t.name for t in REGISTRY]
    assert len(set(names)) == len(names), "a name runs one handler"
    offered = _tools(("preferred_name",))
    assert [t["name"] for t in offered] == sorted(names)
    assert all(set(t) == {"name", "description", "input_schema"} for t in offered)


def test_remember_fact_enumerates_the_tenants_keys_and_is_not_offered_without_any() -> None:
    offered = {t["name"]: t for t in _tools(("preferred_period", "preferred_name"))}
    schema = offered["remember_fact"]["input_schema"]
    assert schema["properties"]["key"] == {"type": "string",
                                           "enum": ["preferred_name", "preferred_period"]}
    assert schema["required"] == ["key", "value"]
    assert "enum" not in REMEMBER_FACT.input_schema["properties"]["key"], "template untouched"
    assert "remember_fact" not in [t["name"] for t in _tools(())]


def test_a_tool_added_to_the_registry_is_offered_and_dispatched_in_a_turn(
        env: ReplayEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    RAN.clear()
    # the turn reads agent/tools' REGISTRY directly: no seam to add a tool (issue 40 item 2)
    monkeypatch.setattr(turns, "REGISTRY", (*REGISTRY, PING))
    env.messages_api.script("turn", [{"tool": "check_ping", "input": {"word": "olá"}},
                                     {"text": "Pronto."}])
    body = text_body("faz o ping", 1, sent_at=env.clock.now())
    assert env.post_webhook(json.dumps(body).encode()) == 200
    env.drain()
    first, second = (c.request for c in env.messages_api.calls)
    assert [t["name"] for t in first["tools"]] == sorted(
        [t.name for t in REGISTRY] + ["check_ping"])
    assert next(t for t in first["tools"] if t["name"] == "check_ping") == {
        "name": "check_ping", "description": "Answer pong.",
        "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}}}
    assert RAN == [(1, 1, {"word": "olá"})], "the conversation's tenant and contact"
    (result,) = [b for b in second["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert (result["content"], result.get("is_error")) == ("pong olá", None)
    with session_scope(env.engine) as session:
        (call,) = session.exec(select(ToolCall)).all()
        assert (call.name, call.result, call.is_error) == ("check_ping", "pong olá", False)
    assert env.messages_api.api_errors == 0


def test_a_tool_not_in_the_registry_is_an_error_result_naming_those_that_are(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"tool": "check_ping", "input": {}}, {"text": "Ops."}])
    body = text_body("faz o ping", 1, sent_at=env.clock.now())
    assert env.post_webhook(json.dumps(body).encode()) == 200
    env.drain()
    second = env.messages_api.calls[1].request
    (result,) = [b for b in second["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert result["is_error"] is True
    assert result["content"] == ("unknown tool 'check_ping'; available: "
                                 + ", ".join(t.name for t in REGISTRY))


def _properties(schema: dict[str, Any], path: str) -> list[tuple[str, str, bool, set[str]]]:
    """(path, description, required, the sibling names) of every property, nested too."""
    found = []
    names = set(schema.get("properties", {}))
    for name, prop in schema.get("properties", {}).items():
        found.append((f"{path}.{name}", str(prop.get("description", "")),
                      name in schema.get("required", []), names - {name}))
        for inner in (prop, prop.get("items") or {}):
            if inner.get("type") == "object":
                found += _properties(inner, f"{path}.{name}")
    return found


def test_each_property_description_agrees_with_required() -> None:
    """Issue 38: a required property never reads as optional; one that is not required says
    so ("optional", a default) or names the property it stands in for ("or services",
    "instead of slot")."""
    wrong = []
    for tool in _tools(("preferred_name",)):
        for path, said, required, siblings in _properties(tool["input_schema"], tool["name"]):
            text = said.casefold()
            optional = "optional" in text or "default" in text
            alternative = text.startswith("or ") or any(
                f"or {s}" in text or f"instead of {s}" in text for s in siblings)
            if required and optional:
                wrong.append(f"{path} is required but described as optional: {said!r}")
            elif not required and not (optional or alternative):
                wrong.append(f"{path} is optional but its description does not say so: "
                             f"{said!r}")
    assert not wrong, "\n".join(wrong)


def _service_words() -> set[str]:
    """The codes and names of every service of the repository's test and example tenants."""
    words: set[str] = set()
    from pathlib import Path
    root = Path(__file__).parent.parent
    for path in [*root.glob("tests/scenarios/**/*.json"), *root.glob("replay/scenarios/*.json"),
                 *root.glob("examples/**/*.json")]:
        try:
            tenant = json.loads(path.read_text()).get("tenant")
        except (ValueError, AttributeError):
            continue
        for service in (tenant or {}).get("services", []) if isinstance(tenant, dict) else []:
            words |= {service["code"].casefold(), service["name"].casefold()}
    from tests.factories import TENANT
    words |= {s["code"].casefold() for s in TENANT["services"]}
    words |= {"coloração", "amônia", "corte", "escova", "manicure"}  # issue 38's example
    return words


def test_no_tool_description_mentions_a_business_service() -> None:
    """Issue 38: tools speak of no particular business (they are in every tenant's request)."""
    text = json.dumps(_tools(("preferred_name",)), ensure_ascii=False).casefold()
    words = _service_words()
    assert len(words) > 10
    import re
    found = sorted(w for w in words if re.search(rf"(?<!\w){re.escape(w)}(?!\w)", text))
    assert not found, found
