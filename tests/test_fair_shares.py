"""Fair shares between tenants (issue 43): the move of due jobs (storage/scheduled.enqueue_due)
puts at most TENANT_WAITING_CAP tagged turns of one tenant in the queue; the rest stay due, in
order, and follow one by one as that tenant's turns start (workers/jobs.run_coalesced). A 429
pauses only the tenant that got it (workers/jobs.pause_tenant)."""

from collections import Counter
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import anthropic
import httpx2
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from rq import Queue
from rq.registry import ScheduledJobRegistry

from storage.jobs import (
    enqueue_compaction,
    enqueue_facts,
    enqueue_turn,
    enqueue_turns,
    job_id_for,
    stale_tokens,
    tenant_of,
)
from storage.keys import parked_key, parked_tenants_key, tenant_pause_key
from storage.scheduled import (
    TENANT_WAITING_CAP,
    enqueue_due,
    fair_share,
    overdue_seconds,
    parked_count,
    split_fair,
)
from workers.jobs import TENANT_PAUSE_DEFAULT, TENANT_PAUSE_MAX, pause_tenant

NOW = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)
PREFIX = "fair"


def _schedule(queue: Queue, tenant: int | None, conversations: range, *, ago: int) -> None:
    at = NOW - timedelta(seconds=ago)  # due; older first
    tenants = None if tenant is None else dict.fromkeys(conversations, tenant)
    enqueue_turns(queue, PREFIX, list(conversations), at=at, tenants=tenants)


def test_a_job_id_carries_its_tenant_and_an_untagged_one_none() -> None:
    assert tenant_of(job_id_for("turn", 12, 7)) == 7
    assert tenant_of(job_id_for("turn", 12)) is None
    assert job_id_for("turn", 12, 7).startswith("turn-12-")


def test_a_flood_of_one_tenant_puts_only_its_cap_ahead_of_the_others(
        redis_client: redis.Redis) -> None:
    queue = Queue("fair", connection=redis_client)
    _schedule(queue, 1, range(1, 501), ago=10)  # tenant 1: 500 customers, first
    _schedule(queue, 2, range(1001, 1004), ago=5)  # tenant 2: three, after (capped too)
    _schedule(queue, None, range(2001, 2003), ago=5)  # untagged (a retry, a console's turn)

    moved = enqueue_due(queue, now=NOW)

    assert moved == 2 * TENANT_WAITING_CAP + 2
    order = [tenant_of(i) for i in queue.job_ids]
    assert order == [1] * TENANT_WAITING_CAP + [2] * TENANT_WAITING_CAP + [None, None]
    registry = ScheduledJobRegistry(queue=queue)
    assert registry.count == 503 - 2 * TENANT_WAITING_CAP, "the rest wait, still due"
    assert enqueue_due(queue, now=NOW) == 0, "nothing more while tenant 1 has its cap waiting"
    assert overdue_seconds(queue, now=NOW) == 0.0, "held back by the cap is not late"


def test_a_started_turn_lets_the_next_of_its_tenant_in_oldest_first(
        redis_client: redis.Redis) -> None:
    queue = Queue("fair", connection=redis_client)
    for k, conversation in enumerate(range(1, 11)):
        enqueue_turn(queue, PREFIX, conversation, at=NOW - timedelta(seconds=60 - k),
                     tenant_id=1)
    enqueue_due(queue, now=NOW)
    first = queue.job_ids[0]
    queue.remove(first)  # a worker took it

    assert enqueue_due(queue, now=NOW, batches=1) == 1
    conversations = [queue.fetch_job(i).kwargs["conversation_id"] for i in queue.job_ids]
    assert conversations == [2, 3], "the oldest due of the tenant, in order"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(1, 4)), max_size=40),
       st.dictionaries(st.integers(1, 4), st.integers(0, 3)), st.integers(1, 3))
def test_the_fair_share_keeps_order_and_never_passes_a_tenants_cap(
        tenants: list[int | None], waiting: dict[int, int], cap: int) -> None:
    ids = [job_id_for("turn", n, t) for n, t in enumerate(tenants)]
    counts = Counter(waiting)
    take = fair_share(ids, counts, cap)

    assert take == [i for i in ids if i in set(take)], "in the registry's order"
    assert all(i in take for i in ids if tenant_of(i) is None), "untagged jobs always move"
    for tenant in {t for t in tenants if t is not None}:
        mine = [i for i in ids if tenant_of(i) == tenant]
        taken = [i for i in take if tenant_of(i) == tenant]
        assert taken == mine[:len(taken)], "a tenant's oldest first"
        assert len(taken) == max(0, min(len(mine), cap - waiting.get(tenant, 0)))
        assert counts[tenant] == waiting.get(tenant, 0) + len(taken)


