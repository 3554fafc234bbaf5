"""Errors of the worker side's Graph API calls, classified by Graph `error.code`.

    GraphError              any refused or failed Graph call; `retryable` says whether to try again
    ├── GraphRateLimited    130429 throughput, 131056 pair, 4 app, 80007 WABA rate limit: back off
    ├── GraphWindowClosed   131047 re-engagement: the 24 h service window is closed, send a template
    ├── GraphAuthError      190 token expired, 0 auth failed: rotate the token, page someone
    ├── GraphTransient      1, 2, 131000, 131016, 131057: Meta-side trouble, answered with
    │   │                   Meta's error body; retry with backoff
    │   └── GraphUnreachable  no connection was made (DNS, refused, TLS handshake, connect
    │                         timeout, no route): nothing reached Meta, a resend cannot double it
    └── GraphNoAnswer       the request was written but no usable answer came back (read
                            timeout, connection dropped, a 200 without a wamid, an HTTP 5xx
                            without Meta's error body: a gateway's page): Meta may have
                            accepted it, so a send is never repeated

`cause` names what went wrong without an answer (core/network.py: dns, refused, tls, timeout,
...; `no_wamid`), None when Meta answered with an error.

Codes and advice: Meta's error-code page (Sources: WhatsApp §5.4, [S16][S17][S24]). Codes not
listed (100 bad parameter, 131026 undeliverable, ...) are a plain `GraphError` with
`retryable=False` unless Graph itself marks them `is_transient`.
"""


class GraphError(Exception):
    """A Graph API call that did not succeed.

    `code` is Graph's `error.code` (None when the answer had none), `title` its message without
    the `(#code) ` prefix, `details` its `error_data.details` ("" when absent), `http_status` the
    HTTP status (0 when no answer arrived), `fbtrace_id` Meta's support trace id, `cause` why
    no usable answer came (None when Meta answered with an error).
    """

    default_retryable = False

    def __init__(
        self,
        *,
        code: int | None,
        title: str,
        details: str = "",
        http_status: int = 0,
        fbtrace_id: str | None = None,
        retryable: bool | None = None,
        cause: str | None = None,
    ) -> None:
        self.code = code
        self.title = title
        self.details = details
        self.http_status = http_status
        self.fbtrace_id = fbtrace_id
        self.cause = cause
        self.retryable = self.default_retryable if retryable is None else retryable
        super().__init__(self._describe())

    def _describe(self) -> str:
        head = f"(#{self.code}) {self.title}" if self.code is not None else self.title
        tail = f": {self.details}" if self.details else ""
        if self.cause is not None:
            return f"{head}{tail} [{self.cause}, http {self.http_status}]"
        return f"{head}{tail} [http {self.http_status}, fbtrace {self.fbtrace_id}]"


class GraphRateLimited(GraphError):
    """Throughput, pair, app or WABA rate limit: retry later with backoff (Meta: 4^X s per pair)."""

    default_retryable = True


class GraphWindowClosed(GraphError):
    """More than 24 h since the user's last message: only a template may be sent."""

    default_retryable = False


class GraphAuthError(GraphError):
    """The access token is expired or invalid: retrying cannot help until it is rotated."""

    default_retryable = False


class GraphTransient(GraphError):
    """Meta answered that it did not take the call (temporary trouble), or the call never
    reached it: retry a few times with backoff."""

    default_retryable = True


class GraphUnreachable(GraphTransient):
    """No connection to Graph was made (httpx2 ConnectError, ConnectTimeout, PoolTimeout,
    ProxyError, UnsupportedProtocol): not one byte of the request reached Meta, so sending it
    again cannot deliver it twice. `cause`: dns, refused, tls, timeout, unreachable, ..."""


class GraphNoAnswer(GraphError):
    """The request was (or may have been) written and no usable answer came back: a read or
    write timeout, a dropped connection, a 200 without a wamid, or a 5xx without Meta's error
    body (cause `gateway`: a proxy's 502/504 page says nothing of whether Meta took it). Meta
    may have accepted the message, so a send is never repeated (it could reach the customer
    twice)."""

    default_retryable = False
