"""Load benchmark: the real web app, real Redis, real RQ workers and the two doubles under
1,000+ conversations with bursts and duplicate deliveries, side by side with a bare aiohttp
handler that only answers 200 (the limit of this machine), in the same run.

Everything listens on 127.0.0.1. One Redis database, `--redis-url` or LOAD_REDIS_URL (default
database 10; flushed at the start and the end, so never one that holds anything else), and one
PostgreSQL schema that this run creates in `--postgres-url` or LOAD_POSTGRES_URL (named by
`--schema` or LOAD_SCHEMA, default a fresh `wagent_load_*`; a schema that already exists is
refused, never reused), dropped at the end: a run never drops a schema it did not create.
Every loop is bounded in count and time; the whole run stops by itself after `--timeout`
seconds and ends every process it started.

Processes:

* the doubles (`load.py _doubles`): the Messages API double, whose empty "turn" queue answers
  a text reply naming the customer messages it answers (the tokens `L000123.2`), and the Graph
  API double, which records every send; a third loopback port serves their records as JSON.
  They run in a child process of their own, not a thread of this one, so serving the workers
  never holds the GIL of the load generator while it times requests;
* the product: `wagent web` and `--workers` x `wagent worker` (the forking RQ worker with the
  scheduler), configured through the environment as in production;
* the bare handler (`load.py _bare`): aiohttp, reads the body, answers 200.

Phases: the bare handler takes the load first (nothing else of the run is up), then the
product takes the same bodies in the same order: a warm-up, `--serial` fresh contacts one POST
at a time (the latency without queueing), then the workers start, and the closed-loop bodies
are posted with `--concurrency` in flight (the most each server accepts per second), then the
paced bodies at a fixed rate, an open loop (the latency at that rate; by default a quarter of
the bare handler's rate, the throughput target). The run then waits until every message is
answered, posts a wave of late redeliveries of answered messages, waits again, and checks the
replies in the database and in the Graph double's records.

Usage: .venv/bin/python bench/load.py [--conversations 1000] [--concurrency 50]
       [--paced-rate R] [--timeout 1200] [--out FILE]
Prints one JSON object on stdout (its "summary" first); progress goes to stderr.
See bench/README.md for what each figure means and the results.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VENV_BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
REDIS_URL = "redis://127.0.0.1:6379/10"  # default; flushed: give one that holds nothing else
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"  # default server/database
APP_SECRET = "load-app-secret"
VERIFY_TOKEN = "load-verify-token"
ACCESS_TOKEN = "load-access-token"
API_KEY = "load-api-key"
TOKEN_RE = re.compile(r"L\d{6}\.\d+")
DEFAULT_REPLY = "__load_default_reply__"
TEXTS = ("oi, tem horário amanhã à tarde pra corte?", "pode ser depois das 15h?",
         "ah, e quanto custa?", "obrigada!", "tem com a Júlia?")
PRELOADED_WORKER = (  # `wagent worker` whose parent imports the job modules and the PostgreSQL
    # driver (which SQLAlchemy imports only when an engine is made) before RQ forks
    "import sys; import psycopg, workers.turns, workers.compaction, workers.facts, "
    "workers.sweeper, workers.maintenance; from cli.main import main; sys.exit(main(['worker']))")
RUN_KEY = "wagent-bench-load:running"  # one run per Redis db at a time: each flushes it
MAX_ATTEMPTS = 3  # a delivery answered with an error is sent again, as Meta redelivers
PACED_SHARE = 0.25  # the paced phase's rate: this share of the bare handler's (the target)


def log(text: str) -> None:
    print(f"[load {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# Child: the two doubles
# ----------------------------------------------------------------------------------------------


def reply_for(request: dict[str, Any]) -> str:
    """The load reply: the tokens of every customer message after the last assistant message,
    i.e. the messages this turn answers, so each send says which messages it answers."""
    tokens: list[str] = []
    for message in reversed(request.get("messages") or []):
        if message.get("role") == "assistant":
            break
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        found = [t for b in blocks or [] if b.get("type") == "text"
                 for t in TOKEN_RE.findall(str(b.get("text", "")))]
        tokens = found + tokens
    return "Recebido: " + " ".join(tokens) if tokens else "Recebido."


def serve_doubles() -> int:
    from aiohttp import web

    from replay.graph_api import GraphDouble
    from replay.messages_api import MessagesDouble

    class LoadMessagesDouble(MessagesDouble):
        """Scripted queues first; an empty "turn" queue answers the load reply."""

        def _take_item(self, purpose: str) -> dict[str, Any] | None:
            item = super()._take_item(purpose)
            if item is None and purpose == "turn":
                return {"text": DEFAULT_REPLY}
            return item

        def _build_message(self, item: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
            if item.get("text") == DEFAULT_REPLY:
                item = {"text": reply_for(request)}
            return super()._build_message(item, request)

    class LoadGraphDouble(GraphDouble):
        """Records the wall time of every accepted send."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.sent_at: list[float] = []

        def _send(self, phone_number_id: str, body: object) -> dict[str, Any]:
            answer = super()._send(phone_number_id, body)
            self.sent_at.append(time.time())
            return answer

    messages = LoadMessagesDouble(api_key=API_KEY)
    graph = LoadGraphDouble(access_token=ACCESS_TOKEN)

    async def state(_: web.Request) -> web.Response:
        accepted = [s for s in graph.sends if s.wamid is not None]
        return web.json_response({
            "sends": [{"wamid": s.wamid, "to": s.body.get("to") or s.body.get("recipient"),
                       "text": (s.body.get("text") or {}).get("body", ""), "at": at}
                      for s, at in zip(accepted, graph.sent_at, strict=True)],
            "refused_sends": len(graph.sends) - len(accepted), "reads": len(graph.reads),
            "calls": dict(Counter(f"{c.purpose}:{c.status}" for c in messages.calls)),
            "api_errors": messages.api_errors, "unscripted_calls": messages.unscripted_calls})

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        _exit_on_stdin_eof(lambda: loop.call_soon_threadsafe(stop.set))
        await messages.start(HOST)
        await graph.start(HOST)
        control = web.Application()
        control.router.add_get("/state", state)
        runner = web.AppRunner(control, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, HOST, 0)
        await site.start()
        port = runner.addresses[0][1]
        print(json.dumps({"messages": messages.base_url, "graph": graph.base_url,
                          "control": f"http://{HOST}:{port}"}), flush=True)
        await stop.wait()
        await runner.cleanup()
        await messages.stop()
        await graph.stop()

    asyncio.run(main())
    return 0


# ----------------------------------------------------------------------------------------------
# Child: the bare handler
# ----------------------------------------------------------------------------------------------


def serve_bare(port: int) -> int:
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="ok")

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/webhook", handle)
    app.router.add_get("/health", health)
    _exit_on_stdin_eof(lambda: os.kill(os.getpid(), signal.SIGTERM))
    web.run_app(app, host=HOST, port=port, access_log=None, print=None, reuse_port=True)
    return 0


