"""A Messages API double: a loopback aiohttp server that speaks the Anthropic wire format.

The real `anthropic` SDK (2.x) talks to it unchanged::

    double = MessagesDouble(api_key="test")
    base_url = await double.start()
    client = anthropic.Anthropic(api_key="test", base_url=base_url, max_retries=0)

What it does (ARCHITECTURE.md, "Testing against the real wire"):

* ``POST /v1/messages`` checks auth (``Authorization: Bearer`` or ``x-api-key``) and the
  ``anthropic-version`` header, then validates the body the way the real API does (tool pairing on
  merged turns, tool results first, non-empty text, at most 4 cache breakpoints, no sampling
  parameters, no prefill...). A broken rule is a 400 ``invalid_request_error`` in the real error
  shape and counts in ``api_errors``.
* Valid requests are answered from scripted responses, one FIFO per purpose. The purpose is the
  ``x-wagent-purpose`` request header (``turn`` when absent; the product also uses ``summary`` and
  ``facts``). An empty queue answers 500 and counts in ``unscripted_calls``; ``fail`` injects
  error statuses. Every error carries ``x-should-retry: false`` so the SDK never retries.
* With ``relay`` set (replay/relay.py: ``wagent chat`` and ``wagent replay --live`` with a
  key), a valid call whose purpose has no scripted response goes on to a real Messages API and
  is recorded with its real answer and usage (not counted in ``unscripted_calls``).
* A scripted item may carry ``"delay": "25s"`` (any duration ``core.clock.parse_duration``
  reads): answering it first moves the product's clock by that much (the ``advance`` callable
  given at construction; replays pass their ``FrozenClock.advance``), as if the model had taken
  that long. Nothing sleeps.
* ``POST /v1/messages/count_tokens`` answers ``{"input_tokens": N}`` from the same cost model.

Pinned cost model (deterministic, so cache hit ratio and context size can be compared):

1. The request is flattened into blocks in prompt order: each tool definition, then the system
   prompt (a string is one text block), then every content block of every message (a string
   content is one text block). Consecutive same-role messages need no special care: merging them
   does not change the block sequence.
2. A block's tokens: drop its ``cache_control`` (also on blocks nested in its ``content`` list),
   serialize with ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``, and
   take ``ceil(utf8_bytes / 4)``. An image or document block instead counts by the product's
   stated rules (agent/media.py: an image width × height / 750, capped at 1,600; a PDF 2,000 a
   page), measured from its decoded bytes: never its base64 / 4.
3. Prefix key at position i: a running sha256 over the model name and, for every block up to i,
   its section (``tools``, ``system``, ``user``, ``assistant``) and serialization. Caches are thus
   model-scoped and a block under a different role is not a prefix match.
4. Breakpoints: blocks carrying ``cache_control`` (directly or on a nested content block), plus
   the last block when the top-level ``cache_control`` is present. TTL ``5m`` (default) or ``1h``.
5. Read: for each breakpoint p, look at positions p, p-1, ... p-19 (20 blocks) for an unexpired
   entry with that position's prefix key; the largest hit over all breakpoints gives
   ``cache_read_input_tokens`` = tokens of blocks[0..hit]. The hit refreshes its entry's expiry.
6. Write: every breakpoint p beyond the hit whose prefix has at least ``min_cacheable_tokens``
   tokens stores an entry. ``cache_creation_input_tokens`` = tokens after the hit up to the last
   written breakpoint; each segment is billed to the TTL of the breakpoint that closes it
   (``ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``).
7. ``input_tokens`` = total - cache read - cache creation. ``output_tokens`` =
   ``ceil(utf8 bytes of the serialized response content / 4)``, at least 1.
8. Expiry is measured on the injected clock (the product clock, which replays move with
   ``advance``), never on wall time.

Only successful calls touch the cache. Injected failures do not count in ``api_errors`` (that
counter measures requests the product got wrong).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import itertools
import json
import math
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

import core.clock
from agent import media
from replay.relay import Relay

PURPOSE_HEADER = "x-wagent-purpose"
DEFAULT_PURPOSE = "turn"
MAX_BREAKPOINTS = 4
MAX_REQUEST_BYTES = 32 * 1024 * 1024  # the Messages API's request size limit (a PDF is 32 MB)
LOOKBACK_BLOCKS = 20
TTLS: dict[str, timedelta] = {"5m": timedelta(minutes=5), "1h": timedelta(hours=1)}

ALLOWED_KEYS = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "metadata",
        "stop_sequences",
        "stream",
        "thinking",
        "output_config",
        "cache_control",
        "service_tier",
        "diagnostics",
        "container",
        "inference_geo",
        "speed",
    }
)
SAMPLING_KEYS = ("temperature", "top_p", "top_k")

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
DEFAULT_ERROR_MESSAGES: dict[int, str] = {
    429: "Number of request tokens has exceeded your per-minute rate limit",
    500: "Internal server error",
    529: "Overloaded",
}

TOOL_USE_WITHOUT_RESULT = (
    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
    "{ids}. Each `tool_use` block must have a corresponding `tool_result` block in the next "
    "message."
)
ORPHAN_TOOL_RESULT = (
    "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. "
    "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
)
RESULTS_NOT_FIRST = (
    "messages.{i}: Did not find {n} `tool_result` block(s) at the beginning of this message. "
    "Messages following `tool_use` blocks must begin with a matching number of `tool_result` "
    "blocks."
)
EMPTY_MESSAGE = (
    "messages.{i}: all messages must have non-empty content except for the optional final "
    "assistant message"
)
PREFILL = (
    "This model does not support assistant message prefill. The conversation must end with a "
    "user message."
)
TTL_ORDER = (
    "A cache_control block with ttl='1h' must not come after a cache_control block with "
    "ttl='5m'. Blocks are processed in the order `tools`, `system`, `messages`."
)


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


class _Invalid(Exception):
    """A request rule was broken; the message is the 400's text."""


