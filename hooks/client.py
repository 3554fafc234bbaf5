"""The one HTTP call of a delivery: POST the signed body, answer the status, keep nothing else.

Guarded against server-side request forgery where it matters, at connect time: the URL's name
is resolved here, every address it gives is checked, and the socket connects to a checked
address itself (TLS then verifies the certificate against the name). A name that resolved to a
public address when the endpoint was registered and to 127.0.0.1 now (DNS rebinding) is
refused now. Only `https` to public addresses is allowed, unless the operator lists networks
in WEBHOOK_ALLOWED_NETWORKS (core/settings.py): an address in one of them may be reached, over
http too (the tests use loopback this way). Sources: OWASP SSRF Prevention Cheat Sheet.

The whole call (resolve aside) has TIMEOUT_SECONDS: a hung endpoint costs a job 5 s, never a
turn (deliveries are their own jobs). Redirects are not followed (a 3xx is a failure, so a
public URL cannot redirect to a private one); the answer's body is never read or stored.
"""

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from typing import Any
from urllib.parse import urlsplit

from core.network import network_cause
from hooks.errors import DeliveryError, DeliveryRefused

TIMEOUT_SECONDS = 5.0
Networks = Sequence[IPv4Network | IPv6Network]
_TLS = ssl.create_default_context()


def check_url(url: str) -> None:
    """The shape of an endpoint's URL (registration): http or https, a host, no user or
    password in it (they would show in the console). Raises DeliveryRefused("url"). Whether
    the address may be reached is decided at connect time (`post`), not here."""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        raise DeliveryRefused("url") from None
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.username \
            or parts.password or len(url) > 2000:
        raise DeliveryRefused("url")


def is_public(address: IPv4Address | IPv6Address) -> bool:
    """A globally routable unicast address (not loopback, private, link-local, CGNAT,
    multicast, reserved or unspecified). An IPv6 address that carries an IPv4 one counts as
    that IPv4 address, and must be public as well: IPv4-mapped (::ffff:a.b.c.d), IPv4-
    translated (::ffff:0:a.b.c.d), IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96 and the
    local 64:ff9b:1::/48, RFC 6052 and 8215: a DNS64 host reaches private IPv4 through them),
    6to4 (2002::/16) and Teredo (2001::/32); deprecated site-local fec0::/10 never is."""
    if isinstance(address, IPv6Address):
        if address in _SITE_LOCAL:
            return False
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return is_public(embedded) and (address.ipv4_mapped is not None
                                            or address in _NAT64 or address.is_global)
    return address.is_global and not address.is_multicast


_NAT64 = ip_network("64:ff9b::/96")
_NAT64_LOCAL = ip_network("64:ff9b:1::/48")
_IPV4_TRANSLATED = ip_network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ip_network("::/96")
_SITE_LOCAL = ip_network("fec0::/10")


def _embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 one carries, by the forms above; None for a plain one."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    low = IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _NAT64 or address in _IPV4_TRANSLATED or address in _IPV4_COMPATIBLE:
        return low
    if address in _NAT64_LOCAL:
        return low  # RFC 8215 leaves the layout to the operator: the low 32 bits, strictest
    return None


Resolve = Callable[..., Sequence[tuple[Any, ...]]]  # socket.getaddrinfo and its stand-ins


def allowed_addresses(scheme: str, infos: list[tuple[str, int]],
                      allowed: Networks) -> list[tuple[str, int]]:
    """The resolved (address, port) pairs a delivery may connect to, in resolver order; raises
    DeliveryRefused("private_address" | "scheme") when none."""
    usable, reason = [], "private_address"
    for host, port in infos:
        address = ip_address(host.split("%", 1)[0])
        listed = any(address in network for network in allowed)
        if not listed and not is_public(address):
            continue
        if scheme != "https" and not listed:
            reason = "scheme"
            continue
        usable.append((host, port))
    if not usable:
        raise DeliveryRefused(reason)
    return usable


def post(url: str, body: bytes, headers: dict[str, str], *, allowed: Networks = (),
         timeout: float = TIMEOUT_SECONDS, resolve: Resolve = socket.getaddrinfo) -> int:
    """POST `body` to `url`; returns the 2xx status. Raises DeliveryRefused (not connected:
    url, scheme, private_address) or DeliveryError (`cause`: a core/network.py word, or
    http_<status> for any other answer, `status_code` set). `resolve` is the resolver, with
    socket.getaddrinfo's signature (a test's DNS)."""
    check_url(url)
    parts = urlsplit(url)
    host, scheme = str(parts.hostname), parts.scheme
    port = parts.port or (443 if scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    deadline = time.monotonic() + timeout
    try:
        infos = [(str(i[4][0]), int(i[4][1])) for i in
                 resolve(host, port, type=socket.SOCK_STREAM)]
    except OSError as exc:
        raise DeliveryError(network_cause(exc)) from None
    targets = allowed_addresses(scheme, infos, allowed)
    fired = threading.Event()
    sock = _connect(targets, deadline)
    try:
        if scheme == "https":
            sock = _TLS.wrap_socket(sock, server_hostname=host)
        watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), _cut, (sock, fired))
        watchdog.daemon = True
        watchdog.start()
        try:
            connection = http.client.HTTPConnection(host, port)
            connection.sock = sock  # already connected to the checked address: no new lookup
            connection.request("POST", path, body=body, headers=headers)
            status = connection.getresponse().status  # the body is never read
        finally:
            watchdog.cancel()
    except DeliveryError:
        raise
    except Exception as exc:  # noqa: BLE001 (named in one word; never the text: it may hold the host)
        raise DeliveryError("timeout" if fired.is_set() else network_cause(exc)) from None
    finally:
        sock.close()
    if not 200 <= status < 300:
        raise DeliveryError(f"http_{status}", status)
    return status


def _connect(targets: list[tuple[str, int]], deadline: float) -> socket.socket:
    cause = "refused"
    for host, port in targets:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeliveryError("timeout")
        try:
            sock = socket.create_connection((host, port), timeout=remaining)
        except OSError as exc:
            cause = network_cause(exc)
            continue
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        return sock
    raise DeliveryError(cause)


def _cut(sock: socket.socket, fired: threading.Event) -> None:
    """The deadline passed mid-call (an endpoint trickling its answer): end the socket."""
    fired.set()
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
