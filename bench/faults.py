"""Fault cases: the product as deployed (`wagent web`, two `wagent worker`, `wagent cron`, as
processes) on the machine's PostgreSQL and a redis-server of its own, real signed webhooks
flowing; each case breaks one thing and measures how long customers waited for their answer.

    .venv/bin/python bench/faults.py                     # every case, about 3.5 minutes here
    .venv/bin/python bench/faults.py --case kill_horse --max-wait 900 --source /tmp/old

Cases (docs: bench/README.md):

- `steady`: no fault, STEADY_S seconds of traffic: the two workers share the turns, each
  from its own process and Redis connection, and no turn job runs twice (issue 43).
- `kill_keeper`: SIGKILL of the worker that moves due scheduled jobs (the keeper's lock holder;
  on code before the keeper, the worker running RQ's scheduler), with its work horse.
- `rolling_restart`: each worker replaced in turn, the new one started before the old one gets
  SIGTERM (RQ's warm shutdown), as a deploy with a surge does; the worker moving due jobs last.
- `kill_horse`: SIGKILL of a work horse in the middle of a turn (the Messages double takes 2 s
  a turn until then, so a turn is caught in its model call).
- `stop_horse`: SIGSTOP of a work horse in its model call (a horse starved of CPU) until another
  turn has answered its conversation, then SIGCONT: the stale turn must send nothing.
- `postgres_outage`: 10 s without PostgreSQL (a TCP proxy of ours between the product and
  PostgreSQL cuts every connection and refuses new ones).
- `redis_loss`: the redis-server killed (SIGKILL) while a turn runs (the double takes 1 s a
  turn) and started again 5 s later, empty.

Since issue 43 a `wagent worker` runs its jobs in one long-lived work process, its child (with
the keeper): the "horse" of `kill_horse` and `stop_horse` is that process.

Traffic: a new customer every TICK_S seconds, writing one message or (one in four) a burst of
two and then waiting for the answer, so nothing but the product itself gets a lost turn going
again (a customer who writes again would); a fifth of the messages delivered twice at once; a
POST answered with anything but 200 is delivered again a second later, as Meta redelivers
(Meta waits longer). Each message carries
a token, and the Messages double answers every turn with the tokens of the messages it
answers, so the Graph double's sends say which message was answered when, and how many times.

It prints one JSON object per case: messages, lost (never answered), doubled (answered twice),
the waits after the fault ended (`after_fault_s`: answer time minus the later of the message's
first POST and the fault's end) and from the first POST (`wait_s`), the oldest due scheduled
job's age seen meanwhile (`max_overdue_s`, sampled every half second) and what the case adds.
`--source DIR` runs the product from another tree (e.g. `git archive main | tar -x -C DIR`) for
before/after figures; the harness, traffic and doubles stay this tree's. tests/test_faults.py
runs the same cases and asserts the bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load import TOKEN_RE, Child, descendants, free_port, reply_for, wait_http  # noqa: E402
from storage.keys import keeper_lock_key  # noqa: E402

HOST = "127.0.0.1"
POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
APP_SECRET = "faults-app-secret"
ACCESS_TOKEN = "faults-access-token"
API_KEY = "faults-api-key"
TICK_S = 0.5
LEAD_S = 3.0  # traffic before the fault
TRAIL_S = 3.0  # traffic after the fault's end
PG_OUTAGE_S = 10.0
STEADY_S = 10.0
REDIS_DOWN_S = 5.0
# The Messages double's time per turn call until the fault: long enough in `kill_horse` and
# `stop_horse` to catch a turn in its model call, and in `redis_loss` for the workers to be busy
# when Redis dies
TURN_S = {"kill_horse": 2.0, "stop_horse": 2.0, "redis_loss": 1.0}
DEFAULT_TURN_S = 0.2
CASES = ("steady", "kill_keeper", "rolling_restart", "kill_horse", "stop_horse", "postgres_outage",
         "redis_loss")


def log(text: str) -> None:
    print(f"[faults {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# The doubles, in this process (an asyncio loop in a thread)
# ----------------------------------------------------------------------------------------------


class Doubles:
    """The Messages API double answering every turn with the tokens it answers (after
    `turn_s` seconds), and the Graph API double recording each accepted send's wall time."""

    def __init__(self, *, turn_s: float) -> None:
        from replay.graph_api import GraphDouble
        from replay.messages_api import MessagesDouble

        self.turn_s = turn_s  # a fault may change it
        # request body -> the `retry-after` seconds of a 429 to answer it with, or None (a
        # scripted rate limit: bench/fairness.py's `--a-429-every`)
        self.rate_limit: Callable[[dict[str, Any]], float | None] | None = None

        doubles = self

        class TokenReplies(MessagesDouble):
            async def _handle_messages(self, request: Any) -> Any:
                await asyncio.sleep(doubles.turn_s)
                if doubles.rate_limit is not None:
                    wait = doubles.rate_limit(await request.json())
                    if wait is not None:
                        return self._rate_limited(wait)
                return await super()._handle_messages(request)

            def _rate_limited(self, wait: float) -> Any:
                from aiohttp import web

                body = {"type": "error", "error": {
                    "type": "rate_limit_error", "message": "rate limited (scripted)"}}
                return web.json_response(body, status=429, headers={
                    "retry-after": f"{wait:g}", "x-should-retry": "false",
                    "request-id": "req_double_429"})

            def _take_item(self, purpose: str) -> dict[str, Any] | None:
                return super()._take_item(purpose) or {"text": "__tokens__"}

            def _build_message(self, item: dict[str, Any],
                               request: dict[str, Any]) -> dict[str, Any]:
                if item.get("text") == "__tokens__":
                    item = {"text": reply_for(request)}
                return super()._build_message(item, request)

        class TimedSends(GraphDouble):
            def __init__(self, **kwargs: Any) -> None:
                super().__init__(**kwargs)
                self.sent_at: list[tuple[str, float]] = []

            def _send(self, phone_number_id: str, body: object) -> dict[str, Any]:
                answer = super()._send(phone_number_id, body)
                text = (self.sends[-1].body.get("text") or {}).get("body", "")
                self.sent_at.append((text, time.time()))
                return answer

        # a horse killed in its model call resets its connection: aiohttp logs a traceback
        # (the level is put back by close(): a test process goes on logging after us)
        self._aiohttp_level = logging.getLogger("aiohttp.server").level
        logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
        self.messages = TokenReplies(api_key=API_KEY)
        self.graph = TimedSends(access_token=ACCESS_TOKEN)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._run(self.messages.start(HOST))
        self._run(self.graph.start(HOST))

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def answers(self) -> list[tuple[str, float]]:
        """(token, wall time) of every token in every accepted send."""
        return [(token, at) for text, at in list(self.graph.sent_at)
                for token in TOKEN_RE.findall(text)]

    def close(self) -> None:
        self._run(self.messages.stop())
        self._run(self.graph.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        logging.getLogger("aiohttp.server").setLevel(self._aiohttp_level)


# ----------------------------------------------------------------------------------------------
# Services of our own: a redis-server, a TCP proxy in front of PostgreSQL
# ----------------------------------------------------------------------------------------------


class PrivateRedis:
    """`redis-server` on a free port, without persistence: `kill()` loses everything."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.url = f"redis://{HOST}:{self.port}/0"
        self.child: Child | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.child = Child(f"redis{self.starts}", [
            "redis-server", "--port", str(self.port), "--bind", HOST, "--save", "",
            "--appendonly", "no", "--daemonize", "no", "--dir", str(self.workdir)],
            env=dict(os.environ), cwd=str(self.workdir),
            log_path=self.workdir / f"redis{self.starts}.log")
        import redis

        client = redis.Redis.from_url(self.url)
        until = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.RedisError:
                if time.monotonic() > until:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        if self.child is not None:
            self.child.proc.send_signal(signal.SIGKILL)
            self.child.proc.wait(timeout=10)
            self.child.stop()
            self.child = None


class TcpProxy:
    """Forwards 127.0.0.1:`port` to `target`; `cut()` closes every connection and refuses new
    ones (as a dead server does) until `restore()`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._pairs: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((HOST, self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    restore = start

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() below
            except OSError:
                pass
            listener.close()
        with self._lock:
            pairs, self._pairs = self._pairs, set()
        for sock in pairs:
            _close(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._pairs.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                _close(sock)
                with self._lock:
                    self._pairs.discard(sock)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


# ----------------------------------------------------------------------------------------------
# The product's processes
# ----------------------------------------------------------------------------------------------


class Cluster:
    """web, two workers and cron from `source`, on a schema of their own and `redis_url`."""

    def __init__(self, *, source: Path, workdir: Path, database_url: str, redis_url: str,
                 doubles: Doubles, prefix: str) -> None:
        from core.settings import Settings

        self.source, self.workdir, self.prefix = source, workdir, prefix
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.env = {k: v for k, v in os.environ.items()
                    if k not in {f.upper() for f in Settings.__dataclass_fields__}
                    and k != "WAGENT_CRASH_AT"}
        self.env.update({
            "DATABASE_URL": database_url, "REDIS_URL": redis_url, "REDIS_PREFIX": prefix,
            "QUEUE_NAME": prefix, "WHATSAPP_APP_SECRET": APP_SECRET,
            "WHATSAPP_VERIFY_TOKEN": "faults-verify", "WHATSAPP_ACCESS_TOKEN": ACCESS_TOKEN,
            "ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": doubles.messages.base_url,
            "GRAPH_API_BASE_URL": doubles.graph.base_url, "WEB_HOST": HOST,
            "WEB_PORT": str(self.port), "LOG_LEVEL": "INFO", "LOG_FORMAT": "json",
            # a share of the CPU even next to other busy processes of a shared machine
            "WORKER_CPU": "low", "PYTHONPATH": str(source)})
        self.web: Child | None = None
        self.cron: Child | None = None
        self.workers: list[Child] = []
        self.dead: list[Child] = []  # killed: their logs stay open until stop()
        self._started = 0

    def spawn(self, role: str) -> Child:
        self._started += 1
        name = f"{role}{self._started}"
        return Child(name, [sys.executable, "-m", "cli.main", role], env=self.env,
                     cwd=str(self.source), log_path=self.workdir / f"{name}.log")

    def start(self, redis_client: Any) -> None:
        self.web = self.spawn("web")
        self.workers = [self.spawn("worker"), self.spawn("worker")]
        wait_http(f"{self.url}/health", until=time.monotonic() + 90, what="wagent web")
        self.wait_workers(redis_client, 2)
        self.wait_scheduler_in_a_worker(redis_client)
        self.cron = self.spawn("cron")  # after: a worker holds the keeper's lock

    def wait_workers(self, redis_client: Any, count: int, *, timeout: float = 90) -> None:
        from rq import Queue, Worker

        queue = Queue(self.prefix, connection=redis_client)
        until = time.monotonic() + timeout
        while Worker.count(queue=queue) < count:
            if time.monotonic() > until:
                raise RuntimeError(f"fewer than {count} workers registered; logs in "
                                   f"{self.workdir}")
            time.sleep(0.1)

    def wait_scheduler_in_a_worker(self, redis_client: Any) -> None:
        until = time.monotonic() + 30
        while self.scheduler_pid(redis_client) is None:
            if time.monotonic() > until:
                raise RuntimeError("no worker took the scheduler's lock")
            time.sleep(0.1)

    def scheduler_pid(self, redis_client: Any) -> int | None:
        """The pid of the worker that moves due jobs: the keeper's lock holder
        (`worker:host:pid:...`; since issue 43 the pid of its work process, whose parent is the
        worker), or, on code before the keeper, the parent of the process that holds RQ's
        scheduler lock."""
        holder = redis_client.get(keeper_lock_key(self.prefix))
        if holder:
            role, _, pid, _ = holder.decode().split(":")
            return self.owner(int(pid)) if role == "worker" else None
        name = redis_client.get(f"rq:scheduler-lock:{self.prefix}")
        if not name:
            return None
        pid = redis_client.hget(f"rq:scheduler:{name.decode()}", "pid")
        return _parent(int(pid)) if pid else None

    def worker_index(self, pid: int) -> int:
        return next(i for i, w in enumerate(self.workers) if w.pid == pid)

    def owner(self, pid: int) -> int | None:
        """The `wagent worker` of `pid`: itself, or the worker whose work process it is (the
        long-lived work process of issue 43 runs RQ's worker and the keeper)."""
        if any(w.pid == pid for w in self.workers):
            return pid
        parent = _parent(pid)
        return parent if any(w.pid == parent for w in self.workers) else None

    def running_turn(self, redis_client: Any) -> tuple[int, int] | None:
        """(worker index, conversation_id) of a turn running in a work horse (or in a
        long-lived work process), or None."""
        from rq.job import Job
        from rq.registry import StartedJobRegistry

        registry = StartedJobRegistry(self.prefix, connection=redis_client)
        for job_id in registry.get_job_ids(cleanup=False):
            job = Job.fetch(job_id, connection=redis_client)
            if job.func_name != "workers.turns.run_turn" or not job.worker_name:
                continue
            pid = redis_client.hget(f"rq:worker:{job.worker_name}", "pid")
            owner = self.owner(int(pid)) if pid else None
            if owner is not None:
                return self.worker_index(owner), int(job.kwargs["conversation_id"])
        return None

    def horses(self, index: int, redis_client: Any) -> list[int]:
        """The worker's child processes but RQ's scheduler (on code that starts it): its work
        horse, or its long-lived work process (issue 43)."""
        worker = self.workers[index]
        schedulers = {int(pid) for key in redis_client.scan_iter("rq:scheduler:*")
                      if (pid := redis_client.hget(key, "pid"))}
        return [pid for pid, _ in descendants(worker.pid)
                if _parent(pid) == worker.pid and pid not in schedulers]

    def kill_worker(self, index: int) -> None:
        """SIGKILL of the worker and its work horse (a container killed, an OOM)."""
        worker = self.workers[index]
        for pid, _ in descendants(worker.pid):
            _kill(pid)
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(timeout=10)
        self.workers.remove(worker)
        self.dead.append(worker)

    def replace_worker(self, index: int, redis_client: Any) -> None:
        """A deploy: the new worker first, then SIGTERM (warm shutdown) to the old one."""
        old = self.workers[index]
        self.workers.append(self.spawn("worker"))
        self.wait_workers(redis_client, 3)
        old.stop(grace=120)
        self.workers.remove(old)
        self.wait_workers(redis_client, 2)

    def children(self) -> list[Child]:
        return [c for c in (self.web, self.cron, *self.workers, *self.dead) if c is not None]

    def stop(self) -> None:
        """SIGKILL to every process and what it started: the case is over, nothing to save."""
        for child in self.children():
            for pid, _ in descendants(child.pid):
                _kill(pid)
            _kill(child.pid)
        for child in self.children():
            child.stop(grace=2)


def _parent(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(raw[raw.rindex(")") + 2:].split()[1])


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ----------------------------------------------------------------------------------------------
# Traffic
# ----------------------------------------------------------------------------------------------


@dataclass
class Sent:
    token: str
    posted_at: float  # first POST (the customer's send time)
    accepted_at: float | None = None
    posts: int = 0


class Traffic:
    """New customers writing until `stop()`; every POST is delivered again a second later
    until answered 200, then, one time in five, once more at once (a duplicate)."""

    GIVE_UP_S = 1200.0  # a POST is delivered again for at most this long

    def __init__(self, url: str, *, first_contact: int = 1) -> None:
        self.url = url
        self.first_contact = first_contact
        self.give_up = time.monotonic() + self.GIVE_UP_S
        self.sent: dict[str, Sent] = {}
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=16)
        self._thread: threading.Thread | None = None
        self._run = uuid.uuid4().hex[:6]

    def post_one(self, contact: int, seq: int) -> Sent:
        """Post one message and wait until it is accepted (used for the warm-up)."""
        return self._deliver(contact, seq, duplicate=False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop writing, and wait for the deliveries under way (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._pool.shutdown(wait=True)

    def _loop(self) -> None:
        started = time.monotonic()
        tick = 0
        while not self._stop.is_set():
            burst = 2 if tick % 4 == 1 else 1
            for k in range(burst):
                self._pool.submit(self._deliver, self.first_contact + tick, k,
                                  duplicate=(tick + k) % 5 == 0)
            tick += 1
            self._stop.wait(max(0.0, started + tick * TICK_S - time.monotonic()))

    def _deliver(self, contact: int, seq: int, *, duplicate: bool) -> Sent:
        from tests.factories import text_body
        from whatsapp.signature import sign

        token = f"L{contact:06d}.{seq}"
        sent = self.sent.setdefault(token, Sent(token, time.time()))
        payload = text_body(f"oi, tem horário amanhã? [{token}]", seq,
                            who=(f"55{11_800_000_000 + contact:011d}", f"BR.FAULT{contact:09d}"),
                            name=f"Cliente {contact}", sent_at=datetime.now(UTC))
        payload["entry"][0]["changes"][0]["value"]["messages"][0]["id"] = \
            f"wamid.FAULT{self._run}x{contact:06d}x{seq}"
        body = json.dumps(payload, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json",
                   "X-Hub-Signature-256": sign(body, APP_SECRET)}
        for copy in range(2 if duplicate else 1):
            while True:
                sent.posts += 1
                if self._post(body, headers):
                    if sent.accepted_at is None:
                        sent.accepted_at = time.time()
                    break
                if copy or time.monotonic() > self.give_up:
                    break
                time.sleep(1.0)
        return sent

    def _post(self, body: bytes, headers: dict[str, str]) -> bool:
        request = urllib.request.Request(f"{self.url}/webhook", data=body, headers=headers,
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return int(response.status) == 200
        except (urllib.error.URLError, OSError):
            return False


# ----------------------------------------------------------------------------------------------
# A case
# ----------------------------------------------------------------------------------------------


@dataclass
class CaseResult:
    case: str
    source: str
    messages: int = 0
    lost: int = 0
    doubled: int = 0
    after_fault_s: dict[str, float] = field(default_factory=dict)
    wait_s: dict[str, float] = field(default_factory=dict)
    max_overdue_s: float = 0.0
    fault_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    logs: str = ""


class Overdue:
    """Samples the age of the oldest due job in RQ's scheduled registry every half second
    (read from Redis here, so that code before storage/scheduled.py is measured alike)."""

    def __init__(self, client: Any, queue_name: str) -> None:
        self.client, self.key, self.max = client, f"rq:scheduled:{queue_name}", 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                first = self.client.zrange(self.key, 0, 0, withscores=True)
            except Exception:  # noqa: BLE001 (Redis down in `redis_loss`: nothing to sample)
                continue
            if first:
                self.max = max(self.max, time.time() - float(first[0][1]))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.max, 1)


class Stage:
    """What a case runs on, set up from nothing and taken down after: a schema of its own
    (reached directly by this script, through `proxy` by the product), a redis-server, the
    doubles and the product's processes (`cluster`, not started)."""

    def __init__(self, case: str, source: Path) -> None:
        import redis
        from sqlalchemy import text
        from sqlalchemy.engine import make_url

        from storage.db import create_schema, make_engine, session_scope
        from storage.tenants import upsert_tenant
        from tests.factories import TENANT

        self.workdir = Path(tempfile.mkdtemp(prefix=f"wagent-faults-{case}-"))
        self.schema = f"wagent_faults_{uuid.uuid4().hex[:10]}"
        self.admin = make_engine(POSTGRES_URL)
        with self.admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{self.schema}"'))
        pg = make_url(POSTGRES_URL)
        self.proxy = TcpProxy((pg.host or HOST, pg.port or 5432))
        self.proxy.start()
        options = {"options": f"-csearch_path={self.schema}"}
        self.engine = make_engine(pg.update_query_dict(options).render_as_string(
            hide_password=False))
        create_schema(self.engine)
        with session_scope(self.engine) as session:
            upsert_tenant(session, TENANT, now=datetime.now(UTC))
        self.redis = PrivateRedis(self.workdir)
        self.redis.start()
        self.client = redis.Redis.from_url(self.redis.url, socket_timeout=5)
        self.doubles = Doubles(turn_s=TURN_S.get(case, DEFAULT_TURN_S))
        self.prefix = f"faults{uuid.uuid4().hex[:6]}"
        self.cluster = Cluster(
            source=source, workdir=self.workdir, redis_url=self.redis.url,
            database_url=pg.set(host=HOST, port=self.proxy.port).update_query_dict(
                options).render_as_string(hide_password=False),
            doubles=self.doubles, prefix=self.prefix)

    def close(self) -> None:
        from sqlalchemy import text

        self.cluster.stop()
        self.redis.kill()
        self.proxy.cut()  # and the product's PostgreSQL connections with it
        self.doubles.close()
        self.engine.dispose()
        with self.admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{self.schema}" CASCADE'))
        self.admin.dispose()


def run_case(case: str, *, source: Path = ROOT, max_wait: float = 90.0,
             keep_logs: bool = False) -> CaseResult:
    """Run one case on a fresh Stage; see the module docstring. The logs are kept (their
    directory in `logs`) with `keep_logs` or when a message was lost or doubled."""
    if case not in CASES:
        raise ValueError(f"unknown case {case!r}: one of {', '.join(CASES)}")
    stage = Stage(case, source)
    result = CaseResult(case=case, source=str(source), logs=str(stage.workdir))
    traffic = Traffic(stage.cluster.url)
    try:
        _play(case, stage, traffic, result, max_wait=max_wait)
    finally:
        traffic.stop()
        stage.close()
        if not keep_logs and not (result.lost or result.doubled):
            shutil.rmtree(stage.workdir, ignore_errors=True)
            result.logs = ""
    return result


def _play(case: str, stage: Stage, traffic: Traffic, result: CaseResult, *,
          max_wait: float) -> None:
    cluster, doubles = stage.cluster, stage.doubles
    cluster.start(stage.client)
    warm = traffic.post_one(900_000, 0)
    _wait_answered(doubles, [warm.token], until=time.monotonic() + 60)
    log(f"{case}: processes up and answering, traffic for {LEAD_S:.0f} s")
    traffic.sent.clear()
    overdue = Overdue(stage.client, stage.prefix)
    traffic.start()
    time.sleep(LEAD_S)
    started = time.time()
    try:
        FAULTS[case](stage, result)
        fault_end = time.time()
        result.fault_s = round(fault_end - started, 1)
        log(f"{case}: fault over after {result.fault_s} s, traffic for {TRAIL_S:.0f} s more")
        time.sleep(TRAIL_S)
        traffic.stop()
        _wait_answered(doubles, [t for t, s in traffic.sent.items() if s.accepted_at],
                       until=time.monotonic() + max_wait,
                       alive=lambda: any(w.proc.poll() is None for w in cluster.workers))
        log(f"{case}: done {time.time() - fault_end:.1f} s after the fault")
    finally:
        result.max_overdue_s = overdue.stop()
    _score(result, traffic, doubles, fault_end)
    result.extra["workers_alive"] = sum(w.proc.poll() is None for w in cluster.workers)
    result.extra["cron_alive"] = bool(cluster.cron and cluster.cron.proc.poll() is None)
    logs = [(stage.workdir / f"{w.name}.log").read_text(errors="replace")
            for w in cluster.workers]
    result.extra["redis_wait_lines"] = [
        text.count("waiting_for_redis") + text.count("could not connect to Redis")
        for text in logs]  # ours, or RQ's own retry line
    result.extra["fenced_turns"] = sum(text.count('"job_fenced_out"') for text in logs)
    turns = [_turn_jobs(text) for text in logs]
    result.extra["turns_per_worker"] = [len(jobs) for jobs in turns]
    result.extra["turn_jobs_run_twice"] = sum(
        1 for count in Counter(job for jobs in turns for job in jobs).values() if count > 1)
    if "killed_horse_conversation" in result.extra:
        result.extra["killed_turn_answered_after_s"] = _answered_after(
            stage.engine, result.extra["killed_horse_conversation"], fault_end)


def _turn_jobs(log_text: str) -> list[str]:
    """The RQ job ids of the turns a worker's JSON log says it finished (`turn_done`)."""
    jobs = []
    for line in log_text.splitlines():
        if '"turn_done"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "turn_done" and record.get("job_id"):
            jobs.append(str(record["job_id"]))
    return jobs


def _answered_after(engine: Any, conversation_id: int, since: float) -> float | None:
    """Seconds from `since` (wall clock) to the conversation's next reply, None without."""
    from sqlmodel import col, func, select

    from storage.db import session_scope
    from storage.models import Message

    with session_scope(engine) as session:
        first = session.exec(select(func.min(Message.received_at)).where(
            Message.conversation_id == conversation_id, Message.direction == "outbound",
            col(Message.received_at) >= datetime.fromtimestamp(since, UTC))).one()
    return None if first is None else round(first.timestamp() - since, 1)


def _wait_answered(doubles: Doubles, tokens: list[str], *, until: float,
                   alive: Any = lambda: True) -> None:
    """Until every token is answered, `until` passes, or no worker is left to answer."""
    while time.monotonic() < until and alive():
        answered = {t for t, _ in doubles.answers()}
        if all(t in answered for t in tokens):
            return
        time.sleep(0.2)


def _score(result: CaseResult, traffic: Traffic, doubles: Doubles, fault_end: float) -> None:
    first: dict[str, float] = {}
    counts: dict[str, int] = {}
    for token, at in doubles.answers():
        counts[token] = counts.get(token, 0) + 1
        first.setdefault(token, at)
    accepted = {t: s for t, s in traffic.sent.items() if s.accepted_at is not None}
    result.messages = len(accepted)
    result.extra["posts"] = sum(s.posts for s in traffic.sent.values())  # with the 503'd ones
    result.extra["never_accepted"] = len(traffic.sent) - len(accepted)
    result.lost = sum(1 for t in accepted if t not in first)
    result.doubled = sum(1 for t in accepted if counts.get(t, 0) > 1)
    after = [max(0.0, first[t] - max(s.posted_at, fault_end)) for t, s in accepted.items()
             if t in first]
    waits = [first[t] - s.posted_at for t, s in accepted.items() if t in first]
    before_end = [first[t] - fault_end for t, s in accepted.items()
                  if t in first and s.posted_at <= fault_end]
    result.after_fault_s = _summary(after)
    result.wait_s = _summary(waits)
    result.extra["posted_before_fault_end"] = len(before_end)
    result.extra["turn_replies"] = len(doubles.graph.sent_at)


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {"p50": round(ordered[len(ordered) // 2], 1), "max": round(ordered[-1], 1)}


# ----------------------------------------------------------------------------------------------
# The faults
# ----------------------------------------------------------------------------------------------


def kill_keeper(stage: Stage, result: CaseResult) -> None:
    cluster = stage.cluster
    pid = cluster.scheduler_pid(stage.client)
    if pid is None:
        raise RuntimeError("no worker moves the scheduled jobs")
    result.extra["killed_worker_pid"] = pid
    cluster.kill_worker(cluster.worker_index(pid))


def rolling_restart(stage: Stage, result: CaseResult) -> None:
    """The worker moving due jobs is replaced last: its replacement and the other's are up
    before it stops (on code before the keeper, the order that left no scheduler)."""
    cluster = stage.cluster
    pid = cluster.scheduler_pid(stage.client)
    holder = cluster.workers[cluster.worker_index(pid)] if pid is not None else None
    for worker in sorted(list(cluster.workers), key=lambda w: w is holder):
        cluster.replace_worker(cluster.workers.index(worker), stage.client)


def kill_horse(stage: Stage, result: CaseResult) -> None:
    conversation_id, horses = _catch_horse(stage)
    for pid in horses:
        _kill(pid)
    result.extra["killed_horse_conversation"] = conversation_id


def stop_horse(stage: Stage, result: CaseResult) -> None:
    """SIGSTOP of a horse in its model call, as a horse starved of CPU: its lock expires, the
    reconciler gets another turn to answer, then SIGCONT: the stale turn must write and send
    nothing (its fence)."""
    conversation_id, horses = _catch_horse(stage)
    stopped = time.time()
    for pid in horses:
        os.kill(pid, signal.SIGSTOP)
    until = time.monotonic() + 90
    while time.monotonic() < until and _answered_after(
            stage.engine, conversation_id, stopped) is None:
        time.sleep(0.5)
    result.extra["stopped_horse_conversation"] = conversation_id
    result.extra["answered_by_another_turn_after_s"] = _answered_after(
        stage.engine, conversation_id, stopped)
    time.sleep(1.0)
    for pid in horses:
        os.kill(pid, signal.SIGCONT)


def _catch_horse(stage: Stage) -> tuple[int, list[int]]:
    """(conversation_id, horse pids) of a turn caught in its model call (the double takes
    2 s); the turns after it take the default time."""
    until = time.monotonic() + 30
    while True:
        found = _turn_running(stage, until=until)
        time.sleep(0.5)
        horses = stage.cluster.horses(found[0], stage.client)
        if horses and stage.cluster.running_turn(stage.client) == found:
            stage.doubles.turn_s = DEFAULT_TURN_S
            return found[1], horses


def _turn_running(stage: Stage, *, until: float) -> tuple[int, int]:
    while time.monotonic() < until:
        found = stage.cluster.running_turn(stage.client)
        if found is not None:
            return found
        time.sleep(0.05)
    raise RuntimeError("no turn was caught running in 30 s")


def steady(_stage: Stage, _result: CaseResult) -> None:
    time.sleep(STEADY_S)


def postgres_outage(stage: Stage, _result: CaseResult) -> None:
    stage.proxy.cut()
    time.sleep(PG_OUTAGE_S)
    stage.proxy.restore()


def redis_loss(stage: Stage, _result: CaseResult) -> None:
    # a worker busy with a turn: RQ's worker exits then (idle, it retries by itself)
    _turn_running(stage, until=time.monotonic() + 30)
    stage.doubles.turn_s = DEFAULT_TURN_S
    stage.redis.kill()
    time.sleep(REDIS_DOWN_S)
    stage.redis.start()


FAULTS = {"steady": steady, "kill_keeper": kill_keeper, "rolling_restart": rolling_restart,
          "kill_horse": kill_horse, "stop_horse": stop_horse,
          "postgres_outage": postgres_outage, "redis_loss": redis_loss}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", choices=CASES,
                        help="a case to run (repeatable; default: all)")
    parser.add_argument("--source", type=Path, default=ROOT,
                        help="the product tree to run (default: this one)")
    parser.add_argument("--max-wait", type=float, default=90.0,
                        help="seconds to wait for the last answers after the traffic stops")
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which("redis-server") is None:
        parser.error("redis-server is not installed")
    for case in args.case or CASES:
        log(f"{case} from {args.source}")
        result = run_case(case, source=args.source.resolve(), max_wait=args.max_wait,
                          keep_logs=args.keep_logs)
        print(json.dumps(asdict(result)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
