"""Enqueueing with coalescing tokens (storage/jobs.py) and the worker process's set-up
(workers/runtime.prepare_worker_parent, cli/worker._lower_cpu_priority)."""

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from redis.exceptions import WatchError
from rq import Queue
from rq.job import Job, JobStatus
from rq.registry import ScheduledJobRegistry

from core.errors import SettingsError
from core.settings import Settings
from storage.jobs import (
    FLUSH_JOB,
    TURN_JOB,
    enqueue_flush,
    enqueue_turn,
    enqueue_turns,
)
from storage.keys import turn_token_key
from tests import redis_faults

PREFIX = "jobs-test"
ROOT = Path(__file__).resolve().parent.parent


def _queue(client: redis.Redis) -> Queue:
    return Queue(f"{PREFIX}-q", connection=client)


def test_enqueue_turns_makes_one_job_per_new_conversation_in_one_transaction(
        redis_client: redis.Redis) -> None:
    queue = _queue(redis_client)
    assert enqueue_turn(queue, PREFIX, 2) is not None  # already queued: coalesced below

    made = enqueue_turns(queue, PREFIX, [1, 2, 3, 3], job_timeout=120)

    assert list(made) == [1, 2, 3] and made[2] is None
    assert queue.count == 3  # 2's first job, 1 and 3
    for conversation_id in (1, 3):
        job_id = made[conversation_id]
        assert job_id is not None
        assert redis_client.get(turn_token_key(PREFIX, conversation_id)) == job_id.encode()
        job = Job.fetch(job_id, connection=redis_client)
        assert job.func_name == TURN_JOB and job.timeout == 120
        assert job.kwargs == {"conversation_id": conversation_id, "attempt": 1}
        assert job.retries_left == 2 and job.get_status() == JobStatus.QUEUED


def test_a_flush_asked_for_earlier_than_the_queued_one_moves_it_never_later(
        redis_client: redis.Redis) -> None:
    queue = _queue(redis_client)
    registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
    now = datetime.now(UTC)
    job_id = enqueue_flush(queue, PREFIX, 5, at=now + timedelta(hours=1))
    assert job_id is not None and Job.fetch(job_id, connection=redis_client).func_name == \
        FLUSH_JOB

    assert enqueue_flush(queue, PREFIX, 5, at=now + timedelta(seconds=30)) is None
    assert redis_client.zscore(registry.key, job_id) == int((now + timedelta(seconds=30))
                                                            .timestamp())
    assert enqueue_flush(queue, PREFIX, 5, at=now + timedelta(minutes=8)) is None
    assert redis_client.zscore(registry.key, job_id) == int((now + timedelta(seconds=30))
                                                            .timestamp())
    assert registry.get_job_ids() == [job_id], "still one flush for the conversation"


def test_scheduled_turns_wait_in_rqs_registry_with_status_scheduled(
        redis_client: redis.Redis) -> None:
    queue = _queue(redis_client)
    at = datetime.now(UTC) + timedelta(seconds=30)

    made = enqueue_turns(queue, PREFIX, [7, 8], at=at)

    assert queue.count == 0
    registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
    assert sorted(registry.get_job_ids()) == sorted(str(j) for j in made.values())
    for job_id in made.values():
        assert redis_client.zscore(registry.key, str(job_id)) == int(at.timestamp())
        assert Job.fetch(str(job_id), connection=redis_client).get_status() == \
            JobStatus.SCHEDULED
    assert queue.key.encode() in redis_client.smembers(queue.redis_queues_keys)


def test_a_token_changed_under_watch_is_read_again_and_nothing_is_doubled(
        redis_client: redis.Redis) -> None:
    """Another web process enqueues conversation 5 between our WATCH and our EXEC: the EXEC is
    refused, the conversations are then taken one at a time, and 5 is left to the other
    process's job."""
    raced: list[bool] = []

    def race(packed: bytes) -> None:
        if redis_faults.words(packed)[:1] == ["MULTI"] and not raced:
            raced.append(True)  # the other process runs once, between our WATCH and EXEC
            enqueue_turn(_queue(redis_client), PREFIX, 5)

    racing = redis_faults.intercepting(redis_client, race)
    queue = _queue(racing)
    made = enqueue_turns(queue, PREFIX, [4, 5, 6])
    racing.close()
    assert raced

    assert made[5] is None and made[4] is not None and made[6] is not None
    assert queue.count == 3  # the other process's job for 5, ours for 4 and 6
    assert {redis_client.get(turn_token_key(PREFIX, c)) for c in (4, 6)} == \
        {str(made[4]).encode(), str(made[6]).encode()}


