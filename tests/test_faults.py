"""Faults with real processes: `wagent web`, two `wagent worker` and `wagent cron` on the
machine's PostgreSQL and a redis-server of the test's own, signed webhooks flowing while one
thing breaks (the cases and the harness: bench/faults.py, which prints the same figures).

Every case: each message answered exactly once, within 60 s of the fault's end. And per case
what issue 14 asks: due scheduled jobs moved within 30 s of the death of the worker moving them
or of a rolling restart; a dead work horse's conversation answered within 30 s; a horse stopped
past its lock fenced out when it resumes, while another turn answered its conversation;
answered within 30 s of PostgreSQL or Redis coming back, with both workers still running and
saying they wait. The product runs with its default settings (lock 20 s, keeper lock 10 s,
reconcile every 15 s for messages waiting 30 s); each case takes 20 to 40 s (`stop_horse` 60 s:
the reconciler's threshold), most of it starting the processes and the fault itself.
"""

import shutil

import pytest

from bench.faults import CaseResult, run_case
from tests.conftest import require_postgres

pytestmark = [pytest.mark.faults, pytest.mark.redis, pytest.mark.postgres]


def _run(case: str) -> CaseResult:
    require_postgres()
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    result = run_case(case, max_wait=75.0)
    assert result.messages >= 10, result
    assert (result.lost, result.doubled) == (0, 0), f"logs kept in {result.logs}: {result}"
    assert result.after_fault_s["max"] <= 60, result
    return result


def test_sigkill_of_the_worker_moving_due_jobs_delays_them_less_than_30_s() -> None:
    result = _run("kill_keeper")
    assert result.max_overdue_s <= 30, result
    # its turn in flight is found from its silence (workers/heartbeats.py), not the reconciler
    assert result.after_fault_s["max"] <= 30, result


def test_a_rolling_restart_of_both_workers_leaves_no_due_job_waiting_30_s() -> None:
    result = _run("rolling_restart")
    assert result.max_overdue_s <= 30, result


def test_a_horse_killed_mid_turn_has_its_conversation_answered_within_30_s() -> None:
    result = _run("kill_horse")
    answered = result.extra["killed_turn_answered_after_s"]
    assert answered is not None and answered <= 30, result


def test_a_horse_starved_past_its_lock_is_fenced_out_and_its_turn_answered_once() -> None:
    result = _run("stop_horse")
    answered = result.extra["answered_by_another_turn_after_s"]
    assert answered is not None and answered <= 30, result  # heartbeats: issue 36
    assert result.extra["fenced_turns"] >= 1, result


def test_ten_seconds_without_postgresql_cost_less_than_30_s_after_it_is_back() -> None:
    result = _run("postgres_outage")
    assert result.after_fault_s["max"] <= 30, result


def test_redis_killed_and_restarted_empty_workers_wait_and_answer_within_30_s() -> None:
    result = _run("redis_loss")
    assert result.after_fault_s["max"] <= 30, result
    assert result.extra["workers_alive"] == 2 and result.extra["cron_alive"], result
    assert all(lines >= 1 for lines in result.extra["redis_wait_lines"]), result


def test_two_worker_processes_share_the_turns_and_run_none_twice() -> None:
    """Issue 43 (scale-out): two `wagent worker`, each its own process and Redis connection,
    against one Redis and one PostgreSQL; no fault. Each took turns, no turn job ran in both,
    and no message was answered twice (the Graph double's sends)."""
    result = _run("steady")
    assert all(count >= 1 for count in result.extra["turns_per_worker"]), result
    assert sum(result.extra["turns_per_worker"]) >= 10, result
    assert result.extra["turn_jobs_run_twice"] == 0, result
