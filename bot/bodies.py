"""Request bodies read within bounds (docs/OPERATE.md, Security): a size limit per route, a minimum
arrival rate, and a budget of bytes that the bodies being read in one web process may hold
together. Every POST of the webhook, the admin API and the console reads its body here.

* Size: a body that announces more than its route's limit is answered 413 before a byte is
  read; one without a Content-Length is cut with 413 once it passes the limit.
* Rate: a body may lag `body_grace_seconds` (10 s) behind `body_min_rate` (32 KiB/s): by t
  seconds after its headers it must have delivered min_rate × (t − grace) bytes, else 408.
  Meta's largest body (3 MB) thus has 106 s: any link of 0.24 Mbit/s or more passes it. A
  stalled or trickled upload is cut 10 s (plus what it sent / min_rate) after its headers.
* Memory: a body reserves its announced size (its route's limit without a Content-Length)
  from `body_budget_bytes` (64 MiB) before it is read, and gives it back once read. A body
  the budget has no room for is answered 503 with Retry-After before a byte is read (Meta
  redelivers). Bodies over SMALL_BODY_BYTES may take only LARGE_BODY_SHARE of the budget, so
  Meta's ordinary updates (a few KB) still find room while large uploads hold the rest.

After a refusal the connection is closed; aiohttp reads and drops what the client still sends
for at most LINGER_SECONDS, so the client can read the answer. Beyond the budget, an open
connection costs aiohttp's read buffer: it stops reading a socket whose unread data passes
2 × 64 KiB.
"""

import asyncio
import ctypes
import urllib.parse

import structlog
from aiohttp import web
from multidict import MultiDict

from bot.routes import route_template
from core.settings import LARGE_BODY_SHARE, SMALL_BODY_BYTES
from intake.keys import SETTINGS

log = structlog.get_logger(__name__)
LINGER_SECONDS = 2.0  # aiohttp's `lingering_time` (its default, 10 s, is a trickle's gift)
SIGN_IN_BODY_BYTES = 4 * 1024  # the console's sign-in form: a CSRF token and a key
FORM_BODY_BYTES = 1024 * 1024  # a console form (instructions of 50,000 characters fit)
ADMIN_BODY_BYTES = 1024 * 1024  # an admin API JSON body (a whole catalogue fits)
RETRY_AFTER_SECONDS = 5  # a body the budget had no room for: try again
MAX_FIELDS = 1000  # of a console form (the catalogue's professional form has one per service)


class BodyBudget:
    """The bytes reserved by the bodies being read in one web process (one event loop)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0

    def reserve(self, size: int) -> bool:
        """Take `size` bytes if there is room (a large body: within its share)."""
        room = self.total if size <= SMALL_BODY_BYTES else int(self.total * LARGE_BODY_SHARE)
        if self.used + size > room:
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        self.used -= size


BODY_BUDGET = web.AppKey("body_budget", BodyBudget)


def lag_allowed(received: int, *, min_rate: int, grace: float) -> float:
    """Seconds after the headers until which a body that has delivered `received` bytes may
    wait for its next one: grace + received / min_rate."""
    return grace + received / min_rate


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole raw body, at most `limit` bytes.

    Raises (as the answer, the connection then closed) HTTPRequestEntityTooLarge (413) past
    the limit, HTTPServiceUnavailable (503, Retry-After) when the budget has no room,
    HTTPRequestTimeout (408) below the minimum rate.
    """
    length = request.content_length
    if length is not None and length > limit:
        raise closing(web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=length))
    size = limit if length is None else length
    budget = request.app[BODY_BUDGET]
    if not budget.reserve(size):
        log.warning("body_refused", reason="budget", route=route_template(request), size=size)
        raise closing(web.HTTPServiceUnavailable(
            text="too many uploads in progress; try again",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)}))
    try:
        return await _read(request, bytearray(size if length is not None else 0), limit)
    finally:
        budget.release(size)


