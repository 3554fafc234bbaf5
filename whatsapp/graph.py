"""Outbound WhatsApp Cloud API client for the workers: sends, mark-as-read, typed Graph errors.

Synchronous on purpose (RQ jobs are sync). It never retries: it raises a typed `GraphError` and
the job decides (ARCHITECTURE.md: one retry layer). Wire format: Sources: WhatsApp §5.
"""

import unicodedata
from typing import Any

import httpx2

from core.network import network_cause
from whatsapp.errors import (
    GraphAuthError,
    GraphError,
    GraphNoAnswer,
    GraphRateLimited,
    GraphTransient,
    GraphUnreachable,
    GraphWindowClosed,
)

__all__ = [
    "GraphAuthError",
    "GraphClient",
    "GraphError",
    "GraphNoAnswer",
    "GraphRateLimited",
    "GraphTransient",
    "GraphUnreachable",
    "GraphWindowClosed",
    "MAX_TEXT_CHARS",
    "error_from_response",
    "split_text",
    "utf16_len",
]

# Meta: text.body at most 4096 characters, without saying how it counts them (Sources:
# WhatsApp §5.2, §9). Counted here in UTF-16 code units (U+1F600 is 1 code point, 2 units),
# at least as strict as counting code points or grapheme clusters: never an error 100.
MAX_TEXT_CHARS = 4096
SPLIT_MARGIN = 96  # and parts stay below the limit by this many units
MIN_PART_SHARE = 2  # a boundary is good when the part before it fills 1/2 of a part

# httpx2 errors raised before any byte of the request was written: the connection itself
# failed (DNS, refused, TLS handshake, connect timeout, no route), the pool had no connection
# to give, the proxy refused the tunnel, or the URL's scheme cannot be sent. Every other
# transport error (a write error, a read timeout, a dropped connection) may come after Meta
# received the request.
NOT_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout, httpx2.ProxyError,
            httpx2.UnsupportedProtocol)

# Graph error.code → class (Meta error-code page, Sources: WhatsApp §5.4 [S16][S17][S24]).
_CLASS_BY_CODE: dict[int, type[GraphError]] = {
    **dict.fromkeys((4, 80007, 130429, 131056), GraphRateLimited),
    131047: GraphWindowClosed,
    **dict.fromkeys((0, 190), GraphAuthError),
    **dict.fromkeys((1, 2, 131000, 131016, 131057), GraphTransient),
}


def error_from_response(http_status: int, body: object) -> GraphError:
    """The typed error for a refused Graph call, chosen by `error.code`.

    `body` is the decoded JSON answer (anything else counts as no body). Meta: build logic on
    `code` (+ `error_data.details`), never on the HTTP status or the title; the one exception is
    a 5xx whose body carries no code (a gateway's page, not Meta's error): Meta may have taken
    the request behind it, so it is `GraphNoAnswer` (cause `gateway`: never resent,
    docs/ARCHITECTURE.md "At most once"). Unknown codes give a plain `GraphError`, retryable only
    when Graph marks it `is_transient`.
    """
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    fields: dict[str, Any] = {
        "code": code,
        "title": _title(error.get("message"), code, http_status),
        "details": _details(error),
        "http_status": http_status,
        "fbtrace_id": error.get("fbtrace_id") if isinstance(error.get("fbtrace_id"), str) else None,
    }
    if code is None:
        if http_status >= 500:
            return GraphNoAnswer(**fields, cause="gateway")
        return GraphError(**fields)
    cls = _CLASS_BY_CODE.get(code)
    if cls is not None:
        return cls(**fields)
    transient = error.get("is_transient")
    return GraphError(**fields, retryable=transient if isinstance(transient, bool) else None)


def _title(message: object, code: int | None, http_status: int) -> str:
    """Graph's `message` is "(#<code>) <title>"; 190 and friends come without the prefix."""
    if not isinstance(message, str) or not message:
        return f"HTTP {http_status}"
    prefix = f"(#{code}) "
    return message.removeprefix(prefix) if code is not None else message


def _details(error: dict[str, Any]) -> str:
    data = error.get("error_data")
    details = data.get("details") if isinstance(data, dict) else None
    if isinstance(details, str):
        return details
    user_msg = error.get("error_user_msg")
    return user_msg if isinstance(user_msg, str) else ""


