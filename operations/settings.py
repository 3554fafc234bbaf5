"""A tenant's configuration, shared by the three doors (the admin API, the console, the CLI):
a whole tenant from its file or body, a change of some settings, resuming its sending.

    a TenantConfig dict → apply_config     create or update, the catalogue included
                        → create_tenant    a new one only (Conflict when it exists)
    a TenantSettings    → apply_settings   (`settings_change` validates a door's body into it)
    (tenant)            → resume_sending

The schema and its rules: storage/tenant_config.py; the writes: storage/tenants.py. Errors:
Invalid, Conflict (operations/errors.py), or TenantConfigError and CatalogueConflict from
apply_config (its callers map them or say them).
"""

from datetime import datetime
from typing import Any

from sqlmodel import Session

from operations.errors import Conflict, Invalid, admin_error
from operations.service import validated
from storage import tenants
from storage.errors import CatalogueConflict, TenantConfigError
from storage.models import Tenant
from storage.tenant_config import TenantSettings


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


def apply_settings(session: Session, tenant: Tenant, change: TenantSettings) -> Tenant:
    """Apply the settings given in `change` (storage/tenants.update_settings: a new inactivity
    timeout moves the open conversations' due times; the next turn reads the rest).
    TenantConfigError when the reminder template does not fit its rules."""
    return tenants.update_settings(session, tenant, change.settings())


def resume_sending(session: Session, tenant: Tenant) -> list[int]:
    """Clear the tenant's sending pause; returns the conversations with replies waiting in the
    outbox (the caller enqueues their flush once committed)."""
    assert tenant.id is not None
    return tenants.resume_sending(session, tenant.id)
