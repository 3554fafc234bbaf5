"""The Claude tool-calling loop: call, run tools, feed results back, until a final answer.

Handles every `stop_reason` of the Messages API (Sources: Anthropic §1.3): `tool_use`,
`end_turn`/`stop_sequence`, `max_tokens` (a truncated tool call is never executed), `refusal`,
`pause_turn` (the assistant content is sent back as is) and `model_context_window_exceeded`.
It stores nothing itself: `hooks` persist each intermediate message as it happens; the final
assistant content is returned for the caller to store together with its side effects.
"""

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.errors import ContextWindowExceeded
from agent.tools.registry import tool_reply
from core.storable import storable_value

Block = dict[str, Any]
MAX_PAUSE_CONTINUATIONS = 5


class LoopHooks(Protocol):
    def on_response(self, response: Any) -> None:
        """Every API response (usage, request id), before anything else is done with it."""

    def on_assistant(self, content: list[Block]) -> None:
        """An intermediate assistant message (tool_use or pause_turn) to store."""

    def tool_round(self, run: Callable[[], list[Block]]) -> list[Block]:
        """Run the round's tools (`run`: one tool_result per tool_use of the previous
        assistant message) and store the user message of their results; returns them. The
        hooks may run `run` again (its results were never seen), so it records nothing."""

    def fold_new_messages(self) -> list[Block]:
        """Customer messages that arrived during the turn, placed after the results just
        stored: their blocks join the same user message, so the final answer covers them."""


ToolExecutor = Callable[[Block], tuple[str, bool]]
# a tool_use block and its successful result -> the customer's reply that ends the turn, or None
FinalReply = Callable[[Block, str], str | None]
# messages -> every argument of `messages.create` for that round (context.build_request, bound)
RequestBuilder = Callable[[list[dict[str, Any]]], dict[str, Any]]


@dataclass
class LoopOutcome:
    """What happened. `kind`: answered, refusal, truncated, max_rounds, empty, or stopped (a
    tool of `stop_after` succeeded: no further call; the caller sends its own reply).
    A turn ended by a tool's own reply (`final_reply`) is answered, that reply its text.

    `final_content` is the last assistant content (text blocks only, possibly empty) still to be
    stored; `rounds` counts API calls; `tool_errors` counts results sent with `is_error`.
    """

    kind: str
    final_content: list[Block]
    stop_reason: str | None
    rounds: int
    tool_errors: int = 0
    tool_calls: list[str] = field(default_factory=list)
    stopped_by: Block | None = None  # kind stopped: the tool_use block that ended the turn

    @property
    def final_text(self) -> str:
        return "\n\n".join(b["text"].strip() for b in self.final_content
                           if b.get("type") == "text" and b["text"].strip())


def run_tool_loop(create: Callable[..., Any], *, request_for: RequestBuilder,
                  messages: list[dict[str, Any]], execute: ToolExecutor, hooks: LoopHooks,
                  max_rounds: int,
                  fatal: tuple[type[BaseException], ...] = (),
                  stop_after: frozenset[str] = frozenset(),
                  final_reply: FinalReply = tool_reply) -> LoopOutcome:
    """Run the loop. `create` is `client.messages.create` (with the purpose header bound);
    each round sends `request_for(messages)`, the whole request as the builder makes it, its
    breakpoints included; `messages` grows here (the caller's list).
    A tool that raises becomes an `is_error` result, except for the `fatal` exceptions (the
    job's timeout), which propagate. A round in which a tool named in `stop_after` succeeded
    ends the loop once its results are stored (`kind` stopped: the handoff). A round whose
    calls all succeeded, one or more of them carrying the customer's reply (`final_reply`:
    offer_choices' body, a booking's checked `reply`; issue 41), ends the loop answered with
    those replies as one text, unless customer messages were folded in after its results.

    Raises the SDK's errors unchanged and ContextWindowExceeded.
    """
    outcome = LoopOutcome(kind="max_rounds", final_content=[], stop_reason=None, rounds=0)
    pauses = 0
    while outcome.rounds < max_rounds:
        response = create(**request_for(messages))
        outcome.rounds += 1
        outcome.stop_reason = response.stop_reason
        hooks.on_response(response)
        content = dump_content(response.content)
        if response.stop_reason == "model_context_window_exceeded":
            raise ContextWindowExceeded(f"request {getattr(response, '_request_id', None)}")
        if response.stop_reason == "pause_turn" and content and pauses < MAX_PAUSE_CONTINUATIONS:
            pauses += 1
            _append(messages, hooks, content)
            continue
        if response.stop_reason == "tool_use" and any(_is_tool_use(b) for b in content):
            _append(messages, hooks, content)
            uses = [block for block in content if _is_tool_use(block)]
            results = hooks.tool_round(functools.partial(_run_tools, uses, execute, fatal))
            outcome.tool_calls += [str(b.get("name")) for b in uses]
            outcome.tool_errors += sum(1 for r in results if r.get("is_error"))
            messages.append({"role": "user", "content": results})
            folded = hooks.fold_new_messages()
            messages[-1]["content"].extend(folded)  # results stay first
            stops = [b for b in content if _is_tool_use(b) and b.get("name") in stop_after
                     and not _failed(results, b)]
            if stops:
                outcome.kind, outcome.stopped_by = "stopped", stops[0]
                return outcome
            replies = [] if folded else _replies(content, results, final_reply)
            if replies:
                outcome.kind = "answered"
                outcome.final_content = [{"type": "text", "text": "\n\n".join(replies)}]
                return outcome
            continue
        outcome.final_content = [b for b in content if b.get("type") == "text"]
        outcome.kind = _final_kind(response.stop_reason, outcome.final_content)
        return outcome
    return outcome


