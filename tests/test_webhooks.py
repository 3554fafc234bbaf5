"""Outbound webhooks (issue 24): signed, retried on the product's clock, logged, SSRF-guarded.

A loopback receiver (replay/webhook_receiver.py) verifies every signature and counts events
by id. The product reaches it through WEBHOOK_ALLOWED_NETWORKS=127.0.0.1/32, the operator
setting; without it the same URL is refused at connect time.
"""

import io
import json
import logging
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import structlog
from sqlmodel import select

from agent.tools.base import ToolContext
from agent.tools.registry import execute_tool
from core.logs import configure_logging
from hooks import client
from hooks.errors import DeliveryError, DeliveryRefused
from hooks.signature import verify
from operations import service
from operations import webhooks as hook_ops
from replay.environment import ReplayEnvironment
from replay.webhook_receiver import WebhookReceiver
from storage import webhooks
from storage.db import session_scope
from storage.jobs import enqueue_webhooks
from storage.models import (
    Contact,
    ContactFact,
    Conversation,
    Message,
    Outbound,
    Tenant,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from tests.conftest import START
from tests.factories import TENANT
from workers import webhooks as hook_jobs
from workers.jobs import RETRY_POLICIES

LOOPBACK = "127.0.0.1/32"


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url,
                                    webhook_allowed_networks=LOOPBACK)
    environment.add_tenant(TENANT)
    yield environment
    environment.close()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    double = WebhookReceiver()
    double.start()
    yield double
    double.stop()


def _tenant(env: ReplayEnvironment) -> Tenant:
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).first()
        assert tenant is not None
        return tenant


def _add(env: ReplayEnvironment, url: str, events: list[str] | None = None) -> dict[str, Any]:
    tenant = _tenant(env)
    with session_scope(env.engine) as session:
        return hook_ops.add_endpoint(session, tenant, hook_ops.EndpointCreate(
            url=url, events=events or list(webhooks.EVENT_TYPES)), now=env.clock.now())


def _emit(env: ReplayEnvironment, n: int, type: str = "appointment.booked") -> list[str]:
    ids, tenant_id = [], _tenant(env).id or 0
    for i in range(n):
        with session_scope(env.engine) as session:
            row = webhooks.emit(session, tenant_id, type, {"appointment_id": i},
                                now=env.clock.now())
            assert row is not None
            ids.append(row.id)
    return ids


def _contact(env: ReplayEnvironment) -> tuple[int, int]:
    now = env.clock.now()
    with session_scope(env.engine) as session:
        contact = Contact(tenant_id=_tenant(env).id or 0, wa_id="5511999990001", created_at=now)
        session.add(contact)
        session.flush()
        conversation = Conversation(tenant_id=contact.tenant_id, contact_id=contact.id or 0,
                                    last_activity_at=now, due_at=now + timedelta(hours=24),
                                    opened_at=now)
        session.add(conversation)
        session.flush()
        return contact.id or 0, conversation.id or 0


def _deliveries(env: ReplayEnvironment) -> list[WebhookDelivery]:
    with session_scope(env.engine) as session:
        return list(session.exec(select(WebhookDelivery).order_by(WebhookDelivery.id)).all())


def _run_for(env: ReplayEnvironment, duration: timedelta, step: timedelta) -> None:
    """Move the product's clock by `step` until `duration` passed, running due jobs each time."""
    moved = timedelta(0)
    while moved < duration:
        env.clock.advance(step)
        moved += step
        env.drain()


# -- delivery ------------------------------------------------------------------------------

def test_every_event_arrives_once_signed_with_the_documented_body(
        env: ReplayEnvironment, receiver: WebhookReceiver) -> None:
    made = _add(env, receiver.url)
    receiver.secrets = [made["secret"]]
    ids = _emit(env, 5)
    env.drain()
    assert receiver.counts() == {i: 1 for i in ids}, "no id twice in a run without faults"
    assert all(r.verified and r.signatures == 1 for r in receiver.received)
    first = receiver.received[0].body
    assert set(first) == {"id", "type", "created_at", "tenant", "data"}
    assert first["type"] == "appointment.booked" and first["tenant"]["id"] == _tenant(env).id
    assert {d.status for d in _deliveries(env)} == {"delivered"}


