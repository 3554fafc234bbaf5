"""The unauthenticated edge bounded (docs/OPERATE.md, Security; issue 15 item 3): a webhook without
a signature is refused before its body is read, a body slower than the minimum rate is cut with
408, the bodies being read share a per-process budget, and the console and the admin API read
theirs the same way. The last test attacks a real `wagent web` process and measures its RSS.

The rate tests scale the rule down (a higher minimum rate, a grace of a fraction of a second)
so they take seconds; the defaults' figures are checked on the pure rule.
"""

import asyncio
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp.test_utils import TestClient
from sqlalchemy import Engine

from bot import bodies
from bot.app import create_app
from bot.bodies import BODY_BUDGET, lag_allowed
from core.settings import Settings
from operations import service
from storage.db import session_scope
from storage.tenants import upsert_tenant
from tests.conftest import START
from tests.factories import TENANT, text_body
from whatsapp.signature import sign

SECRET = "edge-app-secret-0123456789"
OPERATOR = "edge-operator-token-0123456789abcdef"
FAKE_SIGNATURE = "sha256=" + "0" * 64
MiB = 1024 * 1024
Client = TestClient  # type: ignore[type-arg]


def make_settings(**overrides: Any) -> Settings:
    return Settings(whatsapp_app_secret=SECRET, admin_token=OPERATOR, redis_prefix="edge",
                    queue_name="edge", **overrides)


@pytest.fixture
def tenant_id(engine: Engine) -> int:
    with session_scope(engine) as session:
        return int(upsert_tenant(session, TENANT, now=START).id or 0)


async def app_client(aiohttp_client: Any, engine: Engine, redis_client: redis.Redis,
                     **overrides: Any) -> Client:
    client: Client = await aiohttp_client(create_app(make_settings(**overrides), engine=engine,
                                                     redis_client=redis_client))
    return client


class Upload:
    """A raw HTTP request whose body the test sends as it likes; `status()` is the answer's."""

    def __init__(self, port: int, path: str, length: int,
                 headers: dict[str, str] | None = None, method: str = "POST") -> None:
        self.port, self.path, self.length, self.headers = port, path, length, headers or {}
        self.method = method

    async def __aenter__(self) -> "Upload":
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        head = [f"{self.method} {self.path} HTTP/1.1", "Host: 127.0.0.1",
                f"Content-Length: {self.length}",
                *(f"{k}: {v}" for k, v in self.headers.items())]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        await self.writer.drain()
        self.answer = asyncio.ensure_future(self.reader.read(4096))
        return self

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def status(self, within: float = 10) -> int:
        """The answer's status; fails the test when none comes `within` seconds."""
        raw = await asyncio.wait_for(asyncio.shield(self.answer), timeout=within)
        found = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
        assert found, raw[:200]
        return int(found.group(1))

    async def closed(self, within: float = 10) -> bool:
        """True once the server closed the connection (fails after `within` seconds)."""
        async def read_to_end() -> None:
            while await self.reader.read(65536):
                pass
        try:
            await asyncio.wait_for(read_to_end(), timeout=within)
        except (ConnectionError, OSError):
            pass
        return True

    async def __aexit__(self, *_: Any) -> None:
        self.answer.cancel()
        self.writer.transport.abort()


