"""The keeper: the product's own scheduler, a thread in every `wagent worker` and in `wagent cron`.

Every TICK_SECONDS the keeper holding a short Redis lock (`{prefix}:keeper:lock`, KEEPER_LOCK_TTL
seconds, renewed each tick) moves the scheduled jobs that are due to the queue
(`storage.scheduled.enqueue_due`; RQ's own scheduler is not started, storage/scheduled.py says
why). When its process dies the lock expires and another keeper takes over within
KEEPER_LOCK_TTL + TICK_SECONDS; one that stops cleanly (a deploy) releases it at once. Moving is
safe from two keepers at once, so a keeper that lost its lock while starved of CPU does no harm.

The keeper holding the lock also reaps silent jobs (workers/heartbeats.py): a turn whose
work horse died or stopped is given to another worker within heartbeats.SILENCE_SECONDS and a
tick, instead of waiting for its lock's TTL and the reconciler (issue 36).

Every keeper also watches Redis. It logs `redis_unavailable` when a tick fails and `redis_back`
when one works again; when Redis comes back after an outage, or has lost the product's marker
key (`{prefix}:alive`: it restarted empty), it enqueues `workers.maintenance.reconcile(
recovery=True)` ahead of the queue, at most once per RECOVERY_GUARD seconds across keepers: the
messages whose jobs Redis lost are answered within seconds, not after the reconcile's threshold.
"""

import os
import socket
import threading
import time
import uuid

import structlog
from redis import Redis
from redis.exceptions import LockError, RedisError
from rq import Queue, Retry

from core import clock
from core.settings import Settings
from storage.db import connect_redis
from storage.keys import alive_key, keeper_lock_key, recovery_key
from storage.scheduled import enqueue_due
from workers import heartbeats, maintenance

log = structlog.get_logger(__name__)
TICK_SECONDS = 1.0
KEEPER_LOCK_TTL = 5  # seconds: a dead keeper's successor starts within this and a tick
RECOVERY_GUARD = 30  # seconds: one recovery reconcile per Redis loss, whoever notices it
RECONCILE_JOB = maintenance.reconcile  # RQ names it "workers.maintenance.reconcile"


class Keeper:
    """One keeper; `start()` runs it in a daemon thread, `stop()` ends it and releases the lock.
    `tick()` is one pass (tests call it directly). `name` says which process it is; the lock's
    value starts with it."""

    def __init__(self, settings: Settings, *, name: str, redis: Redis | None = None) -> None:
        self.prefix = settings.redis_prefix
        self.turn_job_timeout = settings.turn_job_timeout
        self.redis = redis or connect_redis(settings.redis_url)
        self.queue = Queue(settings.queue_name, connection=self.redis)
        self.token = f"{name}:{uuid.uuid4().hex[:8]}"
        self.lock = self.redis.lock(keeper_lock_key(self.prefix), timeout=KEEPER_LOCK_TTL,
                                    thread_local=False)
        self.holding = False
        self.down_since: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="wagent-keeper")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.holding:
            try:
                self.lock.release()
            except (LockError, RedisError):
                pass  # expired already, or Redis is down: its TTL frees it
            self.holding = False

    def _run(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            self.tick()

    def tick(self) -> int:
        """Watch Redis, keep or take the lock, move due jobs; returns how many were moved. A
        Redis failure is logged (once per outage) and the next tick tries again."""
        try:
            self._watch()
            if not self._hold():
                return 0
            heartbeats.reap(self.redis, self.queue, self.prefix,
                            job_timeout=self.turn_job_timeout)  # a dead horse's turn
            return enqueue_due(self.queue, now=clock.now(), prefix=self.prefix)
        except RedisError as exc:
            if self.down_since is None:
                self.down_since = time.monotonic()
                log.warning("redis_unavailable", keeper=self.token, error=type(exc).__name__)
            self.holding = False
            return 0
        except Exception:  # noqa: BLE001 (a bug must not stop the scheduler: the next tick)
            log.exception("keeper_tick_failed", keeper=self.token)
            return 0

    def _watch(self) -> None:
        lost_data = bool(self.redis.set(alive_key(self.prefix), self.token, nx=True))
        if self.down_since is not None:
            log.warning("redis_back", keeper=self.token,
                        down_s=round(time.monotonic() - self.down_since, 1))
            self.down_since = None
            self.request_recovery("redis_back")
        elif lost_data:
            self.request_recovery("redis_empty")

    def request_recovery(self, reason: str) -> bool:
        """Enqueue the recovery reconcile ahead of the queue unless one was in the last
        RECOVERY_GUARD seconds; True when this call enqueued it."""
        if not self.redis.set(recovery_key(self.prefix), self.token, nx=True,
                              ex=RECOVERY_GUARD):
            return False
        self.queue.enqueue(RECONCILE_JOB, kwargs={"recovery": True}, at_front=True,
                           job_timeout=240, result_ttl=600, failure_ttl=86400,
                           retry=Retry(max=2))
        log.warning("recovery_reconcile_enqueued", reason=reason, keeper=self.token)
        return True

    def _hold(self) -> bool:
        if self.holding:
            try:
                self.lock.extend(KEEPER_LOCK_TTL, replace_ttl=True)
                return True
            except LockError:  # expired while we were starved, or taken: try again below
                self.holding = False
                log.warning("keeper_lock_lost", keeper=self.token)
        if self.lock.acquire(blocking=False, token=self.token):
            self.holding = True
            log.info("keeper_lock_taken", keeper=self.token)
        return self.holding


def process_name(role: str) -> str:
    """`role:host:pid`, the start of a keeper's lock value (who holds it)."""
    return f"{role}:{socket.gethostname()}:{os.getpid()}"