def test_a_wrong_secret_does_not_verify(env: ReplayEnvironment,
                                        receiver: WebhookReceiver) -> None:
    _add(env, receiver.url)
    receiver.secrets = ["whsec_not-the-one"]
    _emit(env, 1)
    env.drain()
    assert len(receiver.received) == 1 and not receiver.received[0].verified


def test_receiver_down_for_ten_minutes_gets_every_event_after_it_returns(
        env: ReplayEnvironment, receiver: WebhookReceiver) -> None:
    made = _add(env, receiver.url)
    receiver.secrets = [made["secret"]]
    receiver.go_down()
    ids = _emit(env, 4)
    env.drain()
    _run_for(env, timedelta(minutes=10), timedelta(seconds=30))
    assert receiver.received == []
    assert all(d.status == "pending" and d.attempts >= 4 and d.last_error == "refused"
               for d in _deliveries(env)), "retried on the product's clock, not given up"
    receiver.go_up()
    _run_for(env, timedelta(minutes=30), timedelta(seconds=30))
    counts = receiver.counts()
    assert set(counts) == set(ids), "every event id arrives at least once after it returns"
    assert all(r.verified for r in receiver.received)
    assert {d.status for d in _deliveries(env)} == {"delivered"}


def test_a_rolled_back_change_emits_nothing(env: ReplayEnvironment,
                                            receiver: WebhookReceiver) -> None:
    _add(env, receiver.url)
    with pytest.raises(RuntimeError), session_scope(env.engine) as session:
        webhooks.emit(session, _tenant(env).id or 0, "appointment.booked", {},
                      now=env.clock.now())
        raise RuntimeError("the change fails")
    env.drain()
    with session_scope(env.engine) as session:
        assert session.exec(select(WebhookEvent)).all() == []
    assert receiver.received == []


def test_unknown_event_type_is_a_bug_and_no_endpoint_means_no_row(env: ReplayEnvironment) -> None:
    with session_scope(env.engine) as session:
        with pytest.raises(ValueError, match="unknown webhook event type"):
            webhooks.emit(session, _tenant(env).id or 0, "appointment.eaten", {},
                          now=env.clock.now())
        assert webhooks.emit(session, _tenant(env).id or 0, "appointment.booked", {},
                             now=env.clock.now()) is None


def test_only_the_events_an_endpoint_wants(env: ReplayEnvironment,
                                           receiver: WebhookReceiver) -> None:
    _add(env, receiver.url, ["message.failed"])
    with session_scope(env.engine) as session:
        assert webhooks.emit(session, _tenant(env).id or 0, "appointment.booked", {},
                             now=env.clock.now()) is None
    failed = _emit(env, 1, "message.failed")
    env.drain()
    assert list(receiver.counts()) == failed


def test_a_lost_job_is_found_by_the_sweep(env: ReplayEnvironment,
                                          receiver: WebhookReceiver) -> None:
    _add(env, receiver.url)
    webhooks.install_enqueuer(env.engine, None)  # as a CLI command: no queue at commit
    ids = _emit(env, 2)
    env.drain()
    assert receiver.received == []
    env.clock.advance(webhooks.LOST_AFTER + timedelta(seconds=1))
    assert hook_jobs.sweep_lost(env.runtime) == 2
    env.drain()
    assert receiver.counts() == {i: 1 for i in ids}
    assert hook_jobs.sweep_lost(env.runtime) == 0


