"""No secret in any log line, and no customer data in a traceback, a line above DEBUG or RQ's
failed-job data (docs/OPERATE.md, Security; issue 15 items 1 and 2).

Logging is configured as `wagent web` and `wagent worker` configure it (core/logs.py, the
settings' secrets given), at DEBUG, in both formats, into a buffer that takes every line:
ours, aiohttp's and RQ's. Each test provokes an error on a path that holds a secret and
scans the buffer (and Redis, where RQ keeps failed jobs) for it.
"""

import asyncio
import io
import json
import logging
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
import structlog
from aiohttp.test_utils import TestServer
from redis.backoff import NoBackoff
from redis.retry import Retry
from rq.registry import FailedJobRegistry
from sqlalchemy import Engine, text
from sqlmodel import select

import bot.console.signin
import bot.webhook
import operations.service
from bot.app import create_app
from bot.console.session import COOKIE
from core.logs import configure_logging
from core.settings import Settings
from operations import service
from replay import environment as replay
from replay.environment import ReplayEnvironment
from storage.db import make_engine, session_scope
from storage.models import ContactFact, Conversation, Tenant
from storage.tenants import upsert_tenant
from tests.conftest import START
from tests.factories import ANA, TENANT, text_body
from whatsapp.signature import sign

APP_SECRET = "sec-app-secret-7f3a9c1e5b2d4f6a8c0e"
VERIFY_TOKEN = "sec-verify-token-2b4d6f8a0c1e3a5c"
ACCESS_TOKEN = "EAAGsecaccesstoken0123456789abcdef"
API_KEY = "sk-ant-sec-api-key-0123456789abcdef"
OPERATOR = "sec-operator-token-0123456789abcdefghijkl"
ALL_SETTINGS_SECRETS = [APP_SECRET, VERIFY_TOKEN, ACCESS_TOKEN, API_KEY, OPERATOR]
SETTINGS = Settings(whatsapp_app_secret=APP_SECRET, whatsapp_verify_token=VERIFY_TOKEN,
                    whatsapp_access_token=ACCESS_TOKEN, anthropic_api_key=API_KEY,
                    admin_token=OPERATOR, redis_prefix="sec", queue_name="sec")
# the secrets of a replay's workers (the doubles check them)
REPLAY_SECRETS = [replay.APP_SECRET, replay.VERIFY_TOKEN, replay.ACCESS_TOKEN, replay.API_KEY,
                  OPERATOR]
CUSTOMER_TEXT = "oi, sou a Ana, moro na rua das Flores 123"
DOWN_DATABASE = "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2"


@dataclass
class Captured:
    """Every log line written while the test ran, in one format."""

    fmt: str
    buffer: io.StringIO = field(default_factory=io.StringIO)

    def text(self) -> str:
        return self.buffer.getvalue()

    def assert_no_secret(self, secrets: Iterable[str]) -> None:
        """Neither a secret nor its last 16 characters (a truncated repr) in any line."""
        text = self.text()
        assert text, "nothing was logged: the capture is broken"
        for secret in secrets:
            assert secret and secret not in text and secret[-16:] not in text, secret

    def assert_no_customer_data(self, values: Iterable[str]) -> None:
        """No value in any line, at any level (DEBUG included), in either format."""
        text = self.text()
        assert text, "nothing was logged: the capture is broken"
        for value in values:
            assert value not in text, (value, text[max(0, text.find(value) - 200):][:400])


