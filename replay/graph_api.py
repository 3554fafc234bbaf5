"""Graph API double: a loopback aiohttp server speaking the WhatsApp Cloud API send wire format.

It answers `POST /{version}/{phone_number_id}/messages` as Meta does (Sources: WhatsApp §5),
records every send in `sends` and every mark-as-read / typing indicator in `reads`, and can be told
to fail the next sends with a given Graph error code (`fail`), to refuse connections until told
otherwise (`go_down` / `go_up`: nothing reaches it), or to take the next sends and hang up without
answering (`drop`: the message went out, the sender cannot know). Product code: the demo, the
replay runner and the tests use it.

Media (Sources: WhatsApp §3.3; fixture graph_api/media_url_response.json): `add_media` puts a
file under a media id; `GET /{version}/{media-id}` answers its URL (on this double's own host),
mime type, sha256 (hex) and size, and `GET /media-download/{media-id}` serves the bytes, both
behind the bearer token. Faults per file (`fault=`): `not_found` (the id answers 404 and Graph's
error 100), `stall` (the download sends its first bytes, then nothing), `oversize` (the answer
declares 100 MB), `oversize_stream` (no size declared, and more bytes than any limit streamed),
`corrupt` (bytes other than those hashed). `media_requests` records the paths asked for.
"""

import asyncio
import base64
import hashlib
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

from aiohttp import web

from replay.errors import GraphRefusal
from whatsapp.interactive import LIMITS
from whatsapp.orders import order_button_problems, order_problems

# Meta: text.body at most 4096 characters. Counted in UTF-16 code units, the strictest count
# Meta could be using (it does not say), so a reply the product sends is never refused by Meta
# for a length this double let through. Its own rule, not the product's: the double stands for
# Meta, and sharing the product's counting would hide a bug in it.
MAX_TEXT_CHARS = 4096
ROUTE = r"/{version:v\d+\.\d+}/{phone_number_id}/messages"
THREAD_ROUTE = r"/{version:v\d+\.\d+}/{phone_number_id}/thread_control"
MEDIA_ROUTE = r"/{version:v\d+\.\d+}/{media_id:\d+}"
DOWNLOAD_ROUTE = r"/media-download/{media_id:\d+}"
MEDIA_FAULTS = ("not_found", "stall", "oversize", "oversize_stream", "corrupt")
OVERSIZE_BYTES = 100 * 1024 * 1024  # a 100 MB video, as declared by `oversize`
STREAM_CHUNK = 256 * 1024

# Titles Graph puts in "(#code) title" (Meta error-code page, Sources: WhatsApp §5.4).
TITLES = {
    130429: "Rate limit hit",
    131056: "(Business Account, Consumer Account) pair rate limit hit",
    131047: "Re-engagement message",
    131026: "Message undeliverable",
    100: "Invalid parameter",
    131009: "Parameter value is not valid",
    132001: "Template name does not exist in the translation",
    132000: "Number of parameters does not match the expected number of params",
}
DETAILS = {
    130429: "Cloud API message throughput has been reached.",
    131056: "Message failed to send because there were too many messages sent from this phone "
    "number to the same phone number in a short period of time.",
    131047: "Message failed to send because more than 24 hours have passed since the customer "
    "last replied to this number.",
    131026: "Message undeliverable.",
    100: "Invalid parameter.",
    132001: "template name does not exist in the language",
    132000: "body: number of localizable_params does not match the expected number of params",
}
TOKEN_EXPIRED = "Error validating access token: Session has expired."

# The body keys a send may carry: the envelope plus the one object named by `type`.
ENVELOPE_KEYS = frozenset(
    {"messaging_product", "recipient_type", "to", "recipient", "type", "context",
     "biz_opaque_callback_data"}
)
MESSAGE_TYPES = frozenset(
    {"text", "template", "interactive", "image", "audio", "video", "document", "sticker",
     "location", "contacts", "reaction"}
)


@dataclass
class MediaItem:
    data: bytes
    mime_type: str
    fault: str | None = None


