"""The product's own scheduler: due scheduled jobs moved by the keeper (workers/keeper.py,
storage/scheduled.py) under a short lock of its own, never twice, and the overdue gauge.
Real Redis when reachable (the test's db, flushed), else the in-process stand-in."""

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus
from structlog.testing import capture_logs

from core import clock
from core.settings import Settings
from replay.environment import ReplayEnvironment
from storage.jobs import enqueue_turn, enqueue_turns
from storage.keys import beats_key, keeper_lock_key, lock_key
from storage.scheduled import enqueue_due, overdue_seconds
from tests import redis_faults
from tests.conftest import START
from tests.factories import TENANT, text_body
from tests.test_metrics import scrape, value
from workers import heartbeats
from workers.jobs import held_lock
from workers.keeper import KEEPER_LOCK_TTL, Keeper

PREFIX = "keeper-test"


@pytest.fixture
def frozen() -> Iterator[clock.FrozenClock]:
    frozen = clock.FrozenClock(START)
    previous = clock.set_clock(frozen)
    yield frozen
    clock.set_clock(previous)


def _keeper(client: redis.Redis, name: str) -> Keeper:
    """A keeper of a product already running (Redis holds its marker: no recovery at start)."""
    client.set(f"{PREFIX}:alive", "earlier")
    settings = Settings(redis_prefix=PREFIX, queue_name=f"{PREFIX}-q")
    return Keeper(settings, name=name, redis=client)


def test_the_keeper_moves_due_jobs_on_the_product_clock_and_leaves_the_others(
        redis_client: redis.Redis, frozen: clock.FrozenClock) -> None:
    keeper = _keeper(redis_client, "worker:a")
    due = enqueue_turn(keeper.queue, PREFIX, 1, at=START + timedelta(seconds=2))
    later = enqueue_turn(keeper.queue, PREFIX, 2, at=START + timedelta(seconds=30))

    assert keeper.tick() == 0 and keeper.queue.count == 0, "nothing due yet"
    frozen.advance(timedelta(seconds=2))
    assert keeper.tick() == 1
    assert keeper.queue.job_ids == [due]
    assert Job.fetch(str(due), connection=redis_client).get_status() == JobStatus.QUEUED
    assert Job.fetch(str(later), connection=redis_client).get_status() == JobStatus.SCHEDULED


def test_one_keeper_holds_the_lock_and_another_takes_over_when_it_dies_or_stops(
        redis_client: redis.Redis, frozen: clock.FrozenClock) -> None:
    first, second = _keeper(redis_client, "worker:a"), _keeper(redis_client, "worker:b")
    first.tick()
    second.tick()
    key = keeper_lock_key(PREFIX)
    assert first.holding and not second.holding
    assert 0 < redis_client.ttl(key) <= KEEPER_LOCK_TTL, "a short lock, renewed each tick"
    enqueue_turn(second.queue, PREFIX, 1, at=START)
    assert second.tick() == 0, "only the holder moves jobs"

    redis_client.delete(key)  # the holder died: nothing renewed its lock, which expired
    assert second.tick() == 1 and second.holding
    assert redis_client.get(key).decode().startswith("worker:b:")
    second.stop()  # a deploy: released at once, the next keeper's tick takes it
    assert redis_client.get(key) is None
    first.tick()
    assert first.holding and first.lock.owned()


