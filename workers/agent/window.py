"""The history window: which stored messages go into a request, and how they become API messages.

Rules (DESIGN.md, "The request sent to Claude"): the first message sent is a user message made
only of text; a start point moves forward, never back; every tool_use has its tool_result in the
next message, results first; empty text blocks are never sent; consecutive stored user messages
merge into one API message. Pure: no I/O.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Block = dict[str, Any]


@dataclass(frozen=True)
class Stored:
    """The part of a stored message the window needs."""

    id: int
    role: str
    content: list[Block]


def has_tool_result(message: Stored) -> bool:
    return any(b.get("type") == "tool_result" for b in message.content)


def has_tool_use(message: Stored) -> bool:
    return any(b.get("type") == "tool_use" for b in message.content)


def is_safe_start(messages: Sequence[Stored], index: int) -> bool:
    """True when the window may begin at `index`: a user message whose run of consecutive user
    messages carries no tool_result (it would be orphaned), and not right after a tool_use.
    """
    if index >= len(messages) or messages[index].role != "user":
        return False
    if index > 0 and messages[index - 1].role == "assistant" and has_tool_use(messages[index - 1]):
        return False
    for message in messages[index:]:
        if message.role != "user":
            break
        if has_tool_result(message):
            return False
    return all(b.get("type") == "text" for b in messages[index].content)


def first_safe_start(messages: Sequence[Stored], start: int = 0) -> int:
    """The first safe start at or after `start`; `len(messages)` when there is none."""
    index = max(0, start)
    while index < len(messages) and not is_safe_start(messages, index):
        index += 1
    return index


def safe_start(messages: Sequence[Stored], keep: int) -> int:
    """Index of the window that keeps about the last `keep` messages verbatim.

    Starts at `len - keep` and moves forward to the first safe start: it sends a little less
    rather than a broken pair. `len(messages)` when no safe start exists.
    """
    return first_safe_start(messages, len(messages) - max(keep, 1))


def to_api_messages(messages: Sequence[Stored]) -> list[dict[str, Any]]:
    """Stored messages → Messages API `messages`.

    Consecutive same-role messages merge; in a merged user message tool_result blocks come
    first; empty or whitespace-only text blocks are dropped, and so is a message left empty.
    """
    merged: list[dict[str, Any]] = []
    for message in messages:
        blocks = [b for b in message.content if not _is_empty_text(b)]
        if not blocks:
            continue
        if merged and merged[-1]["role"] == message.role:
            merged[-1]["content"].extend(blocks)
        else:
            merged.append({"role": message.role, "content": list(blocks)})
    for api_message in merged:
        if api_message["role"] == "user":
            results = [b for b in api_message["content"] if b.get("type") == "tool_result"]
            others = [b for b in api_message["content"] if b.get("type") != "tool_result"]
            api_message["content"] = results + others
    return merged


def _is_empty_text(block: Block) -> bool:
    return block.get("type") == "text" and not str(block.get("text", "")).strip()
