"""Tenant and catalogue repository: read by phone_number_id, create from a config dict."""

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlmodel import Session, col, delete, select

from storage.fact_keys import resolve_keys
from storage.models import Conversation, OpeningHours, Professional, Service, Tenant

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
TENANT_FIELDS = tuple(name for name in Tenant.model_fields
                      if name not in ("id", "phone_number_id", "created_at",
                                      "sending_paused_reason"))


class TenantConfigError(ValueError):
    """A tenant configuration that cannot be applied; the message says which key and why."""


def get_by_phone_number_id(session: Session, phone_number_id: str) -> Tenant | None:
    return session.exec(select(Tenant).where(Tenant.phone_number_id == phone_number_id)).first()


def upsert_tenant(session: Session, config: dict[str, Any], *, now: datetime) -> Tenant:
    """Create or update a tenant and replace its catalogue from a REPLAY.md-style `tenant` dict.

    Keys: phone_number_id (required), the Tenant fields, `services` [{code, name,
    duration_minutes}], `professionals` [{code, name, services}], `hours` {"mon": ["09:00-18:00"]}.
    Raises TenantConfigError on a missing or malformed key.
    """
    phone_number_id = str(config.get("phone_number_id") or "")
    if not phone_number_id:
        raise TenantConfigError("phone_number_id is required")
    validate_config(config)
    tenant = get_by_phone_number_id(session, phone_number_id)
    if tenant is None:
        tenant = Tenant(phone_number_id=phone_number_id, name=str(config.get("name") or ""),
                        created_at=now)
    timeout_before = tenant.inactivity_timeout_minutes
    for key in TENANT_FIELDS:
        if key in config:
            setattr(tenant, key, config[key])
    session.add(tenant)
    session.flush()
    assert tenant.id is not None
    if tenant.inactivity_timeout_minutes != timeout_before:
        _reschedule_open(session, tenant)
    if "services" in config or "professionals" in config or "hours" in config:
        _replace_catalogue(session, tenant.id, config)
    return tenant


CATALOGUE_KEYS = ("services", "professionals", "hours")
INT_FIELDS = {name for name, field in Tenant.model_fields.items() if field.annotation is int}
POSITIVE_FIELDS = {"slot_granularity_minutes", "keep_messages", "inactivity_timeout_minutes",
                   "retention_days"}


def validate_config(config: dict[str, Any]) -> None:
    """Reject unknown keys, non-integer numbers, unknown timezones and empty names up front,
    naming every problem at once (a bad timezone would otherwise fail every message later).
    """
    problems = [f"unknown key {key!r}" for key in config
                if key not in (*TENANT_FIELDS, *CATALOGUE_KEYS, "phone_number_id")]
    for key in sorted(INT_FIELDS & config.keys()):
        value, least = config[key], 1 if key in POSITIVE_FIELDS else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            problems.append(f"{key} must be an integer of at least {least}, got {value!r}")
    if "timezone" in config:
        try:
            ZoneInfo(str(config["timezone"]))
        except (ZoneInfoNotFoundError, ValueError):
            problems.append(f"timezone {config['timezone']!r} is not an IANA zone "
                            "(e.g. America/Sao_Paulo)")
    if "fact_keys" in config:
        try:
            resolve_keys(config["fact_keys"] if isinstance(config["fact_keys"], list) else [1])
        except (ValueError, TypeError) as exc:
            problems.append(f"fact_keys: {exc}")
    for key in ("name", "instructions", "language", "agent_model", "summary_model"):
        if key in config and not isinstance(config[key], str):
            problems.append(f"{key} must be a string")
    if problems:
        raise TenantConfigError("; ".join(problems))


def _reschedule_open(session: Session, tenant: Tenant) -> None:
    """A new inactivity timeout applies to the tenant's open conversations too (their due_at)."""
    timeout = timedelta(minutes=tenant.inactivity_timeout_minutes)
    for conversation in session.exec(select(Conversation).where(
            Conversation.tenant_id == tenant.id, Conversation.status == "open")):
        conversation.due_at = conversation.last_activity_at + timeout
        session.add(conversation)
    session.flush()


def _replace_catalogue(session: Session, tenant_id: int, config: dict[str, Any]) -> None:
    services = config.get("services") or []
    codes = {str(s.get("code")) for s in services}
    for model in (OpeningHours, Professional, Service):
        session.exec(delete(model).where(col(model.tenant_id) == tenant_id))
    for s in services:
        duration = int(s.get("duration_minutes", 0))
        if not s.get("code") or duration <= 0:
            raise TenantConfigError(f"service {s!r}: code and a positive duration_minutes needed")
        session.add(Service(tenant_id=tenant_id, code=str(s["code"]),
                            name=str(s.get("name") or s["code"]), duration_minutes=duration))
    for p in config.get("professionals") or []:
        unknown = set(p.get("services") or []) - codes
        if not p.get("code") or unknown:
            raise TenantConfigError(f"professional {p!r}: needs a code; unknown services {unknown}")
        session.add(Professional(tenant_id=tenant_id, code=str(p["code"]),
                                 name=str(p.get("name") or p["code"]),
                                 service_codes=list(p.get("services") or [])))
    for day, intervals in (config.get("hours") or {}).items():
        if day not in WEEKDAYS:
            raise TenantConfigError(f"hours: unknown weekday {day!r}; use {', '.join(WEEKDAYS)}")
        for interval in intervals:
            opens, _, closes = str(interval).partition("-")
            if not (_is_hhmm(opens) and _is_hhmm(closes) and opens < closes):
                raise TenantConfigError(f"hours.{day}: {interval!r} is not HH:MM-HH:MM")
            session.add(OpeningHours(tenant_id=tenant_id, weekday=WEEKDAYS.index(day),
                                     opens=opens, closes=closes))
    session.flush()


def _is_hhmm(text: str) -> bool:
    hours, _, minutes = text.partition(":")
    return (len(text) == 5 and hours.isdigit() and minutes.isdigit()
            and int(hours) < 24 and int(minutes) < 60)


def pause_sending(session: Session, tenant_id: int, reason: str) -> None:
    """Stop every send of a tenant (its access token was rejected) until `resume_sending`."""
    tenant = session.get(Tenant, tenant_id)
    if tenant is not None and not tenant.sending_paused_reason:
        tenant.sending_paused_reason = reason[:500]
        session.add(tenant)


def resume_sending(session: Session, tenant_id: int) -> list[int]:
    """Clear the pause; returns the conversations with replies waiting in the outbox."""
    from storage.models import Outbound

    tenant = session.get(Tenant, tenant_id)
    if tenant is not None:
        tenant.sending_paused_reason = ""
        session.add(tenant)
    rows = session.exec(select(Outbound.conversation_id).where(
        Outbound.tenant_id == tenant_id, Outbound.status == "pending").distinct()).all()
    return sorted(int(r) for r in rows)


def list_services(session: Session, tenant_id: int) -> list[Service]:
    return list(session.exec(select(Service).where(Service.tenant_id == tenant_id)
                             .order_by(col(Service.code))).all())


def list_professionals(session: Session, tenant_id: int) -> list[Professional]:
    return list(session.exec(select(Professional).where(Professional.tenant_id == tenant_id)
                             .order_by(col(Professional.code))).all())


def list_hours(session: Session, tenant_id: int) -> list[OpeningHours]:
    return list(session.exec(select(OpeningHours).where(OpeningHours.tenant_id == tenant_id)
                             .order_by(col(OpeningHours.weekday), col(OpeningHours.opens))).all())
