"""Adversarial checks of the admin API and the console (a security review, 2026-11-29).

The tests under "problems found" reproduce what the review broke (each fixed since); the
others pin what held (isolation, escaping, redirects, tokens). The concurrency tests matter on
PostgreSQL (SQLite serialises writers, so there they hold trivially).
"""

import http.client
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlmodel import select

from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import Appointment, Contact, ContactFact, Conversation, Message
from tests.conftest import START
from tests.console_helpers import Seeded, seed

OPERATOR = "operator-token-for-break-tests"
XSS = '"><script>alert(1)</script><img src=x onerror=alert(2)>'


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url,
                                    admin_token=OPERATOR)
    yield environment
    environment.close()


@pytest.fixture
def seeded(env: ReplayEnvironment) -> Seeded:
    return seed(env)


def _is_postgres(env: ReplayEnvironment) -> bool:
    return env.engine.url.get_backend_name() == "postgresql"


def call(env: ReplayEnvironment, method: str, path: str, body: Any = None, *,
         token: str | None = OPERATOR, raw: bytes | None = None,
         authorization: str | None = None) -> tuple[int, Any]:
    url = urllib.parse.urlparse(env.web_url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    elif token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    connection.request(method, path, data, headers)
    response = connection.getresponse()
    payload = response.read()
    try:
        return response.status, json.loads(payload) if payload else None
    except ValueError:
        return response.status, payload.decode("utf-8", "replace")


class Browser:
    """Cookie-keeping client that does not follow redirects (any path, raw bodies)."""

    def __init__(self, base: str) -> None:
        url = urllib.parse.urlparse(base)
        self.host, self.port = url.hostname or "", url.port or 80
        self.cookies: dict[str, str] = {}
        self.csrf = ""

    def request(self, path: str, data: dict[str, Any] | None = None
                ) -> tuple[int, str, dict[str, str]]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        headers = {}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = urllib.parse.urlencode(data, doseq=True).encode() if data is not None else None
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        connection.request("POST" if body is not None else "GET", path, body, headers)
        response = connection.getresponse()
        text = response.read().decode("utf-8", "replace")
        for name, value in response.getheaders():
            if name.lower() == "set-cookie":
                key, _, rest = value.partition("=")
                cookie = rest.split(";")[0]
                if "Max-Age=0" in value:
                    self.cookies.pop(key, None)
                else:
                    self.cookies[key] = cookie
        found = re.search(r'name="csrf" value="([^"]+)"', text)
        if found:
            self.csrf = found.group(1)
        return response.status, text, dict(response.getheaders())

    def sign_in(self, token: str) -> None:
        self.request("/console/login")
        status, _, headers = self.request("/console/login", {"csrf": self.csrf, "token": token})
        assert status == 303 and headers["Location"] == "/console/"
        assert self.request("/console/")[0] == 200


# -- what held -------------------------------------------------------------------------------

def test_own_tenant_path_with_another_tenants_ids_and_refs_is_404(
        env: ReplayEnvironment, seeded: Seeded) -> None:
    salon = f"/admin/tenants/{_tenant_id(env, '109876543210987')}"
    bruno_phone, bruno_user = "5511999990002", "BR.9000000000000000002"
    with session_scope(env.engine) as session:
        bruno = session.exec(select(Contact).where(Contact.wa_id == bruno_phone)).one()
    for method, path, body in (
            ("GET", f"{salon}/conversations/{seeded.garage_conversation_id}", None),
            ("GET", f"{salon}/conversations?contact={bruno_phone}", None),
            ("GET", f"{salon}/conversations?contact={bruno.id}", None),
            ("GET", f"{salon}/appointments?contact={bruno_user}", None),
            ("GET", f"{salon}/contacts/{bruno_phone}/export", None),
            ("DELETE", f"{salon}/contacts/{bruno.id}", None),
            ("POST", f"{salon}/facts/{seeded.garage_fact_id}/approve", {}),
            ("POST", f"{salon}/facts/{seeded.garage_fact_id}/reject", {}),
            ("POST", f"{salon}/facts/{seeded.garage_fact_id}/edit", {"value": "x", "reason": "y"}),
            ("DELETE", f"{salon}/services/revisao", None),
            ("DELETE", f"{salon}/professionals/caio", None)):
        status, answer = call(env, method, path, body, token=seeded.salon_token)
        assert status == 404, (method, path, status, answer)
    status, answer = call(env, "PUT", f"{salon}/professionals/zz", {"services": ["revisao"]},
                          token=seeded.salon_token)
    assert status == 422 and "revisao" in answer["error"]["message"]
    with session_scope(env.engine) as session:
        fact = session.get(ContactFact, seeded.garage_fact_id)
        assert fact is not None and fact.state == "pending_review"
        assert session.get(Contact, bruno.id) is not None


@pytest.mark.parametrize("authorization", [
    "Bearer ", "Bearer    ", "Bearer", "", "bearer", "Basic " + OPERATOR,
    "Bearer\t" + OPERATOR, "Bearer " + OPERATOR + "x", "Bearer " + "a" * 600])
def test_malformed_or_wrong_authorization_is_401(env: ReplayEnvironment,
                                                 authorization: str) -> None:
    assert call(env, "GET", "/admin/tenants", authorization=authorization)[0] == 401


def test_an_unset_operator_token_grants_nothing(database_url: str | None,
                                                redis_url: str | None) -> None:
    environment = ReplayEnvironment(start=START, database_url=database_url,
                                    redis_url=redis_url, admin_token="")
    try:
        for authorization in ("Bearer ", "Bearer  ", "Bearer \"\"", "Bearer None"):
            assert call(environment, "GET", "/admin/tenants",
                        authorization=authorization)[0] == 401
            assert call(environment, "POST", "/admin/tenants",
                        {"phone_number_id": "1", "name": "x"},
                        authorization=authorization)[0] == 401
    finally:
        environment.close()


def test_stored_markup_is_escaped_on_every_page(env: ReplayEnvironment, seeded: Seeded) -> None:
    salon = _tenant_id(env, "109876543210987")
    with session_scope(env.engine) as session:
        conversation = session.get(Conversation, seeded.salon_conversation_id)
        assert conversation is not None and conversation.id is not None
        contact = session.get(Contact, conversation.contact_id)
        assert contact is not None and contact.id is not None
        conversation_id = conversation.id
        contact.profile_name = "Ana" + XSS
        conversation.summary = "summary" + XSS
        message = Message(tenant_id=salon, conversation_id=conversation.id, role="user",
                          direction="inbound", position=999,
                          content=[{"type": "text", "text": "msg" + XSS}],
                          received_at=datetime(2026, 6, 1, 14, tzinfo=UTC))
        session.add_all([contact, conversation, message])
        session.flush()
        session.add(ContactFact(tenant_id=salon, contact_id=contact.id,
                                conversation_id=conversation.id, key="allergies",
                                value="v" + XSS, state="pending_review", origin="extracted",
                                source_message_id=message.id, created_at=env.clock.now()))
    assert call(env, "PATCH", f"/admin/tenants/{salon}",
                {"name": "Salao" + XSS, "instructions": "i" + XSS})[0] == 200
    assert call(env, "PUT", f"/admin/tenants/{salon}/services/xss",
                {"name": "s" + XSS, "duration_minutes": 30})[0] == 201
    assert call(env, "PUT", f"/admin/tenants/{salon}/hours-exceptions/2026-06-20",
                {"note": "n" + XSS})[0] == 201
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    for path in ("/console/", "/console/settings", "/console/catalog", "/console/review",
                 "/console/conversations", f"/console/conversations/{conversation_id}",
                 "/console/conversations?contact=%3Cscript%3E"):
        status, page, _ = browser.request(path)
        assert status == 200, path
        assert "<script" not in page and "<img" not in page, path


@pytest.mark.parametrize("target", ["https://evil.example/console/", "//evil.example/",
                                    "/console//evil.example", "/console/\t/evil.example",
                                    "/console/\r\nSet-Cookie: a=b", "/\\evil.example"])
def test_the_language_switch_never_redirects_off_site(env: ReplayEnvironment, seeded: Seeded,
                                                      target: str) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    status, _, headers = browser.request("/console/language", {
        "csrf": browser.csrf, "language": "en", "next": target})
    assert status == 303
    location = headers["Location"]
    assert location.startswith("/console/") and "\n" not in location and "\r" not in location


def test_a_login_without_the_login_cookie_is_refused(env: ReplayEnvironment,
                                                     seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    assert browser.request("/console/login", {"csrf": "", "token": seeded.salon_token})[0] == 403
    assert browser.request("/console/login", {"csrf": "x", "token": seeded.salon_token})[0] == 403


def test_facts_rejected_twice_or_approved_after_rejection_are_409(
        env: ReplayEnvironment, seeded: Seeded) -> None:
    salon = _tenant_id(env, "109876543210987")
    base = f"/admin/tenants/{salon}/facts/{seeded.salon_fact_id}"
    assert call(env, "POST", base + "/reject", {})[0] == 202
    assert call(env, "POST", base + "/reject", {})[0] == 409
    assert call(env, "POST", base + "/approve", {})[0] == 409
    assert call(env, "POST", base + "/edit", {"value": "x", "reason": "y"})[0] == 409


# -- problems found ------------------------------------------------------------------------

def test_deeply_nested_json_is_a_4xx_not_a_500(env: ReplayEnvironment,
                                               seeded: Seeded) -> None:
    salon = _tenant_id(env, "109876543210987")
    for depth in (500, 900):
        raw = b'{"reason":' + b"[" * depth + b"]" * depth + b"}"
        status, _ = call(env, "POST", f"/admin/tenants/{salon}/facts/"
                         f"{seeded.salon_fact_id}/approve", raw=raw, token=seeded.salon_token)
        assert status < 500, depth
        status, _ = call(env, "POST", f"/admin/tenants/{salon}/facts/"
                         f"{seeded.salon_fact_id}/approve", raw=raw, token="not-a-token")
        assert status == 401, ("unauthenticated", depth)


def test_an_unknown_token_gets_401_before_any_validation(env: ReplayEnvironment) -> None:
    for method, path, body in (("GET", "/admin/tenants/1/conversations/abc", None),
                               ("GET", "/admin/tenants/1/contacts?bogus=1", None),
                               ("PUT", "/admin/tenants/1/hours-exceptions/2026-02-30", {})):
        assert call(env, method, path, body, token="not-a-token")[0] == 401, path


def test_console_forms_with_nul_characters_are_not_500(env: ReplayEnvironment,
                                                       seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    for path, data in (("/console/catalog/services", {"code": "n", "name": "a\x00",
                                                      "duration_minutes": "30"}),
                       ("/console/catalog/services/remove", {"code": "a\x00"}),
                       ("/console/catalog/holidays", {"day": "2026-07-01", "note": "a\x00"}),
                       (f"/console/review/{seeded.salon_fact_id}/reject", {"reason": "a\x00"}),
                       ("/console/settings", {
                           "instructions": "a\x00", "inactivity_timeout_minutes": "60",
                           "retention_days": "30", "language": "pt-BR", "fact_keys": "",
                           "followup_template": "", "followup_template_language": ""})):
        assert browser.request(path, {"csrf": browser.csrf, **data})[0] < 500, path
    assert browser.request("/console/conversations?contact=%00")[0] < 500


def test_console_conversation_id_of_a_superscript_digit_is_404(env: ReplayEnvironment,
                                                               seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    assert browser.request("/console/conversations/%C2%B2")[0] == 404


def test_console_fact_keys_that_json_cannot_take_are_422(env: ReplayEnvironment,
                                                         seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    base = {"csrf": browser.csrf, "instructions": "ok", "inactivity_timeout_minutes": "60",
            "retention_days": "30", "language": "pt-BR", "followup_template": "",
            "followup_template_language": ""}
    for line in ('{"a":' * 3000 + "1" + "}" * 3000,
                 '{"name":"zz_k","kind":"preference","validity_days":1' + "0" * 5000 + "}"):
        assert browser.request("/console/settings", {**base, "fact_keys": line})[0] == 422


@pytest.mark.parametrize("value", ["529–982–247–25", "529 . 982 . 247 - 25",
                                   "4111,1111,1111,1111", "4111 - 1111 - 1111 - 1111"])
def test_a_fact_edit_cannot_store_a_cpf_or_card_number(env: ReplayEnvironment, seeded: Seeded,
                                                       value: str) -> None:
    salon = _tenant_id(env, "109876543210987")
    status, _ = call(env, "POST", f"/admin/tenants/{salon}/facts/{seeded.salon_fact_id}/edit",
                     {"value": value, "reason": "typed by the owner"})
    assert status == 422


def test_a_professional_cannot_drop_a_service_with_upcoming_bookings(
        env: ReplayEnvironment, seeded: Seeded) -> None:
    salon = _tenant_id(env, "109876543210987")
    assert call(env, "DELETE", f"/admin/tenants/{salon}/professionals/julia")[0] == 409
    status, kept = call(env, "PUT", f"/admin/tenants/{salon}/professionals/julia", {})
    assert (status, kept["name"], kept["services"]) == (200, "Júlia", ["corte"]), "{}: no change"
    status, body = call(env, "PUT", f"/admin/tenants/{salon}/professionals/julia",
                        {"services": []})
    assert status == 409 and "upcoming" in body["error"]["message"]


def test_concurrent_cancels_of_one_booking_succeed_once(env: ReplayEnvironment,
                                                        seeded: Seeded) -> None:
    salon = _tenant_id(env, "109876543210987")
    with session_scope(env.engine) as session:
        booking = session.exec(select(Appointment)).one()
    statuses: list[int] = []
    barrier = threading.Barrier(8)

    def cancel() -> None:
        barrier.wait()
        statuses.append(call(env, "POST", f"/admin/tenants/{salon}/appointments/"
                             f"{booking.id}/cancel", {})[0])

    threads = [threading.Thread(target=cancel) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses).count(200) == 1, statuses


def _tenant_id(env: ReplayEnvironment, phone_number_id: str) -> int:
    status, tenants = call(env, "GET", "/admin/tenants")
    assert status == 200
    return int(next(t["id"] for t in tenants if t["phone_number_id"] == phone_number_id))


def test_concurrent_weekly_hours_keep_one_of_the_bodies(env: ReplayEnvironment,
                                                        seeded: Seeded) -> None:
    salon = _tenant_id(env, "109876543210987")
    bodies = [{"hours": {"tue": ["08:00-12:00"]}}, {"hours": {"tue": ["13:00-17:00"]}}]
    for _ in range(10):
        barrier = threading.Barrier(2)

        def put(body: dict[str, Any], wait: threading.Barrier = barrier) -> None:
            wait.wait()
            call(env, "PUT", f"/admin/tenants/{salon}/hours", body)

        threads = [threading.Thread(target=put, args=(b,)) for b in bodies]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        status, catalogue = call(env, "GET", f"/admin/tenants/{salon}/catalog")
        assert catalogue["hours"] in ({"tue": ["08:00-12:00"]}, {"tue": ["13:00-17:00"]}), \
            catalogue["hours"]