def _replies(content: list[Block], results: list[Block], final_reply: FinalReply) -> list[str]:
    """The replies the round's tools carry, when every call of the round succeeded (an error
    is for the model to read: it is called again)."""
    if any(r.get("is_error") for r in results):
        return []
    texts = {r["tool_use_id"]: r["content"] for r in results}
    replies = (final_reply(b, str(texts.get(b["id"], ""))) for b in content if _is_tool_use(b))
    return [r.strip() for r in replies if r and r.strip()]


def _final_kind(stop_reason: str | None, text_blocks: list[Block]) -> str:
    if stop_reason == "refusal":
        return "refusal"
    if stop_reason == "max_tokens":
        return "truncated" if text_blocks else "empty"
    return "answered" if text_blocks else "empty"


def _append(messages: list[dict[str, Any]], hooks: LoopHooks, content: list[Block]) -> None:
    messages.append({"role": "assistant", "content": content})
    hooks.on_assistant(content)


def _run_tools(uses: list[Block], execute: ToolExecutor,
               fatal: tuple[type[BaseException], ...]) -> list[Block]:
    return [_run_tool(block, execute, fatal) for block in uses]


def _run_tool(block: Block, execute: ToolExecutor,
              fatal: tuple[type[BaseException], ...]) -> Block:
    try:
        text, is_error = execute(block)
    except fatal:
        raise
    except Exception as exc:  # a tool bug must not kill the turn: the model sees an error result
        text, is_error = f"internal error in tool {block.get('name')}: {type(exc).__name__}", True
    result: Block = {"type": "tool_result", "tool_use_id": block["id"],
                     "content": text or "(no output)"}
    if is_error:
        result["is_error"] = True
    return result


def _failed(results: list[Block], use: Block) -> bool:
    return any(r["tool_use_id"] == use.get("id") and r.get("is_error") for r in results)


def _is_tool_use(block: Block) -> bool:
    return block.get("type") == "tool_use"


def dump_content(content: Any) -> list[Block]:
    """SDK content blocks → JSON-safe dicts as the API takes them; empty text blocks dropped
    (anthropic-sdk-python#461: an empty text block is a 400 when sent back). The one home of
    what the model wrote (a turn's answer and tool inputs, a summary, facts): every string made
    storable (core/storable.py: PostgreSQL refuses NUL and lone surrogates in text and JSONB).
    """
    blocks: list[Block] = []
    for block in content or []:
        if hasattr(block, "model_dump"):  # no warning for a malformed input: it is kept wrapped
            data = block.model_dump(mode="json", exclude_none=True, warnings=False)
        else:
            data = dict(block)
        data = storable_value(data)
        if data.get("type") == "text":
            data = {"type": "text", "text": data.get("text", "")}
            if not data["text"].strip():
                continue
        elif data.get("type") == "tool_use":
            raw = data.get("input")
            # the API takes only an object back: keep what the model sent, wrapped
            tool_input = raw if isinstance(raw, dict) else ({} if raw is None else
                                                             {"invalid_input": raw})
            data = {"type": "tool_use", "id": data["id"], "name": data["name"],
                    "input": tool_input}
        blocks.append(data)
    return blocks