def test_two_movers_at_once_enqueue_every_due_job_exactly_once(
        redis_client: redis.Redis) -> None:
    queue = Queue(f"{PREFIX}-q", connection=redis_client)
    made = enqueue_turns(queue, PREFIX, list(range(1, 301)), at=START)
    barrier = threading.Barrier(4)

    def mover() -> None:
        barrier.wait()
        for _ in range(10):
            enqueue_due(queue, now=START, batch=25)

    threads = [threading.Thread(target=mover) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(queue.job_ids) == sorted(str(j) for j in made.values())
    assert queue.scheduled_job_registry.get_job_count(cleanup=False) == 0


def test_a_scheduled_id_whose_job_expired_is_dropped_not_enqueued(
        redis_client: redis.Redis) -> None:
    queue = Queue(f"{PREFIX}-q", connection=redis_client)
    gone = enqueue_turn(queue, PREFIX, 1, at=START)
    kept = enqueue_turn(queue, PREFIX, 2, at=START)
    redis_client.delete(Job.key_for(str(gone)))
    assert enqueue_due(queue, now=START) == 1
    assert queue.job_ids == [kept]
    assert queue.scheduled_job_registry.get_job_count(cleanup=False) == 0


def test_overdue_seconds_is_the_age_of_the_oldest_due_job(redis_client: redis.Redis) -> None:
    queue = Queue(f"{PREFIX}-q", connection=redis_client)
    assert overdue_seconds(queue, now=START) == 0.0
    enqueue_turn(queue, PREFIX, 1, at=START + timedelta(seconds=10))
    assert overdue_seconds(queue, now=START) == 0.0, "not due yet"
    enqueue_turn(queue, PREFIX, 2, at=START)
    assert overdue_seconds(queue, now=START + timedelta(seconds=45)) == 45.0
    enqueue_due(queue, now=START + timedelta(seconds=45))
    assert overdue_seconds(queue, now=START + timedelta(seconds=45)) == 0.0


def test_the_metrics_page_shows_scheduled_jobs_nobody_moved(redis_url: str | None) -> None:
    env = ReplayEnvironment(start=START, redis_url=redis_url, turn_debounce_seconds=2)
    try:
        env.add_tenant(TENANT)
        env.messages_api.script("turn", [{"text": "Oi!"}])
        assert env.post_webhook(json.dumps(text_body("oi", 1)).encode()) == 200
        env.clock.advance(timedelta(seconds=62))  # due 60 s ago, no keeper ran
        assert value(scrape(env), "wagent_scheduled_overdue_seconds") == 60.0
        env.drain()  # moves it (the keeper's code, on the replay's clock) and answers
        assert value(scrape(env), "wagent_scheduled_overdue_seconds") == 0.0
        assert len(env.graph_api.sends) == 1
    finally:
        env.close()


def test_a_keeper_finding_redis_empty_enqueues_one_recovery_reconcile_ahead_of_the_queue(
        redis_client: redis.Redis, frozen: clock.FrozenClock) -> None:
    first, second = _keeper(redis_client, "worker:a"), _keeper(redis_client, "cron:b")
    first.tick()
    enqueue_turn(first.queue, PREFIX, 7)
    with capture_logs() as logs:
        redis_client.flushdb()  # Redis restarted empty
        enqueue_turn(first.queue, PREFIX, 8)  # a job enqueued right after
        second.tick()
        first.tick()
    recovery = [j for j in first.queue.get_jobs() if j.func_name ==
                "workers.maintenance.reconcile"]
    assert len(recovery) == 1 and recovery[0].kwargs == {"recovery": True}
    assert first.queue.job_ids[0] == recovery[0].id, "ahead of the queued turns"
    assert [e["reason"] for e in logs if e["event"] == "recovery_reconcile_enqueued"] == [
        "redis_empty"]


def test_a_keeper_that_cannot_reach_redis_logs_once_and_asks_for_recovery_when_back(
        redis_client: redis.Redis, frozen: clock.FrozenClock) -> None:
    down: list[bool] = []
    flaky = redis_faults.refusing(redis_client, lambda _command: bool(down))
    keeper = _keeper(flaky, "worker:a")
    keeper.tick()
    assert keeper.queue.count == 0

    with capture_logs() as logs:
        down.append(True)
        assert keeper.tick() == 0 and keeper.tick() == 0
        down.clear()
        keeper.tick()
    flaky.close()
    events = [e["event"] for e in logs]
    assert events.count("redis_unavailable") == 1
    assert "redis_back" in events and "recovery_reconcile_enqueued" in events


def test_a_silent_turn_has_its_lock_freed_and_a_new_turn_enqueued_a_beating_one_not(
        redis_client: redis.Redis, frozen: clock.FrozenClock) -> None:
    """Issue 36: a work horse killed or stopped mid-turn stops beating; the keeper holding its
    lock frees that turn's lock and enqueues a new turn after heartbeats.SILENCE_SECONDS, while
    a job that beats keeps its lock."""
    keeper = _keeper(redis_client, "worker:a")
    runtime: Any = SimpleNamespace(redis=redis_client, settings=Settings(
        redis_prefix=PREFIX, turn_lock_timeout=20))
    silent = lock_key(PREFIX, "turn", 7)
    redis_client.set(silent, "dead-horse", ex=20)
    heartbeats.beat(redis_client, PREFIX, "turn", 7, "dead-horse")
    redis_client.set(lock_key(PREFIX, "turn", 8), "someone-else", ex=20)  # taken since
    heartbeats.beat(redis_client, PREFIX, "turn", 8, "older-horse")
    later = time.time() + heartbeats.SILENCE_SECONDS + 1
    with held_lock(runtime, "turn", 9, blocking_timeout=0) as held:
        assert held
        time.sleep(heartbeats.BEAT_SECONDS * 1.5)  # the renewing thread beats meanwhile
        scores = dict(redis_client.zrange(beats_key(PREFIX), 0, -1, withscores=True))
        beating = next(s for m, s in scores.items() if m.startswith(b"turn:9:"))
        assert beating > scores[b"turn:7:dead-horse"]
        assert heartbeats.reap(redis_client, keeper.queue, PREFIX, job_timeout=300,
                               now=beating + heartbeats.SILENCE_SECONDS - 0.5) == [7, 8]
        assert redis_client.exists(lock_key(PREFIX, "turn", 9)) == 1, "it beats: kept"
    assert redis_client.zcard(beats_key(PREFIX)) == 0, "a clean end says so"
    assert redis_client.exists(silent) == 0 and \
        redis_client.get(lock_key(PREFIX, "turn", 8)) == b"someone-else"
    queued = [Job.fetch(j, connection=redis_client) for j in keeper.queue.job_ids]
    assert sorted(j.kwargs["conversation_id"] for j in queued) == [7, 8]
    assert heartbeats.reap(redis_client, keeper.queue, PREFIX, job_timeout=300,
                           now=later) == []  # reaped once
    redis_client.set(silent, "dead-again", ex=20)
    heartbeats.beat(redis_client, PREFIX, "turn", 7, "dead-again")
    with capture_logs() as logs:
        keeper.tick()  # the keeper holding its lock reaps on its own tick (wall time)
        assert redis_client.exists(silent) == 1, "not silent long enough yet"
        redis_client.zadd(beats_key(PREFIX), {"turn:7:dead-again": time.time() - 6})
        keeper.tick()
    assert redis_client.exists(silent) == 0
    assert "job_silent_lock_freed" in [e["event"] for e in logs]
