"""Failed credential attempts at the web edge (console sign-in, admin API bearer tokens): who
the client is, and whether it, or the tenant its token names, used up its failures.

The counters are in Redis (storage/throttle.py), shared by every web process: per client
address (an IPv6 client by its /64, which one subscriber usually holds whole) and per tenant
(a token of the current form names its tenant: core/credentials.py). While either is at its
limit, an attempt is answered 429 with Retry-After before its credential is looked at, so a
guess then costs nothing and learns nothing. The address is the TCP peer's; a proxy's
X-Forwarded-For is believed only when the peer is one of TRUSTED_PROXIES.

The functions that touch Redis are blocking (run them with `run_admin`) and raise RedisError.
"""

from ipaddress import IPv4Address, IPv6Address, IPv6Network, ip_address

from aiohttp import web

from core.credentials import tenant_named
from core.settings import Settings, trusted_networks
from intake.keys import REDIS, SETTINGS
from storage.throttle import Scope, record_failure, retry_after


def client_address(request: web.Request) -> str:
    """The client's address as the throttle counts it."""
    settings = request.app[SETTINGS]
    peer = _parsed(request.remote or "")
    if peer is None:
        return "unknown"
    trusted = trusted_networks(settings.trusted_proxies)
    if trusted and any(peer in network for network in trusted):
        hops = [h.strip() for part in request.headers.getall("X-Forwarded-For", [])
                for h in part.split(",")]
        for hop in reversed(hops):  # the right end was added by our own proxy
            address = _parsed(hop)
            if address is None:
                break
            peer = address
            if not any(address in network for network in trusted):
                break
    if isinstance(peer, IPv6Address):
        return str(IPv6Network(f"{peer}/64", strict=False))
    return str(peer)


def _parsed(raw: str) -> IPv4Address | IPv6Address | None:
    try:
        address = ip_address(raw)
    except ValueError:
        return None
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def scopes(settings: Settings, address: str, token: str) -> list[Scope]:
    """The counters an attempt with `token` from `address` belongs to."""
    found = [Scope("address", address, settings.auth_failures_per_address)]
    tenant_id = tenant_named(token)
    if tenant_id is not None:
        found.append(Scope("tenant", str(tenant_id), settings.auth_failures_per_tenant))
    return found


def wait_seconds(app: web.Application, address: str, token: str) -> int:
    """Seconds before an attempt with `token` from `address` is looked at; 0: now."""
    settings = app[SETTINGS]
    return retry_after(app[REDIS], settings.redis_prefix, scopes(settings, address, token))


def count_failure(app: web.Application, address: str, token: str) -> None:
    """Count a failed attempt against the address and the tenant the token names."""
    settings = app[SETTINGS]
    record_failure(app[REDIS], settings.redis_prefix, scopes(settings, address, token),
                   window=settings.auth_failure_window_seconds)
