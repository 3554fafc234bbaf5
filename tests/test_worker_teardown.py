"""The teardown of the product's RQ workers (workers/processes.py, PromptTeardown): RQ's pub/sub
thread stops on the UNSUBSCRIBE reply instead of waiting for a subscription.

With RQ 2.12's order (UNSUBSCRIBE, then stop the thread) the thread could read the reply while
still running, find no subscription left and wait up to 60 s inside redis-py's `get_message`,
which redis-py 8.2's `PubSubWorkerThread.stop()` joins without a bound: each `work(burst=True)`
of the replay environment, and each stop of `wagent worker`, could take a minute. The first test
forces that interleaving (the thread has handled the reply before `unsubscribe` returns) and
checks the mechanism, not the clock.
"""

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from rq import Queue, Worker

from workers.processes import InlineWorker, LongLivedWorker, PatientWorker

WORKER_CLASSES = [InlineWorker, PatientWorker, LongLivedWorker]
SETTLE_SECONDS = 10.0  # a bound on a wait that ends within milliseconds; never reached when green


@pytest.fixture
def queue(redis_client: redis.Redis) -> Iterator[Queue]:
    yield Queue("teardown-test", connection=redis_client)


class _Probe:
    """Spies on a subscribed worker's pub/sub: the waits of its thread for a subscription (the
    60 s one), and the moment the thread has either entered that wait or closed the pub/sub on
    its way out."""

    def __init__(self, worker: Worker) -> None:
        self.pubsub: Any = worker.pubsub
        self.thread: threading.Thread = worker.pubsub_thread  # type: ignore[assignment]
        self.subscription_waits: list[float | None] = []
        self.settled = threading.Event()
        send_unsubscribe = self.pubsub.unsubscribe
        close = self.pubsub.close

        def wait_for_subscription(timeout: float | None = None) -> bool:
            self.subscription_waits.append(timeout)
            self.settled.set()
            return False  # as when the wait runs out, without spending it

        def unsubscribe(*args: Any) -> Any:
            sent = send_unsubscribe(*args)
            self.settled.wait(SETTLE_SECONDS)  # the thread has handled the reply
            return sent

        def close_from_thread() -> None:
            if threading.current_thread() is self.thread:
                self.settled.set()
            close()

        self.pubsub.subscribed_event.wait = wait_for_subscription
        self.pubsub.unsubscribe = unsubscribe
        self.pubsub.close = close_from_thread


@pytest.mark.parametrize("worker_class", WORKER_CLASSES, ids=lambda cls: cls.__name__)
def test_the_pubsub_thread_stops_on_the_unsubscribe_reply_without_waiting_for_a_subscription(
        queue: Queue, worker_class: type[Worker]) -> None:
    worker = worker_class([queue], connection=queue.connection)
    worker.subscribe()
    probe = _Probe(worker)

    worker.unsubscribe()

    assert probe.subscription_waits == [], "the thread waited for a subscription at teardown"
    assert not probe.thread.is_alive()
    assert probe.pubsub.connection is None, "the pub/sub connection is closed"
    assert worker.pubsub_thread is None


@pytest.mark.parametrize("worker_class", WORKER_CLASSES, ids=lambda cls: cls.__name__)
def test_a_burst_leaves_no_pubsub_thread_and_no_pubsub_connection(
        queue: Queue, worker_class: type[Worker]) -> None:
    threads: list[threading.Thread] = []

    class Recording(worker_class):  # type: ignore[valid-type, misc]
        def subscribe(self) -> None:
            super().subscribe()
            threads.append(self.pubsub_thread)

    worker = Recording([queue], connection=queue.connection)
    worker.work(burst=True, logging_level="ERROR")

    assert len(threads) == 1, "the worker subscribed to its command channel"
    assert not threads[0].is_alive()
    assert worker.pubsub.connection is None


def test_a_redis_unreachable_at_teardown_skips_the_unsubscribe_and_still_closes(
        queue: Queue) -> None:
    """`wagent worker` calls `unsubscribe` again after RQ's teardown lost Redis
    (workers/processes.py, run_worker): that call must not raise."""
    worker = PatientWorker([queue], connection=queue.connection)
    worker.subscribe()
    pubsub: Any = worker.pubsub
    thread = worker.pubsub_thread

    def unreachable(*args: Any) -> None:
        raise RedisConnectionError("Connection refused")

    pubsub.unsubscribe = unreachable
    worker.unsubscribe()

    assert pubsub.connection is None, "the pub/sub connection is closed"
    assert worker.pubsub_thread is None
    thread.join(SETTLE_SECONDS)  # its read ends with the closed socket
    assert not thread.is_alive()