@pytest.fixture(params=["json", "console"])
def captured(request: pytest.FixtureRequest) -> Iterator[Captured]:
    saved, root = structlog.get_config(), logging.getLogger()
    handlers, level = root.handlers[:], root.level
    capture = Captured(request.param)
    configure_logging("DEBUG", request.param,
                      secrets=[*ALL_SETTINGS_SECRETS, *REPLAY_SECRETS],
                      stream=capture.buffer)
    yield capture
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def down_redis() -> Iterator[redis.Redis]:
    client = redis.Redis(port=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    yield client
    client.close()


@pytest.fixture
def down_engine() -> Iterator[Engine]:
    engine = make_engine(DOWN_DATABASE)
    yield engine
    engine.dispose()


def tenant_token(engine: Engine) -> tuple[int, str]:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, TENANT, now=START)
        return int(tenant.id or 0), service.create_token(session, tenant, label="dona",
                                                         now=START)["token"]


async def login_nonce(client: Any) -> str:
    page = await (await client.get("/console/login")).text()
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found
    return found.group(1)


async def sign_in(client: Any, token: str) -> tuple[str, str]:
    """(session id, the session's CSRF token) after a sign-in that worked."""
    nonce = await login_nonce(client)
    response = await client.post("/console/login", data={"csrf": nonce, "token": token},
                                 allow_redirects=False)
    assert response.status == 303
    sid = response.cookies[COOKIE].value
    page = await (await client.get("/console/")).text()
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found
    return sid, found.group(1)


def assert_unavailable_page(status: int, page: str) -> None:
    assert status == 503
    assert 'lang="pt-BR"' in page and "fora do ar" in page, page[:300]


# -- item 1: the console and the admin API with a store down --------------------------------


async def test_a_console_sign_in_while_redis_is_down_is_a_503_page_and_logs_no_token(
        aiohttp_client: Any, engine: Engine, down_redis: redis.Redis,
        captured: Captured) -> None:
    _, token = tenant_token(engine)
    client = await aiohttp_client(create_app(SETTINGS, engine=engine, redis_client=down_redis))
    nonce = await login_nonce(client)
    response = await client.post("/console/login", data={"csrf": nonce, "token": token})
    assert_unavailable_page(response.status, await response.text())
    assert response.headers["Retry-After"] == "30"
    assert "console_store_unavailable" in captured.text()
    captured.assert_no_secret([token, nonce, *ALL_SETTINGS_SECRETS])


async def test_console_pages_while_redis_or_the_database_is_down_are_503_pages(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis,
        down_redis: redis.Redis, down_engine: Engine, captured: Captured) -> None:
    _, token = tenant_token(engine)
    healthy = await aiohttp_client(create_app(SETTINGS, engine=engine,
                                              redis_client=redis_client))
    sid, csrf = await sign_in(healthy, token)
    cookies = {COOKIE: sid}
    redis_down = await aiohttp_client(create_app(SETTINGS, engine=engine,
                                                 redis_client=down_redis))
    database_down = await aiohttp_client(create_app(SETTINGS, engine=down_engine,
                                                    redis_client=redis_client))
    for client, method, path, data in (
            (redis_down, "GET", "/console/", None),
            (redis_down, "GET", "/console/review?lang=en", None),
            (redis_down, "POST", "/console/settings", {"csrf": csrf, "instructions": "x"}),
            (redis_down, "POST", "/console/logout", {"csrf": csrf}),
            (database_down, "GET", "/console/", None),
            (database_down, "POST", "/console/catalog/services",
             {"csrf": csrf, "code": "x", "duration_minutes": "30"})):
        response = await client.request(method, path, data=data, cookies=cookies,
                                        allow_redirects=False)
        page = await response.text()
        if "lang=en" in path:
            assert response.status == 503 and "down for a moment" in page, path
        else:
            assert_unavailable_page(response.status, page)
    nonce = await login_nonce(database_down)
    response = await database_down.post("/console/login", data={"csrf": nonce, "token": token})
    assert_unavailable_page(response.status, await response.text())
    captured.assert_no_secret([token, sid, csrf, nonce, *ALL_SETTINGS_SECRETS])


