"""Webhook endpoints through the admin API, the CLI and the console (issue 24): the secret is
shown once, another tenant's endpoint is 404, the delivery log says what happened."""

import json
from collections.abc import Iterator

import pytest

from replay.environment import ReplayEnvironment
from replay.webhook_receiver import WebhookReceiver
from tests.conftest import START
from tests.factories import TENANT
from tests.test_admin_api import OPERATOR, OTHER, call, ids, token_for


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url,
                                    admin_token=OPERATOR, webhook_allowed_networks="127.0.0.1/32")
    environment.add_tenant(TENANT)
    environment.add_tenant(OTHER)
    yield environment
    environment.close()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    double = WebhookReceiver()
    double.start()
    yield double
    double.stop()


def test_add_list_rotate_log_remove_through_the_api(env: ReplayEnvironment,
                                                    receiver: WebhookReceiver) -> None:
    salon, _ = ids(env)
    token = token_for(env, salon)
    base = f"/admin/tenants/{salon}/webhooks"
    status, made = call(env, "POST", base, {"url": receiver.url,
                                            "events": ["appointment.cancelled"]}, token=token)
    assert status == 201 and made["secret"].startswith("whsec_")
    receiver.secrets = [made["secret"]]
    status, listed = call(env, "GET", base, token=token)
    assert status == 200 and [e["id"] for e in listed] == [made["id"]]
    assert "secret" not in listed[0] and made["secret"] not in str(listed)
    status, rotated = call(env, "POST", f"{base}/{made['id']}/rotate-secret",
                           {"grace_hours": 2}, token=token)
    assert status == 200 and rotated["secret"] != made["secret"] and rotated["rotating_until"]
    status, _ = call(env, "POST", f"{base}/{made['id']}/rotate-secret", None, token=token)
    assert status == 200, "the grace period defaults (24 h)"
    status, log = call(env, "GET", f"{base}/{made['id']}/deliveries", token=token)
    assert status == 200 and log["deliveries"] == [] and "secret" not in log["endpoint"]
    status, _ = call(env, "DELETE", f"{base}/{made['id']}", token=token)
    assert status == 204
    assert call(env, "GET", base, token=token)[1] == []


def test_a_cancel_through_the_api_is_delivered_and_logged(env: ReplayEnvironment,
                                                          receiver: WebhookReceiver) -> None:
    from datetime import timedelta

    from sqlmodel import select

    from storage.db import session_scope
    from storage.models import Appointment, Contact, Professional, Service
    salon, _ = ids(env)
    base = f"/admin/tenants/{salon}/webhooks"
    status, made = call(env, "POST", base, {"url": receiver.url,
                                            "events": ["appointment.cancelled"]})
    assert status == 201
    receiver.secrets = [made["secret"]]
    now = env.clock.now()
    with session_scope(env.engine) as session:
        service = session.exec(select(Service).where(Service.tenant_id == salon)).one()
        pro = session.exec(select(Professional).where(Professional.tenant_id == salon)).one()
        contact = Contact(tenant_id=salon, wa_id="5511999990001", created_at=now)
        session.add(contact)
        session.flush()
        booking = Appointment(tenant_id=salon, contact_id=contact.id or 0,
                              service_id=service.id or 0, professional_id=pro.id or 0,
                              start_at=now + timedelta(days=1),
                              end_at=now + timedelta(days=1, hours=1), created_at=now)
        session.add(booking)
        session.flush()
        booking_id = booking.id
    status, _ = call(env, "POST", f"/admin/tenants/{salon}/appointments/{booking_id}/cancel", {})
    assert status == 200
    env.drain()
    assert [(r.type, r.verified) for r in receiver.received] == [("appointment.cancelled", True)]
    status, log = call(env, "GET", f"{base}/{made['id']}/deliveries")
    entry = log["deliveries"][0]
    assert (entry["status"], entry["attempts"], entry["last_status_code"]) == ("delivered", 1, 200)


def test_another_tenants_endpoint_is_404_and_bad_input_is_422(env: ReplayEnvironment,
                                                              receiver: WebhookReceiver) -> None:
    salon, garage = ids(env)
    status, theirs = call(env, "POST", f"/admin/tenants/{garage}/webhooks",
                          {"url": receiver.url, "events": ["message.failed"]})
    assert status == 201
    token = token_for(env, salon)
    mine = f"/admin/tenants/{salon}/webhooks/{theirs['id']}"
    for method, path, body in (("GET", mine + "/deliveries", None),
                               ("POST", mine + "/rotate-secret", {}),
                               ("POST", mine + "/enable", {}), ("DELETE", mine, None)):
        status, answer = call(env, method, path, body, token=token)
        assert status == 404 and set(answer) == {"error"}, (method, path)
    status, answer = call(env, "GET", f"/admin/tenants/{garage}/webhooks", token=token)
    assert status == 404 and theirs["secret"] not in str(answer)
    status, answer = call(env, "GET", f"/admin/tenants/{garage}/webhooks")
    assert status == 200 and len(answer) == 1, "nothing removed"
    for body in ({"url": "ftp://x.example/", "events": ["message.failed"]},
                 {"url": "https://x.example/", "events": ["appointment.eaten"]},
                 {"url": "https://x.example/", "events": []},
                 {"url": "https://x.example/", "events": ["message.failed"], "extra": 1}):
        status, answer = call(env, "POST", f"/admin/tenants/{salon}/webhooks", body, token=token)
        assert status == 422, body
    status, own = call(env, "POST", f"/admin/tenants/{salon}/webhooks",
                       {"url": receiver.url, "events": ["message.failed"]}, token=token)
    status, answer = call(env, "POST", f"/admin/tenants/{salon}/webhooks/{own['id']}"
                          "/rotate-secret", {"grace_hours": 1000}, token=token)
    assert status == 422


