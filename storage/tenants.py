"""Tenants: create or update one from its configuration (`upsert_tenant`, the catalogue
included), change its settings, pause and resume its sending. The schema is
storage/tenant_config.py, the catalogue storage/catalogue.py. Used by operations/ and replays.
"""

from datetime import date, datetime
from typing import Any

from sqlmodel import Session, select

from core.holidays import calendar_of, holidays_between
from storage import conversations
from storage.catalogue import (
    list_hours_exceptions,
    list_professionals,
    list_services,
    professional_spec,
    refuse_closing_booked,
    replace_hours_exceptions,
    replace_services,
    set_hours,
)
from storage.errors import TenantConfigError
from storage.models import Conversation, Outbound, Tenant
from storage.tenant_config import (
    DEPOSIT_PARAMETERS,
    REMINDER_PARAMETERS,
    ServiceSpec,
    validate_config,
)


def get_by_phone_number_id(session: Session, phone_number_id: str) -> Tenant | None:
    return session.exec(select(Tenant).where(Tenant.phone_number_id == phone_number_id)).first()


def upsert_tenant(session: Session, config: dict[str, Any], *, now: datetime) -> Tenant:
    """Create or update a tenant, and its catalogue when given, from a REPLAY.md-style dict.

    Keys: phone_number_id (required), the Tenant fields (`TenantSettings`), `services`
    [{code, name, duration_minutes}], `professionals` [{code, name, services}], `hours`
    {"mon": ["09:00-18:00"]}, `hours_exceptions` [{day, hours, note}]. A catalogue key given
    replaces that part of the catalogue: services and professionals left out are archived (kept
    for their appointments), hours and exceptions are replaced. Raises TenantConfigError naming
    every problem, or CatalogueConflict when a removal would orphan an upcoming appointment
    or a new closed exception falls on a day with one (catalogue.refuse_closing_booked).
    """
    spec = validate_config(config)
    tenant = get_by_phone_number_id(session, spec.phone_number_id)
    if tenant is None:
        if spec.name is None:
            raise TenantConfigError("name is required for a new tenant")
        tenant = Tenant(phone_number_id=spec.phone_number_id, name=spec.name, created_at=now)
    update_settings(session, tenant, spec.settings())
    assert tenant.id is not None
    if spec.services is not None or spec.professionals is not None:
        services = spec.services if spec.services is not None else [
            ServiceSpec(code=s.code, name=s.name, duration_minutes=s.duration_minutes,
                        price_cents=s.price_cents, price_from=s.price_from,
                        description=s.description, buffer_minutes=s.buffer_minutes,
                        deposit_cents=s.deposit_cents, deposit_percent=s.deposit_percent)
            for s in list_services(session, tenant.id)]
        professionals = spec.professionals if spec.professionals is not None else [
            professional_spec(p) for p in list_professionals(session, tenant.id)]
        replace_services(session, tenant.id, services, professionals, now=now)
    if spec.hours is not None:
        set_hours(session, tenant.id, spec.hours)
    if spec.hours_exceptions is not None:
        closed = {row.day for row in list_hours_exceptions(session, tenant.id) if not row.hours}
        refuse_closing_booked(session, tenant.id, {e.day for e in spec.hours_exceptions
                                                   if not e.hours} - closed,
                              tenant.timezone, now, "a closed hours exception")
        replace_hours_exceptions(session, tenant.id, spec.hours_exceptions)
    return tenant


def update_settings(session: Session, tenant: Tenant, changes: dict[str, Any]) -> Tenant:
    """Apply validated `TenantSettings` fields. A new inactivity timeout moves the due time of
    the tenant's open conversations (the sweeper reads `due_at`); other changes are read by the
    next turn."""
    timeout_before = tenant.inactivity_timeout_minutes
    if "open_holidays" in changes:  # judged before anything is set
        open_holiday_problems(
            *(changes.get(k, getattr(tenant, k))
              for k in ("holiday_calendar", "timezone", "language")),
            added=set(changes["open_holidays"]) - set(tenant.open_holidays or []))
    for key, value in changes.items():
        setattr(tenant, key, value)
    reminder_template_problems(tenant)
    session.add(tenant)
    session.flush()
    if tenant.id is not None and tenant.inactivity_timeout_minutes != timeout_before:
        _reschedule_open(session, tenant)
    return tenant