def test_an_endpoint_failing_for_24_hours_is_disabled(env: ReplayEnvironment,
                                                      receiver: WebhookReceiver) -> None:
    made = _add(env, receiver.url)
    receiver.status = 500
    first_failure = env.clock.now()
    endpoint = None
    for _ in range(30):  # an event an hour, every one refused, until it is disabled
        _emit(env, 1)
        env.drain()
        _run_for(env, timedelta(hours=1), timedelta(minutes=15))
        with session_scope(env.engine) as session:
            endpoint = session.get(WebhookEndpoint, made["id"])
        assert endpoint is not None
        if endpoint.disabled_at is not None:
            break
    assert endpoint is not None and endpoint.disabled_at is not None
    assert endpoint.disabled_at - first_failure >= webhooks.DISABLE_AFTER
    assert endpoint.disabled_at - first_failure < webhooks.DISABLE_AFTER + timedelta(hours=2)
    delivery = _deliveries(env)[0]
    assert delivery.last_status_code == 500 and delivery.last_error == "http_500"
    assert delivery.attempts <= RETRY_POLICIES["webhook"].max_attempts  # type: ignore[operator]
    tenant = _tenant(env)
    with session_scope(env.engine) as session:
        assert webhooks.emit(session, tenant.id or 0, "appointment.booked", {},
                             now=env.clock.now()) is None, "a disabled endpoint gets nothing"
        view = hook_ops.list_endpoints(session, tenant, now=env.clock.now())[0]
    assert view["state"] == "disabled" and view["disabled_reason"]
    seen = len(receiver.received)
    _run_for(env, timedelta(hours=2), timedelta(minutes=30))
    assert len(receiver.received) == seen, "its waiting deliveries wait"
    receiver.status = 200
    with session_scope(env.engine) as session:
        _, due = hook_ops.enable_endpoint(session, tenant, made["id"], now=env.clock.now())
    assert due, "enabling makes the waiting deliveries due"
    enqueue_webhooks(env.queue, due)
    env.drain()
    assert len(receiver.received) == seen + len(due)


def test_the_retry_policy_backs_off_up_to_about_24_hours() -> None:
    policy = RETRY_POLICIES["webhook"]
    assert policy.max_attempts is not None
    waits = [policy.delay(n) for n in range(1, policy.max_attempts)]
    assert waits == sorted(waits) and max(waits) <= timedelta(hours=8)
    assert timedelta(hours=20) < sum(waits, timedelta(0)) <= timedelta(hours=24)


def test_a_hung_endpoint_costs_a_job_5_seconds(env: ReplayEnvironment,
                                               receiver: WebhookReceiver) -> None:
    _add(env, receiver.url)
    receiver.hang_seconds = 8
    _emit(env, 1)
    started = time.monotonic()
    env.drain()
    assert time.monotonic() - started < client.TIMEOUT_SECONDS + 1.5
    delivery = _deliveries(env)[0]
    assert delivery.status == "pending" and delivery.last_error == "timeout"
    assert delivery.next_attempt_at is not None and delivery.next_attempt_at > env.clock.now()


def test_a_redirect_is_not_followed(env: ReplayEnvironment, receiver: WebhookReceiver) -> None:
    _add(env, receiver.url)
    receiver.status = 302
    _emit(env, 1)
    env.drain()
    assert len(receiver.received) == 1
    assert _deliveries(env)[0].last_error == "http_302"


# -- rotation ------------------------------------------------------------------------------

def test_secret_rotation_signs_with_both_during_the_grace_period(
        env: ReplayEnvironment, receiver: WebhookReceiver) -> None:
    made = _add(env, receiver.url)
    old = made["secret"]
    tenant = _tenant(env)
    with session_scope(env.engine) as session:
        rotated = hook_ops.rotate_secret(session, tenant, made["id"], grace=timedelta(hours=1),
                                         now=env.clock.now())
    new = rotated["secret"]
    assert new != old and rotated["rotating_until"] is not None
    receiver.secrets = [old]
    _emit(env, 1)
    env.drain()
    receiver.secrets = [new]
    _emit(env, 1)
    env.drain()
    assert [(r.signatures, r.verified) for r in receiver.received] == [(2, True), (2, True)]
    env.clock.advance(timedelta(hours=1, seconds=1))
    receiver.secrets = [old]
    _emit(env, 1)
    env.drain()
    assert (receiver.received[-1].signatures, receiver.received[-1].verified) == (1, False)
    receiver.secrets = [new]
    _emit(env, 1)
    env.drain()
    assert receiver.received[-1].verified