def test_a_tenant_paused_after_a_429_moves_nothing_while_the_others_move(
        redis_client: redis.Redis) -> None:
    queue = Queue("fair", connection=redis_client)
    _schedule(queue, 1, range(1, 4), ago=10)
    _schedule(queue, 2, range(11, 13), ago=5)
    redis_client.set(tenant_pause_key(PREFIX, 1), "1", px=30_000)

    assert enqueue_due(queue, now=NOW, prefix=PREFIX) == 2
    assert {tenant_of(i) for i in queue.job_ids} == {2}, "only tenant 1 slows down"

    redis_client.delete(tenant_pause_key(PREFIX, 1))  # its retry-after has passed
    assert enqueue_due(queue, now=NOW, prefix=PREFIX) == TENANT_WAITING_CAP


def _rate_limited(headers: dict[str, str]) -> anthropic.RateLimitError:
    request = httpx2.Request("POST", "http://anthropic.invalid/v1/messages")
    return anthropic.RateLimitError("rate limited", response=httpx2.Response(
        429, headers=headers, request=request), body=None)


def test_a_429_pauses_its_tenant_for_its_retry_after_within_bounds(
        redis_client: redis.Redis) -> None:
    runtime: Any = SimpleNamespace(redis=redis_client,
                                   settings=SimpleNamespace(redis_prefix=PREFIX))
    assert pause_tenant(runtime, 3, _rate_limited({"retry-after": "7"})) == 7.0
    assert 6_000 < redis_client.pttl(tenant_pause_key(PREFIX, 3)) <= 7_000
    assert pause_tenant(runtime, 4, _rate_limited({})) == TENANT_PAUSE_DEFAULT
    assert pause_tenant(runtime, 5, _rate_limited({"retry-after": "9999"})) == TENANT_PAUSE_MAX
    assert pause_tenant(runtime, 6, _rate_limited({"retry-after": "soon"})) == \
        TENANT_PAUSE_DEFAULT
    assert pause_tenant(runtime, 7, RuntimeError("not a 429")) is None
    assert redis_client.get(tenant_pause_key(PREFIX, 7)) is None


def test_a_flood_larger_than_the_window_does_not_hide_another_tenants_turn(
        redis_client: redis.Redis) -> None:
    """The move reads at most `batch` x `batches` due jobs a call (10,000 in the product; 10
    here): a tenant's held jobs are parked out of the registry, so each call reads further and
    another tenant's turn behind a flood of any size moves within backlog / window calls."""
    queue = Queue("fair", connection=redis_client)
    for n in range(1, 41):  # tenant 1: 40, oldest (a second apart): four windows
        _schedule(queue, 1, range(n, n + 1), ago=100 - n)
    _schedule(queue, 2, range(101, 104), ago=30)  # tenant 2: three, behind all of them
    _schedule(queue, None, range(201, 202), ago=30)  # a maintenance job, untagged
    calls = 0
    while calls < 10 and not any(tenant_of(i) == 2 for i in queue.job_ids):
        enqueue_due(queue, now=NOW, batch=5, batches=2, prefix=PREFIX)
        calls += 1

    assert calls <= 5, "ceil(44 / 10) calls reach the end of the backlog"
    assert Counter(tenant_of(i) for i in queue.job_ids) == {
        1: TENANT_WAITING_CAP, 2: TENANT_WAITING_CAP, None: 1}
    assert ScheduledJobRegistry(queue=queue).count == 0, "the held ones are parked"
    assert redis_client.zcard(parked_key(PREFIX, 1)) == 40 - TENANT_WAITING_CAP
    conversations = [queue.fetch_job(i).kwargs["conversation_id"] for i in queue.job_ids
                     if tenant_of(i) == 1]
    assert conversations == [1, 2]

    for job_id in [i for i in queue.job_ids if tenant_of(i) == 1]:
        queue.remove(job_id)  # workers took tenant 1's two
    assert enqueue_due(queue, now=NOW, batch=5, batches=2, prefix=PREFIX) == 2
    conversations = [queue.fetch_job(i).kwargs["conversation_id"] for i in queue.job_ids
                     if tenant_of(i) == 1]
    assert conversations == [3, 4], "the parked ones follow oldest first"


def test_a_tenant_with_parked_jobs_keeps_its_order_for_newer_ones(
        redis_client: redis.Redis) -> None:
    queue = Queue("fair", connection=redis_client)
    for n in range(1, 6):
        _schedule(queue, 1, range(n, n + 1), ago=60 - n)
    enqueue_due(queue, now=NOW, prefix=PREFIX)  # 2 wait, 3 parked
    queue.remove(queue.job_ids[0])  # one taken: room for one
    _schedule(queue, 1, range(6, 7), ago=1)  # a newer turn of the same tenant

    assert enqueue_due(queue, now=NOW, prefix=PREFIX) == 1
    conversations = [queue.fetch_job(i).kwargs["conversation_id"] for i in queue.job_ids]
    assert conversations == [2, 3], "the oldest parked one, not the newer due one"
    assert redis_client.zcard(parked_key(PREFIX, 1)) == 3, "the newer one parked behind"


