"""Head-of-line benchmark: how long small webhook POSTs wait while one big POST is stored.

The real web app (`bot.app.create_app`, aiohttp, one process of its own) on PostgreSQL and
Redis; an inbox drain in a second process at the lowest CPU priority (the worker's default,
`WORKER_CPU=idle`), as `workers.inbox.drain` runs in a worker. Small signed POSTs (one text
message each, from `--contacts` customers) arrive at `--rate` per second; after the first
second one big signed POST goes in: `--statuses` status updates, then in a second case
`--messages` customer messages (10 per customer). Prints, per case, the small POSTs' answer
latency (median, p99, max) before the big one, while it waited for its answer, until its
updates were all stored (the answer, or the drain's end when it went to the inbox) and after;
the big POST's answer time, and when it was stored.

Everything listens on 127.0.0.1. One Redis database, env HOL_REDIS_URL (default db 10; flushed at
the start and the end: give one that holds nothing else); a fresh PostgreSQL schema
`wagent_hol_*` at env WS_POSTGRES_URL (webhook_store.py's; dropped at the end). Every loop is
bounded; the run stops by itself after `--timeout` seconds and ends the processes it started.

With `--sizes 25,50,...` it times lone POSTs of that many statuses and messages instead, each
stored before its answer (WEBHOOK_SPILL_UPDATES=0): what a POST costs the web process, the
figure that picks WEBHOOK_SPILL_UPDATES.

Usage: .venv/bin/python bench/head_of_line.py [--rate 4] [--statuses 20000] [--messages 10000]
       [--ours] [--timeout 600] [--sizes N,N,...]
Prints one JSON object on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # webhook_store.py's fresh schema

HOST = "127.0.0.1"
REDIS_URL = os.environ.get("HOL_REDIS_URL", "redis://127.0.0.1:6379/10")  # flushed: its own
APP_SECRET = "hol-app-secret"
PHONE_NUMBER_ID = "109876543210987"  # tests/factories.py TENANT
AFTER_SECONDS = 3.0  # small POSTs go on this long after the big one is stored


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def settings_for(url: str) -> Any:
    from core.settings import Settings

    spill = os.environ.get("HOL_SPILL_UPDATES")  # --sizes: every POST stored before its answer
    extra = {"webhook_spill_updates": int(spill)} if spill else {}
    return Settings(**extra, database_url=url, redis_url=REDIS_URL, whatsapp_app_secret=APP_SECRET,
                    whatsapp_verify_token="hol", redis_prefix="wagent-hol",
                    queue_name="wagent-hol", log_level="INFO", log_format="json",
                    anthropic_base_url="http://127.0.0.1:9")  # nothing calls it here


def serve(url: str, port: int) -> int:
    """The product's web app on `port` until stdin closes (a child of the benchmark)."""
    from aiohttp import web

    from bot.app import create_app
    from core.logs import configure_logging

    settings = settings_for(url)
    configure_logging(settings.log_level, settings.log_format)

    async def run() -> None:
        runner = web.AppRunner(create_app(settings))
        await runner.setup()
        await web.TCPSite(runner, HOST, port).start()
        print("ready", file=sys.stderr, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await runner.cleanup()

    asyncio.run(run())
    return 0


def drain_forever(url: str) -> int:
    """`workers.inbox.drain` in a loop at SCHED_IDLE until stdin closes (a child)."""
    import threading

    from core.logs import configure_logging
    from workers.inbox import drain
    from workers.runtime import build_runtime

    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # type: ignore[attr-defined]
    settings = settings_for(url)
    configure_logging(settings.log_level, settings.log_format)
    runtime = build_runtime(settings)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    while not stop.is_set():
        drain(runtime, job_id=None, linger=0.2)
    return 0


def sign(body: bytes) -> str:
    return "sha256=" + hmac.new(APP_SECRET.encode(), body, hashlib.sha256).hexdigest()


def envelope(changes: list[dict[str, Any]]) -> bytes:
    return json.dumps({"object": "whatsapp_business_account",
                       "entry": [{"id": "102030405060708", "changes": changes}]},
                      separators=(",", ":")).encode()


def value(**parts: Any) -> dict[str, Any]:
    return {"field": "messages", "value": {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "5511999990000",
                     "phone_number_id": PHONE_NUMBER_ID}, **parts}}


