"""`GET /metrics`: the product's metrics in Prometheus text format, read from Redis per scrape.

No authentication: serve it on a private network or behind a proxy that keeps it from the
public internet (it names outcomes and counts, no customer data).
"""

import asyncio
from collections.abc import Iterator, Mapping

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from rq import Queue
from sqlalchemy import Engine

from core import clock, metrics
from intake.keys import ENGINE, REDIS, SETTINGS, TURN_QUEUE
from storage import inbox
from storage.messages import undelivered_open_conversations
from storage.scheduled import overdue_seconds, parked_count

log = structlog.get_logger(__name__)


class QueueDepthCollector(Collector):
    """`wagent_queue_depth{state}` from RQ's queue and registries, without their cleanup (a
    scrape changes nothing), and the due jobs the fair move parked (`parked`:
    storage/scheduled.parked_count), and `wagent_scheduled_overdue_seconds`
    (storage/scheduled.py)."""

    def __init__(self, queue: Queue, prefix: str) -> None:
        self.queue, self.prefix = queue, prefix

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily("wagent_queue_depth", "Jobs of the work queue by state.",
                                  labels=["state"])
        gauge.add_metric(["queued"], self.queue.count)
        for state, registry in (("scheduled", self.queue.scheduled_job_registry),
                                ("started", self.queue.started_job_registry),
                                ("failed", self.queue.failed_job_registry)):
            gauge.add_metric([state], registry.get_job_count(cleanup=False))
        gauge.add_metric(["parked"], parked_count(self.queue.connection, self.prefix))
        yield gauge
        yield GaugeMetricFamily(
            "wagent_scheduled_overdue_seconds",
            "How long the oldest due scheduled job has waited to be moved to the queue (0 when "
            "none is due; minutes mean no keeper is moving jobs).",
            value=round(overdue_seconds(self.queue, now=clock.now()), 3))


class InboxCollector(Collector):
    """`wagent_inbox_entries` and `wagent_inbox_oldest_seconds`, read from the database at
    each scrape, so a drain that died or stalls shows as an age that grows (alert on it). When
    the database cannot be read both are left out and the rest of the scrape still answers.
    PostgreSQL only: SQLite opens every transaction with BEGIN IMMEDIATE (storage/db.py), so a
    scrape would wait up to the busy timeout behind any writer."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        if self.engine.dialect.name != "postgresql":
            return
        try:
            waiting, oldest = inbox.backlog(self.engine)
        except Exception as exc:  # noqa: BLE001 (the database being down is reported elsewhere)
            log.warning("metrics_inbox_unavailable", error=type(exc).__name__)
            return
        yield GaugeMetricFamily("wagent_inbox_entries",
                                "Webhook POSTs in the inbox, not yet stored.", value=waiting)
        age = 0.0 if oldest is None else max((clock.now() - oldest).total_seconds(), 0.0)
        yield GaugeMetricFamily("wagent_inbox_oldest_seconds",
                                "Age of the oldest POST in the inbox (0 when empty).",
                                value=round(age, 3))


class UndeliveredCollector(Collector):
    """`wagent_conversations_not_delivered{state}`: open conversations whose latest reply did
    not reach the customer (failed, or its fate unknown: the ones the console flags), read from
    the database at each scrape (storage.messages.undelivered_open_conversations, which takes
    no lock on SQLite). Left out when the database cannot be read."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        try:
            counts = undelivered_open_conversations(self.engine)
        except Exception as exc:  # noqa: BLE001 (the database being down is reported elsewhere)
            log.warning("metrics_delivery_unavailable", error=type(exc).__name__)
            return
        gauge = GaugeMetricFamily(
            "wagent_conversations_not_delivered",
            "Open conversations whose last reply did not reach the customer, by its state "
            "(failed, unknown).", labels=["state"])
        for state, count in counts.items():
            gauge.add_metric([state], count)
        yield gauge


