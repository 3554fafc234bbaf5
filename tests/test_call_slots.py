"""The per-tenant cap on Messages API calls in flight (issue 43, fair shares;
workers/call_slots.py): at most TENANT_MODEL_CALLS of one tenant's calls at once on every worker,
another tenant unaffected, a killed holder's slot back when its lease ends, and a job that finds
no slot deferred with the same attempt (workers/jobs.run_coalesced)."""

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from core.settings import Settings
from workers import call_slots
from workers.call_slots import TenantCallsBusy, in_flight, try_take
from workers.jobs import run_coalesced
from workers.model_calls import create_counted
from workers.runtime import set_runtime

PREFIX = "slots"
CALL_SECONDS = 0.3


class _Messages:
    """A Messages API double that takes CALL_SECONDS a call and records, per tenant (the
    request's `metadata`), how many calls were in flight at most and when each ran."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: Counter[int] = Counter()
        self.most: Counter[int] = Counter()
        self.spans: dict[int, list[tuple[float, float]]] = {}

    def create(self, *, metadata: dict[str, Any], **_: Any) -> str:
        tenant = int(metadata["user_id"])
        with self.lock:
            self.now[tenant] += 1
            self.most[tenant] = max(self.most[tenant], self.now[tenant])
        started = time.monotonic()
        time.sleep(CALL_SECONDS)
        with self.lock:
            self.now[tenant] -= 1
            self.spans.setdefault(tenant, []).append((started, time.monotonic()))
        return "answer"


def _runtime(redis_client: redis.Redis, messages: Any, *, cap: int) -> Any:
    return SimpleNamespace(
        redis=redis_client, anthropic=SimpleNamespace(messages=messages),
        settings=Settings(redis_prefix=PREFIX, tenant_model_calls=cap, anthropic_timeout=5.0,
                          turn_lock_timeout=20))


def test_a_tenant_at_its_cap_waits_while_another_tenant_proceeds(
        redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_slots, "WAIT_SECONDS", 2.0)  # room for the four calls in turn
    messages = _Messages()
    runtime = _runtime(redis_client, messages, cap=1)
    errors: list[BaseException] = []

    def call(tenant: int) -> None:
        try:
            create_counted(runtime, "turn", tenant_id=tenant, model="m",
                           metadata={"user_id": str(tenant)})
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(t,)) for t in (1, 1, 1, 1, 2, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == [], "4 calls of 0.3 s fit in the 2 s a call waits for a slot"
    assert messages.most == {1: 1, 2: 1}, "never two calls of one tenant at once"
    a_done = max(end for _, end in messages.spans[1])
    assert min(start for start, _ in messages.spans[2]) < a_done - CALL_SECONDS, \
        "tenant 2 ran while tenant 1 still had calls waiting"
    assert in_flight(redis_client, PREFIX, 1) == 0, "every slot given back"


def test_cap_zero_means_no_cap(redis_client: redis.Redis) -> None:
    messages = _Messages()
    runtime = _runtime(redis_client, messages, cap=0)
    threads = [threading.Thread(target=create_counted, args=(runtime, "turn"),
                                kwargs={"tenant_id": 1, "metadata": {"user_id": "1"}})
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert messages.most[1] == 3


def test_a_killed_holders_slot_comes_back_when_its_lease_ends(
        redis_client: redis.Redis) -> None:
    url = redis_client.connection_pool.connection_kwargs
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, redis\n"
        "from workers.call_slots import try_take\n"
        f"r = redis.Redis(host={url.get('host', '127.0.0.1')!r}, port={url.get('port', 6379)},"
        f" db={url.get('db', 0)})\n"
        f"assert try_take(r, {PREFIX!r}, 1, cap=1, lease_seconds=1.5)\n"
        "print('taken', flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "taken"
        holder.kill()  # SIGKILL: no give-back
        holder.wait()
        assert try_take(redis_client, PREFIX, 1, cap=1, lease_seconds=5) is None, \
            "the dead holder's lease still counts"
        assert try_take(redis_client, PREFIX, 2, cap=1, lease_seconds=5) is not None, \
            "another tenant is not affected"
        time.sleep(1.6)
        assert try_take(redis_client, PREFIX, 1, cap=1, lease_seconds=5) is not None, \
            "the lease ended: the slot is back"
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture
def installed(redis_client: redis.Redis) -> Iterator[Any]:
    runtime = _runtime(redis_client, _Messages(), cap=1)
    set_runtime(runtime)
    yield runtime
    set_runtime(None)


def test_a_job_that_finds_no_slot_is_deferred_with_the_same_attempt(
        installed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert try_take(installed.redis, PREFIX, 1, cap=1, lease_seconds=30)  # another call holds it
    again: list[tuple[int, datetime, int, int]] = []

    def handle(runtime: Any, conversation_id: int, attempt: int) -> str:
        create_counted(runtime, "turn", tenant_id=1, metadata={"user_id": "1"})
        return "answered"

    started = time.monotonic()
    outcome = run_coalesced("turn", 42, 2, outage=1, handle=handle,
                            reenqueue=lambda rt, cid, at, n, o: again.append((cid, at, n, o)))

    assert outcome == "deferred"
    assert time.monotonic() - started < call_slots.WAIT_SECONDS + 1.5, \
        "the worker is not held long"
    assert [(cid, n, o) for cid, _, n, o in again] == [(42, 2, 1)], "same attempt and outage"
    assert installed.anthropic.messages.most[1] == 0, "no call was made"


def test_the_busy_error_names_the_tenant_only() -> None:
    assert TenantCallsBusy(7).tenant_id == 7
    assert "7" in str(TenantCallsBusy(7))
