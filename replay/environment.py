"""A whole product on loopback for one scenario: its own database, Redis namespace, clock,
web app, workers and the two doubles. Used by `wagent replay`, `wagent demo` and tests.
"""

import asyncio
import json
import logging
import tempfile
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import fakeredis
import redis
from aiohttp import web
from rq import Queue
from sqlalchemy import Engine, event, inspect
from sqlalchemy.engine import make_url

from bot.app import create_app
from core import clock
from core.settings import Settings
from replay.graph_api import GraphDouble
from replay.mercadopago_api import MercadoPagoDouble
from replay.messages_api import MessagesDouble
from replay.schemas import SCHEMAS
from replay.transcription_api import TranscriptionDouble
from storage.db import create_schema, make_engine, session_scope
from storage.jobs import enqueue_facts
from storage.scheduled import enqueue_due
from storage.tenants import upsert_tenant
from whatsapp.signature import sign
from workers.maintenance import reconcile_pending
from workers.outages import probe
from workers.processes import InlineWorker
from workers.reminders import reminder_pass
from workers.runtime import build_runtime, set_runtime
from workers.series import series_pass
from workers.sweeper import close_due, sweep_horizon
from workers.waitlist import waitlist_pass

T = TypeVar("T")
APP_SECRET = "replay-app-secret"
VERIFY_TOKEN = "replay-verify-token"
ACCESS_TOKEN = "replay-access-token"
API_KEY = "replay-api-key"
TRANSCRIPTION_KEY = "replay-transcription-key"
MERCADOPAGO_TOKEN = "replay-mercadopago-token"
MERCADOPAGO_SECRET = "replay-mercadopago-webhook-secret"
MAX_DRAIN_ROUNDS = 200