def make_registry(app: web.Application) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics.RedisCollector(app[REDIS], app[SETTINGS].redis_prefix))
    registry.register(QueueDepthCollector(app[TURN_QUEUE], app[SETTINGS].redis_prefix))
    registry.register(InboxCollector(app[ENGINE]))
    registry.register(UndeliveredCollector(app[ENGINE]))
    return registry


async def serve_metrics(request: web.Request) -> web.Response:
    """200 with the exposition; 503 when Redis cannot be read (no zeros in its place)."""
    registry = make_registry(request.app)
    await flush_updates(request.app)
    try:
        body = await asyncio.to_thread(generate_latest, registry)
    except Exception as exc:
        log.warning("metrics_unavailable", error=type(exc).__name__)
        raise web.HTTPServiceUnavailable(text="metrics unavailable") from exc
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


FLUSH_AFTER_SECONDS = 0.5
SPILLED = "(inbox)"  # a POST put in the inbox: its updates are counted by the worker storing it
COST = "(whatsapp µUSD)"  # + category: µUSD charged (wagent_whatsapp_cost_micro_usd_total)


class UpdateCounts:
    """The process's webhook counts not yet in Redis, the timer that will write them and the
    writes under way (kept so the app's cleanup can cancel the one and await the others: a
    timer left on a closing loop leaves a flush that is never awaited)."""

    def __init__(self) -> None:
        self.pending: dict[str, int] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.writes: set[asyncio.Task[None]] = set()


COUNTS = web.AppKey("webhook_counts", UpdateCounts)


def setup_metrics(app: web.Application) -> None:
    """The /metrics route and the process's buffer of webhook counts (flushed on cleanup)."""
    app[COUNTS] = UpdateCounts()
    app.router.add_get("/metrics", serve_metrics)
    app.on_cleanup.append(flush_on_cleanup)


async def flush_on_cleanup(app: web.Application) -> None:
    """Cancel the timed flush, wait for the writes under way, write what is left."""
    buffer = app[COUNTS]
    if buffer.timer is not None:
        buffer.timer.cancel()
        buffer.timer = None
    await asyncio.gather(*buffer.writes, return_exceptions=True)
    await flush_updates(app)


async def record_updates(app: web.Application, counts: Mapping[str, int],
                         costs: Mapping[str, int] | None = None) -> None:
    """Count one webhook POST's updates by kind (ingest's outcome names) and the WhatsApp
    µUSD it charged by category (`costs`). Summed in the process
    and written to Redis at most every FLUSH_AFTER_SECONDS (and before a scrape), so a POST
    costs no Redis round trip of its own."""
    buffer = app[COUNTS]
    pending = buffer.pending
    for kind, amount in [*counts.items(), *((f"{COST}{category}", micro_usd)
                                            for category, micro_usd in (costs or {}).items())]:
        if amount:
            pending[kind] = pending.get(kind, 0) + amount
    if pending and buffer.timer is None:
        buffer.timer = asyncio.get_running_loop().call_later(
            FLUSH_AFTER_SECONDS, _start_timed_flush, app)


def _start_timed_flush(app: web.Application) -> None:
    buffer = app[COUNTS]
    buffer.timer = None
    write = asyncio.ensure_future(flush_updates(app))
    buffer.writes.add(write)
    write.add_done_callback(buffer.writes.discard)


async def flush_updates(app: web.Application) -> None:
    """Write the process's pending webhook counts to Redis (best-effort, like all metrics)."""
    pending = app[COUNTS].pending.copy()
    app[COUNTS].pending.clear()
    if not pending:
        return
    ops = [metrics.inc("wagent_inbox_posts_total", None, amount) if kind == SPILLED
           else metrics.inc("wagent_whatsapp_cost_micro_usd_total",
                            {"category": kind.removeprefix(COST)}, amount)
           if kind.startswith(COST)
           else metrics.inc("wagent_webhook_updates_total", {"kind": kind}, amount)
           for kind, amount in pending.items()]
    await asyncio.to_thread(metrics.record, app[REDIS], app[SETTINGS].redis_prefix, *ops)