async def test_the_admin_api_with_a_store_down_is_503_and_logs_no_token(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis,
        down_redis: redis.Redis, down_engine: Engine, captured: Captured) -> None:
    tenant_id, token = tenant_token(engine)
    for app in (create_app(SETTINGS, engine=down_engine, redis_client=redis_client),
                create_app(SETTINGS, engine=engine, redis_client=down_redis)):
        client = await aiohttp_client(app)
        for bearer in (token, OPERATOR):
            response = await client.get(f"/admin/tenants/{tenant_id}",
                                        headers={"Authorization": f"Bearer {bearer}"})
            assert response.status == 503
            assert (await response.json())["error"]["code"] == "unavailable"
    captured.assert_no_secret([token, *ALL_SETTINGS_SECRETS])


# -- item 1: an unexpected error on every path that holds a secret ----------------------------


def broken(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("injected failure")


async def raw_request(port: int, head: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    await writer.drain()
    answer = await reader.read(200)
    writer.close()
    return answer


async def test_errors_on_every_path_holding_a_secret_log_tracebacks_without_it(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis,
        monkeypatch: pytest.MonkeyPatch, captured: Captured) -> None:
    tenant_id, token = tenant_token(engine)
    client = await aiohttp_client(create_app(SETTINGS, engine=engine,
                                             redis_client=redis_client))
    sid, csrf = await sign_in(client, token)
    webhook = json.dumps(text_body(CUSTOMER_TEXT, 1, sent_at=START)).encode()
    with monkeypatch.context() as patch:  # a bug under each path
        patch.setattr(operations.service, "counts", broken)  # console home, admin GET tenant
        patch.setattr(bot.console.signin, "_token_row", broken)  # console sign-in
        patch.setattr(bot.webhook, "store_posts", broken)  # a signed webhook POST
        assert (await client.get("/console/")).status == 500
        nonce = await login_nonce(client)
        assert (await client.post("/console/login", data={"csrf": nonce, "token": token})
                ).status == 500
        for bearer in (token, OPERATOR):
            response = await client.get(f"/admin/tenants/{tenant_id}",
                                        headers={"Authorization": f"Bearer {bearer}"})
            assert response.status == 500
        response = await client.post("/webhook", data=webhook, headers={
            "X-Hub-Signature-256": sign(webhook, APP_SECRET)})
        assert response.status == 500
    with monkeypatch.context() as patch:  # Meta's handshake: the verify token
        patch.setattr(bot.webhook.hmac, "compare_digest", broken)
        assert (await client.get("/webhook", params={
            "hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN,
            "hub.challenge": "123"})).status == 500
    port = client.server.port
    for head in (  # malformed requests aiohttp quotes in its error line
            f"GET /admin/tenants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\x01\r\n"
            f"\r\n".encode(),
            f"GET /console/ HTTP/1.1\r\nHost: x\r\nCookie: {COOKIE}={sid}; x=\x01\r\n\r\n"
            .encode(),
            f"GET /webhook?hub.verify_token={VERIFY_TOKEN}\x7f HTTP/1.1\r\nHost: x\r\n\r\n"
            .encode()):
        assert (await raw_request(port, head)).startswith(b"HTTP/1.0 400")
    logged = captured.text()
    assert logged.count("injected failure") >= 5 and "Invalid header value char" in logged
    assert "Traceback" in logged or '"exception"' in logged
    captured.assert_no_secret([token, sid, csrf, nonce, *ALL_SETTINGS_SECRETS])
    captured.assert_no_customer_data([ANA[0], ANA[1], CUSTOMER_TEXT])


# -- items 1 and 2: the workers ---------------------------------------------------------------


def redis_text(client: redis.Redis) -> str:
    """Everything in the db as text, compressed fields (RQ's job data, results) expanded."""
    parts: list[str] = []

    def add(raw: Any) -> None:
        if isinstance(raw, bytes):
            try:
                raw = zlib.decompress(raw)
            except zlib.error:
                pass
            parts.append(raw.decode("utf-8", "replace"))
        else:
            parts.append(str(raw))

    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        add(key)
        if kind == b"string":
            add(client.get(key))
        elif kind == b"hash":
            for name, value in client.hgetall(key).items():
                add(name)
                add(value)
        elif kind in (b"list", b"set", b"zset"):
            items = (client.lrange(key, 0, -1) if kind == b"list" else
                     client.smembers(key) if kind == b"set" else client.zrange(key, 0, -1))
            for item in items:
                add(item)
        elif kind == b"stream":
            for _, entry in client.xrange(key):
                for name, value in entry.items():
                    add(name)
                    add(value)
                    if name == b"exc_string":
                        import base64
                        add(zlib.decompress(base64.b64decode(value)))
    return "\n".join(parts)


@pytest.fixture
def env(database_url: str | None, redis_url: str | None,
        captured: Captured) -> Iterator[ReplayEnvironment]:
    """Created after the capture, so RQ's worker logs at DEBUG into it."""
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url,
                                    admin_token=OPERATOR)
    yield environment
    environment.close()


def refuse_replies(engine: Engine) -> None:
    """Make every insert into the outbox fail inside the database, the row's values (phone,
    reply text) in what the database reports."""
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(text("ALTER TABLE outbound ADD CONSTRAINT no_replies "
                                    "CHECK (body = '') NOT VALID"))
        else:
            connection.execute(text("CREATE TRIGGER no_replies BEFORE INSERT ON outbound "
                                    "BEGIN SELECT RAISE(ABORT, 'no replies'); END"))


def test_a_turn_that_fails_in_the_database_leaves_no_customer_data_in_rq_or_the_logs(
        env: ReplayEnvironment, captured: Captured) -> None:
    reply = "Ana, tenho 14h amanhã com a Júlia na rua das Flores"
    env.add_tenant(TENANT)
    refuse_replies(env.engine)
    env.messages_api.script("turn", [{"text": reply}] * 3)
    assert env.post_webhook(json.dumps(text_body(CUSTOMER_TEXT, 1, sent_at=env.clock.now()))
                            .encode()) == 200
    env.drain()
    failed = FailedJobRegistry(queue=env.queue)
    (job_id,) = failed.get_job_ids()
    job = env.queue.fetch_job(job_id)
    assert job is not None and job.kwargs.keys() == {"conversation_id", "attempt"}
    result = job.latest_result()
    assert result is not None and "IntegrityError" in result.exc_string
    assert "[SQL parameters hidden due to hide_parameters=True]" in result.exc_string
    stored = redis_text(env.redis)
    assert "hide_parameters" in stored, "the failed job's record was not read"
    for value in (ANA[0], ANA[1], CUSTOMER_TEXT, reply, "Failing row"):
        assert value not in stored, value
    assert "exception raised while executing" in captured.text()
    captured.assert_no_customer_data([ANA[0], ANA[1], CUSTOMER_TEXT, reply])
    captured.assert_no_secret(REPLAY_SECRETS)


def test_provider_failures_in_workers_log_no_key_or_access_token(
        env: ReplayEnvironment, captured: Captured) -> None:
    env.add_tenant(TENANT)
    env.messages_api.fail("turn", 400)
    env.graph_api.fail(131000)
    env.messages_api.script("turn", [{"text": "Oi Ana!"}])
    for n in (1, 2):
        assert env.post_webhook(json.dumps(text_body(CUSTOMER_TEXT, n,
                                                     sent_at=env.clock.now())).encode()) == 200
        env.drain()
    logged = captured.text()
    assert "turn_request_rejected" in logged and "send_failed" in logged
    captured.assert_no_secret(REPLAY_SECRETS)
    captured.assert_no_customer_data([ANA[0], ANA[1], CUSTOMER_TEXT])


def test_a_rejection_job_carries_the_fact_id_only(env: ReplayEnvironment) -> None:
    """RQ keeps a job's arguments (and logs them when it fails): the reason a person gave,
    which may describe the customer, is read from the fact by the job instead."""
    env.add_tenant(TENANT)
    env.messages_api.script("turn", [{"text": "Oi Ana!"}])
    assert env.post_webhook(json.dumps(text_body(CUSTOMER_TEXT, 1, sent_at=env.clock.now()))
                            .encode()) == 200
    env.drain()
    reason = "a Ana disse que não é alérgica a amônia"
    with session_scope(env.engine) as session:
        conversation = session.exec(select(Conversation)).one()
        fact = ContactFact(tenant_id=conversation.tenant_id, contact_id=conversation.contact_id,
                           conversation_id=conversation.id, key="allergies", value="amônia",
                           state="pending_review", origin="extracted", created_at=START)
        session.add(fact)
        session.flush()
        fact_id = int(fact.id or 0)
        tenant = session.get(Tenant, conversation.tenant_id)
        assert tenant is not None
        service.reject_fact(session, tenant, fact_id, by="operator", reason=reason, now=START)
    service.enqueue_rejection(env.queue, fact_id)
    (job,) = env.queue.jobs
    assert job.kwargs == {"fact_id": fact_id} and reason not in (job.description or "")
    env.drain()
    with session_scope(env.engine) as session:
        decided = session.get(ContactFact, fact_id)
        assert decided is not None and decided.state == "rejected"
        assert decided.decision_reason == reason


# -- the renderer's layers, one at a time ------------------------------------------------------


def render(fmt: str, secrets: Iterable[str], emit: Any) -> str:
    saved, root = structlog.get_config(), logging.getLogger()
    handlers, level = root.handlers[:], root.level
    buffer = io.StringIO()
    try:
        configure_logging("DEBUG", fmt, secrets=secrets, stream=buffer)
        emit()
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)
    return buffer.getvalue()


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_tracebacks_are_rendered_without_frame_locals(fmt: str) -> None:
    """Even a secret the renderer was not told about and that has no minted form stays out of
    a traceback: structlog's renderers show locals by default (`show_locals`)."""
    unknown = "an-unannounced-secret-value-42"

    def fail(credential: str) -> None:
        raise ValueError("no")

    def emit() -> None:
        try:
            fail(unknown)
        except ValueError:
            structlog.get_logger("t").exception("failed")
            logging.getLogger("aiohttp.server").exception("Error handling request")

    out = render(fmt, (), emit)
    assert out.count("ValueError") >= 2 and "fail" in out
    assert unknown not in out