@dataclass
class RecordedSend:
    """One send request as the double saw it; `wamid` None and `error_code` set when refused."""

    phone_number_id: str
    body: dict[str, Any]
    status: int
    wamid: str | None = None
    error_code: int | None = None


class GraphDouble:
    """The double's state and server. `fail(code, times)` queues refusals for the next sends."""

    def __init__(self, *, access_token: str | None = None, wamid_prefix: str = "") -> None:
        self.access_token = access_token
        # the sends' wamids are wamid.OUT<prefix><n>: a double that writes into a kept
        # database (`wagent chat --database-url`) needs a prefix of its own per run, or its
        # wamids collide with an earlier run's (outbound.wamid is unique)
        self.wamid_prefix = wamid_prefix
        self.base_url = ""
        self.sends: list[RecordedSend] = []
        # called once a send is taken, before Meta's answer goes back: what happens while
        # the product waits in its Graph call (tests: the reconciler runs meanwhile)
        self.on_taken: Callable[[RecordedSend], None] | None = None
        self.reads: list[dict[str, Any]] = []
        self.templates: dict[tuple[str, str], tuple[int, int, bool]] | None = None
        self._pending_failures: list[int] = []
        self._pending_drops = 0
        self._pending_gateway: list[int] = []
        self._wamid_seq = 0
        self._trace_seq = 0
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._hold: socket.socket | None = None  # keeps the port while down (refusing)
        self.media: dict[str, MediaItem] = {}
        self.media_requests: list[str] = []
        self.stall_seconds = 30.0  # how long a stalled download waits (until `stop` at most)
        self._released: asyncio.Event | None = None
        self.thread_controls: list[RecordedSend] = []  # thread_control requests, in order
        self.escalation_partner = False  # whether a `take` is allowed (else 2494191)

    def add_media(self, media_id: str, data: bytes, mime_type: str,
                  fault: str | None = None) -> str:
        """Serve `data` under `media_id` (digits); returns its sha256 as base64, as a webhook
        carries it. `fault`: one of MEDIA_FAULTS."""
        if not media_id.isdigit() or (fault is not None and fault not in MEDIA_FAULTS):
            raise ValueError(f"media id must be digits and fault one of {MEDIA_FAULTS}")
        self.media[media_id] = MediaItem(data, mime_type, fault)
        return base64.b64encode(hashlib.sha256(data).digest()).decode()

    @property
    def accepted(self) -> list[RecordedSend]:
        """The sends answered 200, i.e. the messages WhatsApp would have taken."""
        return [send for send in self.sends if send.wamid is not None]

    def fail(self, code: int, times: int = 1) -> None:
        """Answer the next `times` valid message sends with Graph error `code` (400, 401 for 190).

        Invalid sends are refused with 100 on their own and do not use up a queued failure;
        mark-as-read requests never do.
        """
        self._pending_failures.extend([code] * times)

    def drop(self, times: int = 1) -> None:
        """Take the next `times` valid message sends as Meta would (recorded, with a wamid: the
        customer gets them) and close the connection without answering: the sender sees a
        dropped connection and cannot know the message went out."""
        self._pending_drops += times

    def gateway_error(self, status: int = 504, times: int = 1) -> None:
        """Take the next `times` valid message sends as Meta would (recorded, with a wamid: the
        customer gets them) and answer each with HTTP `status` and a gateway's HTML page, not
        Meta's JSON error: what a proxy in front of Graph answers when Meta was slow."""
        self._pending_gateway.extend([status] * times)

    @property
    def down(self) -> bool:
        return self._hold is not None

    async def go_down(self) -> None:
        """Refuse every connection (ECONNREFUSED, as from a host where nothing listens) until
        `go_up`. The port stays bound to a socket that does not listen, so no other process
        can take it meanwhile; open keep-alive connections are closed."""
        if self._runner is None or self._site is None or self._hold is not None:
            return
        hold = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        hold.bind(self._address())
        self._hold = hold
        await self._site.stop()
        for handler in self._runner.server.connections if self._runner.server else []:
            if handler.transport is not None:
                handler.transport.close()

    async def go_up(self) -> None:
        """Listen again on the same address after `go_down`."""
        if self._runner is None or self._hold is None:
            return
        host, port = self._address()
        self._site = web.TCPSite(self._runner, host, port, reuse_port=True)
        await self._site.start()
        self._hold.close()
        self._hold = None

    def _address(self) -> tuple[str, int]:
        host, port = self.base_url.removeprefix("http://").rsplit(":", 1)
        return host, int(port)

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(ROUTE, self._handle)
        app.router.add_post(THREAD_ROUTE, self._thread_control)
        app.router.add_get(MEDIA_ROUTE, self._media_url)
        app.router.add_get(DOWNLOAD_ROUTE, self._media_download)
        return app

    def _media_request(self, request: web.Request) -> tuple[str, web.Response | None]:
        """A media request's id, the request recorded; with Meta's refusal of its token, if
        any (the answer to send instead)."""
        self.media_requests.append(request.path)
        try:
            self._check_token(request)
        except GraphRefusal as refusal:
            return request.match_info["media_id"], web.json_response(
                self._error_body(refusal), status=refusal.http_status)
        return request.match_info["media_id"], None

    async def _media_url(self, request: web.Request) -> web.Response:
        media_id, refused = self._media_request(request)
        if refused is not None:
            return refused
        item = self.media.get(media_id)
        if item is None or item.fault == "not_found":
            missing = GraphRefusal(100, f"Unsupported get request. Object with ID '{media_id}' "
                                   "does not exist, cannot be loaded due to missing "
                                   "permissions, or does not support this operation.")
            return web.json_response(self._error_body(missing), status=404)
        answer: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "url": f"{self.base_url}/media-download/{media_id}?ext=1780319000&hash=ATfake",
            "mime_type": item.mime_type, "sha256": hashlib.sha256(item.data).hexdigest(),
            "file_size": len(item.data), "id": media_id}
        if item.fault == "oversize":
            answer["file_size"] = OVERSIZE_BYTES
        if item.fault == "oversize_stream":
            del answer["file_size"]
        return web.json_response(answer)

    async def _media_download(self, request: web.Request) -> web.StreamResponse:
        media_id, refused = self._media_request(request)
        if refused is not None:
            return refused
        item = self.media.get(media_id)
        if item is None:
            return web.Response(status=404)
        data = item.data
        if item.fault == "corrupt":
            data = bytes([data[0] ^ 0xFF]) + data[1:] if data else b"x"
        response = web.StreamResponse(headers={"Content-Type": item.mime_type})
        if item.fault not in ("stall", "oversize_stream"):
            response.content_length = len(data)
        await response.prepare(request)
        if item.fault == "stall":
            await response.write(data[:16])
            if self._released is not None:
                try:
                    await asyncio.wait_for(self._released.wait(), self.stall_seconds)
                except TimeoutError:
                    pass
            return response
        if item.fault == "oversize_stream":
            for _ in range(OVERSIZE_BYTES // STREAM_CHUNK):
                try:
                    await response.write(b"\0" * STREAM_CHUNK)
                except (ConnectionResetError, RuntimeError):
                    return response  # the client gave up, as it should
            return response
        await response.write(data)
        await response.write_eof()
        return response

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on `host:port` (0: a free port); returns and sets `base_url`."""
        self._released = asyncio.Event()
        self._runner = web.AppRunner(self.make_app(), shutdown_timeout=2.0)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, host, port, reuse_port=True)
        await self._site.start()
        bound_host, bound_port = self._runner.addresses[0][:2]
        self.base_url = f"http://{bound_host}:{bound_port}"
        return self.base_url

    async def stop(self) -> None:
        """Close the server; `sends` and `reads` stay for inspection."""
        if self._released is not None:
            self._released.set()  # a stalled download ends now
        if self._hold is not None:
            self._hold.close()
            self._hold = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        phone_number_id = request.match_info["phone_number_id"]
        body = await _read_json(request)
        try:
            self._check_token(request)
            if _is_read(body):
                return web.json_response(self._mark_read(body))
            answer = self._send(phone_number_id, body)
            if self._pending_drops:
                self._pending_drops -= 1
                if request.transport is not None:
                    request.transport.close()  # taken, and no answer
            if self._pending_gateway:
                status = self._pending_gateway.pop(0)
                return web.Response(status=status, content_type="text/html",
                                    text=f"<html><body>{status} Gateway error</body></html>")
            return web.json_response(answer)
        except GraphRefusal as refusal:
            if not _is_read(body):
                recorded = body if isinstance(body, dict) else {}
                self.sends.append(RecordedSend(phone_number_id, recorded, refusal.http_status,
                                               error_code=refusal.code))
            return web.json_response(self._error_body(refusal), status=refusal.http_status)

    async def _thread_control(self, request: web.Request) -> web.Response:
        """`POST /{phone_number_id}/thread_control` (Meta's thread-control reference, through
        docs/DEPLOY.md section 11 [S14]): the body must carry
        `messaging_product`, exactly one of `to` / `recipient`, an `action` (take, pass,
        release) and `control_pass.target_role` only with a pass (else 100). A `take` is
        refused with 2494191 unless `escalation_partner` is set (the business made this app
        its escalation partner). Answers `{messaging_product, request_id}`; every request is
        recorded in `thread_controls` (refused ones with their code)."""
        body = await _read_json(request)
        recorded = body if isinstance(body, dict) else {}
        try:
            self._check_token(request)
            _validate_thread_control(body)
            if recorded.get("action") == "take" and not self.escalation_partner:
                raise GraphRefusal(THREAD_TAKE_REFUSED, THREAD_TAKE_MESSAGE)
        except GraphRefusal as refusal:
            self.thread_controls.append(RecordedSend(request.match_info["phone_number_id"],
                                                     recorded, refusal.http_status,
                                                     error_code=refusal.code))
            return web.json_response(self._error_body(refusal), status=refusal.http_status)
        self._trace_seq += 1
        self.thread_controls.append(RecordedSend(request.match_info["phone_number_id"],
                                                 recorded, 200))
        return web.json_response({"messaging_product": "whatsapp",
                                  "request_id": f"REQ{self._trace_seq:010d}"})

    def _check_token(self, request: web.Request) -> None:
        """Graph answers a missing, wrong or expired Bearer token with 401 and code 190."""
        if self.access_token is None:
            return
        if request.headers.get("Authorization") != f"Bearer {self.access_token}":
            raise GraphRefusal(190, TOKEN_EXPIRED)

    def _mark_read(self, body: dict[str, Any]) -> dict[str, Any]:
        validate_read(body)
        self.reads.append(body)
        return {"success": True}

    def approve_templates(self, templates: list[dict[str, Any]]) -> None:
        """Meta's approved templates of the number (the scenario's `graph_templates`): a
        template send must name one ((name, language): else 132001) with as many body
        parameters and quick-reply payloads, and an ORDER_DETAILS button when approved with
        one (`order_details: true`, issue 48) and only then (else 132000). Without this, any
        well-formed template send is taken."""
        self.templates = {(str(t["name"]), str(t.get("language", "pt_BR"))):
                          (int(t.get("body_parameters", 0)), int(t.get("quick_replies", 0)),
                           bool(t.get("order_details", False)))
                          for t in templates}

    def _check_template(self, send: dict[str, Any]) -> None:
        if self.templates is None or send.get("type") != "template":
            return
        template = send["template"]
        key = (str(template.get("name")), str((template.get("language") or {}).get("code")))
        if key not in self.templates:
            raise _injected_refusal(132001)
        components = template.get("components") or []
        body = sum(len(c.get("parameters") or []) for c in components if c.get("type") == "body")
        quick = sum(1 for c in components if c.get("type") == "button"
                    and c.get("sub_type") == "quick_reply")
        order = any(c.get("sub_type") == "order_details" for c in components)
        if (body, quick, order) != self.templates[key]:
            raise _injected_refusal(132000)

    def _send(self, phone_number_id: str, body: object) -> dict[str, Any]:
        send = validate_send(body)
        if self._pending_failures:
            raise _injected_refusal(self._pending_failures.pop(0))
        self._check_template(send)
        self._wamid_seq += 1
        wamid = f"wamid.OUT{self.wamid_prefix}{self._wamid_seq:06d}"
        self.sends.append(RecordedSend(phone_number_id, send, 200, wamid=wamid))
        if self.on_taken is not None:
            self.on_taken(self.sends[-1])
        return _send_answer(send, wamid)

    def _error_body(self, refusal: GraphRefusal) -> dict[str, Any]:
        """Meta's error shape; error_data only where Meta sends it (fixtures error_*.json)."""
        self._trace_seq += 1
        error: dict[str, Any] = {
            "message": refusal.message,
            "type": "OAuthException",
            "code": refusal.code,
        }
        if refusal.details is not None:
            error["error_data"] = {"messaging_product": "whatsapp", "details": refusal.details}
        if refusal.code == 190:
            error["error_subcode"] = 463
        error["fbtrace_id"] = f"AFAKEtrace{self._trace_seq:013d}"
        return {"error": error}