def validate_request(body: dict[str, Any], *, require_max_tokens: bool = True) -> str | None:
    """Check a Messages API request body; return the 400 message, or None when it is valid.

    `require_max_tokens=False` is the ``count_tokens`` variant (no ``max_tokens`` field).
    """
    try:
        _validate(body, require_max_tokens=require_max_tokens)
    except _Invalid as problem:
        return str(problem)
    return None


def _validate(body: dict[str, Any], *, require_max_tokens: bool) -> None:
    if not isinstance(body, dict):
        raise _Invalid("request body must be a JSON object")
    _check_top_level_keys(body, require_max_tokens=require_max_tokens)
    _check_model_and_max_tokens(body, require_max_tokens=require_max_tokens)
    if body.get("stream"):
        raise _Invalid("stream: streaming is not supported by this Messages API double")
    _check_tools(body.get("tools"))
    _check_system(body.get("system"))
    messages = _check_messages_shape(body.get("messages"))
    _check_conversation(_merge_turns(messages))
    _check_cache_controls(body)


def _check_top_level_keys(body: dict[str, Any], *, require_max_tokens: bool) -> None:
    for key in SAMPLING_KEYS:
        if key in body:
            raise _Invalid(f"{key}: Extra inputs are not permitted")
    allowed = ALLOWED_KEYS if require_max_tokens else ALLOWED_KEYS - {"max_tokens", "stream"}
    for key in body:
        if key not in allowed:
            raise _Invalid(f"{key}: Extra inputs are not permitted")