def reminder_template_problems(tenant: Tenant) -> None:
    """The tenant's `reminder_template` (and `waitlist_template`, issue 47, whose confirm and
    cancel buttons are Quero and Não posso) names one of its `templates`, whose parameters
    are all reminder fields (REMINDER_PARAMETERS) and whose buttons carry actions;
    TenantConfigError otherwise (issue 25). `deposit_template` (issue 48) likewise names one,
    whose parameters are DEPOSIT_PARAMETERS and which has no quick replies (its one button
    is the ORDER_DETAILS button Meta approved it with, filled in by workers/deposits.py)."""
    for setting in ("reminder_template", "waitlist_template", "deposit_template"):
        name = getattr(tenant, setting)
        if not name:
            continue
        spec = next((t for t in tenant.templates or [] if t.get("name") == name), None)
        if spec is None:
            raise TenantConfigError(f"{setting}: {name!r} is not one of the tenant's "
                                    "templates")
        kind, allowed = (("deposit", DEPOSIT_PARAMETERS) if setting == "deposit_template"
                         else ("reminder", REMINDER_PARAMETERS))
        unknown = [p for p in spec.get("parameters") or [] if p not in allowed]
        if unknown:
            raise TenantConfigError(f"{setting}: parameters {', '.join(unknown)} are not "
                                    f"{kind} fields ({', '.join(allowed)})")
        if setting == "deposit_template" and spec.get("buttons"):
            raise TenantConfigError(f"{setting}: no quick-reply buttons (its one button is "
                                    "ORDER_DETAILS)")
        if any(not isinstance(b, dict) for b in spec.get("buttons") or []):
            raise TenantConfigError(f"{setting}: its buttons need {{\"title\", \"action\"}}")


def open_holiday_problems(holiday_calendar: str, timezone: str, language: str, *,
                          added: set[str]) -> None:
    """The days newly added to `open_holidays` (YYYY-MM-DD) are public holidays of the
    tenant's calendar, as it will be (core/holidays.py; the setting's meaning: "public
    holidays the business opens"); TenantConfigError naming the others. Days already kept
    stay (the calendar may have changed since)."""
    if not added:
        return
    try:
        calendar = calendar_of(holiday_calendar, timezone)
    except ValueError as exc:
        raise TenantConfigError(f"holiday_calendar: {exc}") from None
    if calendar is None:
        raise TenantConfigError("open_holidays: the tenant follows no holiday calendar "
                                "(holiday_calendar), so there is no public holiday to open")
    days = sorted(date.fromisoformat(d) for d in added)
    known = holidays_between(holiday_calendar, timezone, language, days[0], days[-1])
    stray = [d.isoformat() for d in days if d not in known]
    if stray:
        raise TenantConfigError(f"open_holidays: {', '.join(stray)} not a public holiday of "
                                f"{'-'.join(p for p in calendar if p)}; a normal working day "
                                "opens with the weekly hours or an hours exception")


def _reschedule_open(session: Session, tenant: Tenant) -> None:
    """A new inactivity timeout applies to the tenant's open conversations too (their due_at)."""
    timeout = conversations.inactivity_timeout(tenant.inactivity_timeout_minutes)
    for conversation in session.exec(select(Conversation).where(
            Conversation.tenant_id == tenant.id, Conversation.status == "open")):
        conversation.due_at = conversations.due_at(conversation.last_activity_at, timeout)
        session.add(conversation)
    session.flush()


def pause_sending(session: Session, tenant_id: int, reason: str) -> None:
    """Stop every send of a tenant (its access token was rejected) until `resume_sending`."""
    tenant = session.get(Tenant, tenant_id)
    if tenant is not None and not tenant.sending_paused_reason:
        tenant.sending_paused_reason = reason[:500]
        session.add(tenant)


def resume_sending(session: Session, tenant_id: int) -> list[int]:
    """Clear the pause; returns the conversations with replies waiting in the outbox."""
    tenant = session.get(Tenant, tenant_id)
    if tenant is not None:
        tenant.sending_paused_reason = ""
        session.add(tenant)
    rows = session.exec(select(Outbound.conversation_id).where(
        Outbound.tenant_id == tenant_id, Outbound.status == "pending").distinct()).all()
    return sorted(int(r) for r in rows)