def test_a_whole_conversation_at_debug_logs_no_customer_text_nor_phone(
        env: ReplayEnvironment, captured: Captured) -> None:
    """Customer data never reaches a log line, DEBUG included: a message, the agent's reply
    (which may quote it), and the customer's number and user id."""
    reply = "Ana, tenho 14h amanhã com a Júlia na rua das Flores"
    env.add_tenant(TENANT)
    env.messages_api.script("turn", [{"text": reply}])
    assert env.post_webhook(json.dumps(text_body(CUSTOMER_TEXT, 1, sent_at=env.clock.now()))
                            .encode()) == 200
    env.drain()
    assert [s.body["text"]["body"] for s in env.graph_api.accepted] == [reply]
    assert '"level": "debug"' in captured.text() or "[debug" in captured.text()
    captured.assert_no_customer_data([ANA[0], ANA[1], CUSTOMER_TEXT, reply])


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_customer_fields_are_blanked_at_debug_too(fmt: str) -> None:
    def emit() -> None:
        structlog.get_logger("t").debug("d", text="oi, sou a Ana", wa_id="5511999990001",
                                        to="5511999990001")

    out = render(fmt, [], emit)
    assert "oi, sou a Ana" not in out and "5511999990001" not in out
    assert out.count("[redacted]") == 3


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_secret_fields_are_blanked_at_every_level_and_values_wherever_they_appear(
        fmt: str) -> None:
    minted = "wcs_" + "A" * 43

    def emit() -> None:
        log = structlog.get_logger("t")
        log.debug("d", token="field-token-value", cookie="c=1", csrf="field-csrf-value")
        log.info("i", error=f"upstream said {API_KEY} was wrong", note=f"saw {minted}")
        logging.getLogger("aiohttp.server").error("bad line b'Authorization: %s'", OPERATOR)

    out = render(fmt, [API_KEY, OPERATOR, "short"], emit)
    for value in ("field-token-value", "field-csrf-value", API_KEY, OPERATOR, minted):
        assert value not in out, value
    assert out.count("[redacted]") >= 6