def _is_read(body: object) -> TypeGuard[dict[str, Any]]:
    """Mark-as-read and typing indicator share the messages endpoint; `status: "read"` tells."""
    return isinstance(body, dict) and body.get("status") == "read"


async def _read_json(request: web.Request) -> object:
    try:
        return await request.json()
    except ValueError:
        return None


def _injected_refusal(code: int) -> GraphRefusal:
    """The refusal queued by `fail(code)`, shaped like Meta's (190 has no prefix, no details)."""
    if code == 190:
        return GraphRefusal(190, TOKEN_EXPIRED)
    return GraphRefusal(code, f"(#{code}) {TITLES.get(code, 'Error')}", DETAILS.get(code, "Error."))


def _send_answer(body: dict[str, Any], wamid: str) -> dict[str, Any]:
    """Meta's 200: contacts echo the address (`wa_id` for phones, `user_id` for BSUIDs)."""
    if "to" in body:
        contact = {"input": body["to"], "wa_id": str(body["to"]).lstrip("+")}
    else:
        contact = {"input": body["recipient"], "user_id": body["recipient"]}
    message: dict[str, Any] = {"id": wamid}
    if body["type"] == "template":
        message["message_status"] = "accepted"
    return {"messaging_product": "whatsapp", "contacts": [contact], "messages": [message]}