def customer(k: int) -> tuple[str, str]:
    return f"55{11_800_000_000 + k:011d}", f"BR.HOL{k:013d}"


def text_message(k: int, wamid: str, ts: int, text: str) -> dict[str, Any]:
    wa_id, user_id = customer(k)
    return {"from": wa_id, "from_user_id": user_id, "id": wamid, "timestamp": str(ts),
            "type": "text", "text": {"body": text}}


def small_body(n: int, contacts: int, ts: int) -> bytes:
    k = n % contacts
    wa_id, user_id = customer(k)
    return envelope([value(
        contacts=[{"profile": {"name": f"Cliente {k}"}, "wa_id": wa_id, "user_id": user_id}],
        messages=[text_message(k, f"wamid.HOLS{n:08d}", ts, "oi, tem horário amanhã?")])])


def statuses_body(count: int, ts: int, run: str) -> bytes:
    """`count` delivery statuses, 100 to a change: of sends this tenant never made (each a
    lookup, no change), or with `--ours` of its own sends (seeded by `seed_sends`: each
    advances a send and its reply's delivery state)."""
    changes = []
    for start in range(0, count, 100):
        changes.append(value(statuses=[
            {"id": f"wamid.HOLO{run}{n:07d}", "status": "delivered", "timestamp": str(ts),
             "recipient_id": customer(n % 1000)[0]}
            for n in range(start, min(count, start + 100))]))
    return envelope(changes)


def seed_sends(engine: Any, count: int, run: str) -> None:
    """`count` sent one-part replies of one conversation, their wamids as `statuses_body`
    names them (a reply of one part: the common case)."""
    from sqlalchemy import insert
    from sqlmodel import select

    from storage.db import session_scope
    from storage.models import Contact, Conversation, Message, Outbound, Tenant

    now = datetime.now(UTC)
    with session_scope(engine) as session:
        tenant_id = session.exec(select(Tenant.id)).one()
        contact = Contact(tenant_id=tenant_id, wa_id=customer(0)[0], created_at=now)
        session.add(contact)
        session.flush()
        conversation = Conversation(tenant_id=tenant_id, contact_id=contact.id,
                                    last_activity_at=now, due_at=now, opened_at=now)
        session.add(conversation)
        session.flush()
        for start in range(0, count, 2000):
            numbers = range(start, min(count, start + 2000))
            ids = session.execute(insert(Message).returning(Message.id), [  # type: ignore[arg-type]
                {"tenant_id": tenant_id, "conversation_id": conversation.id,
                 "role": "assistant", "direction": "outbound", "received_at": now,
                 "content": [{"type": "text", "text": "ok"}], "delivery_status": "sent"}
                for _ in numbers]).scalars().all()
            session.execute(insert(Outbound), [
                {"tenant_id": tenant_id, "conversation_id": conversation.id,
                 "message_id": message_id, "part": 0, "body": "ok", "status": "sent",
                 "wamid": f"wamid.HOLO{run}{n:07d}", "created_at": now, "sent_at": now}
                for n, message_id in zip(numbers, ids, strict=True)])


def messages_body(count: int, ts: int, first_customer: int) -> bytes:
    """`count` text messages, 10 from each new customer, one change per customer."""
    changes = []
    for start in range(0, count, 10):
        k = first_customer + start // 10
        wa_id, user_id = customer(k)
        changes.append(value(
            contacts=[{"profile": {"name": f"Cliente {k}"}, "wa_id": wa_id, "user_id": user_id}],
            messages=[text_message(k, f"wamid.HOLB{n:08d}", ts, f"mensagem {n}")
                      for n in range(start, min(count, start + 10))]))
    return envelope(changes)


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000, 1)


def figures(latencies: list[float]) -> dict[str, Any]:
    return {"posts": len(latencies),
            "median_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
            "p99_ms": pct(latencies, 0.99),
            "max_ms": round(max(latencies) * 1000, 1) if latencies else None}