class _LoopThread:
    """An asyncio loop in a daemon thread: the web app and the doubles run there, while the
    main thread runs the workers (workers.processes.InlineWorker, an RQ SimpleWorker, needs the
    main thread for its signals).
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="replay-loop")
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


class ReplayEnvironment:
    """Start everything for a scenario; `close()` stops it and restores the clock.

    `settings` override product settings (replays answer without a debounce unless told).
    `database_url` / `redis_url` None → a fresh SQLite file and an in-process Redis. A SQLite
    URL also means a fresh file of the scenario's own. With a PostgreSQL URL the scenario gets
    its own schema; with a Redis URL its own key prefix and queue name, deleted at the end.
    `keep_database` (`wagent chat --database-url`) uses `database_url` as it is, already
    migrated (ValueError otherwise), and leaves what was written there.
    """

    def __init__(self, *, start: datetime, database_url: str | None = None,
                 redis_url: str | None = None, keep_database: bool = False,
                 **settings: Any) -> None:
        self.clock = clock.FrozenClock(start)
        self._worker_log_level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        self._previous_clock = clock.set_clock(self.clock)
        self.namespace = f"wagent-replay-{uuid.uuid4().hex[:10]}"
        self._tmp = tempfile.TemporaryDirectory(prefix="wagent-replay-")
        if keep_database and database_url:  # `wagent chat --database-url`: that database
            self.engine, self._schema = make_engine(database_url), None
            if not inspect(self.engine).has_table("tenant"):
                self.engine.dispose()
                clock.set_clock(self._previous_clock)
                self._tmp.cleanup()
                raise ValueError(f"{make_url(database_url).render_as_string()} has no schema "
                                 "yet: run `wagent db upgrade` first")
        else:
            self.engine, self._schema = self._make_engine(database_url)
        self.redis = (redis.Redis.from_url(redis_url) if redis_url
                      else fakeredis.FakeRedis(server=fakeredis.FakeServer()))
        self.settings = Settings(
            database_url=str(self.engine.url), redis_prefix=self.namespace,
            queue_name=self.namespace, whatsapp_app_secret=APP_SECRET,
            whatsapp_verify_token=VERIFY_TOKEN, whatsapp_access_token=ACCESS_TOKEN,
            anthropic_api_key=API_KEY, mercadopago_access_token=MERCADOPAGO_TOKEN,
            mercadopago_webhook_secret=MERCADOPAGO_SECRET,
            **{"turn_debounce_seconds": 0, **settings})
        self.queue = Queue(self.namespace, connection=self.redis)
        # a kept database has an earlier run's wamids and tool_use ids: this run's are unique
        run_prefix = uuid.uuid4().hex[:12] if keep_database else ""
        self.messages_api = MessagesDouble(api_key=API_KEY, advance=self.clock.advance,
                                           tool_use_prefix=run_prefix and f"{run_prefix}_")
        self.graph_api = GraphDouble(access_token=ACCESS_TOKEN, wamid_prefix=run_prefix.upper())
        self.transcription_api = TranscriptionDouble(api_key=TRANSCRIPTION_KEY)
        self.mercadopago_api = MercadoPagoDouble(access_token=MERCADOPAGO_TOKEN,
                                                 webhook_secret=MERCADOPAGO_SECRET)
        self._loop = _LoopThread()
        self._runner: web.AppRunner | None = None
        self.web_url = self._loop.run(self._start_servers())
        self.settings = Settings(**{**self.settings.__dict__,
                                    "anthropic_base_url": self.messages_api.base_url,
                                    "graph_api_base_url": self.graph_api.base_url,
                                    "mercadopago_base_url": self.mercadopago_api.base_url,
                                    "transcription_base_url": settings.get(
                                        "transcription_base_url",
                                        self.transcription_api.base_url),
                                    "transcription_api_key": TRANSCRIPTION_KEY})
        self.runtime = build_runtime(self.settings, engine=self.engine, redis_client=self.redis)
        set_runtime(self.runtime)

    def _make_engine(self, database_url: str | None) -> tuple[Engine, str | None]:
        backend = make_url(database_url).get_backend_name() if database_url else "sqlite"
        if database_url is None or backend == "sqlite":  # never the configured file: its own
            engine = make_engine(f"sqlite:///{self._tmp.name}/wagent.db")
            event.listen(engine, "connect", no_fsync)
            create_schema(engine)
            return engine, None
        if backend != "postgresql":
            raise ValueError(f"replays run on SQLite or PostgreSQL, not {backend}")
        self._database_url = database_url
        return SCHEMAS.take(database_url, "wagent_replay")  # made, or reused (replay/schemas)

    async def _start_servers(self) -> str:
        await self.messages_api.start()
        await self.graph_api.start()
        await self.transcription_api.start()
        await self.mercadopago_api.start()
        # the web process calls Graph itself for thread control (operations/threads.py)
        web_settings = Settings(**{**self.settings.__dict__,
                                   "graph_api_base_url": self.graph_api.base_url})
        app = create_app(web_settings, engine=self.engine, redis_client=self.redis)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    def add_tenant(self, config: dict[str, Any]) -> None:
        with session_scope(self.engine) as session:
            upsert_tenant(session, config, now=self.clock.now())

    def post_webhook(self, body: bytes, *, signature: str = "valid") -> int:
        """POST `body` byte for byte to the web app; returns the HTTP status."""
        headers = {"Content-Type": "application/json"}
        if signature == "valid":
            headers["X-Hub-Signature-256"] = sign(body, APP_SECRET)
        elif signature == "bad":
            headers["X-Hub-Signature-256"] = sign(body, "not-the-app-secret")
        request = urllib.request.Request(f"{self.web_url}/webhook", data=body, headers=headers,
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def pix_paid(self, reference: str, *, amount_cents: int | None = None,
                 replay: bool = False, signature: str = "valid") -> int:
        """The customer pays the Pix charge of `reference` ("latest": the newest) at the
        Mercado Pago double, which POSTs its signed notification to the web app (`replay`:
        the previous one again; `signature` "bad" or "none": forged); the HTTP status."""
        note = self.mercadopago_api.pay(reference, amount_cents=amount_cents, replay=replay)
        headers = dict(note.headers)
        if signature == "bad":
            headers["x-signature"] = headers["x-signature"][:-4] + "0000"
        elif signature == "none":
            headers.pop("x-signature")
        request = urllib.request.Request(f"{self.web_url}/payments/mercadopago?{note.query}",
                                         data=note.body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def graph_unreachable(self, down: bool) -> None:
        """Make the Graph API double refuse connections (`down`), or listen again."""
        self._loop.run(self.graph_api.go_down() if down else self.graph_api.go_up())

    def drain(self) -> int:
        """Run the workers until no job is queued or due at the product's clock; returns the
        number of worker passes. Due scheduled jobs are moved by the product's clock
        (`storage.scheduled.enqueue_due`, as the keeper does)."""
        for rounds in range(1, MAX_DRAIN_ROUNDS + 1):
            self._enqueue_due()
            if self.queue.count == 0:
                return rounds
            InlineWorker([self.queue], connection=self.redis).work(
                burst=True, logging_level=self._worker_log_level)
        raise RuntimeError(f"drain did not settle after {MAX_DRAIN_ROUNDS} passes")

    def _enqueue_due(self) -> None:
        enqueue_due(self.queue, now=self.clock.now())  # what the keeper does, on our clock

    def sweep(self) -> int:
        now = self.clock.now()
        closed = close_due(self.engine, now=now, due_by=sweep_horizon(self.engine, now=now),
                           on_closed=lambda cid: enqueue_facts(self.queue, self.namespace, cid))
        self.drain()
        return closed

    def cron(self) -> dict[str, int]:
        """The periodic jobs `wagent cron` runs, at the product's clock: the sweeper, the
        reconciler, the series pass (workers/series.py), the reminders pass
        (workers/reminders.py), the waitlist pass (workers/waitlist.py) and the provider probe
        (workers/outages.py); then the workers drain. Returns what each did."""
        now = self.clock.now()
        closed = close_due(self.engine, now=now, due_by=sweep_horizon(self.engine, now=now),
                           on_closed=lambda cid: enqueue_facts(self.queue, self.namespace, cid))
        reconciled = reconcile_pending(self.runtime, now=now)
        placed = series_pass(self.engine, now=now)
        queued = reminder_pass(self.runtime, now=now)
        offers = waitlist_pass(self.runtime, now=now)
        probed = probe(self.runtime, now=now)
        self.drain()
        return {"closed": closed, "reconciled": reconciled, "reminders": queued,
                "waitlist": offers, "probe": probed, "series": placed}

    def _forget_redis_keys(self) -> None:
        """Leave the configured Redis as it was: our keys, RQ's keys for our queue and jobs."""
        keys = list(self.redis.scan_iter(f"*{self.namespace}*", count=1000))
        keys += _job_keys(self.redis, self.namespace)
        if keys:
            self.redis.delete(*keys)
        self.redis.srem("rq:queues", f"rq:queue:{self.namespace}")

    def close(self) -> None:
        if self._runner is not None:
            self._loop.run(self._runner.cleanup())
        self._loop.run(self.messages_api.stop())
        self._loop.run(self.graph_api.stop())
        self._loop.run(self.transcription_api.stop())
        self._loop.run(self.mercadopago_api.stop())
        self._loop.close()
        set_runtime(None)
        clock.set_clock(self._previous_clock)
        self.runtime.graph.close()
        self.runtime.anthropic.close()
        if isinstance(self.redis, fakeredis.FakeRedis):
            self.redis.flushall()
        else:
            self._forget_redis_keys()
        self.engine.dispose()
        if self._schema:
            SCHEMAS.give_back(self.engine, self._database_url, self._schema)
        self._tmp.cleanup()


def no_fsync(dbapi_connection: Any, _: Any) -> None:
    """A replay's SQLite file is a temporary one, gone at the end: no fsync per commit
    (`synchronous=OFF`; a process killed mid-write still loses nothing, only a power cut
    would). About 5 ms a commit on the shared CI disk, a hundred commits a scenario."""
    dbapi_connection.execute("PRAGMA synchronous=OFF")


def _job_keys(redis_client: redis.Redis, namespace: str) -> list[bytes]:
    """RQ's keys of this replay's jobs: their hashes and results (ids do not carry the queue)."""
    keys = []
    for key in redis_client.scan_iter("rq:job:*", count=1000):
        if redis_client.type(key) == b"hash" and redis_client.hget(key, "origin") == \
                namespace.encode():
            job_id = key.decode().removeprefix("rq:job:")
            keys += [key, f"rq:results:{job_id}".encode()]
    return keys


def load_body(ref: Any, base: Path) -> bytes:
    """A webhook step's body: a file path relative to the scenario (bytes as they are) or an
    inline object (compact JSON, ASCII-escaped as Meta sends it).
    """
    if isinstance(ref, str):
        return (base / ref).read_bytes()
    return json.dumps(ref, separators=(",", ":")).encode()
