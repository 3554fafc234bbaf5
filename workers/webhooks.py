"""RQ jobs of the outbound webhooks: `deliver` sends one event to one endpoint, `sweep` finds
deliveries whose job was lost (storage/webhooks.py says what is emitted and when).

`deliver` claims the delivery (pending and due → sending) in one transaction, makes the HTTP
call outside any transaction (hooks/client.py: 5 s at most, SSRF-checked at connect time, no
redirects, the answer's body unread), then records the outcome. A failure is retried on the
product's clock after RETRY_POLICIES["webhook"]'s delay (workers/jobs.py), as a job in the
scheduled registry (storage/jobs.enqueue_webhooks); past its last attempt the delivery is
failed. An endpoint failing for 24 h is disabled (storage/webhooks.DISABLE_AFTER).

Logs name the delivery, the endpoint and the event type by id, the status and a one-word
cause: never the URL (it may hold a token) nor a secret.
"""

from collections.abc import Mapping

import structlog

from core import clock
from core.settings import trusted_networks
from hooks import client, signature
from hooks.errors import DeliveryError
from storage import webhooks
from storage.db import session_scope
from storage.jobs import enqueue_webhooks
from storage.models import WebhookEndpoint, WebhookEvent
from workers.jobs import RETRY_POLICIES
from workers.maintenance import run_once_per_period
from workers.runtime import Runtime, get_runtime

log = structlog.get_logger(__name__)
USER_AGENT = "wagent-webhooks/1"


def deliver(delivery_id: int) -> str:
    """RQ job: one attempt of one delivery. Returns delivered, retry_scheduled, failed,
    disabled (the endpoint is disabled: the claim is given back) or skipped (delivered
    already, claimed by another job, not due, or removed)."""
    runtime = get_runtime()
    now = clock.now()
    with session_scope(runtime.engine) as session:
        delivery = webhooks.claim(session, delivery_id, now=now)
        if delivery is None:
            return "skipped"
        endpoint = session.get(WebhookEndpoint, delivery.endpoint_id)
        event_row = session.get(WebhookEvent, delivery.event_id)
        if endpoint is None or event_row is None:
            return "skipped"
        if endpoint.disabled_at is not None:
            webhooks.release(session, delivery)
            return "disabled"
        payload = webhooks.body(session, event_row)
        url, secrets = endpoint.url, webhooks.signing_secrets(endpoint, now)
        attempt, endpoint_id, event_type = delivery.attempts + 1, endpoint.id, event_row.type
        event_id = event_row.id
    stamp = int(clock.now().timestamp())
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT,
               signature.HEADER: signature.header(secrets, stamp, payload),
               "X-Wagent-Event-Id": event_id, "X-Wagent-Attempt": str(attempt)}
    context = {"delivery_id": delivery_id, "endpoint_id": endpoint_id, "event_type": event_type,
               "attempt": attempt}
    try:
        status = client.post(url, payload, headers, resolve=runtime.resolve,
                             allowed=trusted_networks(runtime.settings.webhook_allowed_networks))
    except DeliveryError as exc:
        return _failed(runtime, delivery_id, attempt, exc, context)
    with session_scope(runtime.engine) as session:
        delivery = webhooks.claimed(session, delivery_id)
        if delivery is not None:
            webhooks.record_success(session, delivery, status_code=status, now=clock.now())
    log.info("webhook_delivered", status=status, **context)
    return "delivered"


def _failed(runtime: Runtime, delivery_id: int, attempt: int, exc: DeliveryError,
            context: Mapping[str, object]) -> str:
    policy, now = RETRY_POLICIES["webhook"], clock.now()
    retry_at = now + policy.delay(attempt) if policy.may_retry(attempt, runtime) else None
    with session_scope(runtime.engine) as session:
        delivery = webhooks.claimed(session, delivery_id)
        if delivery is None:  # removed meanwhile
            return "skipped"
        disabled = webhooks.record_failure(session, delivery, cause=exc.cause,
                                           status_code=exc.status_code, now=now,
                                           retry_at=retry_at)
    if disabled:
        log.error("webhook_endpoint_disabled", **context)
    if retry_at is None:
        log.error("webhook_gave_up", cause=exc.cause, http_status=exc.status_code, **context)
        return "failed"
    try:
        enqueue_webhooks(runtime.queue, [delivery_id], at=retry_at)
    except Exception:  # noqa: BLE001 (recorded as pending and due: the sweep enqueues it)
        log.warning("webhook_retry_not_enqueued", **context)
    log.warning("webhook_retry_scheduled", cause=exc.cause, http_status=exc.status_code,
                delay_s=(retry_at - now).total_seconds(), **context)
    return "retry_scheduled"


def sweep_lost(runtime: Runtime) -> int:
    """Enqueue the deliveries whose job is lost (storage/webhooks.lost_deliveries); returns
    how many."""
    with session_scope(runtime.engine) as session:
        ids = webhooks.lost_deliveries(session, now=clock.now())
    if ids:
        enqueue_webhooks(runtime.queue, ids)
        log.warning("webhook_lost_deliveries_enqueued", count=len(ids))
    return len(ids)


def sweep() -> int | None:
    """RQ job (cron, every SWEEP_PERIOD_SECONDS, once per period): `sweep_lost`."""
    runtime = get_runtime()
    return run_once_per_period(runtime, "webhooks", period_seconds=webhooks.SWEEP_PERIOD_SECONDS,
                               work=lambda: sweep_lost(runtime))
