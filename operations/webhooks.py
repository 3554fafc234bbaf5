"""Webhook endpoints as the admin API, the console and the CLI manage them (one set of
operations for the three): add, list, remove, rotate the secret, enable again, the delivery
log. The rules are storage/webhooks.py's; the URL's shape hooks/client.check_url's.

A secret appears only in what `add_endpoint` and `rotate_secret` return (shown once); every
view of an endpoint leaves it out.
"""

from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session

from hooks.client import check_url
from hooks.errors import DeliveryRefused
from operations.errors import Invalid, NotFound
from operations.service import validated
from storage import webhooks
from storage.models import Tenant, WebhookDelivery, WebhookEndpoint

LOG_LIMIT = 50


class EndpointCreate(BaseModel):
    """A new endpoint: `url` (https; http only to networks the operator allows), the event
    types wanted (storage/webhooks.EVENT_TYPES), a description."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    url: str = Field(min_length=8, max_length=2000)
    events: list[str] = Field(min_length=1, max_length=len(webhooks.EVENT_TYPES))
    description: str = Field("", max_length=200)


class SecretRotation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    grace_hours: float = Field(24, ge=0, le=webhooks.MAX_GRACE.total_seconds() / 3600,
                               description="hours the old secret keeps signing beside the new")


def validated_create(data: dict[str, Any]) -> EndpointCreate:
    """`EndpointCreate` from plain data (the CLI's arguments); Invalid names each problem."""
    return validated(EndpointCreate, data)  # type: ignore[no-any-return]


def endpoint_view(endpoint: WebhookEndpoint, *, now: datetime) -> dict[str, Any]:
    """An endpoint without its secret: `state` enabled / disabled, `rotating_until` while the
    previous secret still signs."""
    rotating = endpoint.previous_until if endpoint.previous_until and \
        endpoint.previous_until > now else None
    return {"id": endpoint.id, "url": endpoint.url, "events": endpoint.events,
            "description": endpoint.description,
            "state": "disabled" if endpoint.disabled_at else "enabled",
            "disabled_at": _iso(endpoint.disabled_at),
            "disabled_reason": endpoint.disabled_reason or None,
            "failing_since": _iso(endpoint.failing_since),
            "rotating_until": _iso(rotating), "created_at": _iso(endpoint.created_at)}


def delivery_view(delivery: WebhookDelivery, event_type: str) -> dict[str, Any]:
    return {"id": delivery.id, "event_id": delivery.event_id, "type": event_type,
            "status": delivery.status, "attempts": delivery.attempts,
            "last_attempt_at": _iso(delivery.last_attempt_at),
            "last_status_code": delivery.last_status_code, "last_error": delivery.last_error,
            "next_attempt_at": _iso(delivery.next_attempt_at)
            if delivery.status == "pending" else None,
            "delivered_at": _iso(delivery.delivered_at), "created_at": _iso(delivery.created_at)}


def add_endpoint(session: Session, tenant: Tenant, body: EndpointCreate, *,
                 now: datetime) -> dict[str, Any]:
    """Raises Invalid for a URL that is not http(s) with a host (or holds a user or password),
    or for unknown event types."""
    try:
        check_url(body.url)
    except DeliveryRefused:
        raise Invalid("url must be https://host/path (http only to networks the operator "
                      "allows), without a user or password", ["url: not usable"]) from None
    try:
        endpoint, secret = webhooks.create_endpoint(session, tenant.id or 0, url=body.url,
                                                    events=body.events,
                                                    description=body.description, now=now)
    except ValueError as exc:
        raise Invalid(str(exc), [f"events: {exc}"]) from None
    return {**endpoint_view(endpoint, now=now), "secret": secret}


def list_endpoints(session: Session, tenant: Tenant, *, now: datetime) -> list[dict[str, Any]]:
    return [endpoint_view(e, now=now) for e in webhooks.list_endpoints(session, tenant.id or 0)]


def the_endpoint(session: Session, tenant: Tenant, endpoint_id: int) -> WebhookEndpoint:
    """The tenant's endpoint; NotFound for an unknown one and for another tenant's."""
    endpoint = webhooks.get_endpoint(session, tenant.id or 0, endpoint_id)
    if endpoint is None:
        raise NotFound(f"no webhook endpoint #{endpoint_id}")
    return endpoint


def remove_endpoint(session: Session, tenant: Tenant, endpoint_id: int) -> None:
    webhooks.remove_endpoint(session, the_endpoint(session, tenant, endpoint_id))


def rotate_secret(session: Session, tenant: Tenant, endpoint_id: int, *, grace: timedelta,
                  now: datetime) -> dict[str, Any]:
    endpoint = the_endpoint(session, tenant, endpoint_id)
    try:
        secret = webhooks.rotate_secret(session, endpoint, now=now, grace=grace)
    except ValueError as exc:
        raise Invalid(str(exc), [f"grace_hours: {exc}"]) from None
    return {**endpoint_view(endpoint, now=now), "secret": secret}


def enable_endpoint(session: Session, tenant: Tenant, endpoint_id: int, *,
                    now: datetime) -> tuple[dict[str, Any], list[int]]:
    """Returns the view and the deliveries now due (to enqueue after commit)."""
    endpoint = the_endpoint(session, tenant, endpoint_id)
    due = webhooks.enable_endpoint(session, endpoint, now=now)
    return endpoint_view(endpoint, now=now), due


def delivery_log(session: Session, tenant: Tenant, endpoint_id: int, *, now: datetime,
                 limit: int = LOG_LIMIT) -> dict[str, Any]:
    """The endpoint (no secret) and its latest deliveries, newest first."""
    endpoint = the_endpoint(session, tenant, endpoint_id)
    rows = webhooks.delivery_log(session, endpoint.id or 0, limit=limit)
    return {"endpoint": endpoint_view(endpoint, now=now),
            "deliveries": [delivery_view(d, t) for d, t in rows]}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