async def _read(request: web.Request, buffer: bytearray, limit: int) -> bytes:
    """Fill `buffer` (preallocated to the announced length, or grown) from the request.

    `StreamReader.readany()` returns what is buffered, not the whole body: read until EOF.
    What the stream holds already is taken without a timer (`read_nowait`): an ordinary
    update of a few KB arrives with its headers, and a timer armed and cancelled per POST
    was a cost of every webhook POST (bench/README.md, issue 43). A body that arrives in one
    piece is returned as it came, without a copy. On any failure the buffer is emptied at
    once: the exception's traceback can keep this frame alive in a reference cycle (aiohttp
    keeps the exception on the request's stream) until a full garbage collection, and it
    would keep the bytes with it.
    """
    content = request.content
    started = asyncio.get_running_loop().time()
    received = 0
    whole: bytes | None = None  # the body when it came in one chunk
    preallocated = len(buffer) > 0
    try:
        while True:
            chunk = content.read_nowait()
            if not chunk and not content.at_eof():
                chunk = await _read_within(request, started, received)
            if not chunk:
                break
            if received + len(chunk) > limit:
                raise closing(web.HTTPRequestEntityTooLarge(
                    max_size=limit, actual_size=received + len(chunk)))
            whole = chunk if received == 0 else None
            if preallocated:
                buffer[received:received + len(chunk)] = chunk
            else:
                buffer += chunk
            received += len(chunk)
        if whole is not None and len(whole) == received:
            return whole
        return bytes(buffer) if received == len(buffer) else bytes(buffer[:received])
    except BaseException:
        buffer.clear()
        raise


async def _read_within(request: web.Request, started: float, received: int) -> bytes:
    """The next chunk of the body, waited for within the minimum rate (`lag_allowed`); the
    408 (connection closed) when it does not come in time."""
    settings = request.app[SETTINGS]
    loop = asyncio.get_running_loop()
    wait = started + lag_allowed(received, min_rate=settings.body_min_rate,
                                 grace=settings.body_grace_seconds) - loop.time()
    try:
        async with asyncio.timeout(max(wait, 0)):
            return await request.content.readany()
    except TimeoutError:
        log.info("body_refused", reason="too_slow", route=route_template(request),
                 received=received, seconds=round(loop.time() - started, 1))
        too_slow = web.HTTPRequestTimeout(
            text=f"the body arrived slower than {settings.body_min_rate} bytes/s")
        raise closing(too_slow) from None


async def read_form(request: web.Request, limit: int) -> MultiDict[str]:
    """A console form (`application/x-www-form-urlencoded`, the only kind its pages post),
    read with `read_body`; any other body is an empty form (its CSRF check then fails).
    Bytes that are not UTF-8 become lone surrogates, which the console refuses (400)."""
    body = await read_body(request, limit)
    if request.content_type != "application/x-www-form-urlencoded":
        return MultiDict()
    try:
        pairs = urllib.parse.parse_qsl(body.decode("utf-8", "surrogateescape"),
                                       keep_blank_values=True, encoding="utf-8",
                                       errors="surrogateescape", max_num_fields=MAX_FIELDS)
    except ValueError:
        raise web.HTTPBadRequest(text=f"more than {MAX_FIELDS} form fields") from None
    return MultiDict(pairs)


def closing(error: web.HTTPException) -> web.HTTPException:
    """`error` as an answer after which the connection closes (the rest of the body unread)."""
    error.force_close()
    return error


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


def return_large_buffers_to_os(threshold: int = 128 * 1024) -> bool:
    """Make glibc serve every allocation of `threshold` bytes or more with its own mmap, which
    goes back to the system when freed. Called once by `wagent web`.

    Left alone, glibc raises its threshold to the size of each mmapped block freed (up to
    32 MiB): after the first body buffer is freed, the 64 to 256 KiB socket reads of many
    concurrent uploads come from the heap, and once freed they leave holes below live objects
    that glibc keeps. bench/edge.py `storms`: after three storms of 300 uploads the process
    stays 62 MB above its start with glibc's default, 34 to 38 MB with the threshold fixed
    here (what is kept is reused: the third storm adds nothing to the second). False
    without glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False