async def run_case(url: str, name: str, big: bytes, *, rate: float, contacts: int,
                   first_small: int, deadline: float, stored: Any) -> dict[str, Any]:
    """Small POSTs at `rate`, the big one after a second; returns the case's figures."""
    import aiohttp

    ts = int(time.time())
    small: list[tuple[float, float, int]] = []  # (sent, latency, status)
    big_sent = big_answered = 0.0
    big_status = 0
    stop = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=max(10.0, deadline - time.monotonic()))
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def post(body: bytes) -> tuple[float, int]:
            started = time.monotonic()
            async with session.post(url, data=body, headers={
                    "X-Hub-Signature-256": sign(body),
                    "Content-Type": "application/json"}) as response:
                await response.read()
                return time.monotonic() - started, response.status

        async def one_small(n: int) -> None:
            sent = time.monotonic()
            latency, status = await post(small_body(n, contacts, ts))
            small.append((sent, latency, status))

        async def smalls() -> None:
            tasks = []
            n = first_small
            start = time.monotonic()
            while not stop.is_set() and time.monotonic() < deadline:
                tasks.append(asyncio.create_task(one_small(n)))
                n += 1
                next_at = start + (n - first_small) / rate
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
            await asyncio.gather(*tasks)

        sender = asyncio.create_task(smalls())
        await asyncio.sleep(1.0)
        log(f"{name}: big POST of {len(big) / 1e6:.2f} MB")
        big_sent = time.monotonic()
        elapsed, big_status = await post(big)
        big_answered = big_sent + elapsed
        log(f"{name}: big POST answered {big_status} after {elapsed:.2f} s")
        stored_at = None
        while time.monotonic() < deadline:
            if stored_at is None and await asyncio.to_thread(stored):
                stored_at = time.monotonic()
            if stored_at is not None and time.monotonic() >= max(big_answered,
                                                                 stored_at) + AFTER_SECONDS:
                break
            await asyncio.sleep(0.1)
        stop.set()
        await sender
    stored_until = stored_at if stored_at is not None else time.monotonic()

    def overlapping(start: float, end: float) -> list[float]:
        """Latencies of the small POSTs in flight at some time between `start` and `end`."""
        return [lat for sent, lat, _ in small if sent < end and sent + lat > start]

    return {"case": name, "big_bytes": len(big), "big_status": big_status,
            "big_answer_s": round(big_answered - big_sent, 2),
            "big_stored_s": None if stored_at is None else round(stored_at - big_sent, 2),
            "small_before_big": figures([lat for sent, lat, _ in small
                                         if sent + lat < big_sent]),
            "small_during_big_answer": figures(overlapping(big_sent, big_answered)),
            "small_while_big_stored": figures(overlapping(big_sent, stored_until)),
            "small_after_stored": figures([lat for sent, lat, _ in small
                                           if sent >= stored_until]),
            "small_not_200": sum(1 for *_, status in small if status != 200),
            "small_total": len(small)}