def validate_read(body: dict[str, Any]) -> None:
    """Mark-as-read / typing indicator body ([S22][S23]); raises GraphRefusal(100)."""
    _require(body.get("messaging_product") == "whatsapp", "messaging_product")
    _require(_is_text(body.get("message_id")), "message_id")
    _reject_unknown(body, {"messaging_product", "status", "message_id", "typing_indicator"}, "")
    if "typing_indicator" in body:
        _require(body["typing_indicator"] == {"type": "text"}, "typing_indicator")


def validate_send(body: object) -> dict[str, Any]:
    """A message send body ([S18]–[S21]), returned as is; GraphRefusal(100) on the first problem."""
    if not isinstance(body, dict):
        raise GraphRefusal(100, "(#100) The request body must be a JSON object.")
    _require(body.get("messaging_product") == "whatsapp", "messaging_product")
    _require(("to" in body) != ("recipient" in body), "to")
    _require(_is_text(body.get("to", body.get("recipient"))), "to")
    _require("recipient_type" not in body or body["recipient_type"] == "individual",
             "recipient_type")
    kind = str(body.get("type"))
    _require(kind in MESSAGE_TYPES, "type")
    _require(isinstance(body.get(kind), dict), str(kind))
    _reject_unknown(body, ENVELOPE_KEYS | {kind}, "")
    if "context" in body:
        _require(isinstance(body["context"], dict) and _is_text(body["context"].get("message_id")),
                 "context['message_id']")
    if kind == "text":
        validate_text(body["text"])
    if kind == "interactive":
        validate_interactive(body["interactive"])
    if kind == "template":
        validate_order_button(body["template"])
    return body


