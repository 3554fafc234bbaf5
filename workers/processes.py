"""The loops of `wagent worker` and `wagent cron`: RQ's worker and cron scheduler, each with a
keeper (workers/keeper.py), and both waiting for a lost Redis instead of exiting.

`wagent worker` runs its jobs in one long-lived work process (RQ's SimpleWorker, the runtime
kept warm), forked and watched by a supervisor that replaces it when it dies and kills it when a
job overruns its timeout: no fork per job (issue 43; docs/ARCHITECTURE.md, "Work processes").

RQ's worker exits on most Redis errors (one during a job, a timeout) and retries others with a
backoff that grows to a minute; its CronScheduler exits on any. Here a lost Redis is waited for,
with a `waiting_for_redis` line every WAIT_LOG_SECONDS, and then RQ's loop starts again; a
SIGTERM still stops the process (RQ's warm shutdown while it runs, at once while waiting).

The worker classes here stop RQ's pub/sub thread at once at teardown (PromptTeardown); RQ's own
teardown with redis-py 8.2 can wait a minute for it.
"""

import ctypes
import logging
import mmap
import os
import signal
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue, SimpleWorker, Worker
from rq.cron import CronScheduler
from rq.job import Job
from rq.worker import WorkerStatus

from core.settings import Settings
from workers.keeper import Keeper, process_name

log = structlog.get_logger(__name__)
WAIT_LOG_SECONDS = 5.0
WAIT_POLL_SECONDS = 0.5
RESTART_PAUSE_SECONDS = 1.0  # between two runs of RQ's loop, so a bug cannot spin
PUBSUB_JOIN_SECONDS = 1.0  # RQ's own bound on the wait for its pub/sub thread
WATCH_SECONDS = 0.2  # the supervisor's look at its work process
# A job still running this long after its timeout did not answer RQ's SIGALRM (stuck in C, or
# the signal blocked): the supervisor kills its work process (RQ kills a horse at timeout + 60 s;
# here sooner: the turn is retried, fenced, by another worker meanwhile).
OVERRUN_GRACE_SECONDS = 10.0
RECYCLE_AFTER_JOBS = 1000  # a new work process then: what a job leaks cannot grow for ever
RECYCLE_EXIT = 3  # a work process's exit code after RECYCLE_AFTER_JOBS


class PromptTeardown:
    """RQ's `Worker.unsubscribe` (called by its teardown) in the order that lets the pub/sub
    thread stop at once; a mixin for RQ's worker classes.

    RQ 2.12 sends UNSUBSCRIBE and only then stops the thread. The thread reads the reply, has no
    subscription left and, its stop flag not yet cleared, enters redis-py's `get_message`, which
    waits up to RQ's sleep_time (60 s) for a subscription; redis-py 8.2's
    `PubSubWorkerThread.stop()` joins that thread without a bound, so the worker's teardown
    (each `work(burst=True)`, each stop of `wagent worker`) could take a minute. Here the flag
    is cleared first (`stop(timeout=0)`, redis-py >= 8.2), so the thread wakes on the reply and
    exits; the join is bounded as RQ bounds it, and a Redis that cannot be reached only skips
    the UNSUBSCRIBE (closing the connection ends the subscription too).
    """

    pubsub: Any
    pubsub_thread: Any

    def unsubscribe(self) -> None:
        thread, pubsub = self.pubsub_thread, self.pubsub
        if thread is None or pubsub is None:
            return
        thread.stop(timeout=0)  # clears the flag only; the bounded join is below
        try:
            pubsub.unsubscribe()  # its reply wakes the thread's read
        except RedisError:
            pass
        thread.join(timeout=PUBSUB_JOIN_SECONDS)
        pubsub.close()
        self.pubsub_thread = None


class InlineWorker(PromptTeardown, SimpleWorker):
    """RQ's SimpleWorker (each job in the worker's own process) with a prompt teardown: the
    replay environment's and the tests' worker."""


class Patience:
    """What `wagent worker`'s RQ worker adds to RQ's: it retries a Redis it cannot reach every
    few seconds (RQ: up to 60 s) and remembers that a signal asked it to stop."""

    max_connection_wait_time = 5.0
    stop_signalled = False

    def request_stop(self, signum: Any, frame: Any) -> None:
        self.stop_signalled = True
        super().request_stop(signum, frame)  # type: ignore[misc]  # RQ's worker, untyped


