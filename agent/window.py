"""The history window: which stored messages go into a request, and how they become API messages.

Rules (ARCHITECTURE.md, "The request sent to Claude"): the first message sent is a user message made
only of text, image and document blocks (never a tool_result) and the first of its run of
consecutive user messages (a burst is one turn: never split between summary and window); a
start point moves forward, never back; every tool_use has its tool_result in the next message,
results first; empty text blocks are never sent;
consecutive stored user messages merge into one API message. Between compactions the window is
everything after the summary's end; only compaction (or the hard cap) moves its start. Old tool
results are pruned to a short note up to a boundary that also moves only at compaction, so the
prefix is stable between steps.
Pure: no I/O. Stored messages are given in history order (their `position`).
"""

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent import media

Block = dict[str, Any]
_SLOT = re.compile(r"\b\d{2}:\d{2}\b")
PRUNED_PREFIX = "result omitted:"


@dataclass(frozen=True)
class Stored:
    """The part of a stored message the window needs. `position` orders the history."""

    id: int
    role: str
    content: list[Block]
    position: int = 0
    author: str | None = None  # Message.author: None for the customer's and the agent's


def has_tool_result(message: Stored) -> bool:
    return any(b.get("type") == "tool_result" for b in message.content)


def has_tool_use(message: Stored) -> bool:
    return any(b.get("type") == "tool_use" for b in message.content)


TURN_START_BLOCKS = ("text", *media.MEDIA_BLOCK_TYPES)


def is_turn_start(message: Stored) -> bool:
    """A user message made only of text, image and document blocks (a customer's message,
    with its photo or PDF): a turn the person began. Never one with a tool_result."""
    return message.role == "user" and bool(message.content) and all(
        b.get("type") in TURN_START_BLOCKS for b in message.content)


def starts_run(messages: Sequence[Stored], index: int) -> bool:
    """True when `index` is the first of a run of consecutive user messages: they merge into
    one API message (`to_api_messages`), so a burst the customer sent is one turn and no cut
    may fall inside it (ARCHITECTURE.md, Safe start). A message with nothing to send (no content, or
    only empty text: the claim an edit makes for an original not yet arrived) is dropped by
    `to_api_messages`, so it neither starts nor joins a run."""
    before = _previous_sent(messages, index)
    return messages[index].role == "user" and (before is None or before.role != "user")


def _previous_sent(messages: Sequence[Stored], index: int) -> Stored | None:
    """The last message before `index` that `to_api_messages` sends (one with a non-empty
    block); None when there is none."""
    for earlier in reversed(messages[:index]):
        if any(not _is_empty_text(b) for b in earlier.content):
            return earlier
    return None


def is_safe_start(messages: Sequence[Stored], index: int) -> bool:
    """True when the window may begin at `index`: the first message of a run of consecutive
    user messages (never one inside a burst), made only of text and media, whose run carries no
    tool_result (it would be orphaned), and which does not follow a tool_use (its results
    would be cut from it).
    """
    if index >= len(messages) or not is_turn_start(messages[index]) \
            or not starts_run(messages, index):
        return False
    before = _previous_sent(messages, index)
    if before is not None and has_tool_use(before):
        return False
    for message in messages[index:]:
        if message.role != "user":
            break
        if has_tool_result(message):
            return False
    return True


def first_safe_start(messages: Sequence[Stored], start: int = 0) -> int:
    """The first safe start at or after `start`; `len(messages)` when there is none."""
    index = max(0, start)
    while index < len(messages) and not is_safe_start(messages, index):
        index += 1
    return index


def last_safe_start(messages: Sequence[Stored]) -> int:
    """The last safe start (the latest turn the customer began, whole); `len(messages)` when
    there is none."""
    for index in range(len(messages) - 1, -1, -1):
        if is_safe_start(messages, index):
            return index
    return len(messages)


def customer_run(messages: Sequence[Stored], index: int) -> bool:
    """True when the run of user messages from `index` holds one the customer wrote (author
    None: not a product or staff message rendered as context, agent/timeline.py)."""
    for message in messages[index:]:
        if message.role != "user":
            return False
        if message.author is None and is_turn_start(message):
            return True
    return False


def last_customer_start(messages: Sequence[Stored]) -> int:
    """The last safe start whose run holds a message the customer wrote; `len(messages)` when
    there is none."""
    for index in range(len(messages) - 1, -1, -1):
        if is_safe_start(messages, index) and customer_run(messages, index):
            return index
    return len(messages)