def test_the_parked_tenants_set_forgets_a_drained_tenant(redis_client: redis.Redis) -> None:
    queue = Queue("fair", connection=redis_client)
    _schedule(queue, 1, range(1, 4), ago=60)
    enqueue_due(queue, now=NOW, prefix=PREFIX)
    assert redis_client.smembers(parked_tenants_key(PREFIX)) == {b"1"}
    while queue.job_ids:
        queue.remove(queue.job_ids[0])
        enqueue_due(queue, now=NOW, prefix=PREFIX)
    enqueue_due(queue, now=NOW, prefix=PREFIX)
    assert redis_client.smembers(parked_tenants_key(PREFIX)) == set()


def test_a_parked_turns_token_is_not_stale_for_the_reconciler(
        redis_client: redis.Redis) -> None:
    queue = Queue("fair", connection=redis_client)
    _schedule(queue, 1, range(1, 4), ago=600)  # due ten minutes ago: far past OVERDUE_AFTER
    enqueue_due(queue, now=NOW, prefix=PREFIX)

    assert stale_tokens(queue, PREFIX, "turn", [1, 2, 3], now=NOW) == {}, \
        "two wait in the queue, one is parked: every one will run"
    parked = redis_client.zrange(parked_key(PREFIX, 1), 0, -1)[0].decode()
    redis_client.delete(f"rq:job:{parked}")  # its job expired: then the token is stale
    assert list(stale_tokens(queue, PREFIX, "turn", [1, 2, 3], now=NOW).values()) == [parked]


def _enqueue_again(url: str, conversation_id: int) -> str | None:
    """What a job's retry does: enqueue its kind again, naming no tenant."""
    queue = Queue("fair", connection=redis.Redis.from_url(url))
    return enqueue_compaction(queue, PREFIX, conversation_id, at=NOW)


def test_a_job_enqueued_again_by_a_tagged_job_keeps_its_tenant(
        redis_client: redis.Redis) -> None:
    """Retries, deferrals and a turn's compaction name no tenant: they take the running job's
    tag when it is a job of the same conversation (storage/jobs.inherited_tenant)."""
    kwargs = redis_client.connection_pool.connection_kwargs
    url = f"redis://{kwargs.get('host', '127.0.0.1')}:{kwargs.get('port', 6379)}/" \
        f"{kwargs.get('db', 0)}"
    runner = Queue("run", connection=redis_client, is_async=False)  # runs each job at once
    same = runner.enqueue(_enqueue_again, url, 42, job_id=job_id_for("turn", 42, 7))
    other = runner.enqueue(_enqueue_again, url, 43, job_id=job_id_for("turn", 42, 7))
    untagged = runner.enqueue(_enqueue_again, url, 44, job_id=job_id_for("turn", 44))

    assert tenant_of(str(same.return_value())) == 7
    assert tenant_of(str(other.return_value())) is None, "another conversation: no tag"
    assert tenant_of(str(untagged.return_value())) is None
    assert tenant_of(str(enqueue_facts(Queue("fair", connection=redis_client), PREFIX, 45,
                                       at=NOW, tenant_id=3))) == 3


def test_the_parked_jobs_are_counted_for_the_queue_depth_gauge(
        redis_client: redis.Redis) -> None:
    queue = Queue("fair", connection=redis_client)
    assert parked_count(redis_client, PREFIX) == 0
    _schedule(queue, 1, range(1, 6), ago=60)
    _schedule(queue, 2, range(11, 14), ago=60)
    enqueue_due(queue, now=NOW, prefix=PREFIX)
    assert parked_count(redis_client, PREFIX) == (5 - TENANT_WAITING_CAP) + (3 - TENANT_WAITING_CAP)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(1, 4)), max_size=40),
       st.dictionaries(st.integers(1, 4), st.integers(0, 3)), st.integers(1, 3),
       st.sets(st.integers(1, 4)))
def test_the_split_parks_a_held_tenants_later_jobs_and_loses_none(
        tenants: list[int | None], waiting: dict[int, int], cap: int, hold: set[int]) -> None:
    ids = [job_id_for("turn", n, t) for n, t in enumerate(tenants)]
    held_before = set(hold)
    take, keep = split_fair(ids, Counter(waiting), cap, hold)
    assert sorted(take + keep) == sorted(ids), "every id is taken or kept, once"
    assert [i for i in ids if i in set(take)] == take, "order kept"
    for tenant in {t for t in tenants if t is not None}:
        mine = [i for i in ids if tenant_of(i) == tenant]
        taken = [i for i in take if tenant_of(i) == tenant]
        assert taken == mine[:len(taken)], "a tenant's oldest first; none after one kept"
        if tenant in held_before:
            assert taken == []
    assert all(tenant_of(i) is not None for i in keep), "untagged jobs always move"
