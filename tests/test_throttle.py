"""Credential guessing is throttled (docs/OPERATE.md, Security; issue 15 item 4): failed console
sign-ins and bearer tokens are counted in Redis per client address (a trusted proxy's
X-Forwarded-For only when TRUSTED_PROXIES names the proxy) and per tenant, and answered 429 with
Retry-After once used up; start-up refuses an ADMIN_TOKEN shorter than 32 characters.
"""

import re
import secrets
from typing import Any

import pytest
import redis
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from sqlalchemy import Engine

from bot.app import create_app
from bot.guard import client_address
from cli import main as cli
from core.credentials import TENANT_TOKEN, tenant_named
from core.errors import SettingsError
from core.settings import Settings
from intake.keys import SETTINGS
from operations import service
from storage.db import session_scope
from storage.keys import auth_failures_key
from storage.tenants import upsert_tenant
from tests.conftest import START
from tests.factories import TENANT

OPERATOR = "throttle-operator-token-0123456789abcdef"
GARAGE = {**TENANT, "phone_number_id": "109876543210999", "name": "Oficina Exemplo"}


def make_settings(**overrides: Any) -> Settings:
    return Settings(whatsapp_app_secret="throttle-app-secret", admin_token=OPERATOR,
                    redis_prefix="thr", queue_name="thr", **overrides)


def tenant_with_token(engine: Engine, config: dict[str, Any]) -> tuple[int, str]:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, config, now=START)
        return int(tenant.id or 0), service.create_token(session, tenant, label="x",
                                                         now=START)["token"]


def guess(tenant_id: int | None = None) -> str:
    """A wrong token, of the current form (naming `tenant_id`) or of no form at all."""
    if tenant_id is None:
        return "not-a-token-" + secrets.token_urlsafe(8)
    return f"{TENANT_TOKEN}{tenant_id}_{secrets.token_urlsafe(32)}"


async def sign_in(client: Any, token: str, address: str | None = None) -> Any:
    headers = {"X-Forwarded-For": address} if address else {}
    page = await (await client.get("/console/login")).text()
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found
    return await client.post("/console/login", data={"csrf": found.group(1), "token": token},
                             headers=headers, allow_redirects=False)