def test_the_cli_adds_lists_rotates_and_removes(env: ReplayEnvironment,
                                                receiver: WebhookReceiver,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.main import main
    monkeypatch.setenv("DATABASE_URL", env.engine.url.render_as_string(hide_password=False))
    number = TENANT["phone_number_id"]
    assert main(["webhooks", "add", number, receiver.url, "--events",
                 "appointment.booked,message.failed", "--description", "crm"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["secret"].startswith("whsec_") and made["events"] == ["appointment.booked",
                                                                      "message.failed"]
    assert main(["webhooks", "list", number]) == 0
    listed = capsys.readouterr().out
    assert receiver.url in listed and made["secret"] not in listed and "enabled" in listed
    assert main(["webhooks", "rotate-secret", number, str(made["id"]), "--grace-hours",
                 "1"]) == 0
    rotated = json.loads(capsys.readouterr().out)
    assert rotated["secret"] != made["secret"] and rotated["rotating_until"]
    assert main(["webhooks", "remove", number, str(made["id"])]) == 0
    capsys.readouterr()
    assert main(["webhooks", "remove", number, str(made["id"])]) == 2
    assert "no webhook endpoint" in capsys.readouterr().err
    assert main(["webhooks", "add", number, "ftp://x.example/", "--events",
                 "message.failed"]) == 2
    assert main(["webhooks", "add", number, receiver.url, "--events", "nope"]) == 2


def test_the_console_adds_shows_the_secret_once_and_says_when_disabled(
        env: ReplayEnvironment, receiver: WebhookReceiver) -> None:
    from sqlmodel import select

    from storage.db import session_scope
    from storage.models import WebhookEndpoint
    from tests.test_console import Browser
    salon, garage = ids(env)
    browser = Browser(env.web_url)
    browser.sign_in(token_for(env, salon))
    status, page, _ = browser.request("/console/webhooks")
    assert status == 200 and "Nenhum endereço cadastrado" in page
    status, page, _ = browser.request("/console/webhooks", {
        "csrf": browser.csrf, "url": receiver.url,
        "events": ["appointment.booked", "message.failed"]})
    assert status == 200 and "não será mostrado de novo" in page
    with session_scope(env.engine) as session:
        endpoint = session.exec(select(WebhookEndpoint)).one()
        secret, endpoint_id = endpoint.secret, endpoint.id
    assert secret in page
    status, page, _ = browser.request("/console/webhooks")
    assert secret not in page and receiver.url.replace("&", "&amp;") in page and "ativo" in page
    with session_scope(env.engine) as session:
        endpoint = session.get(WebhookEndpoint, endpoint_id)
        endpoint.disabled_at, endpoint.disabled_reason = env.clock.now(), "failing"
        session.add(endpoint)
    status, page, _ = browser.request("/console/webhooks")
    assert "Desativado: as entregas falharam por 24 horas" in page
    status, page, _ = browser.request(f"/console/webhooks/{endpoint_id}")
    assert status == 200 and "Nenhuma entrega ainda" in page and secret not in page
    status, _, headers = browser.request(f"/console/webhooks/{endpoint_id}/enable",
                                         {"csrf": browser.csrf})
    assert status == 303
    status, page, _ = browser.request(f"/console/webhooks/{endpoint_id}/rotate",
                                      {"csrf": browser.csrf})
    with session_scope(env.engine) as session:
        rotated = session.get(WebhookEndpoint, endpoint_id)
        assert rotated.disabled_at is None and rotated.previous_secret == secret
        new_secret = rotated.secret
    assert new_secret in page and secret not in page
    status, page, _ = browser.request("/console/webhooks", {
        "csrf": browser.csrf, "url": "ftp://x.example/", "events": ["message.failed"]})
    assert status == 303, "refused with the reason"
    theirs = call(env, "POST", f"/admin/tenants/{garage}/webhooks",
                  {"url": receiver.url, "events": ["message.failed"]})[1]
    status, page, _ = browser.request(f"/console/webhooks/{theirs['id']}")
    assert status == 404 and theirs["secret"] not in page
    status, _, _ = browser.request(f"/console/webhooks/{theirs['id']}/remove",
                                   {"csrf": browser.csrf})
    assert status == 404
    status, _, _ = browser.request(f"/console/webhooks/{endpoint_id}/remove",
                                   {"csrf": browser.csrf})
    assert status == 303
