"""A tenant's configuration, shared by the three doors (the admin API, the console, the CLI):
a whole tenant from its file or body, a change of some settings, resuming its sending.

    a TenantConfig dict → apply_config     create or update, the catalogue included
                        → create_tenant    a new one only (Conflict when it exists)
    a TenantSettings    → apply_settings   (`settings_change` validates a door's body into it;
                                            a new budget → budget_level_now)
    (tenant)            → resume_sending

The schema and its rules: storage/tenant_config.py; the writes: storage/tenants.py. Errors:
Invalid, Conflict (operations/errors.py), or TenantConfigError and CatalogueConflict from
apply_config (its callers map them or say them).
"""

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import structlog
from sqlmodel import Session

from agent.tools.availability import business_exceptions
from operations.errors import Conflict, Invalid, admin_error
from operations.service import validated
from storage import budgets, catalogue, tenants
from storage.errors import CatalogueConflict, TenantConfigError
from storage.models import Tenant
from storage.tenant_config import TenantSettings
from usage.ledger import costs_in, totals

log = structlog.get_logger(__name__)


def find_tenant(session: Session, phone_number_id: str) -> Tenant | None:
    """The tenant of a WhatsApp number (its phone_number_id), or None."""
    return tenants.get_by_phone_number_id(session, phone_number_id)


def apply_config(session: Session, config: Any, *, now: datetime) -> Tenant:
    """Create or update a tenant, and the parts of its catalogue given, from a whole
    configuration (storage/tenants.upsert_tenant: the keys and what a catalogue key replaces).
    Raises TenantConfigError naming every problem, CatalogueConflict when a removal would
    strand an upcoming appointment."""
    return tenants.upsert_tenant(session, config, now=now)


def create_tenant(session: Session, body: Any, *, now: datetime) -> Tenant:
    """A new tenant (and optionally its catalogue) from a `TenantConfig` dict; Conflict when
    one has its phone_number_id, Invalid or Conflict for what apply_config refuses."""
    if not isinstance(body, dict):
        raise Invalid("the tenant must be a JSON object")
    if find_tenant(session, str(body.get("phone_number_id", ""))) is not None:
        raise Conflict(f"a tenant with phone_number_id {body['phone_number_id']} exists; "
                       "update it instead")
    try:
        return apply_config(session, body, now=now)
    except (TenantConfigError, CatalogueConflict) as exc:
        raise admin_error(exc) from None


def settings_change(body: Any) -> TenantSettings:
    """A door's settings (a JSON object; a form or argv made into one) as the change to
    apply; Invalid names every problem."""
    change: TenantSettings = validated(TenantSettings, body)
    return change


def apply_settings(session: Session, tenant: Tenant, change: TenantSettings, *,
                   now: datetime | None = None) -> Tenant:
    """Apply the settings given in `change` (storage/tenants.update_settings: a new inactivity
    timeout moves the open conversations' due times; the next turn reads the rest).
    TenantConfigError when the reminder template does not fit its rules; Invalid when
    `parallel_services` names a code that is not one of the tenant's services (codes match
    exactly, as the catalogue stores them); CatalogueConflict when dropping a day from
    `open_holidays` closes a public holiday with upcoming bookings (`now`: default the
    clock; storage/catalogue.refuse_closing_booked). A new `model_budget_cents` is measured
    against the month's model spend at once (`budget_level_now`): a budget set below what
    the month already spent shows its banner and sends its webhook now, not at the next
    customer turn."""
    changes = change.settings()
    now = now or datetime.now(UTC)
    if "parallel_services" in changes:
        _check_parallel(session, tenant, changes["parallel_services"] or [])
    if "open_holidays" in changes:
        _check_closing_holidays(session, tenant, changes["open_holidays"] or [], now)
    updated = tenants.update_settings(session, tenant, changes)
    if "model_budget_cents" in changes:
        budget_level_now(session, updated, now=now)
    return updated


def month_model_spend(session: Session, tenant: Tenant, *, now: datetime) -> int:
    """The tenant's model cost in µUSD in its local month to `now`'s day (the ledger's:
    usage/ledger.costs_in), the figure its budget is measured against."""
    first = budgets.month_of(tenant, now)
    today = now.astimezone(ZoneInfo(tenant.timezone)).date()
    return totals(costs_in(session, int(tenant.id or 0), first,
                           today + timedelta(days=1))).model_total


def budget_level_now(session: Session, tenant: Tenant, *, now: datetime) -> str | None:
    """The level the tenant's month is at under its current budget (storage/budgets.level_of),
    recorded as a turn records it (storage/budgets.record_level: once per month and level,
    with its webhook event). Returns the level, None under 80 % or without a budget."""
    spent = month_model_spend(session, tenant, now=now)
    level = budgets.level_of(tenant, spent)
    if level is not None:
        for each in budgets.record_level(session, tenant, level, spent_micro_usd=spent,
                                         now=now):
            log.warning("budget_level_reached", tenant_id=tenant.id, level=each,
                        spent_micro_usd=spent, budget_cents=tenant.model_budget_cents,
                        on="settings_saved")
    return level


def _check_parallel(session: Session, tenant: Tenant, codes: list[str]) -> None:
    known = [s.code for s in catalogue.list_services(session, tenant.id or 0)]
    problems = []
    for code in dict.fromkeys(codes):
        if code in known:
            continue
        same = next((k for k in known if k.lower() == code.lower()), None)
        problems.append(f"parallel_services: {code!r} is not one of the tenant's service codes"
                        + (f" (codes are case-sensitive: {same!r}?)" if same else
                           f" ({', '.join(known[:20]) or 'none yet'})"))
    if problems:
        raise Invalid(problems[0] if len(problems) == 1 else
                      f"parallel_services: {len(problems)} unknown service codes", problems)


def _check_closing_holidays(session: Session, tenant: Tenant, kept: list[str],
                            now: datetime) -> None:
    """Days leaving `open_holidays` that are public holidays of the tenant's calendar with no
    hours exception of their own close again: refused while they hold upcoming bookings."""
    days_off = business_exceptions(session, tenant.id or 0)
    closing = [day for text in set(tenant.open_holidays or []) - set(kept)
               if (day := date.fromisoformat(text)) not in days_off.exceptions
               and days_off.public_holiday(day) is not None]
    catalogue.refuse_closing_booked(session, tenant.id or 0, closing, tenant.timezone, now,
                                    "closing the public holiday")


def resume_sending(session: Session, tenant: Tenant) -> list[int]:
    """Clear the tenant's sending pause; returns the conversations with replies waiting in the
    outbox (the caller enqueues their flush once committed)."""
    assert tenant.id is not None
    return tenants.resume_sending(session, tenant.id)
