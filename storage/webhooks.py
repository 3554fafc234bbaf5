"""Outbound webhooks: the endpoints of a tenant, the one way an event is emitted (`emit`), and
the delivery rows the jobs work through (workers/webhooks.py).

`emit(session, tenant_id, type, data)` writes the event and one pending delivery per endpoint
that wants it in the caller's transaction: a change that rolls back emits nothing. Once that
transaction commits, the deliveries are enqueued (`install_enqueuer`, per engine: the worker
runtime and the web app install one); a process without one (a CLI command) or a Redis error
leaves them to the sweep (`lost_deliveries`, every SWEEP_PERIOD_SECONDS from `wagent cron`).

Delivery is at least once: a receiver deduplicates on the event's `id`. Secrets are kept in
the database (they sign, so they cannot be hashed), shown once when made or rotated, and
never logged, listed or put in a job.
"""

import json
import uuid
import weakref
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, event
from sqlmodel import Session, col, delete, select, update

from core.credentials import WEBHOOK_SECRET, mint
from storage import job_catalogue
from storage.models import (
    Appointment,
    Tenant,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)

# The events a business may subscribe to, and where each is emitted (docs/CONFIGURE.md, Webhooks).
EVENT_TYPES = (
    "appointment.booked",  # agent/tools/scheduling.py book_appointment
    "appointment.rescheduled",  # agent/tools/scheduling.py reschedule_appointment
    "appointment.cancelled",  # the cancel tool, and operations/service.py cancel_appointment
    "handoff.requested",  # the handoff tool (issue 23): data {"conversation_id", "contact_id"}
    "fact.review_needed",  # storage/facts.py record: a fact waits in pending_review
    "message.failed",  # storage/messages.py refresh_delivery: a reply ended failed
    "waitlist.filled",  # workers/waitlist.py: a freed slot booked by a waiting customer (issue 47)
    "payment.received",  # storage/deposits.py confirm: a deposit paid (`late`: after release)
    "budget.warning",  # storage/budgets.py: the month's model cost reached 80 % of the budget
    "budget.reached",  # storage/budgets.py: ... 100 % (turns fall back or hand off; issue 49)
)
MAX_ENDPOINTS = 10  # per tenant
DISABLE_AFTER = timedelta(hours=24)  # an endpoint failing this long is disabled
DEFAULT_GRACE = timedelta(hours=24)  # both secrets sign this long after a rotation
MAX_GRACE = timedelta(days=7)
SENDING_STALE_AFTER = timedelta(seconds=60)  # a claim older than this: the job died
LOST_AFTER = timedelta(seconds=60)  # a due delivery still pending this long: its job is lost
SWEEP_PERIOD_SECONDS = 15
LOG_RETENTION = timedelta(days=30)  # finished deliveries (and their events) kept this long
_PENDING = "webhook_deliveries"  # session.info: delivery ids to enqueue after commit

Enqueuer = Callable[[list[int]], object]
_enqueuers: "weakref.WeakKeyDictionary[Engine, Enqueuer]" = weakref.WeakKeyDictionary()


def new_secret() -> str:
    return mint(WEBHOOK_SECRET)  # core/credentials.py: the log scrubber knows the prefix


def emit(session: Session, tenant_id: int, type: str, data: dict[str, Any], *,
         now: datetime) -> WebhookEvent | None:
    """Record event `type` of the tenant with `data` (ids and times, never message text) in
    the caller's transaction, and a pending delivery to each enabled endpoint that wants it.
    Returns the event, or None when no endpoint wants it (nothing is written). Raises
    ValueError for a type not in EVENT_TYPES (a bug in the caller)."""
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown webhook event type {type!r}")
    endpoints = [e for e in job_catalogue.endpoints(session, tenant_id) if type in e.events]
    if not endpoints:
        return None
    row = WebhookEvent(id=f"evt_{uuid.uuid4().hex}", tenant_id=tenant_id, type=type,
                       data=data, created_at=now)
    session.add(row)
    session.flush()
    deliveries = [WebhookDelivery(tenant_id=tenant_id, endpoint_id=e.id or 0, event_id=row.id,
                                  next_attempt_at=now, created_at=now) for e in endpoints]
    session.add_all(deliveries)
    session.flush()
    session.info.setdefault(_PENDING, []).extend(d.id for d in deliveries)
    return row