class PatientWorker(Patience, PromptTeardown, Worker):
    """RQ's forking Worker (a work horse per job) with Patience: kept for comparison
    (bench/job_cpu.py measures it against the long-lived worker)."""


class Deadline:
    """The time by which the running job of a work process must be over, shared with the
    supervisor that forked it (an anonymous shared mapping: both see one float, seconds of
    `time.monotonic()`, system-wide on Linux; 0 while no job runs)."""

    def __init__(self) -> None:
        self._cell = mmap.mmap(-1, 8)

    def set(self, seconds: float) -> None:
        self._cell[:] = struct.pack("d", time.monotonic() + seconds)

    def clear(self) -> None:
        self._cell[:] = struct.pack("d", 0.0)

    def overdue(self, grace: float = 0.0) -> bool:
        """True while a job runs `grace` seconds past its deadline."""
        (at,) = struct.unpack("d", self._cell[:])
        return bool(at) and time.monotonic() > at + grace


class LongLivedWorker(Patience, InlineWorker):
    """`wagent worker`'s RQ worker: RQ's SimpleWorker, every job in this one long-lived work
    process, with the runtime (engine pool, Redis, the Anthropic and Graph clients) kept warm
    from job to job (docs/ARCHITECTURE.md, "Work processes").

    What a work horse per job gave, kept here: RQ's own timeout (SIGALRM in this process,
    JobTimeoutException at the job's timeout); the job's Deadline for the supervisor, which
    kills this process when a job outlives its timeout by OVERRUN_GRACE_SECONDS (stuck where
    SIGALRM cannot reach it); nothing of a job's log context is left for the next one; a cold
    shutdown (a second SIGTERM) mid-job ends the process at once, as RQ kills a horse, so the
    job's lock and heartbeat are left for the keeper to reap (workers/heartbeats.py) and the
    turn is retried, fenced.
    """

    deadline: Deadline | None = None

    def execute_job(self, job: Job, queue: Queue) -> None:
        structlog.contextvars.clear_contextvars()
        timeout = job.timeout or self.queue_class.DEFAULT_TIMEOUT
        if self.deadline is not None and timeout != -1:
            self.deadline.set(float(timeout))
        try:
            super().execute_job(job, queue)
        finally:
            if self.deadline is not None:
                self.deadline.clear()
            structlog.contextvars.clear_contextvars()

    def request_force_stop(self, signum: Any, frame: Any) -> None:
        if self.get_state() == WorkerStatus.BUSY:
            log.warning("work_process_cold_shutdown_mid_job")
            os._exit(1)  # no finally of the job runs: its lock is reaped, its turn retried
        super().request_force_stop(signum, frame)


def run_worker(settings: Settings, *, burst: bool = False) -> int:
    """`wagent worker`: a supervisor (this process, no thread, no connection) and one
    long-lived work process forked from it, which runs the keeper and RQ's SimpleWorker on
    the product's queue, without RQ's scheduler (the keeper moves due jobs). The supervisor
    forks a new work process when one dies (after RESTART_PAUSE_SECONDS), after
    RECYCLE_AFTER_JOBS jobs, and kills one whose job is OVERRUN_GRACE_SECONDS past its
    timeout. SIGTERM: warm shutdown (the job ends, then the process); a second: the work
    process is killed (RQ's cold shutdown). Returns the exit code."""
    return Supervisor(lambda deadline: _work_process(settings, burst, deadline),
                      burst=burst).run()


class Supervisor:
    """Forks `work(deadline)` (an exit code) and watches it; see `run_worker`.
    `grace` overrides OVERRUN_GRACE_SECONDS (tests)."""

    def __init__(self, work: Callable[[Deadline], int], *, burst: bool = False,
                 grace: float | None = None) -> None:
        self.work, self.burst, self.grace = work, burst, grace
        self.deadline = Deadline()
        self.stopping = 0  # signals received
        self.pid = 0
        self.started = 0  # work processes forked
        self.overruns = 0

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._signalled)
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while True:
                code = self._run_one()
                if self.stopping or (self.burst and code == 0):
                    return 0 if self.stopping else code
                if code != RECYCLE_EXIT:
                    time.sleep(RESTART_PAUSE_SECONDS)  # a crash loop cannot spin
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run_one(self) -> int:
        self.deadline.clear()
        self.pid = _fork(lambda: self.work(self.deadline))
        self.started += 1
        killed = False  # one overrun a process: a SIGKILL can take longer than WATCH_SECONDS
        while True:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.pid = 0
                code = os.waitstatus_to_exitcode(status)
                if code not in (0, RECYCLE_EXIT):
                    log.warning("work_process_ended", exit_code=code)
                return code
            if not killed and self.deadline.overdue(
                    OVERRUN_GRACE_SECONDS if self.grace is None else self.grace):
                killed = True
                self.overruns += 1
                log.error("work_process_overran_job_timeout")
                _signal(self.pid, signal.SIGKILL)  # its turn is reaped and retried, fenced
            time.sleep(WATCH_SECONDS)

    def _signalled(self, signum: int, frame: Any) -> None:
        self.stopping += 1
        if self.pid:
            _signal(self.pid, signal.SIGTERM if self.stopping == 1 else signal.SIGKILL)


