"""`wagent worker`'s long-lived work process (workers/processes.py, issue 43): jobs run one after
another in one process, a stuck job is stopped at its timeout (RQ's SIGALRM) or, when the alarm
cannot reach it, its work process is killed by the supervisor and replaced, and the next job runs.
"""

import os
import signal
import time
from pathlib import Path

import pytest
import redis
import structlog
from rq import Queue
from rq.job import JobStatus

from tests.conftest import REDIS_UP, REDIS_URL
from workers.processes import (
    RECYCLE_EXIT,
    RESTART_PAUSE_SECONDS,
    Deadline,
    LongLivedWorker,
    Supervisor,
)

QUEUE = "work-process-test"


def stuck(seconds: float) -> None:
    time.sleep(seconds)


def stuck_past_the_alarm(seconds: float) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # RQ's timeout cannot reach it
    time.sleep(seconds)


def whoami() -> int:
    return os.getpid()


def bind_context() -> None:
    structlog.contextvars.bind_contextvars(conversation_id=7)


def read_context() -> dict[str, object]:
    return dict(structlog.contextvars.get_contextvars())


def test_a_stuck_job_is_stopped_at_its_timeout_and_the_next_runs_in_the_same_process(
        redis_client: redis.Redis) -> None:
    queue = Queue(QUEUE, connection=redis_client)
    stuck_job = queue.enqueue(stuck, 30, job_timeout=1)
    after = queue.enqueue(whoami)
    worker = LongLivedWorker([queue], connection=redis_client)
    worker.deadline = Deadline()

    started = time.monotonic()
    worker.work(burst=True, logging_level="ERROR")

    assert time.monotonic() - started < 10, "stopped at its 1 s timeout, not after 30 s"
    assert stuck_job.get_status(refresh=True) == JobStatus.FAILED
    assert "JobTimeoutException" in (stuck_job.latest_result().exc_string or "")
    assert after.get_status(refresh=True) == JobStatus.FINISHED
    assert after.return_value() == os.getpid(), "no work horse: this process ran it"
    assert not worker.deadline.overdue(), "cleared after each job"


def test_no_log_context_of_a_job_is_left_for_the_next(redis_client: redis.Redis) -> None:
    queue = Queue(QUEUE, connection=redis_client)
    queue.enqueue(bind_context)
    reader = queue.enqueue(read_context)

    LongLivedWorker([queue], connection=redis_client).work(burst=True, logging_level="ERROR")

    assert reader.return_value() == {}


def test_a_deadline_is_overdue_only_after_its_seconds() -> None:
    deadline = Deadline()
    assert not deadline.overdue(), "no job running"
    deadline.set(0.2)
    assert not deadline.overdue()
    time.sleep(0.3)
    assert deadline.overdue()
    deadline.clear()
    assert not deadline.overdue()


def test_a_work_process_slow_to_die_is_one_overrun_killed_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGKILL that takes longer than a watch to end the process (a loaded machine) is one
    overrun, logged and sent once: the supervisor does not count its every look at it."""
    import threading

    from workers import processes
    sent: list[int] = []

    def slow_kill(pid: int, sig: int) -> None:  # the kill lands 5 watches later
        sent.append(sig)
        threading.Timer(processes.WATCH_SECONDS * 5, os.kill, (pid, sig)).start()

    monkeypatch.setattr(processes, "_signal", slow_kill)

    def work(deadline: Deadline) -> int:
        deadline.set(0.1)
        time.sleep(30)
        return 0

    supervisor = Supervisor(work, burst=True, grace=0.1)
    monkeypatch.setattr(processes, "RESTART_PAUSE_SECONDS", 0)
    supervisor._run_one()
    assert (supervisor.overruns, sent) == (1, [signal.SIGKILL])


@pytest.mark.redis
def test_a_job_the_alarm_cannot_stop_has_its_work_process_killed_and_the_next_job_runs() -> None:
    """The supervisor forks the work process; the first job blocks SIGALRM and sleeps 30 s
    with a 1 s timeout: killed at timeout + grace, a new work process runs the second job."""
    if not REDIS_UP:
        pytest.skip("a forked work process needs a real Redis (fakeredis is per process)")
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    queue = Queue(QUEUE, connection=client)
    queue.enqueue(stuck_past_the_alarm, 30, job_timeout=1)
    after = queue.enqueue(whoami)

    def work(deadline: Deadline) -> int:
        connection = redis.Redis.from_url(REDIS_URL)
        worker = LongLivedWorker([Queue(QUEUE, connection=connection)], connection=connection)
        worker.deadline = deadline
        worker.work(burst=True, logging_level="ERROR")
        return 0

    supervisor = Supervisor(work, burst=True, grace=0.5)
    started = time.monotonic()
    try:
        assert supervisor.run() == 0
    finally:
        if supervisor.pid:
            os.kill(supervisor.pid, signal.SIGKILL)
    assert time.monotonic() - started < 15, "killed at 1.5 s, not after the 30 s sleep"
    assert (supervisor.overruns, supervisor.started) == (1, 2)
    assert after.get_status(refresh=True) == JobStatus.FINISHED
    assert after.return_value() not in (None, os.getpid())
    client.flushdb()
    client.close()


def test_the_supervisor_replaces_a_recycled_work_process_at_once_and_a_crashed_one_after_a_pause(
        tmp_path: Path) -> None:
    """Exit codes of successive work processes: RECYCLE_EXIT (its RECYCLE_AFTER_JOBS done), a
    crash (an exception: exit 1), then 0 (a burst is over)."""
    runs = tmp_path / "runs"

    def work(deadline: Deadline) -> int:
        with runs.open("a") as out:
            out.write("x")
        done = len(runs.read_text())
        if done == 1:
            return RECYCLE_EXIT
        if done == 2:
            raise RuntimeError("a bug in a job shell")
        return 0

    supervisor = Supervisor(work, burst=True)
    started = time.monotonic()
    assert supervisor.run() == 0
    elapsed = time.monotonic() - started
    assert supervisor.started == 3
    assert RESTART_PAUSE_SECONDS <= elapsed < 2 * RESTART_PAUSE_SECONDS + 5, \
        "one pause: after the crash, not after the recycle"