def test_the_readme_verification_snippet_accepts_what_is_sent(
        env: ReplayEnvironment, receiver: WebhookReceiver) -> None:
    made = _add(env, receiver.url)
    _emit(env, 1)
    env.drain()
    got = receiver.received[0]
    raw = got.headers["Content-Length"]
    assert int(raw) > 0
    body = json.dumps(got.body, sort_keys=True, separators=(",", ":"),
                                    ensure_ascii=False).encode()
    now = int(env.clock.now().timestamp())
    assert verify(got.headers["X-Wagent-Signature"], made["secret"], body, now=now)
    assert not verify(got.headers["X-Wagent-Signature"], made["secret"], body, now=now + 3600)


# -- SSRF ----------------------------------------------------------------------------------

def test_a_private_address_is_refused_at_connect_time(receiver: WebhookReceiver) -> None:
    """Without the operator's setting, loopback is refused, by name or by address."""
    for url in (receiver.url, f"http://localhost:{receiver.port}/",
                f"https://127.0.0.1:{receiver.port}/"):
        with pytest.raises(DeliveryRefused) as refused:
            client.post(url, b"{}", {}, allowed=())
        assert refused.value.cause in ("private_address", "scheme")
    assert receiver.received == []


def test_dns_rebinding_cannot_point_a_name_at_a_private_address(
        env: ReplayEnvironment, receiver: WebhookReceiver) -> None:
    """The name resolved to a public address at registration; now it says 10.0.0.7: the
    delivery is refused when connecting and no socket is opened."""
    env.runtime.settings = env.settings = type(env.settings)(
        **{**env.settings.__dict__, "webhook_allowed_networks": ""})
    _add(env, "https://hooks.example.com/wagent")

    def rebinding(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "hooks.example.com":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", 443))]
        return socket.getaddrinfo(host, *args, **kwargs)

    env.runtime.resolve = rebinding  # the deliveries' DNS (workers/runtime.py)
    _emit(env, 1)
    env.drain()
    delivery = _deliveries(env)[0]
    assert delivery.last_error == "private_address" and delivery.status == "pending"


def test_http_to_a_public_address_is_refused() -> None:
    def public(*_: Any, **__: Any) -> Any:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80))]

    with pytest.raises(DeliveryRefused) as refused:
        client.post("http://hooks.example.com/", b"{}", {}, allowed=(), resolve=public)
    assert refused.value.cause == "scheme"


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1",
                                     "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1",
                                     "fe80::1", "fd00::1", "::ffff:127.0.0.1", "224.0.0.1",
                                     # IPv4 inside IPv6: NAT64 of the metadata address and of
                                     # 10/8, 6to4, IPv4-compatible, IPv4-translated, Teredo
                                     "64:ff9b::a9fe:a9fe", "64:ff9b::a00:1",
                                     "64:ff9b:1::a00:1", "2002:a9fe:a9fe::", "::127.0.0.1",
                                     "::ffff:0:7f00:1", "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                                     "fec0::1"])
def test_non_public_addresses(address: str) -> None:
    with pytest.raises(DeliveryRefused):
        client.allowed_addresses("https", [(address, 443)], ())


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700:4700::1111",
                                     "64:ff9b::808:808"])
def test_public_addresses_pass_also_through_nat64(address: str) -> None:
    assert client.allowed_addresses("https", [(address, 443)], ()) == [(address, 443)]


def test_a_webhook_secret_is_scrubbed_from_logs() -> None:
    from core.logs import ScrubSecrets
    secret = webhooks.new_secret()
    line = ScrubSecrets()(None, "error", f'{{"event": "boom", "error": "{secret}"}}')
    assert secret not in line and "[redacted]" in line


def test_a_name_that_does_not_resolve_is_a_dns_failure() -> None:
    with pytest.raises(DeliveryError) as failed:
        client.post("https://no-such-host.invalid/", b"{}", {}, allowed=())
    assert failed.value.cause == "dns"


@pytest.mark.parametrize("url", ["ftp://hooks.example.com/", "https://user:pw@example.com/",
                                 "https:///nohost", "hooks.example.com/x"])
def test_unusable_urls_are_refused_at_registration(env: ReplayEnvironment, url: str) -> None:
    with pytest.raises(service.Invalid):
        _add(env, url)


# -- where events come from ------------------------------------------------------------------

