"""Fair shares between businesses (issue 43): tenant A receives a flood of messages at once while
tenants B-J receive their usual traffic; B-J's time from webhook to reply is compared with the
same traffic without the flood.

The product as deployed, from bench/faults.py's stage (`wagent web`, two `wagent worker`,
`wagent cron` as processes, a redis-server of its own, a PostgreSQL schema of its own, the
Messages and Graph doubles answering each turn after DEFAULT_TURN_S with the tokens it answers).
Ten tenants (A is the factories' tenant, B-J copies on their own phone numbers). Two phases of
`--seconds` each: "quiet" (B-J only: each of the nine sends a new customer's message every
`--interval` seconds) and "flood" (the same B-J traffic, and at its start `--flood` messages to A
from as many customers, posted as Meta batches them: `--batch` messages per POST). A's backlog is
not waited for; the stage is taken down after the flood phase's answers settle
(`--settle` seconds).

With `--a-429-every N` the Messages double answers every Nth call for A's customers with a
429 and `retry-after: --retry-after` (B-J's never): the product pauses A alone
(workers/jobs.pause_tenant). `--tenant-model-calls` sets the per-tenant cap on calls in flight.

Usage: .venv/bin/python bench/fairness.py [--flood 5000] [--seconds 40] [--a-429-every 3]
       [--retry-after 5] [--tenant-model-calls 1] [--source DIR]
Needs redis-server and TEST_POSTGRES_URL. Prints one JSON object: per phase, B-J's p50/p99/max
seconds from POST to reply, how many were answered, and how many of A's were answered.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.faults import APP_SECRET, Stage, log  # noqa: E402

TENANTS = "ABCDEFGHIJ"
PHONE_BASE = 109_876_543_210_000  # B-J's phone_number_id: this plus their index
FLOOD_FIRST = 500_000  # A's flood customers are contacts from this number up


class Poster:
    """Posts messages to `url`, each carrying a token `L{contact:06d}.0`; remembers when."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.posted: dict[str, tuple[str, float]] = {}  # token -> (tenant letter, first POST)
        self.pool = ThreadPoolExecutor(max_workers=16)
        self.run = os.urandom(3).hex()

    def body(self, tenant: int, contacts: list[int]) -> bytes:
        from tests.factories import PHONE_NUMBER_ID, text_body
        from whatsapp.signature import sign  # noqa: F401  (imported for `post`)

        phone = PHONE_NUMBER_ID if tenant == 0 else str(PHONE_BASE + tenant)
        changes = []
        for contact in contacts:
            token = f"L{contact:06d}.0"
            payload = text_body(f"oi, tem horário amanhã? [{token}]", 0,
                                who=(f"55{11_700_000_000 + contact:011d}", f"BR.FAIR{contact:09d}"),
                                name=f"Cliente {contact}", phone_number_id=phone,
                                sent_at=datetime.now(UTC))
            change = payload["entry"][0]["changes"][0]
            change["value"]["messages"][0]["id"] = f"wamid.FAIR{self.run}x{contact:06d}"
            changes.append(change)
            self.posted[token] = (TENANTS[tenant], time.time())
        payload["entry"][0]["changes"] = changes
        return json.dumps(payload, separators=(",", ":")).encode()

    def post(self, tenant: int, contacts: list[int]) -> None:
        from whatsapp.signature import sign

        raw = self.body(tenant, contacts)
        request = urllib.request.Request(
            f"{self.url}/webhook", data=raw, method="POST",
            headers={"Content-Type": "application/json",
                     "X-Hub-Signature-256": sign(raw, APP_SECRET)})
        for _ in range(30):  # a 503 is delivered again a second later, as Meta would
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1.0)


class RateLimitA:
    """The Messages double's scripted rate limit for tenant A only: every `every`-th call that
    answers A's customers (tokens of contacts FLOOD_FIRST and up) gets a 429 with
    `retry-after: {retry_after}`; B-J's calls are never refused."""

    def __init__(self, *, every: int, retry_after: float) -> None:
        self.every, self.retry_after = every, retry_after
        self.calls = self.refused = 0
        self.lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> float | None:
        from bench.load import TOKEN_RE

        text = json.dumps(request.get("messages") or [])
        if not any(int(t[1:7]) >= FLOOD_FIRST for t in TOKEN_RE.findall(text)):
            return None
        with self.lock:
            self.calls += 1
            if self.every and self.calls % self.every == 0:
                self.refused += 1
                return self.retry_after
        return None


