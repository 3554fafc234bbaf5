"""What the model saw: the `expect.requests` expectation of a replay (docs/REPLAY.md).

`{"requests": {"purpose": "turn", "calls": 2, "system_contains": [...], "system_excludes": [...],
"messages_contain": [...], "messages_excludes": [...], "tools_include": [...],
"block_types": ["image"]}}` looks at the
Messages API calls of one purpose (default `turn`) that the double received since the previous
`expect`: `calls` is their number; each string of a `*_contains` / `*_include` list must be
found in at least one of them, each string of `system_excludes` / `messages_excludes` in none;
`block_types` must all appear in the messages of one of them. Every key is optional. Pure: no I/O.

The texts compared, per request body:
- system: the text of every system block, joined by newlines (a plain string system as is);
- messages: the text of every `text` block and every `tool_result` (its string content, or the
  text blocks inside it), joined by newlines;
- tools: the names of the tools listed.
"""

from collections.abc import Iterable
from typing import Any

PURPOSES = ("turn", "summary", "facts", "probe")
LIST_KEYS = ("system_contains", "system_excludes", "messages_contain", "messages_excludes",
             "tools_include", "block_types")
KEYS = frozenset({"purpose", "calls", *LIST_KEYS})


def problems(spec: Any, *, notes: Iterable[str] = ()) -> list[str]:
    """What is wrong with a `requests` expectation before the scenario runs (unknown keys,
    wrong types); [] when it is well formed. `notes` are keys allowed and not compared."""
    if not isinstance(spec, dict):
        return ["requests must be an object"]
    allowed = KEYS | set(notes)
    found = [f"requests: unknown key {key!r} (known: {', '.join(sorted(KEYS))})"
             for key in spec if key not in allowed]
    if "purpose" in spec and spec["purpose"] not in PURPOSES:
        found.append(f"requests.purpose must be one of {', '.join(PURPOSES)}")
    calls = spec.get("calls")
    if "calls" in spec and (not isinstance(calls, int) or isinstance(calls, bool) or calls < 0):
        found.append("requests.calls must be a whole number, 0 or more")
    for key in LIST_KEYS:
        value = spec.get(key)
        if key in spec and (not isinstance(value, list)
                            or not all(isinstance(s, str) and s for s in value)):
            found.append(f"requests.{key} must be a list of non-empty strings")
    return found


def system_text(body: dict[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, str):
        return system
    return "\n".join(str(b.get("text", "")) for b in system or [] if isinstance(b, dict))


def messages_text(body: dict[str, Any]) -> str:
    parts: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
            continue
        for block in content or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, str):
                    parts.append(inner)
                else:
                    parts += [str(b.get("text", "")) for b in inner or []
                              if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(parts)


def block_types(body: dict[str, Any]) -> set[str]:
    """Block types in a request's messages (a string content counts as text)."""
    found: set[str] = set()
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            found.add("text")
        elif isinstance(content, list):
            found |= {str(b.get("type")) for b in content if isinstance(b, dict)}
    return found


def block_types_problem(bodies: list[dict[str, Any]], wanted: list[str]) -> str | None:
    """None when one of the request `bodies` carries every type in `wanted` in its messages;
    otherwise what was seen, for the failure message."""
    if any(set(wanted) <= block_types(body) for body in bodies):
        return None
    seen = sorted(set().union(*(block_types(b) for b in bodies))) if bodies else []
    return f"no call's messages held block types {sorted(wanted)} (seen: {seen or 'no calls'})"


def tool_names(body: dict[str, Any]) -> list[str]:
    return [str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)]


def failures(spec: dict[str, Any], bodies: list[dict[str, Any]]) -> list[str]:
    """Each way `bodies` (the request bodies of the purpose, in order) miss `spec`; [] when
    they meet it. A list check against no call at all fails (nothing was seen)."""
    found: list[str] = []
    purpose = spec.get("purpose", "turn")
    if "calls" in spec and len(bodies) != spec["calls"]:
        found.append(f"requests: {len(bodies)} {purpose} call(s), expected {spec['calls']}")
    found += _text_failures(purpose, "system", "contains", [system_text(b) for b in bodies],
                            spec.get("system_contains", []), spec.get("system_excludes", []))
    found += _text_failures(purpose, "messages", "contain", [messages_text(b) for b in bodies],
                            spec.get("messages_contain", []), spec.get("messages_excludes", []))
    tools = [tool_names(b) for b in bodies]
    for wanted in spec.get("tools_include", []):
        if not any(wanted in names for names in tools):
            found.append(f"requests: no {purpose} call lists the tool {wanted!r}")
    if spec.get("block_types"):
        problem = block_types_problem(bodies, list(spec["block_types"]))
        if problem:
            found.append(f"requests: {problem}")
    return found


def _text_failures(purpose: str, part: str, verb: str, texts: list[str], wanted: list[str],
                   unwanted: list[str]) -> list[str]:
    """`failures` of one part of the calls (`texts`, one per call): each `wanted` string no
    call holds, each `unwanted` one some call holds (with those calls' numbers)."""
    found = [f"requests: no {purpose} call's {part} {verb} {w!r}"
             for w in wanted if not any(w in text for text in texts)]
    for bad in unwanted:
        hits = [n for n, text in enumerate(texts) if bad in text]
        if hits:
            found.append(f"requests: the {part} of {purpose} call(s) {hits} (since the "
                         f"previous expect, from 0) {verb} {bad!r}")
    return found