async def api(client: Any, token: str, tenant_id: int, address: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    if address:
        headers["X-Forwarded-For"] = address
    return await client.get(f"/admin/tenants/{tenant_id}", headers=headers)


def test_the_defaults_are_10_per_address_and_100_per_tenant_in_15_minutes() -> None:
    settings = Settings()
    assert (settings.auth_failures_per_address, settings.auth_failures_per_tenant,
            settings.auth_failure_window_seconds, settings.trusted_proxies) == (10, 100, 900, "")


async def test_wrong_console_sign_ins_are_limited_per_address(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    _, token = tenant_with_token(engine, TENANT)
    client = await aiohttp_client(create_app(make_settings(), engine=engine,
                                             redis_client=redis_client))
    for _ in range(10):
        response = await sign_in(client, guess())
        assert response.status == 303 and "failed" in response.headers["Location"]
    refused = await sign_in(client, token)  # even the right key: not looked at
    assert refused.status == 429
    assert 895 <= int(refused.headers["Retry-After"]) <= 900
    page = await refused.text()
    assert 'lang="pt-BR"' in page and "Muitas tentativas" in page and "15 min" in page
    assert 'name="csrf"' in page  # a form to try again later
    key = auth_failures_key("thr", "address", "127.0.0.1")
    assert int(redis_client.get(key) or 0) == 10 and 895 <= redis_client.ttl(key) <= 900


async def test_wrong_bearer_tokens_are_limited_per_address_and_429_says_when_to_retry(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    tenant_id, token = tenant_with_token(engine, TENANT)
    client = await aiohttp_client(create_app(make_settings(), engine=engine,
                                             redis_client=redis_client))
    for wrong in [guess(), OPERATOR + "x", *(guess(tenant_id) for _ in range(8))]:
        assert (await api(client, wrong, tenant_id)).status == 401
    for right in (token, OPERATOR):
        response = await api(client, right, tenant_id)
        assert response.status == 429
        assert 895 <= int(response.headers["Retry-After"]) <= 900
        assert (await response.json())["error"]["code"] == "too_many_attempts"
    # console and API share the address's count
    assert (await sign_in(client, token)).status == 429


async def test_a_proxys_forwarded_address_counts_only_when_the_proxy_is_trusted(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    tenant_id, token = tenant_with_token(engine, TENANT)
    untrusted = await aiohttp_client(create_app(make_settings(), engine=engine,
                                                redis_client=redis_client))
    for n in range(10):  # a client cannot dodge its count by naming another address
        assert (await api(untrusted, guess(), tenant_id, f"203.0.113.{n}")).status == 401
    assert (await api(untrusted, token, tenant_id, "203.0.113.99")).status == 429
    redis_client.flushdb()
    behind_proxy = await aiohttp_client(create_app(
        make_settings(trusted_proxies="127.0.0.1"), engine=engine, redis_client=redis_client))
    for _ in range(10):
        assert (await api(behind_proxy, guess(), tenant_id, "203.0.113.7")).status == 401
    assert (await api(behind_proxy, token, tenant_id, "203.0.113.7")).status == 429
    assert (await api(behind_proxy, token, tenant_id, "203.0.113.8")).status == 200
    response = await sign_in(behind_proxy, token, "203.0.113.8")
    assert response.status == 303 and response.headers["Location"] == "/console/"


async def test_failures_naming_a_tenant_are_limited_in_total_across_addresses(
        aiohttp_client: Any, engine: Engine, redis_client: redis.Redis) -> None:
    salon_id, salon_token = tenant_with_token(engine, TENANT)
    garage_id, garage_token = tenant_with_token(engine, GARAGE)
    assert tenant_named(salon_token) == salon_id
    assert tenant_named("wat_" + secrets.token_urlsafe(32)) is None  # the older form
    client = await aiohttp_client(create_app(
        make_settings(trusted_proxies="127.0.0.0/8", auth_failures_per_tenant=12),
        engine=engine, redis_client=redis_client))
    signed_in = await sign_in(client, salon_token, "198.51.100.250")
    assert signed_in.status == 303 and signed_in.headers["Location"] == "/console/"
    for n in range(12):  # a spread guess: one failure per address, all naming the salon
        address = f"198.51.100.{n}"
        if n % 2:
            assert (await api(client, guess(salon_id), salon_id, address)).status == 401
        else:
            assert (await sign_in(client, guess(salon_id), address)).status == 303
    fresh = "198.51.100.200"
    assert (await api(client, salon_token, salon_id, fresh)).status == 429
    assert (await sign_in(client, salon_token, fresh)).status == 429
    assert (await api(client, garage_token, garage_id, fresh)).status == 200
    assert (await api(client, OPERATOR, salon_id, fresh)).status == 200  # names no tenant
    assert (await client.get("/console/")).status == 200  # signed in before: goes on


def test_the_client_address() -> None:
    def address(peer: str, forwarded: str | None = None, trusted: str = "") -> str:
        headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        app = web.Application()
        app[SETTINGS] = make_settings(trusted_proxies=trusted)
        request = make_mocked_request("GET", "/", headers=headers, app=app,
                                      transport=_Transport(peer))
        return client_address(request)

    assert address("203.0.113.5") == "203.0.113.5"
    assert address("203.0.113.5", "198.51.100.1") == "203.0.113.5"  # no proxy trusted
    assert address("10.0.0.2", "198.51.100.1, 10.0.0.9", "10.0.0.0/8") == "198.51.100.1"
    assert address("10.0.0.2", "1.2.3.4, 198.51.100.1", "10.0.0.2") == "198.51.100.1"
    assert address("10.0.0.2", "garbage", "10.0.0.2") == "10.0.0.2"
    assert address("10.0.0.2", None, "10.0.0.2") == "10.0.0.2"
    assert address("2001:db8:1:2:3:4:5:6") == "2001:db8:1:2::/64"  # one subscriber's /64
    assert address("::ffff:203.0.113.5") == "203.0.113.5"


class _Transport:
    def __init__(self, peer: str) -> None:
        self.peer = peer

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return (self.peer, 40000) if name == "peername" else default


def test_start_up_refuses_an_admin_token_shorter_than_32_characters(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    base = {"WHATSAPP_APP_SECRET": "s", "WHATSAPP_VERIFY_TOKEN": "v",
            "WHATSAPP_ACCESS_TOKEN": "a", "ANTHROPIC_API_KEY": "k"}
    with pytest.raises(SettingsError, match="ADMIN_TOKEN must be at least 32 characters"):
        Settings.from_env({**base, "ADMIN_TOKEN": "x" * 31})
    assert Settings.from_env({**base, "ADMIN_TOKEN": "x" * 32}).admin_token == "x" * 32
    assert Settings.from_env(base).admin_token == ""  # none: the operator API is off
    for name, value in {**base, "ADMIN_TOKEN": "short-operator-token"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        cli.main(["web"])
    assert exited.value.code == 2
    assert "ADMIN_TOKEN must be at least 32 characters" in capsys.readouterr().err