def install_enqueuer(engine: Engine, enqueue: Enqueuer | None) -> None:
    """After each commit on `engine` that emitted events, call `enqueue(delivery_ids)`
    (storage/jobs.enqueue_webhooks on the process's queue); None removes it."""
    if enqueue is None:
        _enqueuers.pop(engine, None)
    else:
        _enqueuers[engine] = enqueue


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    ids = session.info.pop(_PENDING, None)
    if not ids:
        return
    bind = session.get_bind()
    engine = bind if isinstance(bind, Engine) else bind.engine
    enqueue = _enqueuers.get(engine)
    if enqueue is None:
        return  # the sweep enqueues them (lost_deliveries)
    try:
        enqueue(list(ids))
    except Exception:  # noqa: BLE001 (committed: the sweep enqueues them)
        pass


@event.listens_for(Session, "after_rollback")
def _after_rollback(session: Session) -> None:
    session.info.pop(_PENDING, None)


def appointment_data(session: Session, appointment: Appointment, *, by: str) -> dict[str, Any]:
    """The `data` of an appointment.* event: ids, codes and aware UTC times; `by` is who
    acted (customer: the agent's tools; business: the console, the admin API, the CLI)."""
    service = job_catalogue.service(session, appointment.tenant_id, appointment.service_id)
    pro = job_catalogue.professional(session, appointment.tenant_id, appointment.professional_id)
    return {"appointment_id": appointment.id, "contact_id": appointment.contact_id,
            "service": service.code if service else None,
            "professional": pro.code if pro else None,
            "start_at": appointment.start_at.isoformat(),
            "end_at": appointment.end_at.isoformat(), "status": appointment.status, "by": by}


# -- endpoints -----------------------------------------------------------------------------