def _exit_on_stdin_eof(stop: Any) -> None:
    """Our children stop when this script's end of their stdin pipe closes (even if it died)."""
    def watch() -> None:
        while sys.stdin.buffer.read(4096):
            pass
        stop()
    threading.Thread(target=watch, daemon=True).start()


# ----------------------------------------------------------------------------------------------
# The workload
# ----------------------------------------------------------------------------------------------


@dataclass
class Delivery:
    body: bytes
    signature: str
    wamid: str
    token: str


@dataclass
class Workload:
    warmup: list[Delivery]
    serial: list[Delivery]  # posted one at a time: the latency without queueing
    main: list[Delivery]  # in posting order, duplicates included (closed loop)
    paced: list[Delivery]  # other contacts, same shape, posted at a fixed rate (open loop)
    late: list[Delivery]  # redeliveries after everything is answered
    messages: dict[str, str]  # token -> wamid, every distinct message
    contacts: int
    bursts: int


PACED_CONTACTS = 700_000  # the paced phase's contacts are numbered from here


def build_workload(conversations: int, warmup: int, serial: int, seed: int) -> Workload:
    """`conversations` distinct contacts for the closed-loop phase and as many others for the
    paced phase, 1 to 4 messages each (bursts: all of one contact's messages posted back to
    back, so they arrive together); 20% of messages delivered twice at once (the copy right
    behind the original), 10% once more at the end of the phase; 10% of all of them again as
    late redeliveries once everything is answered."""
    from tests.factories import text_body
    from whatsapp.signature import sign

    rng = random.Random(seed)
    now = datetime.now(UTC)
    n = 0
    messages: dict[str, str] = {}

    def delivery(contact: int, k: int) -> Delivery:
        nonlocal n
        n += 1
        token = f"L{contact:06d}.{k}"
        who = (f"55{11_900_000_000 + contact:011d}", f"BR.LOAD{contact:012d}")
        payload = text_body(f"{TEXTS[(contact + k) % len(TEXTS)]} [{token}]", n, who=who,
                            name=f"Cliente {contact}", sent_at=now)
        wamid = f"wamid.LOAD{contact:06d}x{k}"  # unique for any number of contacts
        payload["entry"][0]["changes"][0]["value"]["messages"][0]["id"] = wamid
        body = json.dumps(payload, separators=(",", ":")).encode()
        messages[token] = wamid
        return Delivery(body, sign(body, APP_SECRET), wamid, token)

    def phase(first_contact: int) -> tuple[list[Delivery], int]:
        posts: list[Delivery] = []
        tail: list[Delivery] = []
        bursts = 0
        for contact in range(first_contact, first_contact + conversations):
            count = 1 + contact % 4
            bursts += count > 1
            for k in range(count):
                d = delivery(contact, k)
                posts.append(d)
                roll = rng.random()
                if roll < 0.2:
                    posts.append(d)
                if roll < 0.1:
                    tail.append(d)
        rng.shuffle(tail)
        return posts + tail, bursts

    warm = [delivery(900_000 + i, 0) for i in range(warmup)]
    alone = [delivery(800_000 + i, 0) for i in range(serial)]
    main, bursts = phase(0)
    paced, paced_bursts = phase(PACED_CONTACTS)
    distinct = list({d.wamid: d for d in main + paced}.values())
    late = rng.sample(distinct, k=max(1, len(distinct) // 10))
    return Workload(warm, alone, main, paced, late, messages, 2 * conversations,
                    bursts + paced_bursts)


# ----------------------------------------------------------------------------------------------
# The load generator
# ----------------------------------------------------------------------------------------------


@dataclass
class PhaseStats:
    posts: int = 0
    accepted: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    failed: int = 0  # still refused after MAX_ATTEMPTS
    unsent: int = 0  # not posted: the phase ran out of time
    started: float = 0.0
    ended: float = 0.0

    def count(self, status: str, attempt: int) -> bool:
        """Count one answer; True when the delivery is to be posted again (an error answer,
        fewer than MAX_ATTEMPTS so far), as Meta redelivers."""
        self.posts += 1
        self.statuses[status] += 1
        if status == "200":
            self.accepted += 1
            return False
        if attempt < MAX_ATTEMPTS:
            return True
        self.failed += 1
        return False

    def to_json(self) -> dict[str, Any]:
        elapsed = max(self.ended - self.started, 1e-9)
        lat = sorted(self.latencies)
        return {
            "posts": self.posts, "accepted": self.accepted, "statuses": dict(self.statuses),
            "failed": self.failed, "unsent": self.unsent, "elapsed_s": round(elapsed, 3),
            "updates_per_second": round(self.accepted / elapsed, 1),
            "latency_ms": {"p50": _ms(_pct(lat, 50)), "p90": _ms(_pct(lat, 90)),
                           "p99": _ms(_pct(lat, 99)), "max": _ms(lat[-1] if lat else 0.0),
                           "mean": _ms(sum(lat) / len(lat) if lat else 0.0)},
        }


def _webhook_only(bare: PhaseStats, product: PhaseStats, bare_paced: PhaseStats,
                  product_paced: PhaseStats, paced_rate: float, rounds: dict[str, Any],
                  profile: dict[str, Any] | None) -> dict[str, Any]:
    """The summary of a `--webhook-only` run: the two servers' figures, no turn checked."""
    b, p = bare.to_json(), product.to_json()
    return {"summary": {
        "paced_rate": paced_rate,
        "product": {"updates_per_second": p["updates_per_second"],
                    "latency_ms": product_paced.to_json()["latency_ms"],
                    "statuses": p["statuses"]},
        "bare": {"updates_per_second": b["updates_per_second"],
                 "latency_ms": bare_paced.to_json()["latency_ms"]},
        "ratio_updates_per_second": round(p["updates_per_second"] / max(
            b["updates_per_second"], 1e-9), 3),
        **({"rounds": rounds} if rounds else {})},
        **({"profile": profile} if profile else {})}


def _slices(items: list[Delivery], n: int) -> list[list[Delivery]]:
    """`items` in `n` contiguous slices of (nearly) equal length, in order."""
    size = -(-len(items) // n)
    return [items[k:k + size] for k in range(0, len(items), size)]


def _merged(phases: list[PhaseStats]) -> PhaseStats:
    """Phases as one: counts and latencies summed, elapsed the sum of their durations (the
    gaps between them, when the other server was timed, left out)."""
    total = PhaseStats()
    for one in phases:
        total.ended += one.ended - one.started
        total.posts += one.posts
        total.accepted += one.accepted
        total.statuses.update(one.statuses)
        total.latencies += one.latencies
        total.failed += one.failed
        total.unsent += one.unsent
    return total


@contextlib.contextmanager
def _no_gc_pauses() -> Iterator[None]:
    """No cyclic garbage collection in the load generator while it posts: this process holds
    every body and timing, and a full collection paused it for 66-74 ms in the middle of a
    paced phase (measured with a gc callback), which then sent a hundred late POSTs at once
    and charged the server for both. The objects made before are frozen out of later
    collections; what the phase makes is collected after it (a phase is bounded)."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


def _pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile of sorted `values`."""
    if not values:
        return 0.0
    rank = max(1, -(-len(values) * p // 100))
    return values[int(rank) - 1]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


async def post_all(url: str, deliveries: list[Delivery], *, concurrency: int,
                   deadline: float) -> PhaseStats:
    """POST every delivery with at most `concurrency` in flight, timing each; an error answer
    or a failed connection is retried (at the end of the line) up to MAX_ATTEMPTS times."""
    import aiohttp

    stats = PhaseStats()
    todo: deque[tuple[Delivery, int]] = deque((d, 1) for d in deliveries)
    in_flight = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=30)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal in_flight
        while time.monotonic() < deadline:
            if not todo:
                if in_flight == 0:
                    return
                await asyncio.sleep(0.005)  # a retry may still be queued by another task
                continue
            delivery, attempt = todo.popleft()
            in_flight += 1
            started = time.perf_counter()
            try:
                status = await _post_status(session, url, delivery)
            finally:
                stats.latencies.append(time.perf_counter() - started)
                in_flight -= 1
            if stats.count(status, attempt):
                todo.append((delivery, attempt + 1))

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        stats.started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        stats.ended = time.perf_counter()
    stats.unsent = len(todo)
    return stats


async def post_paced(url: str, deliveries: list[Delivery], *, rate: float, seed: int,
                     deadline: float, warmup: list[Delivery],
                     max_in_flight: int = 1000) -> PhaseStats:
    """POST the deliveries in order at `rate` per second (an open loop: Poisson arrivals, each
    sent at its time whether or not earlier ones were answered, as Meta delivers), at most
    `max_in_flight` at once. Each latency counts from the POST's scheduled time, so a server
    that falls behind is charged for the wait (no coordinated omission). An error answer is
    posted again (up to MAX_ATTEMPTS) after the paced ones, as in `post_all`. The `warmup`
    bodies (already posted: redeliveries) are posted untimed first, 50 at once, so that the
    client's connections are open when the clock starts."""
    import aiohttp

    rng = random.Random(seed)
    stats = PhaseStats()
    retry: list[tuple[Delivery, int]] = []
    limit = asyncio.Semaphore(max_in_flight)
    connector = aiohttp.TCPConnector(limit=max_in_flight)
    timeout = aiohttp.ClientTimeout(total=30)

    async def one(session: aiohttp.ClientSession, delivery: Delivery, attempt: int,
                  scheduled: float) -> None:
        try:
            async with limit:
                status = await _post_status(session, url, delivery)
        finally:
            stats.latencies.append(time.perf_counter() - scheduled)
        if stats.count(status, attempt):
            retry.append((delivery, attempt + 1))

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(_post_status(session, url, d) for d in warmup[:50]))
        stats.started = time.perf_counter()
        at = stats.started
        tasks = []
        for index, delivery in enumerate(deliveries):
            if time.monotonic() >= deadline:
                stats.unsent = len(deliveries) - index
                break
            at += rng.expovariate(rate)
            pause = at - time.perf_counter()
            if pause > 0:
                await asyncio.sleep(pause)
            tasks.append(asyncio.create_task(one(session, delivery, 1, at)))
        await asyncio.gather(*tasks)
        while retry and time.monotonic() < deadline:
            again = list(retry)
            retry.clear()
            await asyncio.gather(*(one(session, d, a, time.perf_counter()) for d, a in again))
        stats.ended = time.perf_counter()
    stats.unsent += len(retry)
    return stats


async def _post_status(session: Any, url: str, delivery: Delivery) -> str:
    """POST one signed delivery; the answer's status, or the name of the client's error."""
    import aiohttp

    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": delivery.signature}
    try:
        async with session.post(url, data=delivery.body, headers=headers) as response:
            await response.read()
            return str(response.status)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return type(exc).__name__


# ----------------------------------------------------------------------------------------------
# Processes
# ----------------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when this script dies, even by SIGKILL (Linux)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), None when it is gone: with it a pid
    is never mistaken for a later process that reused the number (pid_max is 32768 here)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(raw[raw.rindex(")") + 2:].split()[19])


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of every process below `pid`."""
    found: list[tuple[int, int]] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            for child in children:
                started = _start_time(child)
                if started is not None:
                    found.append((child, started))
                    stack.append(child)
    return found


class Child:
    def __init__(self, name: str, argv: list[str], *, env: dict[str, str], cwd: str,
                 log_path: Path, stdout_pipe: bool = False) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE if stdout_pipe else self._log, stderr=self._log,
            preexec_fn=_die_with_parent)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (RQ: warm shutdown), a second SIGTERM (cold: kills the work horse) after
        half the grace, then SIGKILL to it and to whatever it started that is still alive."""
        tree = descendants(self.pid)
        if self.proc.poll() is None:
            self._signal(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace / 2)
            except subprocess.TimeoutExpired:
                tree = list(dict.fromkeys(tree + descendants(self.pid)))
                self._signal(self.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=grace / 2)
                except subprocess.TimeoutExpired:
                    self._signal(self.pid, signal.SIGKILL)
                    self.proc.wait(timeout=5)
        for pid, started in tree:  # the same processes only, not a reused pid
            if _start_time(pid) == started:
                self._signal(pid, signal.SIGKILL)
        if self.proc.stdin:
            self.proc.stdin.close()
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()

    @staticmethod
    def _signal(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_http(url: str, *, until: float, what: str) -> None:
    last = ""
    while time.monotonic() < until:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (OSError, urllib.error.URLError) as exc:
            last = str(exc)
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer 200 at {url}: {last}")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


# ----------------------------------------------------------------------------------------------
# CPU per component (from /proc, every process of the machine, read only)
# ----------------------------------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_snapshot() -> dict[int, tuple[str, int, float, float]]:
    """pid -> (comm, ppid, own CPU s, reaped children's CPU s)."""
    snap: dict[int, tuple[str, int, float, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        rest = raw[raw.rindex(")") + 2:].split()
        utime, stime, cutime, cstime = (int(x) for x in rest[11:15])
        snap[int(entry.name)] = (comm, int(rest[1]), (utime + stime) / CLK_TCK,
                                 (cutime + cstime) / CLK_TCK)
    return snap


def machine_busy() -> tuple[float, float]:
    """(busy seconds, total seconds) summed over the cores, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / CLK_TCK, sum(fields[:8]) / CLK_TCK


def cpu_groups(snap: dict[int, tuple[str, int, float, float]],
               roots: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds (own + reaped children) per group: our roots with their descendants,
    then postgres and redis by command name, the rest as "other"."""
    owner: dict[int, str] = {}
    for group, pids in roots.items():
        for pid in pids:
            owner[pid] = group

    def group_of(pid: int) -> str:
        seen = 0
        current = pid
        while current in snap and seen < 64:
            if current in owner:
                return owner[current]
            current = snap[current][1]
            seen += 1
        comm = snap[pid][0]
        if comm.startswith("postgres"):
            return "postgres"
        if comm.startswith("redis"):
            return "redis"
        return "other"

    totals: dict[str, float] = {}
    for pid, (_, _, own, children) in snap.items():
        group = group_of(pid)
        totals[group] = totals.get(group, 0.0) + own + children
    return totals


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.deadline: float = time.monotonic() + float(args.timeout)
        self.tmp = tempfile.mkdtemp(prefix="wagent-load-")
        self.children: list[Child] = []
        self.schema = args.schema or f"wagent_load_{uuid.uuid4().hex[:10]}"
        self.schema_created = False  # only a schema this run created is dropped
        self.redis_url, self.postgres_url = args.redis_url, args.postgres_url
        self.prefix = f"wagent-load-{uuid.uuid4().hex[:6]}"
        self.engine: Any = None
        self.redis: Any = None
        self.web: Child | None = None
        self.workers: list[Child] = []
        self.doubles: Child | None = None
        self.urls: dict[str, str] = {}
        self.env: dict[str, str] = {}
        self.warmup: list[Delivery] = []
        self.inbox_empty_at: float | None = None
        self.rounds: dict[str, Any] = {}  # --rounds: each round's figures

    def remaining(self) -> float:
        return float(self.deadline - time.monotonic())

    # -- set-up and tear-down -----------------------------------------------------------------

    def setup(self) -> None:
        import redis
        from sqlalchemy import text
        from sqlalchemy.engine import make_url

        from storage.db import create_schema, make_engine, session_scope
        from storage.tenants import upsert_tenant
        from tests.factories import TENANT

        self.redis = redis.Redis.from_url(self.redis_url)
        db = self.redis.connection_pool.connection_kwargs.get("db", 0)
        if self.redis.exists(RUN_KEY):  # flushing would wreck the other run's queue
            self.redis = None  # and leave it alone at clean-up
            raise RuntimeError(f"another load run holds Redis db {db} ({RUN_KEY}); wait for it")
        self.redis.flushdb()
        self.redis.set(RUN_KEY, str(os.getpid()), ex=int(self.args.timeout) + 120)
        admin = make_engine(self.postgres_url)
        try:
            with admin.begin() as connection:
                exists = connection.execute(text(
                    "select 1 from pg_namespace where nspname = :name"),
                    {"name": self.schema}).first()
                if exists:
                    raise RuntimeError(f"schema {self.schema} already exists; this run drops "
                                       "only a schema it creates: name another")
                connection.execute(text(f'CREATE SCHEMA "{self.schema}"'))
            self.schema_created = True
        finally:
            admin.dispose()
        self.database_url = make_url(self.postgres_url).update_query_dict(
            {"options": f"-csearch_path={self.schema}"}).render_as_string(hide_password=False)
        self.engine = make_engine(self.database_url)
        create_schema(self.engine)
        with session_scope(self.engine) as session:
            upsert_tenant(session, TENANT, now=datetime.now(UTC))
        log(f"schema {self.schema}, Redis {self.redis_url}, logs in {self.tmp}")

    def start_doubles(self) -> None:
        self.doubles = self._spawn("doubles", [sys.executable, __file__, "_doubles"],
                                   env=dict(os.environ), stdout_pipe=True)
        assert self.doubles.proc.stdout is not None
        line = self.doubles.proc.stdout.readline()  # the child prints it at once (or dies)
        if not line:
            raise RuntimeError(f"the doubles did not start: see {self.doubles.log_path}")
        self.urls.update(json.loads(line))

    def product_env(self, port: int) -> dict[str, str]:
        from core.settings import Settings

        env = {k: v for k, v in os.environ.items()
               if k not in {f.upper() for f in Settings.__dataclass_fields__}}
        env.update({
            "DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url,
            "REDIS_PREFIX": self.prefix, "QUEUE_NAME": self.prefix,
            "WHATSAPP_APP_SECRET": APP_SECRET, "WHATSAPP_VERIFY_TOKEN": VERIFY_TOKEN,
            "WHATSAPP_ACCESS_TOKEN": ACCESS_TOKEN, "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_BASE_URL": self.urls["messages"], "GRAPH_API_BASE_URL": self.urls["graph"],
            "WEB_HOST": HOST, "WEB_PORT": str(port), "LOG_LEVEL": self.args.log_level,
            "LOG_FORMAT": "json"})
        if self.args.worker_cpu:
            env["WORKER_CPU"] = self.args.worker_cpu
        if self.args.spill_at is not None:
            env["WEBHOOK_SPILL_AT"] = str(self.args.spill_at)
        return env

    def start_web(self) -> str:
        self.port = free_port()
        self.env = self.product_env(self.port)
        self.web = self._spawn("web", [str(VENV_BIN / "wagent"), "web", "--processes",
                                       str(self.args.web_processes)], env=self.env)
        url = f"http://{HOST}:{self.port}"
        wait_http(f"{url}/health", until=min(self.deadline, time.monotonic() + 60),
                  what="wagent web")
        time.sleep(0.5)  # every process listening before the timed phase
        return url

    def start_workers(self) -> None:
        worker = [str(VENV_BIN / "wagent"), "worker"]
        if self.args.preload_worker_modules:  # `wagent worker`, the job modules imported first
            worker = [sys.executable, "-c", PRELOADED_WORKER]
        self.workers = [self._spawn(f"worker{i}", worker, env=self.env)
                        for i in range(self.args.workers)]
        self.wait_workers_ready()

    def wait_workers_ready(self) -> None:
        """Until every worker has registered with RQ, i.e. finished importing the job code,
        as in production where workers are up before traffic comes (bounded: 120 s). Without
        this, two interpreters importing anthropic & co. (about 3 CPU-s each) would be timed
        as part of the webhook's load phase."""
        from rq import Queue, Worker

        queue = Queue(self.prefix, connection=self.redis)
        until = min(self.deadline, time.monotonic() + 120)
        while time.monotonic() < until:
            if Worker.count(queue=queue) >= len(self.workers):
                return
            time.sleep(0.2)
        log("the workers did not all register within 120 s; posting anyway")

    def start_bare(self) -> tuple[list[Child], str]:
        """`--web-processes` bare handlers sharing one port (SO_REUSEPORT), as the product."""
        port = free_port()
        children = [self._spawn(f"bare{i}", [sys.executable, __file__, "_bare", "--port",
                                             str(port)], env=dict(os.environ))
                    for i in range(self.args.web_processes)]
        url = f"http://{HOST}:{port}"
        wait_http(f"{url}/health", until=min(self.deadline, time.monotonic() + 30),
                  what="the bare handler")
        time.sleep(0.5)  # every process listening before the timed phase
        return children, url

    def _spawn(self, name: str, argv: list[str], *, env: dict[str, str],
               stdout_pipe: bool = False) -> Child:
        child = Child(name, argv, env=env, cwd=self.tmp, log_path=Path(self.tmp) / f"{name}.log",
                      stdout_pipe=stdout_pipe)
        self.children.append(child)
        return child

    def stop_child(self, child: Child | None) -> None:
        if child is not None and child in self.children:
            child.stop()
            self.children.remove(child)

    def cleanup(self) -> None:
        from sqlalchemy import text

        from storage.db import make_engine

        for child in reversed(list(self.children)):
            try:
                self.stop_child(child)
            except Exception as exc:  # keep cleaning up
                log(f"stopping {child.name}: {exc}")
        if self.redis is not None:
            self.redis.flushdb()
            self.redis.close()
        if self.engine is not None:
            self.engine.dispose()
        if self.schema_created:
            admin = make_engine(self.postgres_url)
            with admin.begin() as connection:
                connection.execute(text(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'))
            admin.dispose()
        if not self.args.keep_logs:
            for path in Path(self.tmp).glob("*"):
                path.unlink()
            os.rmdir(self.tmp)
        else:
            log(f"logs kept in {self.tmp}")

    # -- phases --------------------------------------------------------------------------------

    def post(self, url: str, deliveries: list[Delivery], *,
             concurrency: int | None = None) -> PhaseStats:
        with _no_gc_pauses():
            return asyncio.run(post_all(f"{url}/webhook", deliveries,
                                        concurrency=concurrency or self.args.concurrency,
                                        deadline=self.deadline))

    def post_paced(self, url: str, deliveries: list[Delivery], rate: float) -> PhaseStats:
        with _no_gc_pauses():
            return asyncio.run(post_paced(f"{url}/webhook", deliveries, rate=rate,
                                          seed=self.args.seed, deadline=self.deadline,
                                          warmup=self.warmup))

    def alternate_closed(self, bare_url: str, web_url: str, deliveries: list[Delivery]
                         ) -> tuple[PhaseStats, PhaseStats, dict[str, Any]]:
        """`--rounds` closed-loop rounds, each the bare handler (`--bare-passes` passes over a
        slice of the bodies) then the product (the same slice, once): a ratio per round, both
        servers timed within seconds of each other on a shared machine."""
        bares, products, rounds = [], [], []
        for k, part in enumerate(_slices(deliveries, self.args.rounds)):
            bares.append(self.post_passes(bare_url, part))
            products.append(self.post(web_url, part))
            b = bares[-1].to_json()["updates_per_second"]
            p = products[-1].to_json()["updates_per_second"]
            rounds.append({"bare": b, "product": p, "ratio": round(p / max(b, 1e-9), 3)})
            log(f"round {k + 1}: bare {b}/s, product {p}/s, ratio {rounds[-1]['ratio']}")
        ratios = sorted(r["ratio"] for r in rounds)
        return _merged(bares), _merged(products), {
            "closed": rounds, "ratio_median": statistics.median(ratios),
            "ratio_min": ratios[0], "ratio_max": ratios[-1]}

    def alternate_paced(self, bare_url: str, web_url: str, deliveries: list[Delivery],
                        rate: float) -> tuple[PhaseStats, PhaseStats]:
        """The paced phase in `--rounds` slices, bare then product, at the same rate."""
        bares, products, rounds = [], [], []
        for part in _slices(deliveries, self.args.rounds):
            bares.append(self.post_paced(bare_url, part, rate))
            products.append(self.post_paced(web_url, part, rate))
            rounds.append({"bare_p99": bares[-1].to_json()["latency_ms"]["p99"],
                           "product_p99": products[-1].to_json()["latency_ms"]["p99"]})
            log(f"paced round: {rounds[-1]}")
        self.rounds["paced"] = rounds
        return _merged(bares), _merged(products)

    def post_passes(self, url: str, deliveries: list[Delivery]) -> PhaseStats:
        """`--bare-passes` closed-loop passes over the same bodies, as one phase: the bare
        handler answers in well under a second, and a rate timed over a fraction of a second
        swings with whatever else the machine does."""
        total = PhaseStats()
        for _ in range(self.args.bare_passes):
            one = self.post(url, deliveries)
            total.started = total.started or one.started
            total.ended = one.ended
            total.posts += one.posts
            total.accepted += one.accepted
            total.statuses.update(one.statuses)
            total.latencies += one.latencies
            total.failed += one.failed
            total.unsent += one.unsent
        return total

    def run(self) -> dict[str, Any]:
        args = self.args
        work = build_workload(args.conversations, args.warmup, args.serial, args.seed)
        self.warmup = work.warmup
        log(f"{work.contacts} conversations, {len(work.messages)} distinct messages, "
            f"{len(work.main)} closed-loop posts and {len(work.paced)} paced ({work.bursts} "
            f"bursts in all), {len(work.late)} late redeliveries; "
            f"load average {os.getloadavg()[0]:.2f}")
        loadavg_start = os.getloadavg()
        self.setup()

        bare, bare_url = self.start_bare()
        self.post(bare_url, work.warmup)
        bare_serial = self.post(bare_url, work.serial, concurrency=1)
        alternate = args.rounds > 1
        if not alternate:
            log("bare handler: posting")
            bare_stats = self.post_passes(bare_url, work.main)
            bare_rate = bare_stats.to_json()["updates_per_second"]
            paced_rate = float(args.paced_rate or round(PACED_SHARE * bare_rate))
            log(f"bare handler: {bare_rate} updates/s; paced at {paced_rate}/s")
            bare_paced = self.post_paced(bare_url, work.paced, paced_rate)
            for child in bare:
                self.stop_child(child)

        self.start_doubles()
        web_url = self.start_web()
        warm = self.post(web_url, work.warmup)
        product_serial = self.post(web_url, work.serial, concurrency=1)
        if not (args.workers_after_load or args.webhook_only):
            self.start_workers()
        workers_started = time.time()
        roots = {"web": [self.web.pid], "workers": [w.pid for w in self.workers],  # type: ignore[union-attr]
                 "doubles": [self.doubles.pid], "load generator": [os.getpid()]}  # type: ignore[union-attr]

        profiler = self._start_profiler()
        if profiler is not None:
            roots["profiler"] = [profiler.pid]
        cpu_before, busy_before = proc_snapshot(), machine_busy()
        log("product: posting")
        if alternate:
            roots["bare"] = [child.pid for child in bare]  # type: ignore[misc]
            bare_stats, product_stats, self.rounds = self.alternate_closed(
                bare_url, web_url, work.main)
        else:
            product_stats = self.post(web_url, work.main)
        cpu_after, busy_after = proc_snapshot(), machine_busy()
        inbox_after_closed = self.inbox_backlog()
        self._stop_profiler(profiler)
        if alternate:
            paced_rate = float(args.paced_rate or round(
                PACED_SHARE * statistics.median(r["bare"] for r in self.rounds["closed"])))
        log(f"product: {product_stats.to_json()['updates_per_second']} updates/s; "
            f"paced at {paced_rate}/s")
        if alternate:
            bare_paced, product_paced = self.alternate_paced(
                bare_url, web_url, work.paced, paced_rate)
            for child in bare:
                self.stop_child(child)
        else:
            product_paced = self.post_paced(web_url, work.paced, paced_rate)
        if args.webhook_only:
            return _webhook_only(bare_stats, product_stats, bare_paced, product_paced,
                                 paced_rate, self.rounds, self._profile_summary())
        posted_at = time.monotonic()
        inbox_after_paced = self.inbox_backlog()
        log(f"product: paced p99 {product_paced.to_json()['latency_ms']['p99']} ms; "
            f"inbox {inbox_after_paced}; waiting for the replies")
        if args.workers_after_load:
            self.start_workers()
            workers_started = time.time()
        drained = self.wait_answered(len(work.messages))
        inbox_drained_s = (None if self.inbox_empty_at is None
                           else round(max(self.inbox_empty_at - posted_at, 0.0), 2))
        roots["workers"] = [w.pid for w in self.workers]
        cpu_drained = proc_snapshot()
        state = get_json(f"{self.urls['control']}/state")
        replies_before_late = len(state["sends"])
        late_stats = PhaseStats()
        if drained:
            log(f"late redeliveries: {len(work.late)}")
            late_stats = self.post(web_url, work.late)
            drained = self.wait_answered(len(work.messages), settle=3.0)
            state = get_json(f"{self.urls['control']}/state")
        backlog = self.backlog()
        checks = self.check(work, state)
        log_summary = {child.name: _log_levels(child.log_path)
                       for child in [self.web, *self.workers] if child is not None}
        sends_at = sorted(s["at"] for s in state["sends"])[:replies_before_late]
        last_reply = sends_at[-1] if sends_at else workers_started
        turn_window = max(last_reply - workers_started, 1e-9)
        product = product_stats.to_json()
        bare_json = bare_stats.to_json()
        paced, bare_paced_json = product_paced.to_json(), bare_paced.to_json()
        other_cpu = _cpu_delta(cpu_before, cpu_after, roots).get("other", 0.0)
        return {
            "summary": {
                "paced_rate": paced_rate,
                "product": {"updates_per_second": product["updates_per_second"],
                            "latency_ms": {k: paced["latency_ms"][k] for k in ("p50", "p99")},
                            "latency_at_saturation_ms": {
                                k: product["latency_ms"][k] for k in ("p50", "p99")},
                            "paced_updates_per_second": paced["updates_per_second"],
                            "turns_per_second": round(replies_before_late / turn_window, 2),
                            "lost": checks["lost"],
                            "duplicate_replies": checks["duplicate_replies"],
                            "drained": drained,
                            **({} if drained else {"note": (
                                "not drained by --timeout: `lost` counts the messages still "
                                "unanswered then, with the jobs left in backlog_at_end")})},
                "bare": {"updates_per_second": bare_json["updates_per_second"],
                         "latency_ms": {k: bare_paced_json["latency_ms"][k]
                                        for k in ("p50", "p99")},
                         "latency_at_saturation_ms": {
                             k: bare_json["latency_ms"][k] for k in ("p50", "p99")}},
                "ratio_updates_per_second": round(product["updates_per_second"] / max(
                    bare_json["updates_per_second"], 1e-9), 3),
                **({"rounds": self.rounds} if self.rounds else {})},
            "machine": {"cores": os.cpu_count(), "python": sys.version.split()[0],
                        "loadavg_at_start": [round(x, 2) for x in loadavg_start],
                        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
                        "foreign_cpu_s_during_product_posting": other_cpu},
            "workload": {"conversations": work.contacts, "distinct_messages": len(work.messages),
                         "posts": len(work.main), "paced_posts": len(work.paced),
                         "bursts": work.bursts,
                         "duplicate_posts": len(work.main) + len(work.paced) - len(
                             {d.wamid for d in work.main + work.paced}),
                         "bare_passes": args.bare_passes, "paced_rate": paced_rate,
                         "late_redeliveries": len(work.late), "warmup_posts": len(work.warmup),
                         "serial_posts": len(work.serial), "concurrency": args.concurrency,
                         "workers": args.workers, "web_processes": args.web_processes,
                         "log_level": args.log_level,
                         "preload_worker_modules": args.preload_worker_modules,
                         "workers_after_load": args.workers_after_load,
                         "worker_cpu": args.worker_cpu or "default (idle)",
                         "spill_at": "default (16)" if args.spill_at is None else args.spill_at},
            "bare": {**bare_json, "serial_latency_ms": bare_serial.to_json()["latency_ms"],
                     "paced": bare_paced_json},
            "product": {
                **product,
                "paced": paced,
                "serial_latency_ms": product_serial.to_json()["latency_ms"],
                "turns": state["calls"].get("turn:200", 0), "replies_sent": len(state["sends"]),
                "turns_per_second": round(replies_before_late / turn_window, 2),
                "seconds_from_workers_start_to_last_reply": round(turn_window, 1),
                "drained": drained, "backlog_at_end": backlog,
                "inbox": {
                    "spilled_posts": _spilled_posts(self.web.log_path)  # type: ignore[union-attr]
                    if self.web is not None else None,
                    "entries_after_closed_loop": inbox_after_closed,
                    "entries_after_paced": inbox_after_paced,
                    "seconds_from_last_post_to_empty": inbox_drained_s},
                "lost": checks["lost"], "duplicate_replies": checks["duplicate_replies"],
                "checks": checks,
                "other_statuses": {"warmup": dict(warm.statuses),
                                   "serial": dict(product_serial.statuses),
                                   "paced": dict(product_paced.statuses),
                                   "late_redeliveries": dict(late_stats.statuses)},
                "cpu_s_during_posting": _cpu_delta(cpu_before, cpu_after, roots),
                "cpu_s_posting_to_drained": _cpu_delta(cpu_before, cpu_drained, roots),
                "machine_busy_during_posting": round(
                    (busy_after[0] - busy_before[0]) / max(busy_after[1] - busy_before[1],
                                                           1e-9), 3),
                "logs": log_summary,
                "doubles": {k: state[k] for k in ("calls", "api_errors", "unscripted_calls",
                                                  "refused_sends")},
            },
            "ratio_updates_per_second": round(
                product["updates_per_second"] / max(bare_json["updates_per_second"], 1e-9), 3),
            "targets": {
                "lost_zero": drained and checks["lost"] == 0,
                "duplicate_replies_zero": drained and checks["duplicate_replies"] == 0,
                "p99_under_50ms_at_paced_rate": paced["latency_ms"]["p99"] < 50
                and paced["failed"] == 0 and paced["unsent"] == 0,
                "ratio_at_least_0.25": product["updates_per_second"]
                >= 0.25 * bare_json["updates_per_second"],
            },
            "profile": self._profile_summary(),
        }

    def inbox_backlog(self) -> int:
        """POSTs accepted into the inbox and not yet stored (0 once drained)."""
        from sqlalchemy import text

        with self.engine.connect() as connection:
            return int(connection.execute(text("select count(*) from inbox")).scalar_one())

    def backlog(self) -> dict[str, int]:
        """What the workers still had to do: RQ's queue and registries."""
        from rq import Queue
        from rq.registry import FailedJobRegistry, ScheduledJobRegistry, StartedJobRegistry

        queue = Queue(self.prefix, connection=self.redis)
        return {"queued": queue.count, "started": StartedJobRegistry(queue=queue).count,
                "scheduled": ScheduledJobRegistry(queue=queue).count,  # type: ignore[no-untyped-call]
                "failed": FailedJobRegistry(queue=queue).count}

    def wait_answered(self, expected: int, settle: float = 2.0) -> bool:
        """Poll until every expected message is stored and answered, nothing is left in the
        outbox or in RQ (queued, running, scheduled) and the Graph double saw no new send for
        `settle` seconds; False on time-out."""
        from sqlalchemy import text

        last_sends, stable_since, last_log = -1, time.monotonic(), 0.0
        while self.remaining() > 0:
            with self.engine.connect() as connection:
                inbound, unanswered = connection.execute(text(
                    "select count(*), count(*) filter (where answered_at is null) "
                    "from message where direction = 'inbound'")).one()
                outbox = connection.execute(text(
                    "select count(*) from outbound where status in ('pending', 'sending')"
                )).scalar_one()
            sends = len(get_json(f"{self.urls['control']}/state")["sends"])
            if self.inbox_empty_at is None and not self.inbox_backlog():
                self.inbox_empty_at = time.monotonic()
            backlog = self.backlog()
            busy = backlog["queued"] + backlog["started"] + backlog["scheduled"]
            now = time.monotonic()
            if sends != last_sends:
                last_sends, stable_since = sends, now
            if now - last_log > 10:
                log(f"stored {inbound}/{expected}, unanswered {unanswered}, outbox {outbox}, "
                    f"sends {sends}, jobs {backlog}")
                last_log = now
            if inbound >= expected and unanswered == 0 and outbox == 0 and busy == 0 \
                    and now - stable_since >= settle:
                return True
            time.sleep(0.5)
        log("time-out while waiting for the replies")
        return False

    def check(self, work: Workload, state: dict[str, Any]) -> dict[str, Any]:
        """Lost: a distinct message not stored, not answered, or named by no send. Duplicate
        replies: a message named by more than one send, a send naming no message, a send the
        outbox does not account for once, a reply answering no message."""
        from sqlalchemy import text

        with self.engine.connect() as connection:
            inbound = {row.wamid: row for row in connection.execute(text(
                "select wamid, answered_at, status_reason, conversation_id, position "
                "from message where direction = 'inbound'"))}
            outbound = connection.execute(text(
                "select o.wamid, o.status, o.message_id, o.part from outbound o")).all()
            replies = connection.execute(text(
                "select m.conversation_id, m.position from message m "
                "where m.direction = 'outbound' order by m.conversation_id, m.position")).all()
            conversations = connection.execute(text(
                "select count(*) from conversation")).scalar_one()
            dead_letters = connection.execute(text("select count(*) from deadletter")
                                              ).scalar_one()
        wamids = set(work.messages.values())
        not_stored = sorted(wamids - inbound.keys())
        unanswered = sorted(w for w in wamids & inbound.keys() if inbound[w].answered_at is None)
        refused = sorted(w for w in wamids & inbound.keys() if inbound[w].status_reason)
        named: Counter[str] = Counter()
        sends_naming_nothing = 0
        for send in state["sends"]:
            tokens = TOKEN_RE.findall(send["text"])
            sends_naming_nothing += not tokens
            named.update(set(tokens))
        no_reply = sorted(t for t in work.messages if named[t] == 0)
        named_twice = sum(c - 1 for c in named.values() if c > 1)
        sent_wamids = Counter(o.wamid for o in outbound if o.wamid)
        graph_wamids = Counter(s["wamid"] for s in state["sends"])
        sends_unaccounted = sum((graph_wamids - sent_wamids).values())
        # a reply that answers no customer message: two replies with no inbound between them
        positions: dict[int, list[tuple[int, str]]] = {}
        for row in inbound.values():
            if row.position is not None:
                positions.setdefault(row.conversation_id, []).append((row.position, "in"))
        for row in replies:
            positions.setdefault(row.conversation_id, []).append((row.position, "out"))
        empty_replies = 0
        for items in positions.values():
            previous = "out"
            for _, kind in sorted(items):
                empty_replies += kind == "out" and previous == "out"
                previous = kind
        lost = len(set(not_stored) | set(unanswered) | {work.messages[t] for t in no_reply})
        duplicates = named_twice + sends_naming_nothing + sends_unaccounted + empty_replies
        return {
            "lost": lost, "duplicate_replies": duplicates,
            "not_stored": len(not_stored), "unanswered": len(unanswered),
            "answered_without_reply": len(refused), "named_by_no_send": len(no_reply),
            "named_by_two_sends": named_twice, "sends_naming_nothing": sends_naming_nothing,
            "sends_not_in_outbox": sends_unaccounted, "replies_answering_nothing": empty_replies,
            "outbound_rows": len(outbound),
            "outbound_by_status": dict(Counter(o.status for o in outbound)),
            "replies": len(replies), "conversations": conversations,
            "messages_per_reply": round(len(wamids) / max(len(replies), 1), 2),
            "dead_letters": dead_letters, "examples_lost": list(dict.fromkeys(
                not_stored + unanswered + [work.messages[t] for t in no_reply]))[:5],
        }

    # -- profiling (optional) ------------------------------------------------------------------

    def _start_profiler(self) -> subprocess.Popen[bytes] | None:
        if not self.args.profile_web or self.web is None:
            return None
        spy = VENV_BIN / "py-spy"
        if not spy.exists():
            log("--profile-web: py-spy is not installed in the venv (pip install py-spy)")
            return None
        return subprocess.Popen(
            [str(spy), "record", "--pid", str(self.web.pid), "--rate", "100", "--format", "raw",
             "--output", str(self.args.profile_web), "--nonblocking", "--gil", "--subprocesses"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def _stop_profiler(self, profiler: subprocess.Popen[bytes] | None) -> None:
        if profiler is None:
            return
        profiler.send_signal(signal.SIGINT)
        try:
            profiler.wait(timeout=30)
        except subprocess.TimeoutExpired:
            profiler.kill()
            profiler.wait(timeout=5)

    def _profile_summary(self) -> dict[str, Any] | None:
        path = self.args.profile_web
        if not path or not Path(path).exists():
            return None
        return summarize_profile(Path(path))


# Where a sample of the web process is, judged from the leaf up: the first frame that matches
# names its bucket (so SQLAlchemy called from the ingest code counts as SQLAlchemy).
BUCKETS = (
    ("psycopg (driver, wire protocol)", ("psycopg/", "psycopg_binary", "psycopg_pool")),
    ("SQLAlchemy ORM/Core", ("sqlalchemy/", "sqlmodel/")),
    ("Redis / RQ enqueue", ("redis/", "rq/")),
    ("logging (structlog, json)", ("structlog/", "logging/", "core/logs.py")),
    ("JSON decode / parse", ("json/", "whatsapp/inbound.py")),
    ("aiohttp server", ("aiohttp/",)),
    ("asyncio / threads", ("asyncio/", "concurrent/", "threading.py")),
    ("product code (bot/, storage/)", ("bot/", "storage/", "core/")),
)


def summarize_profile(path: Path) -> dict[str, Any]:
    """Share of samples per bucket and the top leaf functions, from py-spy's raw output."""
    buckets: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        leaves[frames[-1]] += count
        for frame in reversed(frames):
            bucket = next((name for name, keys in BUCKETS if any(k in frame for k in keys)),
                          None)
            if bucket:
                buckets[bucket] += count
                break
        else:
            buckets["other"] += count
    return {"samples": total, "file": str(path),
            "share": {k: round(v / max(total, 1), 3) for k, v in buckets.most_common()},
            "top_leaves": [{"frame": k, "share": round(v / max(total, 1), 3)}
                           for k, v in leaves.most_common(12)]}


def _cpu_delta(before: dict[int, tuple[str, int, float, float]],
               after: dict[int, tuple[str, int, float, float]],
               roots: dict[str, list[int]]) -> dict[str, float]:
    start, end = cpu_groups(before, roots), cpu_groups(after, roots)
    return {k: round(end.get(k, 0.0) - start.get(k, 0.0), 2)
            for k in sorted(set(start) | set(end), key=lambda k: -(end.get(k, 0) - start.get(
                k, 0)))}


def _spilled_posts(path: Path) -> int:
    """POSTs the web process put in the inbox (its `webhook_group_spilled` lines)."""
    total = 0
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return 0
    for line in lines:
        if "webhook_group_spilled" in line:
            try:
                total += int(json.loads(line).get("posts", 0))
            except ValueError:
                continue
    return total


def _log_levels(path: Path) -> dict[str, Any]:
    """Lines per level in a product log, and the events of its warnings and errors."""
    levels: Counter[str] = Counter()
    events: Counter[str] = Counter()
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            levels["unparsed"] += 1
            continue
        level = str(entry.get("level", "?"))
        levels[level] += 1
        if level in ("warning", "error", "critical"):
            events[f"{level}:{entry.get('event')}"] += 1
    return {"levels": dict(levels), "warnings_and_errors": dict(events.most_common(10))}


# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_doubles"]:
        return serve_doubles()
    if argv[:1] == ["_bare"]:
        return serve_bare(int(argv[argv.index("--port") + 1]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=1000,
                        help="distinct contacts, 1 to 4 messages each (default 1000)")
    parser.add_argument("--concurrency", type=int, default=50,
                        help="POSTs in flight at most (default 50)")
    parser.add_argument("--workers", type=int, default=2, help="`wagent worker` processes")
    parser.add_argument("--web-processes", type=int, default=2,
                        help="`wagent web --processes N`, and as many bare handlers on one "
                             "port (default 2)")
    parser.add_argument("--warmup", type=int, default=20,
                        help="warm-up contacts posted before each timed phase (default 20)")
    parser.add_argument("--serial", type=int, default=100,
                        help="fresh contacts posted one at a time before the load, for the "
                             "latency without queueing (default 100)")
    parser.add_argument("--bare-passes", type=int, default=3,
                        help="closed-loop passes of the bare handler over the bodies, timed "
                             "as one phase (default 3)")
    parser.add_argument("--paced-rate", type=float, default=None,
                        help="updates/s of the paced (open-loop) phase, for both servers "
                             f"(default {PACED_SHARE} x the bare handler's rate: the rate "
                             "the throughput target asks the product to sustain)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds; the run stops by itself after this (default 600)")
    parser.add_argument("--preload-worker-modules", action="store_true",
                        help="start the workers as `wagent worker` with workers.turns & co. "
                             "imported first (what `wagent worker` itself does now; kept to "
                             "compare)")
    parser.add_argument("--workers-after-load", action="store_true",
                        help="start the workers only once every update is posted: the web "
                             "process has the machine to itself while it is timed")
    parser.add_argument("--log-level", default="INFO", help="LOG_LEVEL of the product")
    parser.add_argument("--spill-at", type=int, default=None,
                        help="WEBHOOK_SPILL_AT of the web processes (default: the product's "
                        "default; 0 stores every POST before answering, as before the inbox)")
    parser.add_argument("--worker-cpu", choices=("idle", "low", "normal"), default=None,
                        help="WORKER_CPU of the workers (default: the product's default)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternate the bare handler and the product this many times, each "
                             "on a slice of the closed-loop and paced bodies (a ratio per round; "
                             "default 1: the bare handler's phases, then the product's)")
    parser.add_argument("--webhook-only", action="store_true",
                        help="no workers: time the two servers and stop (the inbox is left to "
                             "the schema's drop; no turn, loss or duplicate is checked)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--redis-url", default=os.environ.get("LOAD_REDIS_URL", REDIS_URL),
                        help="the Redis database of this run, flushed at the start and the "
                             f"end (env LOAD_REDIS_URL; default {REDIS_URL})")
    parser.add_argument("--postgres-url",
                        default=os.environ.get("LOAD_POSTGRES_URL", POSTGRES_URL),
                        help="the PostgreSQL database in which the run creates its schema "
                             f"(env LOAD_POSTGRES_URL; default {POSTGRES_URL})")
    parser.add_argument("--schema", default=os.environ.get("LOAD_SCHEMA") or None,
                        help="the schema this run creates and drops; refused when it already "
                             "exists (env LOAD_SCHEMA; default a fresh wagent_load_*)")
    parser.add_argument("--profile-web", type=Path, default=None,
                        help="record the web process with py-spy during the posting phase "
                             "(raw stacks to this file; py-spy must be in the venv)")
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep the product's logs (the path is printed on stderr)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.schema is not None and not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", args.schema):
        parser.error("--schema: lower-case letters, digits and _ (at most 63)")
    if not 1 <= args.concurrency <= 500 or not 1 <= args.conversations <= 100_000 \
            or not 1 <= args.workers <= 8 or not 10 <= args.timeout <= 3600 \
            or not 1 <= args.web_processes <= 8 or not 1 <= args.bare_passes <= 10 \
            or args.paced_rate is not None and not 1 <= args.paced_rate <= 20_000:
        parser.error("out of bounds: concurrency 1-500, conversations 1-100000, "
                     "workers 1-8, web processes 1-8, timeout 10-3600 s, bare passes 1-10, "
                     "paced rate 1-20000/s")

    bench = Bench(args)

    def on_signal(signum: int, _: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    watchdog = threading.Timer(args.timeout + 60, lambda: os.kill(os.getpid(), signal.SIGTERM))
    watchdog.daemon = True
    watchdog.start()
    try:
        result = bench.run()
    finally:
        watchdog.cancel()
        bench.cleanup()
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
