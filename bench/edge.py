"""The unauthenticated edge under attack: a real `wagent web` process, its RSS measured before,
during and after.

Attacks (issue 15), each on its own fresh web process:

* `unsigned`: N concurrent `POST /webhook` without `X-Hub-Signature-256`, each announcing a
  2.9 MB body, sending all of it but the last byte, then stalling;
* `signed`: the same with a well-formed but wrong signature (the product must read a body to
  know the signature is wrong, so this is the attack the memory budget is for);
* `trickle`: one POST whose body arrives one byte a second: how long the connection stays open
  and what it is answered;
* during `signed`: an ordinary signed 2 KB update and a signed 3 MB body sent at full speed:
  what they are answered while the attack holds the budget's share for large bodies;
* `slow_meta`: one signed 3 MB body sent at a slow link's rate (`--meta-rate`, 40 KiB/s,
  above the minimum of 32 KiB/s): its answer and how long it took;
* `storms`: three `signed` storms one after the other on one process: RSS after each.

Everything listens on 127.0.0.1; the web process gets a fresh SQLite file and a Redis db of its
own (`--redis-url`, default db 12, flushed at the start and the end). RSS is VmRSS from
/proc/PID/status. Every loop is bounded; the web process is ended by this script.

Usage: .venv/bin/python bench/edge.py [--uploads 300] [--size 2900000] [--attack all|...]
Prints one JSON object on stdout; progress goes to stderr. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
APP_SECRET = "bench-edge-app-secret"
WRONG_SIGNATURE = "sha256=" + "0" * 64


def log(message: str) -> None:
    print(f"[edge] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def rss_bytes(pid: int) -> int:
    """VmRSS of `pid` in bytes (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Web:
    """A `wagent web` process on a free port, configured through the environment."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def rss(self) -> int:
        return rss_bytes(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


GLIBC_DEFAULT_WEB = ("import cli.main, cli.web; cli.web.return_large_buffers_to_os = "
                     "lambda: False; raise SystemExit(cli.main.main(['web']))")


def start_web(tmp: str, redis_url: str, *, glibc_default: bool = False,
              **settings: str) -> Web:
    """Start `wagent web` with a fresh SQLite schema and wait for it to answer (60 s at
    most)."""
    from core.settings import Settings

    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in {f.upper() for f in Settings.__dataclass_fields__}}
    database = Path(tmp) / f"edge-{port}.db"
    env.update({"DATABASE_URL": f"sqlite:///{database}", "REDIS_URL": redis_url,
                "REDIS_PREFIX": f"edge{port}", "QUEUE_NAME": f"edge{port}",
                "WHATSAPP_APP_SECRET": APP_SECRET, "WHATSAPP_VERIFY_TOKEN": "bench-verify",
                "WHATSAPP_ACCESS_TOKEN": "bench-access", "ANTHROPIC_API_KEY": "bench-key",
                "WEB_HOST": HOST, "WEB_PORT": str(port), "LOG_LEVEL": "WARNING",
                "LOG_FORMAT": "json", **{k.upper(): v for k, v in settings.items()}})
    subprocess.run([str(VENV_BIN / "wagent"), "db", "upgrade"], env=env, cwd=tmp, check=True,
                   stdout=subprocess.DEVNULL)
    log_path = Path(tmp) / f"web-{port}.log"
    argv = [str(VENV_BIN / "wagent"), "web"]
    if glibc_default:  # `wagent web` without its mallopt call, to compare
        argv = [sys.executable, "-c", GLIBC_DEFAULT_WEB]
    with open(log_path, "wb") as sink:
        proc = subprocess.Popen(argv, env=env, cwd=tmp, stdout=sink, stderr=sink,
                                preexec_fn=_die_with_parent)
    web = Web(proc, port, log_path)
    until = time.monotonic() + 60
    while time.monotonic() < until:  # any answer: the edge needs neither Redis nor the db
        try:
            with urllib.request.urlopen(f"{web.url}/health", timeout=2):
                return web
        except urllib.error.HTTPError:
            return web
        except (OSError, urllib.error.URLError):
            if proc.poll() is not None:
                raise RuntimeError(f"wagent web exited: see {log_path}") from None
            time.sleep(0.1)
    web.stop()
    raise RuntimeError(f"wagent web did not answer: see {log_path}")


async def _status(reader: asyncio.StreamReader) -> int | None:
    """The status of the answer, None when the connection closed without one."""
    try:
        line = await reader.readline()
    except (ConnectionError, OSError):
        return None
    parts = line.split()
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None


def _head(port: int, length: int, signature: str | None) -> bytes:
    lines = [b"POST /webhook HTTP/1.1", f"Host: {HOST}:{port}".encode(),
             b"Content-Type: application/json", f"Content-Length: {length}".encode()]
    if signature:
        lines.append(f"X-Hub-Signature-256: {signature}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def stalled_upload(port: int, size: int, signature: str | None,
                         stalled: asyncio.Event, release: asyncio.Event) -> int | None:
    """Announce `size` bytes, send all but the last, stall until `release`; the status the
    server answered (None: closed without an answer, or no answer before `release`)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    status: int | None = None
    answer = asyncio.ensure_future(_status(reader))
    try:
        writer.write(_head(port, size, signature))
        block = b" " * 65536
        sent = 0
        while sent < size - 1 and not answer.done():
            piece = block[:min(len(block), size - 1 - sent)]
            writer.write(piece)
            sent += len(piece)
            try:
                await asyncio.wait_for(writer.drain(), timeout=5)
            except (TimeoutError, ConnectionError, OSError):
                break  # the server stopped reading: we stall here
        stalled.set()
        done, _ = await asyncio.wait({answer, asyncio.ensure_future(release.wait())},
                                     return_when=asyncio.FIRST_COMPLETED)
        if answer in done:
            status = answer.result()
    finally:
        answer.cancel()
        writer.transport.abort()
    return status


async def stalled_attack(web: Web, uploads: int, size: int, signature: str | None, *,
                         hold: float) -> dict[str, Any]:
    """`uploads` stalled uploads at once; RSS sampled every 0.2 s while they are held `hold`
    seconds (`rss_held`: the last sample, once the burst is over), then the attackers go
    away."""
    before = web.rss()
    release = asyncio.Event()
    events = [asyncio.Event() for _ in range(uploads)]
    tasks = [asyncio.ensure_future(stalled_upload(web.port, size, signature, e, release))
             for e in events]
    started = time.monotonic()
    peak = held = before
    while time.monotonic() - started < hold:
        held = web.rss()
        peak = max(peak, held)
        await asyncio.sleep(0.2)
    stalled_count = sum(e.is_set() for e in events)
    release.set()
    statuses = await asyncio.gather(*tasks, return_exceptions=True)
    counts: dict[str, int] = {}
    for status in statuses:
        key = str(status if not isinstance(status, BaseException) else type(status).__name__)
        counts[key] = counts.get(key, 0) + 1
    return {"uploads": uploads, "size": size, "signed": signature is not None,
            "stalled": stalled_count, "answers": counts, "rss_before": before,
            "rss_peak": peak, "rss_held": held, "hold_seconds": hold}


async def settle(web: Web, seconds: float) -> int:
    """RSS after the attackers left, once `seconds` passed (the server's lingering closes)."""
    await asyncio.sleep(seconds)
    return web.rss()


async def trickle(port: int, *, every: float = 1.0, limit: float = 240.0) -> dict[str, Any]:
    """A signed-looking POST whose 100 KB body comes one byte every `every` seconds: how long
    until the server answers or closes (bounded by `limit`)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    started = time.monotonic()
    answer = asyncio.ensure_future(_status(reader))
    sent = 0
    try:
        writer.write(_head(port, 100_000, WRONG_SIGNATURE))
        while not answer.done() and time.monotonic() - started < limit:
            try:
                writer.write(b" ")
                await writer.drain()
                sent += 1
            except (ConnectionError, OSError):
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(answer), timeout=every)
        status = answer.result() if answer.done() else None
    finally:
        answer.cancel()
        writer.transport.abort()
    return {"open_seconds": round(time.monotonic() - started, 1), "status": status,
            "bytes_sent": sent}


async def slow_meta_body(port: int, size: int, rate: int) -> dict[str, Any]:
    """A correctly signed body of `size` bytes sent at `rate` bytes a second (in tenths of a
    second), as Meta would on a slow link: its status and duration."""
    from whatsapp.signature import sign

    body = b'{"object":"whatsapp_business_account","entry":[]}' + b" " * (size - 51)
    reader, writer = await asyncio.open_connection(HOST, port)
    started = time.monotonic()
    answer = asyncio.ensure_future(_status(reader))
    try:
        writer.write(_head(port, len(body), sign(body, APP_SECRET)))
        step = max(1, rate // 10)
        for offset in range(0, len(body), step):
            if answer.done():
                break
            writer.write(body[offset:offset + step])
            await writer.drain()
            if step < len(body):
                await asyncio.sleep(0.1)
        status = await asyncio.wait_for(answer, timeout=30)
    finally:
        writer.transport.abort()
    return {"size": size, "rate": rate, "status": status,
            "seconds": round(time.monotonic() - started, 1)}


def small_update(url: str) -> int:
    from whatsapp.signature import sign

    body = b'{"object":"whatsapp_business_account","entry":[]}' + b" " * 2000
    request = urllib.request.Request(f"{url}/webhook", data=body, method="POST", headers={
        "Content-Type": "application/json", "X-Hub-Signature-256": sign(body, APP_SECRET)})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


ATTACKS = ["unsigned", "signed", "trickle", "slow_meta", "storms"]


async def run(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for attack in ATTACKS if args.attack == "all" else [args.attack]:
        web = start_web(tmp, args.redis_url, glibc_default=args.glibc_default)
        try:
            await asyncio.sleep(1)
            results[attack] = await _attack(web, attack, args)
        finally:
            web.stop()
    return results


async def _attack(web: Web, attack: str, args: argparse.Namespace) -> dict[str, Any]:
    if attack == "trickle":
        log("trickle: one byte a second")
        return {"rss_before": web.rss(), **await trickle(web.port)}
    if attack == "storms":  # does what glibc keeps after one storm grow with the next?
        before, after = web.rss(), []
        for n in range(3):
            log(f"storms: signed storm {n + 1} of 3")
            await stalled_attack(web, args.uploads, args.size, WRONG_SIGNATURE,
                                 hold=args.hold / 2)
            after.append(await settle(web, args.settle))
        return {"rss_before": before, **{f"rss_after_storm_{n + 1}": v
                                          for n, v in enumerate(after)}}
    if attack == "slow_meta":
        log(f"slow_meta: a signed 3 MB body at {args.meta_rate} bytes/s")
        return await slow_meta_body(web.port, 3 * 1024 * 1024 - 1000, args.meta_rate)
    signature = WRONG_SIGNATURE if attack == "signed" else None
    log(f"{attack}: {args.uploads} stalled uploads of {args.size} bytes")
    held = asyncio.ensure_future(stalled_attack(web, args.uploads, args.size, signature,
                                                hold=args.hold))
    during: dict[str, Any] = {}
    if attack == "signed":  # while the attack holds the budget's share for large bodies
        await asyncio.sleep(args.hold / 2)
        during["small_update_status"] = await asyncio.to_thread(small_update, web.url)
        during["fast_3mb"] = await slow_meta_body(web.port, 3 * 1024 * 1024 - 1000, 2**30)
    outcome = await held
    outcome["rss_after"] = await settle(web, args.settle)
    return {**outcome, **during}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=300)
    parser.add_argument("--size", type=int, default=2_900_000)
    parser.add_argument("--hold", type=float, default=20.0,
                        help="seconds the stalled uploads are held")
    parser.add_argument("--settle", type=float, default=15.0,
                        help="seconds after the attackers leave before RSS is read again")
    parser.add_argument("--meta-rate", type=int, default=40 * 1024,
                        help="bytes/s of the signed 3 MB body of `slow_meta`")
    parser.add_argument("--attack", choices=["all", *ATTACKS], default="all")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--glibc-default", action="store_true",
                        help="run wagent web without its mallopt call (glibc's dynamic mmap "
                             "threshold), to compare")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import redis

    client = redis.Redis.from_url(args.redis_url)
    client.flushdb()
    try:
        with tempfile.TemporaryDirectory(prefix="wagent-edge-") as tmp:
            results = asyncio.run(run(args, tmp))
    finally:
        client.flushdb()
    mib = {k: {f: (round(v / 2**20, 1) if f.startswith("rss") else v) for f, v in r.items()}
           for k, r in results.items()}
    print(json.dumps(mib, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