def validate_order_button(template: dict[str, Any]) -> None:
    """An order-details template's button (issue 48; whatsapp/orders.py, Meta's "Payments API
    - Brazil"): at most one `sub_type` order_details component, at index 0, whose `action`
    parameter carries an order_details payment by the same rules as the interactive one;
    131009 naming what is broken otherwise."""
    components = template.get("components") or []
    _require(isinstance(components, list), "template['components']")
    orders = [c for c in components if isinstance(c, dict) and c.get("type") == "button"
              and c.get("sub_type") == "order_details"]
    if not orders:
        return
    problems = [] if len(orders) == 1 and str(orders[0].get("index")) == "0" \
        else ["one order_details button, at index 0"]
    problems += order_button_problems(orders[0])
    if problems:
        raise GraphRefusal(131009, f"(#131009) {TITLES[131009]}", "; ".join(problems))


def validate_interactive(interactive: dict[str, Any]) -> None:
    """Reply buttons and lists ([S19][S20]) within Meta's limits (`whatsapp.interactive.LIMITS`,
    their one home; this walk is the double's own). A missing or misplaced part is a 100; a
    broken count or length a 131009 whose details name it, as Meta answers ("Button title
    length invalid. Min length: 1, Max length: 20"). Lengths in UTF-16 code units."""
    kind = interactive.get("type")
    if kind in ("order_details", "order_status"):  # Payments API - Brazil (whatsapp/orders.py)
        _reject_unknown(interactive, {"type", "header", "body", "footer", "action"},
                        "interactive")
        problems = order_problems(interactive)
        if problems:
            raise GraphRefusal(131009, f"(#131009) {TITLES[131009]}", "; ".join(problems))
        return
    _require(kind in ("button", "list"), "interactive['type']")
    _reject_unknown(interactive, {"type", "header", "body", "footer", "action"}, "interactive")
    body = interactive.get("body")
    _require(isinstance(body, dict) and _is_text(body.get("text")), "interactive['body']")
    assert isinstance(body, dict)
    _length("Body", body["text"], LIMITS.button_body if kind == "button" else LIMITS.list_body)
    for part in ("header", "footer"):  # a header may also be an image, video or document
        value = interactive.get(part)
        if part in interactive and (part == "footer" or _dict_get(value, "type") == "text"):
            _require(isinstance(value, dict) and _is_text(value.get("text")),
                     f"interactive['{part}']")
            assert isinstance(value, dict)
            _length(part.capitalize(), value["text"], LIMITS.header if part == "header"
                    else LIMITS.footer)
        elif part in interactive:
            _require(isinstance(value, dict), f"interactive['{part}']")
    action = interactive.get("action")
    _require(isinstance(action, dict), "interactive['action']")
    assert isinstance(action, dict)
    if kind == "button":
        _validate_buttons(action)
    else:
        _validate_list(action)


