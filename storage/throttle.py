"""Failed credential attempts, counted in Redis per client address and per tenant in fixed
windows (docs/OPERATE.md, Security: 10 per address and 100 per tenant in 15 minutes by default).

A window starts with its first failure and lasts `window` seconds, shared by every web
process. While a counter is at its limit, attempts in its scope are refused (429) without
looking at the credential, until the window ends: the caller's Retry-After.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from redis import Redis

from storage.keys import auth_failures_key


@dataclass(frozen=True)
class Scope:
    """One counter: `kind` (`address` or `tenant`), its `name`, and its `limit`."""

    kind: str
    name: str
    limit: int


def retry_after(redis: Redis, prefix: str, scopes: Sequence[Scope]) -> int:
    """Seconds until the attempts of `scopes` are looked at again; 0 when none is at its limit.
    One round trip. Raises redis.RedisError."""
    with redis.pipeline(transaction=False) as pipe:
        for scope in scopes:
            key = auth_failures_key(prefix, scope.kind, scope.name)
            pipe.get(key)
            pipe.pttl(key)
        answers = pipe.execute()
    wait_ms = 0
    for scope, count, ttl in zip(scopes, answers[::2], answers[1::2], strict=True):
        if count is not None and int(count) >= scope.limit:
            wait_ms = max(wait_ms, int(ttl) if int(ttl) > 0 else 1000)
    return -(-wait_ms // 1000)


def record_failure(redis: Redis, prefix: str, scopes: Sequence[Scope], *, window: int) -> None:
    """Count one failed attempt in each of `scopes` (a new window starts at the first).
    One transaction. Raises redis.RedisError."""
    with redis.pipeline(transaction=True) as pipe:
        for scope in scopes:
            key = auth_failures_key(prefix, scope.kind, scope.name)
            pipe.set(key, 0, ex=window, nx=True)
            pipe.incr(key)
        pipe.execute()