def safe_start(messages: Sequence[Stored], keep: int) -> int:
    """Index of the window that keeps about the last `keep` messages verbatim.

    Starts at `len - keep` and moves forward to the first safe start: it sends a little less
    rather than a broken pair or a split burst. When the last `keep` messages hold none (they
    sit inside the latest turn, e.g. a burst longer than `keep`), the latest turn's start: that
    turn whole, never a part of it. Never after the latest turn the customer began (messages
    the product sent after it, a reminder or an alert, never push the customer's messages
    out). `len(messages)` when no safe start exists.
    """
    start = first_safe_start(messages, len(messages) - max(keep, 1))
    if start >= len(messages):
        start = last_safe_start(messages)
    return min(start, last_customer_start(messages))


def select_window(messages: Sequence[Stored], *, summarized_until: int, keep: int,
                  hard_cap: bool) -> list[Stored]:
    """The messages to send: everything after position `summarized_until` from its first safe
    start; with `hard_cap` only the safe window of the last `keep` messages, or the latest
    turn whole when it is longer than that (a burst is never split, and never dropped).
    """
    after = [m for m in messages if m.position > summarized_until]
    start = safe_start(after, keep) if hard_cap else first_safe_start(after)
    return after[start:]


# Issue 41: lookups are the tools that change nothing and whose results are long (a slot
# search lists up to 20 slots, list_services the catalogue). A lookup's result serves the turn
# that asked for it: from the next customer turn on it is pruned like any old result (what the
# model offered from it, offer_choices' options, and what was booked stay), and while its turn
# runs the request's tail breakpoint sits before it (agent/context.place_breakpoints), so its
# bytes are sent once or twice uncached instead of being written to the cache at 2x and read
# on every later call. The price: a customer who asks, turns later, for a slot that was listed
# but not offered costs a new search. Figures: bench/README.md, issue 41.
LOOKUP_TOOLS = frozenset({"find_available_slots", "list_services"})


def prune(messages: Sequence[Stored], *, pruned_until: int,
          lookups_until: int = 0) -> list[Stored]:
    """Replace the content of tool results at or before position `pruned_until`, and of
    LOOKUP_TOOLS' results at or before `lookups_until` (the turn boundary: `prune_boundary`
    with one customer turn kept), by a short note that keeps the `tool_use_id` and says what
    was there. Deterministic: the same input gives the same bytes, so a pruned prefix stays
    cacheable. Media blocks (a photo, a PDF) up to `pruned_until` become a short note too
    (`agent.media.omitted_note`); compaction deletes their bytes when it moves the boundary
    (storage/media.py).
    """
    names = {b["id"]: str(b.get("name")) for m in messages if m.role == "assistant"
             for b in m.content if b.get("type") == "tool_use"}
    pruned: list[Stored] = []
    for message in messages:
        old = message.position <= pruned_until
        lookups = message.position <= lookups_until and has_tool_result(message)
        if not (old and (has_tool_result(message) or any(media.is_media(b)
                                                         for b in message.content))
                or lookups):
            pruned.append(message)
            continue
        content = [_prune_result(b, names.get(b.get("tool_use_id", ""), "tool"), old=old)
                   if b.get("type") == "tool_result"
                   else media.omitted_note(b) if old and media.is_media(b) else b
                   for b in message.content]
        pruned.append(Stored(message.id, message.role, content, message.position,
                             message.author))
    return pruned


def _prune_result(block: Block, tool_name: str, *, old: bool) -> Block:
    """`block` pruned when it is `old` or the result of a lookup; else as it is."""
    return _prune_block(block, tool_name) if old or tool_name in LOOKUP_TOOLS else block


def is_lookup_result(block: Block, names: dict[str, str]) -> bool:
    """`block` is a tool_result of a LOOKUP_TOOLS call (`names`: tool_use id -> tool name) not
    pruned yet: the first such block of a request is where its stable prefix ends."""
    return block.get("type") == "tool_result" and names.get(
        str(block.get("tool_use_id")), "") in LOOKUP_TOOLS and not tool_result_text(
        block.get("content")).startswith(PRUNED_PREFIX)