def _ctx(env: ReplayEnvironment, contact_id: int, conversation_id: int, tool_use_id: str,
         ) -> ToolContext:
    from zoneinfo import ZoneInfo
    return ToolContext(engine=env.engine, tenant_id=_tenant(env).id or 0, contact_id=contact_id,
                       conversation_id=conversation_id, timezone=ZoneInfo("America/Sao_Paulo"),
                       now=env.clock.now(), tool_use_id=tool_use_id)


def _types(receiver: WebhookReceiver) -> list[str]:
    return [r.type for r in receiver.received]


def test_the_scheduling_tools_and_the_business_cancel_emit(
        env: ReplayEnvironment, receiver: WebhookReceiver) -> None:
    _add(env, receiver.url)
    contact_id, conversation_id = _contact(env)
    ctx = _ctx(env, contact_id, conversation_id, "toolu_book")
    text, error = execute_tool(ctx, "book_appointment", {"service": "corte",
                                                         "start": "2026-06-02T10:00"})
    assert not error, text
    execute_tool(ctx, "book_appointment", {"service": "corte", "start": "2026-06-02T10:00"})
    with session_scope(env.engine) as session:
        booked = session.exec(select(WebhookEvent)).one().data["appointment_id"]
    ctx2 = _ctx(env, contact_id, conversation_id, "toolu_move")
    text, error = execute_tool(ctx2, "reschedule_appointment", {"appointment_id": booked,
                                                               "start": "2026-06-02T14:00"})
    assert not error, text
    env.drain()
    with session_scope(env.engine) as session:
        moved = [e for e in session.exec(select(WebhookEvent)).all()
                 if e.type == "appointment.rescheduled"][0].data
    assert moved["previous_appointment_id"] == booked
    ctx3 = _ctx(env, contact_id, conversation_id, "toolu_cancel")
    execute_tool(ctx3, "cancel_appointment", {"appointment_id": moved["appointment_id"]})
    text, error = execute_tool(_ctx(env, contact_id, conversation_id, "toolu_again"),
                               "book_appointment", {"service": "corte",
                                                    "start": "2026-06-02T16:00"})
    assert not error, text
    tenant = _tenant(env)
    with session_scope(env.engine) as session:
        again = [e for e in session.exec(select(WebhookEvent)).all()
                 if e.type == "appointment.booked"][-1].data["appointment_id"]
        service.cancel_appointment(session, tenant, again, now=env.clock.now())
    env.drain()
    assert _types(receiver) == ["appointment.booked", "appointment.rescheduled",
                                "appointment.cancelled", "appointment.booked",
                                "appointment.cancelled"], "a replayed tool_use emits nothing"
    assert receiver.received[-1].body["data"]["by"] == "business"
    assert receiver.received[2].body["data"]["by"] == "customer"


def test_a_fact_waiting_for_review_emits(env: ReplayEnvironment,
                                         receiver: WebhookReceiver) -> None:
    from storage import facts
    _add(env, receiver.url, ["fact.review_needed"])
    contact_id, _ = _contact(env)
    tenant_id = _tenant(env).id or 0
    with session_scope(env.engine) as session:
        for key, state in (("preferred_name", "suggested"), ("allergy", "pending_review")):
            facts.record(session, ContactFact(tenant_id=tenant_id,
                                              contact_id=contact_id, key=key, value="x",
                                              state=state, created_at=env.clock.now()),
                         now=env.clock.now())
    env.drain()
    assert _types(receiver) == ["fact.review_needed"]
    assert receiver.received[0].body["data"]["key"] == "allergy"
    assert "value" not in receiver.received[0].body["data"]


def test_a_handoff_emits_once_with_ids_only(env: ReplayEnvironment,
                                            receiver: WebhookReceiver) -> None:
    from storage import staff
    _add(env, receiver.url, ["handoff.requested"])
    contact_id, conversation_id = _contact(env)
    tenant_id = _tenant(env).id
    for _ in range(2):  # the second is a no-op: staff already handle it
        with session_scope(env.engine) as session:
            conversation = session.get(Conversation, conversation_id)
            tenant = session.get(Tenant, tenant_id)
            assert conversation is not None and tenant is not None
            staff.start_handoff(session, conversation, tenant, reason="reclamação",
                                summary="cliente quer falar com a dona", now=env.clock.now())
    env.drain()
    assert _types(receiver) == ["handoff.requested"]
    assert receiver.received[0].body["data"] == {"conversation_id": conversation_id,
                                                 "contact_id": contact_id}