def _validate_buttons(action: dict[str, Any]) -> None:
    buttons = action.get("buttons")
    _require(isinstance(buttons, list) and bool(buttons), "interactive['action']['buttons']")
    assert isinstance(buttons, list)
    _count("buttons", len(buttons), LIMITS.buttons)
    titles = []
    for n, button in enumerate(buttons):
        reply = button.get("reply") if isinstance(button, dict) else None
        _require(isinstance(reply, dict) and button.get("type") == "reply"
                 and _is_text(reply.get("id")) and _is_text(reply.get("title")),
                 f"interactive['action']['buttons'][{n}]")
        assert isinstance(reply, dict)
        _length("Button title", reply["title"], LIMITS.button_title)
        _length("Button id", reply["id"], LIMITS.button_id)
        titles.append(reply["title"])
    if len(set(titles)) != len(titles):
        raise GraphRefusal(131009, f"(#131009) {TITLES[131009]}",
                           "Button title is not unique.")


def _validate_list(action: dict[str, Any]) -> None:
    _require(_is_text(action.get("button")), "interactive['action']['button']")
    _length("Button label", action["button"], LIMITS.list_button)
    sections = action.get("sections")
    _require(isinstance(sections, list) and bool(sections), "interactive['action']['sections']")
    assert isinstance(sections, list)
    _count("sections", len(sections), LIMITS.list_sections)
    rows = 0
    for s, section in enumerate(sections):
        _require(isinstance(section, dict) and isinstance(section.get("rows"), list)
                 and bool(section["rows"]), f"interactive['action']['sections'][{s}]")
        if "title" in section:
            _length("Section title", section["title"], LIMITS.section_title)
        elif len(sections) > 1:  # Meta: a title on every section of a multi-section list
            _require(False, f"interactive['action']['sections'][{s}]['title']")
        for n, row in enumerate(section["rows"]):
            where = f"interactive['action']['sections'][{s}]['rows'][{n}]"
            _require(isinstance(row, dict) and _is_text(row.get("id"))
                     and _is_text(row.get("title")), where)
            _reject_unknown(row, {"id", "title", "description"}, where)
            _length("Row title", row["title"], LIMITS.row_title)
            _length("Row id", row["id"], LIMITS.row_id)
            if "description" in row:
                _length("Row description", row["description"], LIMITS.row_description)
            rows += 1
    _count("rows", rows, LIMITS.list_rows)


