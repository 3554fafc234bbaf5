"""The loops of `wagent worker` and `wagent cron`: RQ's worker and cron scheduler, each with a
keeper (workers/keeper.py), and both waiting for a lost Redis instead of exiting.

RQ's worker exits on most Redis errors (one during a job, a timeout) and retries others with a
backoff that grows to a minute; its CronScheduler exits on any. Here a lost Redis is waited for,
with a `waiting_for_redis` line every WAIT_LOG_SECONDS, and then RQ's loop starts again; a
SIGTERM still stops the process (RQ's warm shutdown while it runs, at once while waiting).

Both worker classes here stop RQ's pub/sub thread at once at teardown (PromptTeardown); RQ's own
teardown with redis-py 8.2 can wait a minute for it.
"""

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue, SimpleWorker, Worker
from rq.cron import CronScheduler

from core.settings import Settings
from workers.keeper import Keeper, process_name

log = structlog.get_logger(__name__)
WAIT_LOG_SECONDS = 5.0
WAIT_POLL_SECONDS = 0.5
RESTART_PAUSE_SECONDS = 1.0  # between two runs of RQ's loop, so a bug cannot spin
PUBSUB_JOIN_SECONDS = 1.0  # RQ's own bound on the wait for its pub/sub thread


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


class PatientWorker(PromptTeardown, Worker):
    """RQ's Worker that retries a Redis it cannot reach every few seconds (RQ: up to 60 s) and
    remembers that a signal asked it to stop."""

    max_connection_wait_time = 5.0
    stop_signalled = False

    def request_stop(self, signum: Any, frame: Any) -> None:
        self.stop_signalled = True
        super().request_stop(signum, frame)  # type: ignore[no-untyped-call]  # RQ: untyped


def run_worker(settings: Settings, *, burst: bool = False) -> int:
    """`wagent worker`: RQ's forking worker on the product's queue, without RQ's scheduler
    (the keeper moves due jobs), started again after Redis was lost."""
    connection = Redis.from_url(settings.redis_url)
    queue = Queue(settings.queue_name, connection=connection)
    keeper = Keeper(settings, name=process_name("worker"))
    keeper.start()
    try:
        while True:
            worker = PatientWorker([queue], connection=connection)
            try:
                worker.work(burst=burst, with_scheduler=False)
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