def test_a_queued_token_is_not_watched(redis_client: redis.Redis) -> None:
    """A conversation whose turn is already queued is left out of the transaction: its job
    starting meanwhile (consuming the token) does not refuse the others' EXEC."""
    enqueue_turn(_queue(redis_client), PREFIX, 1)
    watched: list[tuple[str, ...]] = []

    def spy(packed: bytes) -> None:
        if (sent := redis_faults.words(packed))[:1] == ["WATCH"]:
            watched.append(tuple(sent[1:]))

    spied = redis_faults.intercepting(redis_client, spy)
    made = enqueue_turns(_queue(spied), PREFIX, [1, 2, 3])
    spied.close()

    assert watched == [(turn_token_key(PREFIX, 2), turn_token_key(PREFIX, 3))]
    assert made[1] is None and made[2] and made[3]


def test_tokens_that_never_settle_end_in_an_error_not_a_loop(
        redis_client: redis.Redis) -> None:
    def always_changed(packed: bytes) -> None:  # another process, before every EXEC
        if redis_faults.words(packed)[:1] == ["MULTI"]:
            raise WatchError("changed")

    changing = redis_faults.intercepting(redis_client, always_changed)
    with pytest.raises(RuntimeError, match="kept changing"):
        enqueue_turns(_queue(changing), PREFIX, [9])
    changing.close()
    assert _queue(redis_client).count == 0
    assert redis_client.get(turn_token_key(PREFIX, 9)) is None


def test_worker_cpu_setting_is_checked() -> None:
    assert Settings.from_env({}, require=False).worker_cpu == "normal"
    with pytest.raises(SettingsError, match="WORKER_CPU='fast' is not one of idle, low"):
        Settings.from_env({"WORKER_CPU": "fast"}, require=False)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")
@pytest.mark.parametrize(("policy", "expected"), [
    ("idle", "SCHED_IDLE 0"), ("low", "SCHED_OTHER 19"), ("normal", "SCHED_OTHER 0")])
def test_worker_cpu_priority(policy: str, expected: str) -> None:
    code = ("import os; from cli.worker import _lower_cpu_priority; "
            f"_lower_cpu_priority({policy!r}); "
            "names = {os.SCHED_IDLE: 'SCHED_IDLE', os.SCHED_OTHER: 'SCHED_OTHER'}; "
            "print(names[os.sched_getscheduler(0)], os.nice(0))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.split() == expected.split()


def test_work_horses_inherit_the_prepared_runtime_and_use_their_own_connections(
        tmp_path: Path) -> None:
    """`wagent worker` builds the runtime before RQ forks: a horse gets it with the dialect
    initialised and the SDK warmed, and opens its own database connection; a process forked
    from a horse builds its own runtime."""
    code = f"""
import os, sys
from sqlalchemy import text
from core.settings import Settings
from storage.db import create_schema, make_engine
from workers import runtime

settings = Settings(database_url="sqlite:///{tmp_path / 'w.db'}", redis_url="redis://x:1/0")
create_schema(make_engine(settings.database_url))
prepared = runtime.prepare_worker_parent(settings)
assert prepared.engine.pool.checkedout() == 0
pid = os.fork()
if pid == 0:  # the work horse
    ok = runtime.get_runtime() is prepared
    with prepared.engine.connect() as connection:
        ok = ok and connection.execute(text("select count(*) from tenant")).scalar() == 0
    grandchild = os.fork()
    if grandchild == 0:
        os._exit(0 if runtime._runtime is None else 3)
    _, status = os.waitpid(grandchild, 0)
    os._exit(0 if ok and os.waitstatus_to_exitcode(status) == 0 else 4)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), runtime.get_runtime() is prepared)
"""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "True"]