THREAD_TAKE_REFUSED = 2494191
THREAD_TAKE_MESSAGE = ("(#2494191) The app is not the designated escalation partner for this "
                       "phone number")


def _validate_thread_control(body: object) -> None:
    """The shape Meta documents for a thread_control body; 100 otherwise."""
    if not isinstance(body, dict) or body.get("messaging_product") != "whatsapp":
        raise GraphRefusal(100, "messaging_product must be whatsapp")
    if ("to" in body) == ("recipient" in body):
        raise GraphRefusal(100, "exactly one of to or recipient")
    if body.get("action") not in ("take", "pass", "release"):
        raise GraphRefusal(100, "action must be take, pass or release")
    if "control_pass" in body and body.get("action") != "pass":
        raise GraphRefusal(100, "control_pass is valid for pass only")
    unknown = set(body) - {"messaging_product", "to", "recipient", "action", "metadata",
                           "control_pass"}
    if unknown:
        raise GraphRefusal(100, f"unknown fields: {', '.join(sorted(unknown))}")


def _dict_get(value: object, key: str) -> object:
    return value.get(key) if isinstance(value, dict) else None


def _length(what: str, value: object, limit: int) -> None:
    if not isinstance(value, str) or not 1 <= len(value.encode("utf-16-le",
                                                              "surrogatepass")) // 2 <= limit:
        raise GraphRefusal(131009, f"(#131009) {TITLES[131009]}",
                           f"{what} length invalid. Min length: 1, Max length: {limit}")


def _count(what: str, count: int, limit: int) -> None:
    if count > limit:
        raise GraphRefusal(131009, f"(#131009) {TITLES[131009]}",
                           f"Too many {what}: {count}. Max {what}: {limit}")


def validate_text(text: dict[str, Any]) -> None:
    """Meta: text.body a non-empty string of at most 4096 characters (UTF-16 code units here:
    an emoji counts 2); preview_url a boolean."""
    _reject_unknown(text, {"body", "preview_url"}, "text")
    _require(_is_text(text.get("body")), "text['body']")
    if len(text["body"].encode("utf-16-le", "surrogatepass")) // 2 > MAX_TEXT_CHARS:
        raise GraphRefusal(
            100, f"(#100) Param text['body'] must be at most {MAX_TEXT_CHARS} characters long."
        )
    _require(isinstance(text.get("preview_url", False), bool), "text['preview_url']")


def _require(ok: bool, param: str) -> None:
    if not ok:
        raise GraphRefusal(100, f"(#100) Param {param} is missing or invalid.")


def _reject_unknown(obj: dict[str, Any], allowed: set[str] | frozenset[str], where: str) -> None:
    for key in obj:
        if key not in allowed:
            place = f' on param "{where}"' if where else ""
            raise GraphRefusal(100, f"(#100) {TITLES[100]}", f'Unexpected key "{key}"{place}.')


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value)
