"""Naming the cause of a failed connection (core/network.py), through the real libraries'
exception chains: httpx2 against loopback, the anthropic SDK wrapping httpx2."""

import socket
import ssl
from collections.abc import Iterator

import anthropic
import httpx2
import pytest

from core.network import network_cause


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port bound to a socket that never listens: connections to it are refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield int(sock.getsockname()[1])
    sock.close()


def _raised(call: object) -> BaseException:
    try:
        call()  # type: ignore[operator]
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("no error")


def test_a_refused_connection_through_httpx2_and_the_anthropic_sdk_is_refused(
        refused_port: int) -> None:
    port = refused_port
    error = _raised(lambda: httpx2.post(f"http://127.0.0.1:{port}/", json={}))
    assert isinstance(error, httpx2.ConnectError) and network_cause(error) == "refused"
    client = anthropic.Anthropic(api_key="k", base_url=f"http://127.0.0.1:{port}",
                                 max_retries=0)
    error = _raised(lambda: client.messages.create(
        model="claude-haiku-4-5", max_tokens=5, messages=[{"role": "user", "content": "oi"}]))
    assert type(error) is anthropic.APIConnectionError
    assert network_cause(error) == "refused"
    client.close()


@pytest.mark.parametrize(("error", "cause"), [
    (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "dns"),
    (ssl.SSLCertVerificationError("certificate verify failed"), "tls"),
    (TimeoutError("timed out"), "timeout"),
    (ConnectionResetError(104, "Connection reset by peer"), "reset"),
    (OSError(101, "Network is unreachable"), "unreachable"),
    (httpx2.RemoteProtocolError("Server disconnected without sending a response."), "closed"),
    (httpx2.ReadTimeout("timed out"), "timeout"),
    (ValueError("something else"), "other"),
])
def test_the_innermost_known_error_names_the_cause(error: Exception, cause: str) -> None:
    outer = httpx2.ConnectError("wrapped")
    outer.__cause__ = error
    assert network_cause(outer) == cause
