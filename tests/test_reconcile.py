"""The reconciler (workers/maintenance.py): a token whose job will never run does not block it,
it counts the jobs it really enqueued, and it takes every waiting conversation, the longest
waiting first, page by page. Real worker, real Redis when reachable, SQLite and PostgreSQL."""

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from rq.job import Job, JobStatus
from structlog.testing import capture_logs

from replay.environment import ReplayEnvironment
from storage.jobs import enqueue_turn, tenant_of
from storage.keys import lock_key, turn_token_key
from tests import database_faults
from tests.conftest import START
from tests.factories import TENANT, text_body
from workers.maintenance import find_pending, reconcile_pending


def _contact(n: int) -> tuple[str, str]:
    return f"55119999{n:05d}", f"BR.{n:019d}"


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    environment.add_tenant(TENANT)
    environment.messages_api.script("turn", [{"text": f"Oi {n}!"} for n in range(10)])
    yield environment
    environment.close()


def _post(env: ReplayEnvironment, contact: int) -> None:
    body = text_body("oi", contact, who=_contact(contact), sent_at=env.clock.now())
    assert env.post_webhook(json.dumps(body).encode()) == 200


def _token_job(env: ReplayEnvironment, conversation_id: int) -> str:
    raw = env.redis.get(turn_token_key(env.namespace, conversation_id))
    assert raw is not None
    return raw.decode()


@pytest.mark.parametrize("state", ["gone", "failed", "overdue"])
def test_a_token_whose_job_will_never_run_does_not_block_the_reconciler(
        env: ReplayEnvironment, state: str) -> None:
    _post(env, 1)
    stuck = _token_job(env, 1)
    job = Job.fetch(stuck, connection=env.redis)
    if state == "gone":
        job.delete()
    elif state == "failed":  # every retry failed before the job consumed its token
        env.queue.remove(job)
        job.set_status(JobStatus.FAILED)
    else:  # a debounced turn (due in 2 s) that no keeper moved
        job.delete()
        env.redis.delete(turn_token_key(env.namespace, 1))
        stuck = str(enqueue_turn(env.queue, env.namespace, 1,
                                 at=env.clock.now() + timedelta(seconds=2)))
    env.clock.advance(timedelta(minutes=1))

    assert reconcile_pending(env.runtime, now=env.clock.now()) == 1
    assert _token_job(env, 1) != stuck
    env.drain()
    assert [s.body["text"]["body"] for s in env.graph_api.sends] == ["Oi 0!"]


def test_the_reconcilers_turn_carries_its_tenants_tag(env: ReplayEnvironment) -> None:
    """Every job that makes model calls for a tenant is tagged (issue 43): the reconciler's
    turn too, so the fair move of due jobs holds it to its tenant's share."""
    _post(env, 1)
    webhook_turn = _token_job(env, 1)
    assert tenant_of(webhook_turn) is not None
    Job.fetch(webhook_turn, connection=env.redis).delete()  # lost
    env.clock.advance(timedelta(minutes=1))

    assert reconcile_pending(env.runtime, now=env.clock.now()) == 1
    assert tenant_of(_token_job(env, 1)) == tenant_of(webhook_turn)


def test_a_live_token_coalesces_and_the_log_counts_jobs_not_conversations(
        env: ReplayEnvironment) -> None:
    for contact in (1, 2, 3):
        _post(env, contact)
    for conversation_id in (2, 3):  # their jobs are lost; conversation 1's is still queued
        Job.fetch(_token_job(env, conversation_id), connection=env.redis).delete()
    env.clock.advance(timedelta(minutes=1))

    with capture_logs() as logs:
        assert reconcile_pending(env.runtime, now=env.clock.now()) == 2
        assert reconcile_pending(env.runtime, now=env.clock.now()) == 0
    assert [(e["enqueued"], e["waiting"]) for e in logs
            if e["event"] == "reconciled_lost_turns"] == [(2, 3)]
    env.drain()
    assert len(env.graph_api.sends) == 3


def test_a_conversation_whose_turn_is_running_is_left_alone(env: ReplayEnvironment) -> None:
    _post(env, 1)
    Job.fetch(_token_job(env, 1), connection=env.redis).delete()
    env.redis.set(lock_key(env.namespace, "turn", 1), "a running turn", ex=20)
    env.clock.advance(timedelta(minutes=1))
    assert reconcile_pending(env.runtime, now=env.clock.now()) == 0
    env.redis.delete(lock_key(env.namespace, "turn", 1))  # it died: its lock expired
    assert reconcile_pending(env.runtime, now=env.clock.now()) == 1


def test_pending_conversations_come_longest_waiting_first_through_a_cursor(
        env: ReplayEnvironment) -> None:
    for contact in (1, 2, 3, 4, 5):  # conversation n is contact n's
        _post(env, contact)
        env.clock.advance(timedelta(seconds=5))
    for conversation_id in range(1, 6):  # Redis lost every job
        env.redis.delete(turn_token_key(env.namespace, conversation_id))
    env.queue.empty()
    now = env.clock.now() + timedelta(minutes=1)

    first = find_pending(env.engine, now=now, limit=2)
    second = find_pending(env.engine, now=now, after=first[-1], limit=2)
    third = find_pending(env.engine, now=now, after=second[-1], limit=2)
    assert [cid for _, cid in first + second + third] == [1, 2, 3, 4, 5]
    assert [at for at, _ in first + second + third] == [
        START + timedelta(seconds=5 * n) for n in range(5)]
    assert find_pending(env.engine, now=START + timedelta(seconds=39)) == [
        (START, 1), (START + timedelta(seconds=5), 2)], "waiting 30 s or more"

    # pages of two: the first (the two longest waiting) keeps coming back, its turns running
    for conversation_id in (1, 2):
        env.redis.set(lock_key(env.namespace, "turn", conversation_id), "running", ex=20)
    pending = database_faults.sql_contains("min(message.received_at)")  # find_pending's
    with capture_logs() as logs, database_faults.counting(env.engine, pending) as pages:
        assert reconcile_pending(env.runtime, now=now, batch=2) == 3
    assert sorted(j.kwargs["conversation_id"] for j in env.queue.get_jobs()) == [3, 4, 5]
    assert len(pages) == 3, "pages of 2, 2 and 1"
    assert [(e["enqueued"], e["waiting"]) for e in logs
            if e["event"] == "reconciled_lost_turns"] == [(3, 5)]