class GraphClient:
    """Sends to `POST {base_url}/{api_version}/{phone_number_id}/messages` with a Bearer token.

    `timeout` is in seconds, for each of connect, read, write and pool. Pass `http_client` to
    share a connection pool; it is then not closed by `close()`. Every method raises a
    `GraphError` subclass (see whatsapp/errors.py) on a refusal, `GraphUnreachable` when no
    connection was made (nothing reached Meta), `GraphNoAnswer` when the request may have been
    written but no usable answer came, and `ValueError` on arguments Meta would refuse anyway.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_version: str,
        access_token: str,
        timeout: float = 15.0,
        http_client: httpx2.Client | None = None,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._api_version = api_version if api_version.startswith("v") else f"v{api_version}"
        self._headers = {"Authorization": f"Bearer {access_token}"}
        self._timeout = httpx2.Timeout(timeout)
        self._owns_client = http_client is None
        self._http = http_client if http_client is not None else httpx2.Client()

    def send_text(
        self,
        phone_number_id: str,
        *,
        body: str,
        to: str | None = None,
        recipient: str | None = None,
        reply_to: str | None = None,
    ) -> str:
        """Send a free-form text and return its wamid (accepted, not yet delivered).

        Address by phone (`to`, digits as Meta gave them) or business-scoped user id
        (`recipient`), exactly one. `reply_to` quotes that wamid (`context.message_id`).
        Link previews are off. Meta: body non-empty, at most 4096 characters, counted here as
        UTF-16 code units (`utf16_len`): longer text raises ValueError, use `split_text` first.
        Outside the 24 h window Meta answers 131047 (`GraphWindowClosed`), often only later on
        a status webhook.
        """
        if not body.strip() or utf16_len(body) > MAX_TEXT_CHARS:
            raise ValueError(f"text body must be 1..{MAX_TEXT_CHARS} UTF-16 code units, got "
                             f"{utf16_len(body)}")
        payload = _envelope(to, recipient)
        if reply_to is not None:
            payload["context"] = {"message_id": reply_to}
        payload["type"] = "text"
        payload["text"] = {"preview_url": False, "body": body}
        return self._send(phone_number_id, payload)

    def send_template(
        self,
        phone_number_id: str,
        *,
        name: str,
        language: str,
        to: str | None = None,
        recipient: str | None = None,
        components: list[dict[str, Any]] | None = None,
    ) -> str:
        """Send an approved template (the only kind allowed outside the 24 h window); its wamid.

        `language` is the template's code, e.g. "pt_BR"; `components` as Meta's template object
        (body parameters, quick-reply buttons), omitted when None ([S21]).
        """
        template: dict[str, Any] = {"name": name, "language": {"code": language}}
        if components is not None:
            template["components"] = components
        payload = _envelope(to, recipient)
        payload["type"] = "template"
        payload["template"] = template
        return self._send(phone_number_id, payload)

    def send_interactive(
        self,
        phone_number_id: str,
        *,
        interactive: dict[str, Any],
        to: str | None = None,
        recipient: str | None = None,
    ) -> str:
        """Send reply buttons, a list or an order (issue 48) and return its wamid.
        `interactive` is the object as `whatsapp.interactive.list_message` / `buttons_message`
        or `whatsapp.orders.order_details` / `order_status` build it (they check Meta's
        limits, Sources: WhatsApp §5.2 [S19][S20]; Payments API - Brazil); addressing as
        `send_text`. Free-form: outside the 24 h window Meta answers 131047
        (`GraphWindowClosed`).
        """
        if not isinstance(interactive, dict) or interactive.get("type") not in (
                "list", "button", "order_details", "order_status"):
            raise ValueError("interactive must be a list, button or order object")
        payload = _envelope(to, recipient)
        payload["type"] = "interactive"
        payload["interactive"] = interactive
        return self._send(phone_number_id, payload)

    def mark_read(self, phone_number_id: str, wamid: str, *, typing: bool = False) -> None:
        """Mark an inbound message (and earlier ones) read; with `typing`, show the typing
        indicator too (Meta: it lasts until the reply or 25 s, so only when a reply follows)."""
        payload: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": wamid,
        }
        if typing:
            payload["typing_indicator"] = {"type": "text"}
        answer = self._post(phone_number_id, payload)
        if not (isinstance(answer, dict) and answer.get("success") is True):
            raise GraphError(code=None, title="unexpected mark-as-read answer", http_status=200)

    def thread_control(self, phone_number_id: str, action: str, *, to: str | None = None,
                       recipient: str | None = None, target_role: str | None = None,
                       metadata: str | None = None) -> str:
        """`POST /{phone_number_id}/thread_control` (issue 45; Meta's thread-control reference,
        docs/DEPLOY.md section 11 [S14]): `action` take, pass or release,
        for the customer `to` (phone) or `recipient` (user id); `target_role` for a pass only
        ("ai_agent": back to Meta's agent), `metadata` ≤2,000 characters. Returns Meta's
        `request_id` ("" when none). Raises ValueError on a bad argument, GraphError when
        refused: code THREAD_TAKE_REFUSED (2494191) when this app is not the business's
        escalation partner."""
        if action not in THREAD_ACTIONS:
            raise ValueError(f"action must be one of {', '.join(THREAD_ACTIONS)}")
        if target_role is not None and action != "pass":
            raise ValueError("target_role is for a pass only")
        payload = {k: v for k, v in _envelope(to, recipient).items() if k != "recipient_type"}
        payload["action"] = action
        if target_role is not None:
            payload["control_pass"] = {"target_role": target_role}
        if metadata:
            payload["metadata"] = metadata[:2000]
        answer = self._post(phone_number_id, payload, edge="thread_control")
        request_id = answer.get("request_id") if isinstance(answer, dict) else None
        return request_id if isinstance(request_id, str) else ""

    def close(self) -> None:
        """Close the connection pool, if this client created it."""
        if self._owns_client:
            self._http.close()

    def __enter__(self) -> "GraphClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _send(self, phone_number_id: str, payload: dict[str, Any]) -> str:
        answer = self._post(phone_number_id, payload)
        messages = answer.get("messages") if isinstance(answer, dict) else None
        wamid = messages[0].get("id") if messages and isinstance(messages[0], dict) else None
        if not isinstance(wamid, str) or not wamid:
            # Accepted but unreadable: a retry could send the message twice.
            raise GraphNoAnswer(code=None, title="send answer without a wamid", http_status=200,
                                cause="no_wamid")
        return wamid

    def _post(self, phone_number_id: str, payload: dict[str, Any], *,
              edge: str = "messages") -> object:
        """POST one body to the number's `edge`; the decoded 2xx answer, or raise the typed
        error."""
        if not phone_number_id:
            raise ValueError("phone_number_id is required")
        url = f"{self._base_url}/{self._api_version}/{phone_number_id}/{edge}"
        try:
            response = self._http.post(
                url, json=payload, headers=self._headers, timeout=self._timeout
            )
        except NOT_SENT as exc:
            raise GraphUnreachable(code=None, title=type(exc).__name__,
                                   cause=network_cause(exc)) from exc
        except httpx2.TransportError as exc:
            raise GraphNoAnswer(code=None, title=type(exc).__name__,
                                cause=network_cause(exc)) from exc
        try:
            answer: object = response.json()
        except ValueError:
            answer = None
        if not response.is_success:
            raise error_from_response(response.status_code, answer)
        return answer


THREAD_ACTIONS = ("take", "pass", "release")
THREAD_TAKE_REFUSED = 2494191  # `take` by an app that is not the escalation partner (§2.4)


def _envelope(to: str | None, recipient: str | None) -> dict[str, Any]:
    """The common start of a send body: phone (`to`) or user-id (`recipient`) addressing."""
    if (to is None) == (recipient is None):
        raise ValueError("give exactly one of to= (phone) or recipient= (user id)")
    payload: dict[str, Any] = {"messaging_product": "whatsapp", "recipient_type": "individual"}
    if to is not None:
        payload["to"] = to
    else:
        payload["recipient"] = recipient
    return payload


def utf16_len(text: str) -> int:
    """Length of `text` in UTF-16 code units: a character outside the Basic Multilingual Plane
    (most emoji) counts 2, a lone surrogate 1. How this product counts Meta's 4096 limit."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def split_text(text: str, limit: int = MAX_TEXT_CHARS) -> list[str]:
    """Split `text` into stripped, non-empty parts of at most `limit - margin` UTF-16 code
    units (`utf16_len`, so "👍" counts 2).

    The margin is 96 (a quarter of `limit` when that is smaller): Meta caps text.body at 4096
    characters without saying how it counts them (Sources: WhatsApp §5.2, §9). Cuts go at
    the last paragraph break ("\\n\\n") that fits, else line break, else sentence end (". ",
    "! ", "? "), else whitespace, but a boundary counts only when the part before it fills at
    least half a part (`MIN_PART_SHARE`): an early "Oi!\\n\\n" is not worth a third message.
    When no boundary is that late, the last one of any kind is taken, else anywhere between
    two grapheme clusters; a cluster
    (combining marks, variation selectors, skin tones, ZWJ sequences, flags, surrogate pairs)
    is cut only when it alone is longer than a part. Only whitespace at cuts is dropped.
    Raises ValueError when `limit` < 2 (a part must hold one emoji).
    """
    if limit < 2:
        raise ValueError("limit must be at least 2 (one emoji is 2 UTF-16 code units)")
    budget = limit - min(SPLIT_MARGIN, limit // 4)
    parts: list[str] = []
    rest = text.strip()
    while utf16_len(rest) > budget:
        least = _chars_within(rest, budget // MIN_PART_SHARE)
        cut = _find_cut(rest, _chars_within(rest, budget), least)
        parts.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        parts.append(rest)
    return parts


def _chars_within(text: str, units: int) -> int:
    """How many characters of `text` (longer than `units`) fit in `units` UTF-16 code units;
    at least 1, so that a cut always moves on."""
    used = 0
    for index, ch in enumerate(text):
        used += 2 if ord(ch) > 0xFFFF else 1
        if used > units:
            return max(index, 1)
    return len(text)


_SEPARATORS: tuple[tuple[tuple[str, int], ...], ...] = (
    (("\n\n", 0),),
    (("\n", 0),),
    ((". ", 1), ("! ", 1), ("? ", 1)),  # the punctuation stays with the sentence
)


def _find_cut(text: str, budget: int, least: int) -> int:
    """Index in 1..budget where `text` (stripped, longer than budget) is best cut: the last
    boundary of the best kind at or after `least` (characters), else the last of any kind."""
    safe = _safe_cuts(text, budget)
    at_space = next((i for i in range(budget, 0, -1) if safe[i] and text[i].isspace()), 0)
    by_level = [max(_last_cut_at(text, budget, safe, sep, keep) for sep, keep in level)
                for level in _SEPARATORS] + [at_space]
    good = [cut for cut in by_level if cut >= least]
    if good or max(by_level) > 0:
        return good[0] if good else max(by_level)
    between_clusters = (i for i in range(budget, 0, -1) if safe[i])
    # Else one cluster is longer than a part: cut it, but never between two surrogate halves.
    forced = budget - 1 if budget > 1 and _is_high_surrogate(text[budget - 1]) else budget
    return next(between_clusters, 0) or forced


def _last_cut_at(text: str, budget: int, safe: list[bool], sep: str, keep: int) -> int:
    """The last safe cut at `sep` keeping `keep` of its characters in the head; 0 when none."""
    end = budget - keep + len(sep)
    idx = text.rfind(sep, 0, end)
    while idx != -1:
        if idx + keep >= 1 and safe[idx + keep]:
            return idx + keep
        idx = text.rfind(sep, 0, idx + len(sep) - 1)
    return 0


def _safe_cuts(text: str, budget: int) -> list[bool]:
    """safe[i] for i in 0..budget: cutting before text[i] splits no grapheme cluster.

    Unsafe: after a ZWJ, inside a regional-indicator pair (a flag), or where the next
    non-whitespace character extends the one before it (the part would start with it).
    """
    safe = [False] * (budget + 1)
    ri_run = [0] * (budget + 1)
    for i in range(budget + 1):
        if _is_regional_indicator(text[i]):
            ri_run[i] = ri_run[i - 1] + 1 if i else 1
    nxt = budget + 1
    while nxt < len(text) and text[nxt].isspace():
        nxt += 1
    for i in range(budget, 0, -1):
        if not text[i].isspace():
            nxt = i
        extends = nxt < len(text) and _is_extender(text[nxt])
        in_flag = ri_run[i] > 0 and ri_run[i - 1] % 2 == 1
        safe[i] = not extends and not in_flag and text[i - 1] != "\u200d"
    return safe


def _is_extender(ch: str) -> bool:
    """A character that belongs to the cluster before it (so no part may start with it)."""
    cp = ord(ch)
    return (
        unicodedata.category(ch) in ("Mn", "Mc", "Me")
        or 0xFE00 <= cp <= 0xFE0F  # variation selectors (U+FE0F: emoji presentation)
        or 0xE0100 <= cp <= 0xE01EF  # variation selectors supplement
        or 0x1F3FB <= cp <= 0x1F3FF  # emoji skin tone modifiers
        or cp in (0x200C, 0x200D)  # ZWNJ, ZWJ
        or 0xE0020 <= cp <= 0xE007F  # tag characters (subdivision flags)
        or 0x1160 <= cp <= 0x11FF  # Hangul medial vowels and final consonants
        or 0xD7B0 <= cp <= 0xD7FF
        or 0xDC00 <= cp <= 0xDFFF  # low surrogate half
    )


def _is_regional_indicator(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _is_high_surrogate(ch: str) -> bool:
    return 0xD800 <= ord(ch) <= 0xDBFF