def usual_traffic(poster: Poster, *, seconds: float, interval: float, first: int) -> None:
    """B-J: each sends one new customer's message every `interval` s for `seconds` s."""
    started, tick = time.monotonic(), 0
    while time.monotonic() - started < seconds:
        for tenant in range(1, len(TENANTS)):
            poster.pool.submit(poster.post, tenant, [first + tick * 100 + tenant])
        tick += 1
        time.sleep(max(0.0, started + tick * interval - time.monotonic()))


def phase(stage: Stage, poster: Poster, *, name: str, seconds: float, interval: float,
          first: int, settle: float) -> dict[str, Any]:
    tokens_before = set(poster.posted)
    usual_traffic(poster, seconds=seconds, interval=interval, first=first)
    mine = [t for t in poster.posted if t not in tokens_before and poster.posted[t][0] != "A"]
    until = time.monotonic() + settle
    while time.monotonic() < until:
        answered = {t for t, _ in stage.doubles.answers()}
        if all(t in answered for t in mine):
            break
        time.sleep(0.5)
    first_answer: dict[str, float] = {}
    for token, at in stage.doubles.answers():
        first_answer.setdefault(token, at)
    waits = sorted(first_answer[t] - poster.posted[t][1] for t in mine if t in first_answer)
    flood = [t for t in poster.posted if poster.posted[t][0] == "A"]
    return {"phase": name, "b_to_j_messages": len(mine), "b_to_j_answered": len(waits),
            "b_to_j_wait_s": _percentiles(waits),
            "a_answered": sum(1 for t in flood if t in first_answer), "a_posted": len(flood)}


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    def at(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))], 2)
    return {"p50": at(0.5), "p99": at(0.99), "max": round(values[-1], 2)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from storage.db import session_scope
    from storage.tenants import upsert_tenant
    from tests.factories import TENANT

    stage = Stage("steady", args.source)
    try:
        with session_scope(stage.engine) as session:
            for k in range(1, len(TENANTS)):
                upsert_tenant(session, {**TENANT, "phone_number_id": str(PHONE_BASE + k),
                                        "name": f"Negócio {TENANTS[k]}"},
                              now=datetime.now(UTC))
        stage.cluster.env["WORKER_CPU"] = "normal"  # the faults' "low" measures the machine's load
        if args.tenant_model_calls is not None:
            stage.cluster.env["TENANT_MODEL_CALLS"] = str(args.tenant_model_calls)
        limiter = RateLimitA(every=args.a_429_every, retry_after=args.retry_after)
        stage.doubles.rate_limit = limiter if args.a_429_every else None
        stage.cluster.start(stage.client)
        poster = Poster(stage.cluster.url)
        poster.post(1, [999_999])  # warm-up
        quiet = phase(stage, poster, name="quiet", seconds=args.seconds,
                      interval=args.interval, first=10_000, settle=args.settle)
        log(f"quiet: {quiet}")
        flood_contacts = list(range(FLOOD_FIRST, FLOOD_FIRST + args.flood))
        batches = [flood_contacts[i:i + args.batch]
                   for i in range(0, len(flood_contacts), args.batch)]
        threading.Thread(target=lambda: [poster.post(0, b) for b in batches],
                         daemon=True).start()
        flood = phase(stage, poster, name="flood", seconds=args.seconds,
                      interval=args.interval, first=100_000, settle=args.settle)
        log(f"flood: {flood}")
        poster.pool.shutdown(wait=False, cancel_futures=True)
        p99 = (quiet["b_to_j_wait_s"].get("p99"), flood["b_to_j_wait_s"].get("p99"))
        return {"source": str(args.source), "flood": args.flood, "phases": [quiet, flood],
                "a_calls": limiter.calls, "a_429s": limiter.refused,
                "tenant_model_calls": args.tenant_model_calls,
                "b_to_j_p99_ratio": round(p99[1] / p99[0], 2) if all(p99) else None}
    finally:
        stage.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=100, help="messages per flood POST")
    parser.add_argument("--seconds", type=float, default=40.0, help="each phase's traffic")
    parser.add_argument("--interval", type=float, default=6.0,
                        help="seconds between two messages of one of B-J")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="seconds to wait for B-J's answers after a phase's traffic")
    parser.add_argument("--a-429-every", type=int, default=0,
                        help="every Nth Messages API call for A's customers gets a 429 with "
                        "retry-after (0: none); B-J's never")
    parser.add_argument("--retry-after", type=float, default=5.0,
                        help="the retry-after seconds of those 429s")
    parser.add_argument("--tenant-model-calls", type=int, default=None,
                        help="TENANT_MODEL_CALLS for the workers (default: the product's)")
    parser.add_argument("--source", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    args.source = args.source.resolve()
    print(json.dumps(run(args)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