def _fork(work: Callable[[], int]) -> int:
    """Fork; the child runs `work()` and exits with its code (never returns)."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)  # RQ installs its own in work()
        _die_with_parent()
        code = work()
    except SystemExit as exc:  # RQ's cold shutdown while idle
        code = exc.code if isinstance(exc.code, int) else 0
    except BaseException:  # noqa: BLE001 (the supervisor logs the exit code)
        log.exception("work_process_failed")
    finally:
        logging.shutdown()
        os._exit(code)


def _die_with_parent() -> None:
    """SIGKILL when the supervisor dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG): no work
    process is left without its watch."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _work_process(settings: Settings, burst: bool, deadline: Deadline) -> int:
    """The work process: the keeper and RQ's loop, started again after Redis was lost.
    Returns 0 (stopped, or a burst is over) or RECYCLE_EXIT (RECYCLE_AFTER_JOBS done)."""
    connection = Redis.from_url(settings.redis_url)
    queue = Queue(settings.queue_name, connection=connection)
    keeper = Keeper(settings, name=process_name("worker"))
    keeper.start()
    try:
        while True:
            worker = LongLivedWorker([queue], connection=connection)
            worker.deadline = deadline
            try:
                worker.work(burst=burst, with_scheduler=False,
                            max_jobs=None if burst else RECYCLE_AFTER_JOBS)
                if not (burst or worker.stop_signalled):
                    return RECYCLE_EXIT
            except RedisError as exc:  # RQ's teardown could not reach it
                log.warning("worker_lost_redis", error=type(exc).__name__)
                worker.unsubscribe()
            if burst or worker.stop_signalled or not _restart_after(connection):
                return 0
    finally:
        keeper.stop()


def run_cron(settings: Settings, jobs: list[tuple[Callable[[], object], int]]) -> int:
    """`wagent cron`: RQ's CronScheduler enqueuing `jobs` (function, interval in seconds), and
    a keeper; started again after Redis was lost (its interval jobs fire again at start, which
    their per-period guards make harmless)."""
    connection = Redis.from_url(settings.redis_url)
    keeper = Keeper(settings, name=process_name("cron"))
    keeper.start()
    try:
        while True:
            scheduler = CronScheduler(connection=connection)
            for job, every in jobs:
                scheduler.register(job, settings.queue_name, interval=every, job_timeout=240,
                                   result_ttl=600, failure_ttl=86400)
            try:
                scheduler.start()  # type: ignore[no-untyped-call]  # returns once a signal stopped it
                return 0
            except RedisError as exc:
                log.warning("cron_lost_redis", error=type(exc).__name__)
            if not _restart_after(connection):
                return 0
    finally:
        keeper.stop()


def _restart_after(connection: Redis) -> bool:
    """Pause, then wait for Redis; False when a signal asked to stop meanwhile."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if stop.wait(RESTART_PAUSE_SECONDS):
            return False
        return wait_for_redis(connection, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def wait_for_redis(connection: Redis, stop: threading.Event) -> bool:
    """Ping Redis until it answers (True) or `stop` is set (False), logging
    `waiting_for_redis` every WAIT_LOG_SECONDS."""
    started = time.monotonic()
    logged: float | None = None
    while not stop.is_set():
        try:
            connection.ping()
            if logged is not None:
                log.info("redis_reachable_again", waited_s=round(time.monotonic() - started, 1))
            return True
        except RedisError as exc:
            if logged is None or time.monotonic() - logged >= WAIT_LOG_SECONDS:
                logged = time.monotonic()
                log.warning("waiting_for_redis", waited_s=round(logged - started, 1),
                            error=type(exc).__name__)
        stop.wait(WAIT_POLL_SECONDS)
    return False
