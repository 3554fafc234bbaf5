"""Naming why a connection failed, from an exception's cause chain (for logs and the outbox).

httpx2 (the product's HTTP client, and the `anthropic` SDK's) wraps the operating system's
error twice: `anthropic.APIConnectionError` ← `httpx2.ConnectError` ← `httpcore2.ConnectError`
← `socket.gaierror`. The outer classes say only "connection error"; the innermost one says what
happened. `network_cause` walks `__cause__` / `__context__` and names it with one word, never
with the exception's text (it may name hosts; a caller logging it must not add customer data).
"""

import errno
import socket
import ssl

# One word per cause: what an engineer on call needs to tell a DNS outage from a firewall.
CAUSES = ("dns", "refused", "tls", "timeout", "unreachable", "reset", "closed", "protocol",
          "other")
_UNREACHABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN}
MAX_CHAIN = 16  # a cycle in a hand-built chain must not loop forever


def network_cause(exc: BaseException) -> str:
    """One of CAUSES for a failed connection or request.

    dns: the name did not resolve; refused: nothing listens (connection refused); tls: the TLS
    handshake failed (certificate, protocol); timeout: connecting, reading or writing took too
    long; unreachable: no route to the network or host; reset: the peer reset or the pipe broke;
    closed: the server closed the connection without answering; protocol: a malformed answer;
    other: none of these (the caller logs the exception's class beside it).
    """
    chain = _chain(exc)
    for link in reversed(chain):  # the innermost error is the most specific
        cause = _classify(link)
        if cause is not None:
            return cause
    return "other"


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < MAX_CHAIN:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _classify(exc: BaseException) -> str | None:
    if isinstance(exc, ssl.SSLError):  # before OSError: SSLError is one
        return "tls"
    if isinstance(exc, socket.gaierror):
        return "dns"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, ConnectionResetError | ConnectionAbortedError | BrokenPipeError):
        return "reset"
    if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError since Python 3.10
        return "timeout"
    if isinstance(exc, OSError) and exc.errno in _UNREACHABLE:
        return "unreachable"
    return _classify_by_name(type(exc).__name__, str(exc))


def _classify_by_name(name: str, text: str) -> str | None:
    """httpx2 / httpcore2 classes that carry no OS error (a timeout the library measured, a
    server that hung up), recognised by name so this module imports no HTTP library."""
    if name.endswith(("Timeout", "TimeoutError")) or name == "TimeoutException":
        return "timeout"
    if name == "RemoteProtocolError":
        return "closed" if "disconnected" in text.lower() else "protocol"
    return None