async def time_sizes(url: str, sizes: list[int], repeat: int = 5) -> dict[str, Any]:
    """The median answer time (ms) of a lone POST of n statuses and of n messages (new
    customers, 10 messages each), each stored before its answer, `repeat` times."""
    import aiohttp

    ts, out, customers = int(time.time()), {}, 20_000
    async with aiohttp.ClientSession() as session:
        for n in sizes:
            for kind in ("statuses", "messages"):
                times = []
                for k in range(repeat):
                    if kind == "statuses":
                        body = statuses_body(n, ts, f"{n}x{k}")
                    else:
                        body = messages_body(n, ts, customers).replace(
                            b"wamid.HOLB", f"wamid.HOL{n}x{k}x".encode())
                        customers += n // 10 + 1
                    started = time.monotonic()
                    async with session.post(url, data=body, headers={
                            "X-Hub-Signature-256": sign(body)}) as response:
                        await response.read()
                        assert response.status == 200, response.status
                    times.append(time.monotonic() - started)
                out[f"{kind}_{n}_ms"] = round(statistics.median(times) * 1000, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=4.0, help="small POSTs a second (4)")
    parser.add_argument("--contacts", type=int, default=20, help="customers of the small POSTs")
    parser.add_argument("--statuses", type=int, default=20_000)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--ours", action="store_true",
                        help="the statuses are of the tenant's own sends (seeded)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--sizes", default="",
                        help="instead: answer times of lone POSTs of these many statuses and "
                             "messages, stored before the answer (e.g. 25,50,100,200,400)")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.sizes.split(",") if n]
    if any(not 1 <= n <= 10_000 for n in sizes):
        parser.error("sizes 1-10000")
    if not (0.2 <= args.rate <= 50 and 1 <= args.contacts <= 1000
            and 0 <= args.statuses <= 20_000 and 0 <= args.messages <= 10_000
            and 10 <= args.timeout <= 3600):
        parser.error("out of bounds: rate 0.2-50, contacts 1-1000, statuses 0-20000, "
                     "messages 0-10000, timeout 10-3600")
    deadline = time.monotonic() + args.timeout

    import redis
    from sqlalchemy import func, select
    from webhook_store import drop_schema, fresh_schema

    from storage import inbox
    from storage.db import create_schema, make_engine, session_scope
    from storage.models import Message
    from storage.tenants import upsert_tenant
    from tests.factories import TENANT

    schema, admin, url = fresh_schema("wagent_hol")  # webhook_store.POSTGRES_URL
    engine = make_engine(url)
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    children: list[subprocess.Popen[bytes]] = []
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"{schema}.log"
    try:
        create_schema(engine)
        with session_scope(engine) as session:
            upsert_tenant(session, TENANT, now=datetime.now(UTC))
        port = free_port()
        env = {**os.environ, "HOL_SPILL_UPDATES": "0"} if sizes else None
        with open(logs, "wb") as out:
            for mode in (["_serve", url, str(port)], ["_drain", url]):
                children.append(subprocess.Popen(
                    [sys.executable, __file__, *mode], cwd=ROOT, stdin=subprocess.PIPE,
                    stdout=out, stderr=out, env=env))
        _wait_ready(f"http://{HOST}:{port}/health", deadline)
        webhook = f"http://{HOST}:{port}/webhook"
        if sizes:
            print(json.dumps(asyncio.run(time_sizes(webhook, sizes)), indent=2))
            return 0

        def inbox_empty() -> bool:
            return inbox.backlog(engine)[0] == 0

        def messages_stored() -> bool:
            with session_scope(engine) as session:
                count = session.exec(select(func.count()).select_from(Message).where(
                    Message.wamid.like("wamid.HOLB%"))).one()  # type: ignore[union-attr]
            return bool(count[0] >= args.messages and inbox_empty())

        ts = int(time.time())
        cases = []
        if args.statuses and args.ours:
            seed_sends(engine, args.statuses, "a")
        if args.statuses:
            cases.append(("statuses", statuses_body(args.statuses, ts, "a"), inbox_empty))
        if args.messages:
            cases.append(("messages", messages_body(args.messages, ts, 10_000),
                          messages_stored))
        results = []
        for k, (name, body, stored) in enumerate(cases):
            results.append(asyncio.run(run_case(
                webhook, name, body, rate=args.rate, contacts=args.contacts,
                first_small=k * 100_000, deadline=deadline, stored=stored)))
            log(json.dumps(results[-1]))
        print(json.dumps({"rate": args.rate, "cases": results}, indent=2))
    finally:
        for child in children:
            with contextlib.suppress(OSError):
                child.stdin.close()  # type: ignore[union-attr]
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=5)
        engine.dispose()
        drop_schema(admin, schema)
        client.flushdb()
        client.close()
        log(f"server and drain logs: {logs}")
    return 0


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, deadline: float) -> None:
    import urllib.error
    import urllib.request

    until = min(deadline, time.monotonic() + 30)
    while time.monotonic() < until:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise RuntimeError(f"the web app did not answer at {url}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        raise SystemExit(serve(sys.argv[2], int(sys.argv[3])))
    if len(sys.argv) > 1 and sys.argv[1] == "_drain":
        raise SystemExit(drain_forever(sys.argv[2]))
    raise SystemExit(main())