def test_the_settings_name_their_secrets_and_keep_them_out_of_their_repr() -> None:
    settings = Settings(**{**SETTINGS.__dict__,
                           "database_url": "postgresql://wagent:db-password-123@db/wagent",
                           "redis_url": "redis://:redis-password-456@cache:6379/0"})
    assert set(settings.secret_values()) == {*ALL_SETTINGS_SECRETS, "db-password-123",
                                             "redis-password-456"}
    shown = repr(settings)
    for secret in settings.secret_values():
        assert secret not in shown


def test_database_errors_name_the_statement_never_its_values(engine: Engine) -> None:
    phone = "5511999990001"
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE probe (wa_id VARCHAR(32) UNIQUE)"))
        connection.execute(text("INSERT INTO probe VALUES (:w)"), {"w": phone})
    with pytest.raises(Exception) as raised, engine.begin() as connection:
        connection.execute(text("INSERT INTO probe VALUES (:w)"), {"w": phone})
    message = str(raised.value)
    assert "INSERT INTO probe" in message and phone not in message
    assert "[SQL parameters hidden due to hide_parameters=True]" in message
    if engine.dialect.name == "postgresql":  # the DETAIL line is cut, still there for code
        assert "DETAIL" not in message and "Key (wa_id)" not in message
        assert phone in raised.value.orig.diag.message_detail  # type: ignore[union-attr]
        assert raised.value.orig.sqlstate == "23505"  # type: ignore[union-attr]