def _check_model_and_max_tokens(body: dict[str, Any], *, require_max_tokens: bool) -> None:
    if "model" not in body:
        raise _Invalid("model: Field required")
    if not isinstance(body["model"], str) or not body["model"]:
        raise _Invalid("model: Input should be a valid string")
    if not require_max_tokens:
        return
    if "max_tokens" not in body:
        raise _Invalid("max_tokens: Field required")
    max_tokens = body["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise _Invalid("max_tokens: Input should be a valid integer")
    if max_tokens < 1:
        raise _Invalid("max_tokens: Input should be greater than or equal to 1")


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _Invalid("tools: Input should be a valid list")
    names: set[str] = set()
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _Invalid(f"tools.{index}: Input should be a valid dictionary or object")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise _Invalid(f"tools.{index}.name: Field required")
        if name in names:
            raise _Invalid("tools: Tool names must be unique.")
        names.add(name)


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise _Invalid("system: Input should be a valid string or a list of text blocks")
    for index, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise _Invalid(f"system.{index}.type: Input should be 'text'")
        _check_text(block.get("text"), where="system")


def _check_text(text: Any, *, where: str) -> None:
    if not isinstance(text, str):
        raise _Invalid(f"{where}: text content blocks must have a string `text`")
    if not text:
        raise _Invalid(f"{where}: text content blocks must be non-empty")
    if not text.strip():
        raise _Invalid(f"{where}: text content blocks must contain non-whitespace text")


def _check_messages_shape(messages: Any) -> list[dict[str, Any]]:
    if messages is None:
        raise _Invalid("messages: Field required")
    if not isinstance(messages, list):
        raise _Invalid("messages: Input should be a valid list")
    if not messages:
        raise _Invalid("messages: at least one message is required")
    for index, message in enumerate(messages):
        _check_message(index, message)
    if messages[0]["role"] != "user":
        raise _Invalid('messages: first message must use the "user" role')
    return messages


def _check_message(index: int, message: Any) -> None:
    if not isinstance(message, dict):
        raise _Invalid(f"messages.{index}: Input should be a valid dictionary or object")
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise _Invalid(f"messages.{index}.role: Input should be 'user' or 'assistant'")
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            raise _Invalid(EMPTY_MESSAGE.format(i=index))
        _check_text(content, where="messages")
        return
    if not isinstance(content, list):
        raise _Invalid(f"messages.{index}.content: Input should be a valid string or list")
    if not content:
        raise _Invalid(EMPTY_MESSAGE.format(i=index))
    for position, block in enumerate(content):
        _check_block(f"messages.{index}.content.{position}", role, block)


def _check_block(where: str, role: str, block: Any) -> None:
    if not isinstance(block, dict):
        raise _Invalid(f"{where}: Input should be a valid dictionary or object")
    kind = block.get("type")
    if not isinstance(kind, str):
        raise _Invalid(f"{where}.type: Field required")
    if kind == "text":
        _check_text(block.get("text"), where="messages")
    elif kind == "tool_use":
        _check_tool_use(where, role, block)
    elif kind == "tool_result":
        _check_tool_result(where, role, block)
    elif kind in media.MEDIA_BLOCK_TYPES:
        _check_media(where, role, block)


def _check_media(where: str, role: str, block: dict[str, Any]) -> None:
    """An image or document block within the bounds of agent/media.py (the product states them
    once, the double enforces them): base64 source, a supported media type, size, pixels,
    pages. Only user messages carry them."""
    kind = block["type"]
    if role != "user":
        raise _Invalid(f"{where}: `{kind}` blocks can only appear in user messages")
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "base64":
        raise _Invalid(f"{where}.source: Input tag does not match any of the expected tags: "
                       "'base64', 'url'")
    allowed = media.IMAGE_TYPES if kind == "image" else media.DOCUMENT_TYPES
    if source.get("media_type") not in allowed:
        raise _Invalid(f"{where}.source.media_type: Input should be "
                       + " or ".join(repr(t) for t in allowed))
    try:
        data = base64.b64decode(str(source.get("data", "")), validate=True)
    except ValueError as exc:
        raise _Invalid(f"{where}.source.data: invalid base64 data") from exc
    try:
        fields = media.check_file(data, str(source["media_type"]))
    except media.MediaRejected as exc:
        raise _Invalid(f"{where}.source.{kind}: {exc}") from exc
    if kind == "image" and fields["media_type"] != source["media_type"]:
        raise _Invalid(f"{where}.source.base64: The image was specified using the "
                       f"{source['media_type']} media type, but the image appears to be a "
                       f"{fields['media_type']} image")


COULD_NOT_PROCESS_IMAGE = "Could not process image"  # the real API's text: no position
PDF_NOT_VALID = "{where}.pdf.source.base64.data: The PDF specified was not valid."


def undecodable_media(body: dict[str, Any]) -> str | None:
    """The 400 text for the first image or PDF of a (valid) request whose bytes do not decode,
    by the double's own check, stricter than the product's (agent/media.py walks structure;
    this one inflates a PNG's image data and checks its size against IHDR, wants a JPEG's
    entropy-coded data after its scan header, a PDF's `%%EOF`). The texts are the real API's
    (as quoted in anthropics/claude-code issues #1747, #5174: "Could not process image", and
    "messages.N.content.M.pdf.source.base64.data: The PDF specified was not valid.").
    None when every file decodes."""
    for index, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for position, block in enumerate(content if isinstance(content, list) else []):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind not in media.MEDIA_BLOCK_TYPES:
                continue
            source = block.get("source") or {}
            data = base64.b64decode(str(source.get("data", "")))
            if kind == "document" and b"%%EOF" not in data[-1024:]:
                return PDF_NOT_VALID.format(where=f"messages.{index}.content.{position}")
            if kind == "image" and not _decodes(str(source.get("media_type")), data):
                return COULD_NOT_PROCESS_IMAGE
    return None


def _decodes(media_type: str, data: bytes) -> bool:
    try:
        if media_type == "image/png":
            return _png_decodes(data)
        if media_type == "image/jpeg":
            scan = data.find(b"\xff\xda")
            length = int.from_bytes(data[scan + 2:scan + 4], "big")
            return scan > 0 and data.rfind(b"\xff\xd9") > scan + 2 + length
    except (ValueError, IndexError, zlib.error):
        return False
    return True


def _png_decodes(data: bytes) -> bool:
    """Inflate the IDAT stream and compare its length with what IHDR's size asks for
    (non-interlaced; an interlaced image only has to inflate)."""
    index, idat, header = 8, [], b""
    while index + 8 <= len(data):
        length = int.from_bytes(data[index:index + 4], "big")
        kind, body = data[index + 4:index + 8], data[index + 8:index + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat.append(body)
        index += 12 + length
    if len(header) < 13 or not idat:
        return False
    width, height = int.from_bytes(header[0:4], "big"), int.from_bytes(header[4:8], "big")
    depth, colour, interlace = header[8], header[9], header[12]
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(colour, 0)
    inflater = zlib.decompressobj()
    raw = inflater.decompress(b"".join(idat), 64 * 1024 * 1024)
    if not inflater.eof:
        return False
    if interlace:
        return True
    return channels > 0 and len(raw) == height * (1 + math.ceil(width * channels * depth / 8))


def _check_tool_use(where: str, role: str, block: dict[str, Any]) -> None:
    if role != "assistant":
        raise _Invalid(f"{where}: `tool_use` blocks can only appear in assistant messages")
    for key, kind in (("id", str), ("name", str), ("input", dict)):
        if not isinstance(block.get(key), kind):
            raise _Invalid(f"{where}.{key}: Field required")


def _check_tool_result(where: str, role: str, block: dict[str, Any]) -> None:
    if role != "user":
        raise _Invalid(f"{where}: `tool_result` blocks can only appear in user messages")
    if not isinstance(block.get("tool_use_id"), str):
        raise _Invalid(f"{where}.tool_use_id: Field required")
    content = block.get("content")
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _Invalid(f"{where}.content: Input should be a valid string or list")
    for position, inner in enumerate(content):
        if not isinstance(inner, dict) or not isinstance(inner.get("type"), str):
            raise _Invalid(f"{where}.content.{position}.type: Field required")
        if inner["type"] == "text":
            _check_text(inner.get("text"), where="messages")


def _content_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def _merge_turns(messages: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Combine consecutive same-role messages, as the real API does."""
    merged: list[tuple[str, list[dict[str, Any]]]] = []
    for message in messages:
        blocks = _content_blocks(message["content"])
        if merged and merged[-1][0] == message["role"]:
            merged[-1][1].extend(blocks)
        else:
            merged.append((message["role"], blocks))
    return merged


def _tool_use_ids(blocks: list[dict[str, Any]]) -> list[str]:
    return [block["id"] for block in blocks if block.get("type") == "tool_use"]


def _check_conversation(turns: list[tuple[str, list[dict[str, Any]]]]) -> None:
    for index, (role, blocks) in enumerate(turns):
        if role == "user":
            previous = turns[index - 1][1] if index else []
            _check_results(index, blocks, set(_tool_use_ids(previous)))
        else:
            following = turns[index + 1][1] if index + 1 < len(turns) else []
            _check_uses_answered(index, blocks, following)
    last_role, last_blocks = turns[-1]
    if last_role != "user" and not _is_server_tool_continuation(last_blocks):
        raise _Invalid(PREFILL)


def _is_server_tool_continuation(blocks: list[dict[str, Any]]) -> bool:
    """A `pause_turn` resend: the paused assistant turn ends in a server tool call, which the
    API itself continues (Sources: Anthropic §1.3); it is not a prefill.
    """
    return bool(blocks) and blocks[-1].get("type") == "server_tool_use"


def _check_results(index: int, blocks: list[dict[str, Any]], expected: set[str]) -> None:
    seen_other = False
    for position, block in enumerate(blocks):
        if block.get("type") != "tool_result":
            seen_other = True
            continue
        if block["tool_use_id"] not in expected:
            raise _Invalid(ORPHAN_TOOL_RESULT.format(i=index, j=position, id=block["tool_use_id"]))
        if seen_other:
            raise _Invalid(RESULTS_NOT_FIRST.format(i=index, n=len(expected)))


def _check_uses_answered(
    index: int, blocks: list[dict[str, Any]], following: list[dict[str, Any]]
) -> None:
    answered = {b["tool_use_id"] for b in following if b.get("type") == "tool_result"}
    missing = [tool_id for tool_id in _tool_use_ids(blocks) if tool_id not in answered]
    if missing:
        raise _Invalid(TOOL_USE_WITHOUT_RESULT.format(i=index, ids=", ".join(missing)))


def _cache_control_sites(body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Every (location, cache_control) in prompt order; the top-level one comes last."""
    for index, tool in enumerate(body.get("tools") or []):
        if "cache_control" in tool:
            yield f"tools.{index}", tool["cache_control"]
    system = body.get("system")
    if isinstance(system, list):
        for index, block in enumerate(system):
            if "cache_control" in block:
                yield f"system.{index}", block["cache_control"]
    for index, message in enumerate(body["messages"]):
        if isinstance(message["content"], str):
            continue
        for position, block in enumerate(message["content"]):
            yield from _block_cache_controls(f"messages.{index}.content.{position}", block)
    if "cache_control" in body:
        yield "cache_control", body["cache_control"]


def _block_cache_controls(where: str, block: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    if "cache_control" in block:
        yield where, block["cache_control"]
    inner = block.get("content")
    if isinstance(inner, list):
        for position, nested in enumerate(inner):
            if isinstance(nested, dict) and "cache_control" in nested:
                yield f"{where}.content.{position}", nested["cache_control"]


def _check_cache_controls(body: dict[str, Any]) -> None:
    sites = list(_cache_control_sites(body))
    for where, control in sites:
        _check_cache_control(where, control)
    if len(sites) > MAX_BREAKPOINTS:
        raise _Invalid(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(sites)}."
        )
    seen_short = False
    for _, control in sites:
        ttl = control.get("ttl", "5m")
        if ttl == "1h" and seen_short:
            raise _Invalid(TTL_ORDER)
        seen_short = seen_short or ttl == "5m"


def _check_cache_control(where: str, control: Any) -> None:
    if not isinstance(control, dict):
        raise _Invalid(f"{where}.cache_control: Input should be a valid dictionary or object")
    if control.get("type") != "ephemeral":
        raise _Invalid(f"{where}.cache_control.type: Input should be 'ephemeral'")
    if "ttl" in control and control["ttl"] not in TTLS:
        raise _Invalid(f"{where}.cache_control.ttl: Input should be '5m' or '1h'")
    for key in control:
        if key not in ("type", "ttl"):
            raise _Invalid(f"{where}.cache_control.{key}: Extra inputs are not permitted")


# --------------------------------------------------------------------------------------------
# Cost model
# --------------------------------------------------------------------------------------------


def _strip_cache_control(block: dict[str, Any]) -> dict[str, Any]:
    stripped = {key: value for key, value in block.items() if key != "cache_control"}
    inner = stripped.get("content")
    if isinstance(inner, list):
        stripped["content"] = [
            _strip_cache_control(item) if isinstance(item, dict) else item for item in inner
        ]
    return stripped


def _serialize(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _tokens_of_text(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / 4)


def count_tokens(block: dict[str, Any]) -> int:
    """Tokens of one prompt block under the pinned cost model (cache_control does not count)."""
    counted = media.block_tokens(block)
    return counted if counted is not None else _tokens_of_text(
        _serialize(_strip_cache_control(block)))


def _breakpoint_ttl(block: dict[str, Any]) -> str | None:
    """The TTL of the cache_control on this block (or on a block nested in it), if any."""
    ttl: str | None = None
    for _, control in _block_cache_controls("", block):
        ttl = control.get("ttl", "5m")
    return ttl


@dataclass(frozen=True)
class PromptBlock:
    """One block of a flattened request, with what the cost model needs to know about it."""

    section: str
    serialized: str
    tokens: int
    ttl: str | None


def flatten_request(body: dict[str, Any]) -> list[PromptBlock]:
    """The request's blocks in prompt order: tools, system, then message content."""
    raw: list[tuple[str, dict[str, Any]]] = [("tools", tool) for tool in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, str) and system:
        raw.append(("system", {"type": "text", "text": system}))
    elif isinstance(system, list):
        raw.extend(("system", block) for block in system)
    for message in body["messages"]:
        raw.extend((message["role"], block) for block in _content_blocks(message["content"]))
    blocks = [_prompt_block(section, block) for section, block in raw]
    if "cache_control" in body and blocks and blocks[-1].ttl is None:
        ttl = body["cache_control"].get("ttl", "5m")
        last = blocks[-1]
        blocks[-1] = PromptBlock(last.section, last.serialized, last.tokens, ttl)
    return blocks


def _prompt_block(section: str, block: dict[str, Any]) -> PromptBlock:
    serialized = _serialize(_strip_cache_control(block))
    counted = media.block_tokens(block)
    tokens = counted if counted is not None else _tokens_of_text(serialized)
    return PromptBlock(section, serialized, tokens, _breakpoint_ttl(block))


def _prefix_keys(model: str, blocks: list[PromptBlock]) -> list[str]:
    running = hashlib.sha256(model.encode("utf-8"))
    keys: list[str] = []
    for block in blocks:
        for part in (block.section, block.serialized):
            data = part.encode("utf-8")
            running.update(len(data).to_bytes(8, "big"))
            running.update(data)
        keys.append(running.copy().hexdigest())
    return keys


@dataclass
class _CacheEntry:
    expires_at: datetime
    ttl: str


class PromptCache:
    """The double's prompt cache: entries at breakpoint prefixes, on the injected clock."""

    def __init__(self, clock: Callable[[], datetime], min_cacheable_tokens: int) -> None:
        self._clock = clock
        self._min_tokens = min_cacheable_tokens
        self._entries: dict[str, _CacheEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def account(self, body: dict[str, Any]) -> dict[str, Any]:
        """Apply one successful request to the cache; return its input-side usage."""
        blocks = flatten_request(body)
        keys = _prefix_keys(body["model"], blocks)
        cumulative = list(itertools.accumulate(block.tokens for block in blocks))
        breakpoints = [i for i, block in enumerate(blocks) if block.ttl is not None]
        now = self._clock()
        hit = self._read(keys, breakpoints, now)
        read = cumulative[hit] if hit >= 0 else 0
        five, hour = self._write(blocks, keys, cumulative, breakpoints, hit, now)
        total = cumulative[-1] if cumulative else 0
        return {
            "input_tokens": total - read - five - hour,
            "cache_creation_input_tokens": five + hour,
            "cache_read_input_tokens": read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": five,
                "ephemeral_1h_input_tokens": hour,
            },
        }

    def _live(self, key: str, now: datetime) -> _CacheEntry | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expires_at <= now:
            del self._entries[key]
            return None
        return entry

    def _read(self, keys: list[str], breakpoints: list[int], now: datetime) -> int:
        """The largest position with a live entry within lookback of a breakpoint, else -1."""
        best = -1
        for position in breakpoints:
            lowest = max(0, position - LOOKBACK_BLOCKS + 1)
            for candidate in range(position, lowest - 1, -1):
                if candidate <= best:
                    break
                if self._live(keys[candidate], now) is not None:
                    best = candidate
                    break
        if best >= 0:
            entry = self._entries[keys[best]]
            entry.expires_at = now + TTLS[entry.ttl]
        return best

    def _write(
        self,
        blocks: list[PromptBlock],
        keys: list[str],
        cumulative: list[int],
        breakpoints: list[int],
        hit: int,
        now: datetime,
    ) -> tuple[int, int]:
        """Store entries past the hit; return the tokens written under 5m and 1h TTLs."""
        written = {"5m": 0, "1h": 0}
        covered = cumulative[hit] if hit >= 0 else 0
        for position in breakpoints:
            if position <= hit or cumulative[position] < self._min_tokens:
                continue
            ttl = blocks[position].ttl or "5m"
            self._entries[keys[position]] = _CacheEntry(now + TTLS[ttl], ttl)
            written[ttl] += cumulative[position] - covered
            covered = cumulative[position]
        return written["5m"], written["1h"]


def output_tokens(content: list[dict[str, Any]]) -> int:
    """Output tokens of a response's content under the pinned cost model (at least 1)."""
    return max(1, _tokens_of_text(_serialize(content)))


# --------------------------------------------------------------------------------------------
# Scripted responses
# --------------------------------------------------------------------------------------------

_SHORTHAND_KEYS = frozenset({"text", "tool", "input", "tools", "stop_reason", "delay"})


def check_item(item: dict[str, Any]) -> None:
    """Raise ValueError when a scripted item is neither a full response nor a shorthand."""
    if not isinstance(item, dict):
        raise ValueError(f"scripted item must be a dict, got {type(item).__name__}")
    if "delay" in item:
        core.clock.parse_duration(str(item["delay"]))  # ValueError names the bad duration
    if "content" in item:
        if not isinstance(item["content"], list):
            raise ValueError("scripted response `content` must be a list of blocks")
        return
    unknown = set(item) - _SHORTHAND_KEYS
    if unknown:
        raise ValueError(f"unknown keys in scripted item: {sorted(unknown)}")
    if "tool" in item and "tools" in item:
        raise ValueError("scripted item has both `tool` and `tools`")
    if not ({"text", "tool", "tools"} & set(item)):
        raise ValueError("scripted item needs `text`, `tool`, `tools` or `content`")
    for call in item.get("tools", []):
        if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
            raise ValueError("each entry of `tools` needs a `tool` name")


def _shorthand_calls(item: dict[str, Any]) -> list[dict[str, Any]]:
    if "tool" in item:
        return [{"tool": item["tool"], "input": item.get("input", {})}]
    return list(item.get("tools", []))


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


@dataclass
class RecordedCall:
    """One request the double answered on ``/v1/messages``."""

    purpose: str
    request: dict[str, Any]
    status: int
    response: dict[str, Any]
    usage: dict[str, Any] | None = None


@dataclass
class _Failure:
    status: int
    times: int
    message: str | None = None


@dataclass
class _Counters:
    request: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    message: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    tool_use: Iterator[int] = field(default_factory=lambda: itertools.count(1))


class MessagesDouble:
    """A local stand-in for ``POST /v1/messages`` that the real SDK can call."""

    def __init__(
        self,
        *,
        clock: Callable[[], datetime] | None = None,
        min_cacheable_tokens: int = 1024,
        api_key: str | None = None,
        advance: Callable[[timedelta], None] | None = None,
        tool_use_prefix: str = "",
    ) -> None:
        self._clock: Callable[[], datetime] = clock or (lambda: core.clock.now())
        # moves the clock by a scripted item's `delay` (the call "took" that long); None: the
        # delay is refused when the item is answered (no clock to move)
        self._advance = advance
        self._api_key = api_key
        self.cache = PromptCache(self._clock, min_cacheable_tokens)
        self.base_url = ""
        self.calls: list[RecordedCall] = []
        self.api_errors = 0
        self.unscripted_calls = 0
        self.media_refused = 0  # requests refused for a file that does not decode
        self.last_requests: dict[str, dict[str, Any]] = {}  # the last admitted body per purpose
        self._queues: dict[str, deque[dict[str, Any]]] = {}
        self._failures: dict[str, deque[_Failure]] = {}
        self._counters = _Counters()
        # tool_use ids are `toolu_double_<prefix><n>`: a run on a kept database (`wagent chat
        # --database-url`) passes a run-unique prefix, since the product keys a tool's effect on
        # its tool_use id (toolcall.tool_use_id is unique); "" keeps scenario ids deterministic
        self._tool_use_prefix = tool_use_prefix
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self.relay: Relay | None = None  # unscripted calls go there when set (replay/relay.py)

    # -- scripting -----------------------------------------------------------------------------

    def script(self, purpose: str, items: list[dict[str, Any]]) -> None:
        """Append responses to `purpose`'s queue (full bodies or shorthands, see module doc)."""
        for item in items:
            check_item(item)
        with self._lock:
            self._queues.setdefault(purpose, deque()).extend(copy.deepcopy(items))

    def fail(self, purpose: str, status: int, times: int = 1, message: str | None = None) -> None:
        """Make the next `times` valid calls of `purpose` fail with HTTP `status` (and the
        error's `message`, e.g. the real API's "Could not process image")."""
        if status < 400 or times < 1:
            raise ValueError("fail needs an error status (>= 400) and times >= 1")
        with self._lock:
            self._failures.setdefault(purpose, deque()).append(
                _Failure(status, times, message))

    def leftover(self) -> dict[str, int]:
        """Scripted responses not used yet, per purpose (purposes with none left are omitted)."""
        with self._lock:
            return {purpose: len(queue) for purpose, queue in self._queues.items() if queue}

    def usage_totals(self) -> dict[str, int]:
        """Token sums over the successful calls."""
        keys = (
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "output_tokens",
        )
        totals = dict.fromkeys(keys, 0)
        for call in self.calls:
            if call.status == 200 and call.usage:
                for key in keys:
                    totals[key] += int(call.usage.get(key) or 0)
        return totals

    # -- serving -------------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_post("/v1/messages", self._handle_messages)
        app.router.add_post("/v1/messages/count_tokens", self._handle_count_tokens)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on `host`:`port` (0 picks a free port); return and remember the base URL."""
        runner = web.AppRunner(self.make_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        self._runner = runner
        bound_port = runner.addresses[0][1]
        shown = f"[{host}]" if ":" in host else host
        self.base_url = f"http://{shown}:{bound_port}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- handlers ------------------------------------------------------------------------------

    async def _handle_messages(self, request: web.Request) -> web.Response:
        purpose = request.headers.get(PURPOSE_HEADER) or DEFAULT_PURPOSE
        body, rejection = await self._admit(request)
        if rejection is not None:
            status, message = rejection
            return self._error(purpose, body, status, message)
        with self._lock:
            self.last_requests[purpose] = body
            failure = self._take_failure(purpose)
            item = None if failure else self._take_item(purpose)
            if failure is None and item is None and self.relay is None:
                self.unscripted_calls += 1
        if failure is not None:
            return self._error(purpose, body, failure.status, failure.message
                               or DEFAULT_ERROR_MESSAGES.get(failure.status, "Injected failure"))
        if item is None and self.relay is not None:
            return await self._relayed(purpose, body, request)
        if item is None:
            return self._error(purpose, body, 500, f"unscripted call for purpose {purpose}")
        return self._success(purpose, body, item)

    async def _relayed(self, purpose: str, body: dict[str, Any],
                       request: web.Request) -> web.Response:
        """An unscripted call sent on to the real API (`relay`, replay/relay.py); the answer
        is recorded and returned as it came, its `usage` the real one."""
        assert self.relay is not None
        status, answer = await self.relay.send(body, dict(request.headers))
        usage = answer.get("usage") if status == 200 else None
        with self._lock:
            self.calls.append(RecordedCall(purpose, body, status, answer, usage))
        return self._respond(status, answer)

    async def _handle_count_tokens(self, request: web.Request) -> web.Response:
        body, rejection = await self._admit(request, require_max_tokens=False)
        if rejection is not None:
            status, message = rejection
            return self._respond(status, _error_body(status, message, self._request_id()))
        total = sum(block.tokens for block in flatten_request(body))
        return self._respond(200, {"input_tokens": total})

    async def _admit(
        self, request: web.Request, *, require_max_tokens: bool = True
    ) -> tuple[dict[str, Any], tuple[int, str] | None]:
        """Auth, version header, JSON and validation; returns (body, (status, message) | None)."""
        auth_problem = self._check_auth(request)
        if auth_problem is not None:
            return {}, (401, auth_problem)
        body, problem = await _read_body(request)
        if problem is None and not request.headers.get("anthropic-version"):
            problem = "anthropic-version: header is required"
        if problem is None:
            problem = validate_request(body, require_max_tokens=require_max_tokens)
        if problem is not None:
            with self._lock:
                self.api_errors += 1
            return body, (400, problem)
        problem = undecodable_media(body)
        if problem is not None:  # the customer's file, not the product's request shape
            with self._lock:
                self.media_refused += 1
            return body, (400, problem)
        return body, None

    def _check_auth(self, request: web.Request) -> str | None:
        key = request.headers.get("x-api-key")
        authorization = request.headers.get("Authorization", "")
        if authorization.lower().startswith("bearer "):
            key = authorization[len("bearer ") :].strip()
        if not key:
            return "missing credentials: send `Authorization: Bearer <key>` or `x-api-key`"
        if self._api_key is not None and key != self._api_key:
            return "invalid x-api-key"
        return None

    def _take_failure(self, purpose: str) -> _Failure | None:
        pending = self._failures.get(purpose)
        if not pending:
            return None
        failure = pending[0]
        failure.times -= 1
        if failure.times <= 0:
            pending.popleft()
        return failure

    def _take_item(self, purpose: str) -> dict[str, Any] | None:
        queue = self._queues.get(purpose)
        return queue.popleft() if queue else None

    # -- responses -----------------------------------------------------------------------------

    def _success(self, purpose: str, request: dict[str, Any], item: dict[str, Any]) -> web.Response:
        if "delay" in item:  # the model "took" this long, on the product's clock: no sleep
            item = dict(item)
            delay = core.clock.parse_duration(str(item.pop("delay")))
            if self._advance is None:
                raise RuntimeError("a scripted delay needs a clock to advance (advance=)")
            self._advance(delay)
        with self._lock:
            response = self._build_message(item, request)
            usage = self._usage(request, response["content"])  # the cache moves either way
            response.setdefault("usage", usage)
            self.calls.append(RecordedCall(purpose, request, 200, response, response["usage"]))
            request_id = self._request_id()
        return self._respond(200, response, request_id)

    def _error(
        self, purpose: str, request: dict[str, Any], status: int, message: str
    ) -> web.Response:
        request_id = self._request_id()
        body = _error_body(status, message, request_id)
        with self._lock:
            self.calls.append(RecordedCall(purpose, request, status, body))
        return self._respond(status, body, request_id)

    def _respond(
        self, status: int, body: dict[str, Any], request_id: str | None = None
    ) -> web.Response:
        request_id = request_id or body.get("request_id") or self._request_id()
        headers = {"request-id": request_id}
        if status >= 400:
            headers["x-should-retry"] = "false"
        return web.json_response(body, status=status, headers=headers)

    def _request_id(self) -> str:
        return f"req_double_{next(self._counters.request):04d}"

    def _build_message(self, item: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        if "content" in item:
            message = copy.deepcopy(item)
            for block in message["content"]:
                if block.get("type") == "tool_use" and not block.get("id"):
                    block["id"] = self._tool_use_id()
        else:
            message = {"content": self._shorthand_content(item)}
            if "stop_reason" in item:
                message["stop_reason"] = item["stop_reason"]
        has_tool_use = any(block.get("type") == "tool_use" for block in message["content"])
        message.setdefault("stop_reason", "tool_use" if has_tool_use else "end_turn")
        message.setdefault("id", f"msg_double_{next(self._counters.message):04d}")
        message.setdefault("type", "message")
        message.setdefault("role", "assistant")
        message.setdefault("model", request["model"])
        message.setdefault("stop_sequence", None)
        return message

    def _shorthand_content(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        if "text" in item:
            content.append({"type": "text", "text": item["text"]})
        for call in _shorthand_calls(item):
            content.append(
                {
                    "type": "tool_use",
                    "id": self._tool_use_id(),
                    "name": call["tool"],
                    "input": copy.deepcopy(call.get("input", {})),
                }
            )
        return content

    def _tool_use_id(self) -> str:
        return f"toolu_double_{self._tool_use_prefix}{next(self._counters.tool_use):04d}"

    def _usage(self, request: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, Any]:
        usage = self.cache.account(request)
        usage["output_tokens"] = output_tokens(content)
        return usage


def _error_body(status: int, message: str, request_id: str) -> dict[str, Any]:
    error_type = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


async def _read_body(request: web.Request) -> tuple[dict[str, Any], str | None]:
    """The JSON object body, or ({}, problem) when it is not one."""
    text = await request.text()
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return {}, "There was an error parsing the body of your request as JSON"
    if not isinstance(body, dict):
        return {}, "request body must be a JSON object"
    return body, None