def create_endpoint(session: Session, tenant_id: int, *, url: str, events: list[str],
                    description: str = "", now: datetime) -> tuple[WebhookEndpoint, str]:
    """A new endpoint and its secret (to show once). Raises ValueError for an unknown or
    missing event type, or past MAX_ENDPOINTS. The URL's shape is the caller's check
    (hooks/client.check_url); whether it may be reached is decided at connect time."""
    wanted = list(dict.fromkeys(events))
    unknown = [e for e in wanted if e not in EVENT_TYPES]
    if unknown or not wanted:
        raise ValueError(f"events must be some of {', '.join(EVENT_TYPES)}"
                         + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    if len(list_endpoints(session, tenant_id)) >= MAX_ENDPOINTS:
        raise ValueError(f"a tenant has at most {MAX_ENDPOINTS} webhook endpoints")
    secret = new_secret()
    endpoint = WebhookEndpoint(tenant_id=tenant_id, url=url, secret=secret, events=wanted,
                               description=description, created_at=now)
    session.add(endpoint)
    session.flush()
    job_catalogue.forget(tenant_id)  # emit reads the endpoints once per job
    return endpoint, secret


def list_endpoints(session: Session, tenant_id: int) -> list[WebhookEndpoint]:
    return list(session.exec(select(WebhookEndpoint).where(
        WebhookEndpoint.tenant_id == tenant_id).order_by(col(WebhookEndpoint.id))).all())


def get_endpoint(session: Session, tenant_id: int, endpoint_id: int) -> WebhookEndpoint | None:
    """The tenant's endpoint, or None (another tenant's endpoint is None too)."""
    endpoint = session.get(WebhookEndpoint, endpoint_id)
    if endpoint is None or endpoint.tenant_id != tenant_id:
        return None
    return endpoint


def remove_endpoint(session: Session, endpoint: WebhookEndpoint) -> None:
    """Delete the endpoint and (cascade) its deliveries: their jobs then find nothing."""
    session.exec(delete(WebhookDelivery).where(
        col(WebhookDelivery.endpoint_id) == endpoint.id))
    session.delete(endpoint)
    session.flush()
    job_catalogue.forget(endpoint.tenant_id)


def rotate_secret(session: Session, endpoint: WebhookEndpoint, *, now: datetime,
                  grace: timedelta = DEFAULT_GRACE) -> str:
    """A new secret (to show once); the old one keeps signing beside it for `grace` (0: stops
    at once). Raises ValueError for a grace below 0 or above MAX_GRACE."""
    if not timedelta(0) <= grace <= MAX_GRACE:
        raise ValueError(f"the grace period is 0 to {MAX_GRACE.days * 24} hours")
    secret = new_secret()
    endpoint.previous_secret = endpoint.secret if grace else None
    endpoint.previous_until = now + grace if grace else None
    endpoint.secret = secret
    session.add(endpoint)
    session.flush()
    return secret


def enable_endpoint(session: Session, endpoint: WebhookEndpoint, *, now: datetime) -> list[int]:
    """Enable a disabled endpoint again: its waiting deliveries are due now. Returns their ids
    (the caller enqueues them after commit)."""
    endpoint.disabled_at, endpoint.disabled_reason, endpoint.failing_since = None, "", None
    session.add(endpoint)
    waiting = list(session.exec(select(WebhookDelivery.id).where(
        WebhookDelivery.endpoint_id == endpoint.id, WebhookDelivery.status == "pending")).all())
    session.exec(update(WebhookDelivery).where(
        col(WebhookDelivery.id).in_(waiting)).values(next_attempt_at=now))
    session.flush()
    job_catalogue.forget(endpoint.tenant_id)
    return [int(i) for i in waiting if i is not None]


def signing_secrets(endpoint: WebhookEndpoint, now: datetime) -> list[str]:
    """The secrets that sign a delivery at `now`: the current one, and the previous one
    during its grace period."""
    found = [endpoint.secret]
    if endpoint.previous_secret and endpoint.previous_until and endpoint.previous_until > now:
        found.append(endpoint.previous_secret)
    return found


def body(session: Session, event_row: WebhookEvent) -> bytes:
    """The delivery's JSON body: {"id", "type", "created_at", "tenant": {"id", "name"},
    "data"}, compact, keys sorted (the same bytes on every attempt)."""
    tenant = session.get(Tenant, event_row.tenant_id)
    document = {"id": event_row.id, "type": event_row.type,
                "created_at": event_row.created_at.isoformat(),
                "tenant": {"id": event_row.tenant_id, "name": tenant.name if tenant else ""},
                "data": event_row.data}
    return json.dumps(document, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()


# -- deliveries ----------------------------------------------------------------------------

def claim(session: Session, delivery_id: int, *, now: datetime) -> WebhookDelivery | None:
    """pending and due → sending, atomically; None when not (delivered, claimed by another
    job, not due yet, gone): a second job for one delivery sends nothing."""
    claimed = session.exec(update(WebhookDelivery).where(
        col(WebhookDelivery.id) == delivery_id, col(WebhookDelivery.status) == "pending",
        col(WebhookDelivery.next_attempt_at) <= now,
    ).values(status="sending", claimed_at=now))
    if not claimed.rowcount:
        return None
    return session.get(WebhookDelivery, delivery_id, populate_existing=True)


def claimed(session: Session, delivery_id: int) -> WebhookDelivery | None:
    """The delivery while it is still `sending` (the claim a job holds), else None."""
    delivery = session.get(WebhookDelivery, delivery_id, populate_existing=True)
    return delivery if delivery is not None and delivery.status == "sending" else None


def release(session: Session, delivery: WebhookDelivery) -> None:
    """Give a claim back unsent (its endpoint is disabled: enabling it makes it due)."""
    delivery.status = "pending"
    session.add(delivery)
    session.flush()


def record_success(session: Session, delivery: WebhookDelivery, *, status_code: int,
                   now: datetime) -> None:
    delivery.status, delivery.attempts = "delivered", delivery.attempts + 1
    delivery.last_attempt_at, delivery.last_status_code = now, status_code
    delivery.last_error, delivery.delivered_at, delivery.next_attempt_at = None, now, None
    session.add(delivery)
    endpoint = session.get(WebhookEndpoint, delivery.endpoint_id)
    if endpoint is not None and endpoint.failing_since is not None:
        endpoint.failing_since = None
        session.add(endpoint)
    session.flush()


def record_failure(session: Session, delivery: WebhookDelivery, *, cause: str,
                   status_code: int | None, now: datetime,
                   retry_at: datetime | None) -> bool:
    """One failed attempt: pending again until `retry_at`, or failed for good (None). The
    endpoint's `failing_since` starts at its first failure; past DISABLE_AFTER it is disabled.
    Returns True when this attempt disabled the endpoint."""
    delivery.attempts += 1
    delivery.status = "pending" if retry_at is not None else "failed"
    delivery.last_attempt_at, delivery.last_status_code = now, status_code
    delivery.last_error, delivery.next_attempt_at = cause[:32], retry_at
    session.add(delivery)
    endpoint = session.get(WebhookEndpoint, delivery.endpoint_id)
    disabled = False
    if endpoint is not None:
        if endpoint.failing_since is None:
            endpoint.failing_since = now
        elif endpoint.disabled_at is None and now - endpoint.failing_since >= DISABLE_AFTER:
            endpoint.disabled_at = now
            endpoint.disabled_reason = f"failing since {endpoint.failing_since.isoformat()}"
            disabled = True
            job_catalogue.forget(endpoint.tenant_id)
        session.add(endpoint)
    session.flush()
    return disabled


def lost_deliveries(session: Session, *, now: datetime, limit: int = 500) -> list[int]:
    """Deliveries whose job is lost: due for LOST_AFTER and still pending, or claimed longer
    than SENDING_STALE_AFTER ago (the job died mid-call: they become pending and due, so the
    event may arrive twice, never not at all). Enabled endpoints only. Returns their ids."""
    enabled = select(WebhookEndpoint.id).where(col(WebhookEndpoint.disabled_at).is_(None))
    session.exec(update(WebhookDelivery).where(
        col(WebhookDelivery.status) == "sending",
        col(WebhookDelivery.claimed_at) <= now - SENDING_STALE_AFTER,
    ).values(status="pending", next_attempt_at=now - LOST_AFTER))
    rows = session.exec(select(WebhookDelivery.id).where(
        col(WebhookDelivery.status) == "pending",
        col(WebhookDelivery.next_attempt_at) <= now - LOST_AFTER,
        col(WebhookDelivery.endpoint_id).in_(enabled),
    ).order_by(col(WebhookDelivery.next_attempt_at)).limit(limit)).all()
    return [int(i) for i in rows if i is not None]


def delivery_log(session: Session, endpoint_id: int, *,
                 limit: int = 50) -> list[tuple[WebhookDelivery, str]]:
    """The endpoint's latest deliveries, newest first, each with its event type."""
    rows = session.exec(select(WebhookDelivery, WebhookEvent.type).join(
        WebhookEvent, col(WebhookEvent.id) == col(WebhookDelivery.event_id)).where(
        WebhookDelivery.endpoint_id == endpoint_id).order_by(
        col(WebhookDelivery.id).desc()).limit(limit)).all()
    return [(d, str(t)) for d, t in rows]


def purge_finished(session: Session, *, now: datetime) -> int:
    """Delete deliveries that ended (delivered or failed) more than LOG_RETENTION ago, then the
    events no delivery names any more; pending and sending ones are kept whatever their age.
    Returns how many deliveries. Run by the retention purge (workers/maintenance.purge_all)."""
    cutoff = now - LOG_RETENTION
    done = session.exec(delete(WebhookDelivery).where(
        col(WebhookDelivery.status).in_(("delivered", "failed")),
        col(WebhookDelivery.created_at) < cutoff))
    session.exec(delete(WebhookEvent).where(
        col(WebhookEvent.created_at) < cutoff,
        ~select(WebhookDelivery.id).where(
            col(WebhookDelivery.event_id) == col(WebhookEvent.id)).exists()))
    return int(done.rowcount or 0)