def test_a_reply_that_ends_failed_emits_once(env: ReplayEnvironment,
                                             receiver: WebhookReceiver) -> None:
    from storage import messages
    _add(env, receiver.url, ["message.failed"])
    _, conversation_id = _contact(env)
    now, tenant_id = env.clock.now(), _tenant(env).id or 0
    with session_scope(env.engine) as session:
        reply = Message(tenant_id=tenant_id, conversation_id=conversation_id,
                        role="assistant", direction="outbound",
                        content=[{"type": "text", "text": "Olá"}], received_at=now)
        session.add(reply)
        session.flush()
        session.add(Outbound(tenant_id=reply.tenant_id, conversation_id=conversation_id,
                             message_id=reply.id or 0, body="Olá", status="sent",
                             wamid="wamid.HOOK1", created_at=now))
    for status in ("failed", "failed"):
        with session_scope(env.engine) as session:
            messages.apply_status(session, wamid="wamid.HOOK1", status=status, error_code=131026,
                                  error_reason="undeliverable", now=now)
    env.drain()
    assert _types(receiver) == ["message.failed"]
    data = receiver.received[0].body["data"]
    assert data["error_code"] == 131026 and "Olá" not in str(receiver.received[0].body)


# -- secrets -------------------------------------------------------------------------------

def test_secrets_never_reach_the_logs(env: ReplayEnvironment, receiver: WebhookReceiver) -> None:
    buffer = io.StringIO()
    root = logging.getLogger()
    previous = (list(root.handlers), root.level)
    configure_logging("DEBUG", "json", stream=buffer)
    try:
        made = _add(env, receiver.url)
        tenant = _tenant(env)
        with session_scope(env.engine) as session:
            rotated = hook_ops.rotate_secret(session, tenant, made["id"],
                                             grace=timedelta(hours=1), now=env.clock.now())
        receiver.status = 500
        _emit(env, 2)
        env.drain()
        receiver.status = 200
        _run_for(env, timedelta(minutes=2), timedelta(seconds=30))
        with session_scope(env.engine) as session:
            listed = hook_ops.list_endpoints(session, tenant, now=env.clock.now())
            log_view = hook_ops.delivery_log(session, tenant, made["id"], now=env.clock.now())
    finally:
        root.handlers[:] = previous[0]
        root.setLevel(previous[1])
        structlog.reset_defaults()
    text = buffer.getvalue()
    assert "webhook_retry_scheduled" in text and "webhook_delivered" in text, "logs were read"
    for secret in (made["secret"], rotated["secret"]):
        assert secret not in text
        assert secret not in str(listed) and secret not in str(log_view)
    assert receiver.url not in text and "source=wagent" not in text, "URLs may hold tokens"
    assert {d["status"] for d in log_view["deliveries"]} == {"delivered"}


def test_the_retention_purge_drops_finished_deliveries_after_30_days_and_keeps_pending_ones(
        env: ReplayEnvironment, receiver: WebhookReceiver) -> None:
    from workers.maintenance import purge_all
    made = _add(env, receiver.url)
    receiver.secrets = [made["secret"]]
    delivered = _emit(env, 2)
    env.drain()
    assert set(receiver.counts()) == set(delivered)
    receiver.go_down()
    pending = _emit(env, 1)
    env.drain()  # its first attempt fails: it waits for a retry
    later = env.clock.now() + webhooks.LOG_RETENTION + timedelta(days=1)
    purge_all(env.engine, now=later, dead_letter_retention_days=30)
    with session_scope(env.engine) as session:
        left = session.exec(select(WebhookDelivery)).all()
        events = {e.id for e in session.exec(select(WebhookEvent)).all()}
    assert [d.event_id for d in left] == pending and events == set(pending)