def _prune_block(block: Block, tool_name: str) -> Block:
    text = tool_result_text(block.get("content"))
    if text.startswith(PRUNED_PREFIX):
        return block  # once pruned, stays as it is
    note = prune_note(tool_name, text)
    pruned: Block = {"type": "tool_result", "tool_use_id": block["tool_use_id"],
                     "content": note}
    if block.get("is_error"):
        pruned["is_error"] = True
    return pruned


def prune_note(tool_name: str, text: str) -> str:
    """"result omitted: 20 slots listed" for slot searches; a line count otherwise."""
    if tool_name == "find_available_slots":
        return f"{PRUNED_PREFIX} {len(_SLOT.findall(text))} slots listed"
    lines = len([line for line in text.splitlines() if line.strip()])
    return f"{PRUNED_PREFIX} {tool_name} returned {lines} line(s)"


def tool_result_text(content: Any) -> str:
    """The text of a tool_result's `content`: a string as it is; a list of content blocks as
    their texts, one per line (what the Messages API accepts; our tools store a string,
    `agent/loop.py`); anything else "". Pruning, the summariser's transcript and the console
    read results through this one function.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def prune_boundary(messages: Sequence[Stored], *, keep_user_turns: int) -> int:
    """Position up to which tool results may be pruned: just before the start of the
    `keep_user_turns`-th last turn the customer began (a run holding a customer message: a
    reminder alone is not a turn). 0 when there are not that many turns.
    """
    starts = [i for i, m in enumerate(messages) if is_turn_start(m) and starts_run(messages, i)
              and customer_run(messages, i)]
    if keep_user_turns <= 0:
        return messages[-1].position if messages else 0
    if len(starts) < keep_user_turns:
        return 0
    index = starts[-keep_user_turns]
    return messages[index - 1].position if index > 0 else 0


def find_dangling(messages: Sequence[Stored]) -> list[tuple[int, list[Block]]]:
    """Assistant messages whose tool_use blocks have no tool_result in the run of user messages
    right after them (a worker died between the two writes): (index, missing tool_use blocks).
    """
    dangling = []
    for index, message in enumerate(messages):
        if message.role != "assistant" or not has_tool_use(message):
            continue
        answered = set()
        for following in messages[index + 1:]:
            if following.role != "user":
                break
            answered |= {b.get("tool_use_id") for b in following.content
                         if b.get("type") == "tool_result"}
        missing = [b for b in message.content
                   if b.get("type") == "tool_use" and b.get("id") not in answered]
        if missing:
            dangling.append((index, missing))
    return dangling


def estimate_tokens(messages: Sequence[Stored]) -> int:
    """Rough context size of stored messages: UTF-8 bytes of the serialized blocks / 4; a
    photo or a PDF by the token rules of `agent.media` (never its bytes / 4)."""
    return sum(_block_estimate(b) for m in messages for b in m.content)


def _block_estimate(block: Block) -> int:
    counted = media.block_tokens(block)
    if counted is not None:
        return counted
    return math.ceil(len(json.dumps(block, ensure_ascii=False, separators=(",", ":"))
                         .encode()) / 4)


SENT_NOTE = "[enviado ao cliente: {text}]"  # agent/timeline.py LABELS["sent"]


def to_api_messages(messages: Sequence[Stored]) -> list[dict[str, Any]]:
    """Stored messages → Messages API `messages`.

    Consecutive same-role messages merge; in a merged user message tool_result blocks come
    first; empty or whitespace-only text blocks are dropped, and so is a message left empty.
    A request never ends on the assistant's side (the API refuses it: "must end with a user
    message"): trailing assistant text (a message stored after the customer's, e.g. one
    written before authors were recorded, agent/timeline.py) goes to the user side as a note
    of what was sent.
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
    if merged and merged[-1]["role"] == "assistant" and not any(
            b.get("type") == "tool_use" for b in merged[-1]["content"]):
        texts = [str(b.get("text", "")).strip() for b in merged.pop()["content"]
                 if b.get("type") == "text"]
        note = {"type": "text", "text": SENT_NOTE.format(text="\n".join(texts))}
        if merged:
            merged[-1]["content"].append(note)
        else:
            merged.append({"role": "user", "content": [note]})
    for api_message in merged:
        if api_message["role"] == "user":
            results = [b for b in api_message["content"] if b.get("type") == "tool_result"]
            others = [b for b in api_message["content"] if b.get("type") != "tool_result"]
            api_message["content"] = results + others
    return merged


def _is_empty_text(block: Block) -> bool:
    return block.get("type") == "text" and not str(block.get("text", "")).strip()