async def eventually(condition: Callable[[], bool], within: float = 5) -> None:
    """Wait for the server to reach `condition` (it runs on this event loop), at most
    `within` seconds."""
    for _ in range(int(within / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never got there")


# -- the webhook --------------------------------------------------------------------------------


async def test_a_webhook_post_without_a_signature_is_401_before_its_body_is_read(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    client = await app_client(aiohttp_client, engine, redis_client)
    for headers, expected in (({}, 401), ({"X-Hub-Signature-256": "sha256=nothex"}, 403),
                              ({"X-Hub-Signature-256": "0" * 64}, 403)):
        async with Upload(client.server.port, "/webhook", 2_900_000, headers) as upload:
            assert await upload.status(within=5) == expected  # not a byte of the body sent
            assert await upload.closed()
    assert client.app[BODY_BUDGET].used == 0


async def test_a_body_slower_than_the_minimum_rate_is_cut_with_408(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    client = await app_client(aiohttp_client, engine, redis_client, body_min_rate=4096,
                              body_grace_seconds=0.5)
    started = asyncio.get_running_loop().time()
    async with Upload(client.server.port, "/webhook", 100_000,
                      {"X-Hub-Signature-256": FAKE_SIGNATURE}) as trickled:
        for _ in range(50):  # one byte every 0.05 s: 20 bytes/s
            if trickled.answer.done():
                break
            await trickled.send(b" ")
            await asyncio.sleep(0.05)
        assert await trickled.status(within=5) == 408
        # cut at the grace plus what it sent at the minimum rate: 0.5 s + 10 bytes / 4096
        assert asyncio.get_running_loop().time() - started < 1.5
        assert await trickled.closed()  # after aiohttp's lingering (bodies.LINGER_SECONDS)
    async with Upload(client.server.port, "/webhook", 100_000,
                      {"X-Hub-Signature-256": FAKE_SIGNATURE}) as stalled:
        await stalled.send(b" " * 8192)  # then nothing: cut after 0.5 s + 8192 / 4096 = 2.5 s
        assert await stalled.status(within=6) == 408
    assert client.app[BODY_BUDGET].used == 0


async def test_a_signed_body_at_the_minimum_rate_is_read_whole(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis, tenant_id: int) -> None:
    """Meta's body on a slow link, scaled: 200 KiB at 80 KiB/s against a minimum of 64 KiB/s
    (the defaults: 3 MiB at 40 KiB/s against 32 KiB/s, bench/edge.py `slow_meta`)."""
    client = await app_client(aiohttp_client, engine, redis_client, body_min_rate=64 * 1024,
                              body_grace_seconds=0.5)
    message = text_body("x" * (200 * 1024), 1, sent_at=START)
    raw = json.dumps(message).encode()
    async with Upload(client.server.port, "/webhook", len(raw),
                      {"X-Hub-Signature-256": sign(raw, SECRET)}) as upload:
        for offset in range(0, len(raw), 8 * 1024):  # 8 KiB every 0.1 s
            await upload.send(raw[offset:offset + 8 * 1024])
            await asyncio.sleep(0.1)
        assert await upload.status() == 200


def test_the_default_rate_gives_metas_largest_body_106_seconds() -> None:
    settings = Settings()
    assert (settings.body_min_rate, settings.body_grace_seconds) == (32 * 1024, 10.0)
    allowed = lag_allowed(3 * MiB, min_rate=settings.body_min_rate,
                          grace=settings.body_grace_seconds)
    assert allowed == 106.0
    assert 3 * MiB / allowed * 8 / 1e6 < 0.24  # a 0.24 Mbit/s link still delivers it in time
    # a stalled or trickled body is cut ~10 s after its headers
    assert lag_allowed(200, min_rate=settings.body_min_rate, grace=10) < 10.01


async def test_bodies_beyond_the_budget_are_refused_503_and_small_ones_still_pass(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis, tenant_id: int) -> None:
    """4 MiB budget, 1 MiB bodies: three large uploads take the large bodies' share (3 MiB),
    a fourth is refused at once; an ordinary update still has the small bodies' quarter."""
    client = await app_client(aiohttp_client, engine, redis_client, max_body_bytes=MiB,
                              body_budget_bytes=4 * MiB)
    headers = {"X-Hub-Signature-256": FAKE_SIGNATURE}
    port = client.server.port
    async with Upload(port, "/webhook", MiB, headers) as one, \
            Upload(port, "/webhook", MiB, headers) as two, \
            Upload(port, "/webhook", MiB, headers) as three:
        for upload in (one, two, three):
            await upload.send(b" " * 1000)
        await eventually(lambda: client.app[BODY_BUDGET].used == 3 * MiB)
        async with Upload(port, "/webhook", MiB, headers) as fourth:
            assert await fourth.status(within=5) == 503
            assert b"Retry-After: 5" in fourth.answer.result()
        small = json.dumps(text_body("oi", 1, sent_at=START)).encode()
        response = await client.post("/webhook", data=small,
                                     headers={"X-Hub-Signature-256": sign(small, SECRET)})
        assert response.status == 200
        assert client.app[BODY_BUDGET].used == 3 * MiB
    # the three went away: their reservations come back
    await eventually(lambda: client.app[BODY_BUDGET].used == 0)


def test_the_budget_keeps_a_quarter_for_small_bodies() -> None:
    budget = bodies.BodyBudget(4 * MiB)
    assert budget.reserve(3 * MiB)  # a large body: up to three quarters
    assert not budget.reserve(100 * 1024)  # another large one: over that share
    assert budget.reserve(64 * 1024)  # a small one: the last quarter is theirs
    assert budget.used == 3 * MiB + 64 * 1024
    budget.release(3 * MiB)
    assert budget.reserve(2 * MiB) and budget.used == 2 * MiB + 64 * 1024


# -- the console and the admin API --------------------------------------------------------------


async def test_console_and_admin_bodies_are_read_within_the_same_bounds(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis, tenant_id: int) -> None:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, TENANT, now=START)
        token = service.create_token(session, tenant, label="x", now=START)["token"]
    client = await app_client(aiohttp_client, engine, redis_client, body_min_rate=4096,
                              body_grace_seconds=0.5)
    port = client.server.port
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    hours = f"/admin/tenants/{tenant_id}/hours"
    cases = [  # (method, path, announced length, headers, bytes sent, expected status)
        ("POST", "/console/login", 5000, form, b"", 413),  # the sign-in form: 4 KiB at most
        ("POST", "/console/login", 1000, form, b"csrf=", 408),  # trickled, then stalled
        ("POST", "/console/settings", 10 * MiB, form, b"", 303),  # no session: unread
        ("PUT", hours, 2 * MiB, bearer, b"", 413),
        ("PUT", hours, 1000, bearer, b'{"hours"', 408),
        ("PUT", hours, 2 * MiB, {}, b"", 401),  # no token: unread
    ]
    for method, path, length, headers, data, expected in cases:
        async with Upload(port, path, length, headers, method) as upload:
            await upload.send(data)
            assert await upload.status(within=5) == expected, path
    response = await client.put(f"/admin/tenants/{tenant_id}/hours", data=b"x" * (MiB + 1),
                                headers=bearer)
    assert response.status == 413
    assert (await response.json())["error"]["code"] == "too_large"
    page = await (await client.get("/console/login")).text()
    nonce = re.search(r'name="csrf" value="([^"]+)"', page)
    assert nonce
    signed_in = await client.post("/console/login", data={"csrf": nonce.group(1),
                                                          "token": token},
                                  allow_redirects=False)
    assert signed_in.status == 303
    too_big = await client.post("/console/settings", data={"instructions": "x" * (MiB + 1)})
    assert too_big.status == 413  # a signed-in form: 1 MiB at most
    assert client.app[BODY_BUDGET].used == 0


# -- the attack on a real web process ---------------------------------------------------------


def load_bench() -> Any:
    path = Path(__file__).parent.parent / "bench" / "edge.py"
    spec = importlib.util.spec_from_file_location("bench_edge", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_edge"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def web(tmp_path: Path, redis_url: str | None) -> Iterator[Any]:
    bench = load_bench()
    process = bench.start_web(str(tmp_path), redis_url or "redis://127.0.0.1:1/0")
    yield bench, process
    process.stop()


async def test_300_stalled_uploads_hold_at_most_the_budget_of_a_real_web_process(
        web: Any) -> None:
    """Issue 15's attack on `wagent web`: 300 stalled 2.9 MB uploads without a signature (they
    took it from 125 MB to 1,070 MB and it stayed there), then 300 with a well-formed wrong
    one, which must be read to be found wrong.

    Bound (docs/OPERATE.md, Security): what bodies being read hold is the 64 MiB budget; on top,
    while the burst lasts, aiohttp's buffers of the connections it has not closed yet, and after
    it the heap glibc keeps for reuse (bench/README.md: 5 to 36 MB in the runs there). The
    margins below are that, with room; the old code held 870 MB and kept it.
    """
    bench, process = web
    await asyncio.sleep(1)
    before = process.rss()
    unsigned = await bench.stalled_attack(process, 300, 2_900_000, None, hold=4)
    assert unsigned["answers"] == {"401": 300}
    assert unsigned["rss_held"] - before < 48 * MiB, unsigned
    signed = await bench.stalled_attack(process, 300, 2_900_000, FAKE_SIGNATURE, hold=6)
    admitted = int(64 * MiB * 0.75 // 2_900_000)  # the large bodies' share of the budget
    assert signed["answers"] == {"None": admitted, "503": 300 - admitted}, signed
    assert signed["rss_held"] - before < 64 * MiB + 48 * MiB, signed
    assert signed["rss_peak"] - before < 64 * MiB + 300 * MiB, signed
    after = await bench.settle(process, 5)
    assert after - before < 64 * MiB, (before, after)