async def test_console_session_keys_in_redis_hold_no_session_id(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    _, token = tenant_token(engine)
    client = await aiohttp_client(create_app(SETTINGS, engine=engine,
                                             redis_client=redis_client))
    sid, csrf = await sign_in(client, token)
    assert sid.startswith("wcs_") and csrf.startswith("wcf_")
    keys = [k.decode() for k in redis_client.scan_iter("sec:*")]
    assert any(k.startswith("sec:console:session:") for k in keys), keys
    assert not [k for k in keys if sid in k or sid[4:] in k]


async def test_a_refused_token_on_a_contact_route_logs_the_route_template_not_the_phone(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis,
        captured: Captured) -> None:
    """Issue 35 item 7: the contact routes' path is the customer's phone; every line of the
    request (admin_token_refused, admin_call and the request's bound context) names the
    route's template instead, at every level."""
    tenant_id, _ = tenant_token(engine)
    server = TestServer(create_app(SETTINGS, engine=engine, redis_client=redis_client))
    await server.start_server(access_log=None)  # as `wagent web` runs it (cli/web.py)
    client = await aiohttp_client(server)
    for method, path in (("GET", f"/admin/tenants/{tenant_id}/contacts/{ANA[0]}/export"),
                         ("DELETE", f"/admin/tenants/{tenant_id}/contacts/{ANA[0]}"),
                         ("GET", f"/admin/nowhere/{ANA[0]}")):
        response = await client.request(method, path,
                                        headers={"Authorization": "Bearer not-a-token-at-all"})
        assert response.status in (401, 404), path
    text = captured.text()
    assert "admin_token_refused" in text
    assert "/admin/tenants/{tenant_id}/contacts/{contact}" in text
    captured.assert_no_customer_data([ANA[0]])
