"""A per-tenant cap on Messages API calls in flight (issue 43, fair shares): one business
cannot use the account's whole rate limit, whatever number of workers its flood reaches.

A Redis semaphore of leases (`storage.keys.tenant_calls_key`): a sorted set of tokens, each
scored by the millisecond its lease ends on Redis's own clock (`TIME`, so hosts whose clocks
differ agree). Taking a slot drops the expired leases and adds one while fewer than the cap
remain, in one script (atomic); giving it back removes the token. A worker killed mid-call
(SIGKILL, OOM) never gives its slot back: the lease ends it, `lease_seconds` after it was
taken (the call's own timeout, `ANTHROPIC_TIMEOUT`, plus LEASE_MARGIN_SECONDS: a call that
still runs past that has been abandoned by the SDK anyway).

A call that finds no slot waits up to WAIT_SECONDS, polling every POLL_SECONDS, then raises
TenantCallsBusy before any call is made; `workers.jobs.run_coalesced` then enqueues the job
again DEFER later with the same attempt (a busy tenant is neither a provider failure nor an
outage), so a worker waits at most WAIT_SECONDS for its tenant's other calls and then takes
other work (another tenant's turns, which the fair move of due jobs keeps in the queue).
"""

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from redis import Redis

from storage.keys import tenant_calls_key

LEASE_MARGIN_SECONDS = 30.0
# A call waits this long for a slot in its worker, then its job is deferred: short, since the
# waiting worker serves no other tenant meanwhile (bench/README.md, "fair shares, the rest":
# 2 s cost B-J's p99 with a cap of 1 on two workers)
WAIT_SECONDS = 0.5
POLL_SECONDS = 0.1
DEFER = timedelta(seconds=5)  # a deferred job is enqueued again this much later

# KEYS[1] the tenant's set; ARGV cap, lease (ms), token. 1 when taken, 0 when full.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""


class TenantCallsBusy(Exception):
    """Every one of the tenant's call slots stayed taken for WAIT_SECONDS: the job is to be
    deferred (DEFER), not failed."""

    def __init__(self, tenant_id: int) -> None:
        super().__init__(f"tenant {tenant_id} has every Messages API call slot in use")
        self.tenant_id = tenant_id


def try_take(redis: Redis, prefix: str, tenant_id: int, *, cap: int,
             lease_seconds: float) -> str | None:
    """One of the tenant's `cap` slots for `lease_seconds`: its token, or None when all are
    taken. Raises redis.exceptions.RedisError when Redis fails."""
    token = uuid.uuid4().hex
    taken = redis.eval(_TAKE, 1, tenant_calls_key(prefix, tenant_id), cap,
                       int(lease_seconds * 1000), token)
    return token if int(taken) == 1 else None


def give_back(redis: Redis, prefix: str, tenant_id: int, token: str) -> None:
    """Free the slot `token` holds (nothing when its lease already ended)."""
    redis.zrem(tenant_calls_key(prefix, tenant_id), token)


def in_flight(redis: Redis, prefix: str, tenant_id: int) -> int:
    """The tenant's slots taken now (leases not ended; Redis's clock)."""
    seconds, micros = redis.time()
    now = seconds * 1000 + micros // 1000
    return int(redis.zcount(tenant_calls_key(prefix, tenant_id), f"({now}", "+inf"))


@contextmanager
def call_slot(redis: Redis, prefix: str, tenant_id: int | None, *, cap: int,
              lease_seconds: float, wait: float | None = None) -> Iterator[None]:
    """Hold one of the tenant's slots while the body (one Messages API call) runs. No tenant
    (the outage probe) or `cap` 0: no slot. Raises TenantCallsBusy when none is free within
    `wait` seconds (wall clock; default WAIT_SECONDS); a slot whose give-back fails (Redis)
    ends with its lease."""
    if tenant_id is None or cap <= 0:
        yield
        return
    deadline = time.monotonic() + (WAIT_SECONDS if wait is None else wait)
    while (token := try_take(redis, prefix, tenant_id, cap=cap,
                             lease_seconds=lease_seconds)) is None:
        if time.monotonic() >= deadline:
            raise TenantCallsBusy(tenant_id)
        time.sleep(POLL_SECONDS)
    try:
        yield
    finally:
        try:
            give_back(redis, prefix, tenant_id, token)
        except Exception:  # noqa: BLE001 - the lease frees it
            pass
