"""Storing an identity change: a customer's number or business-scoped user id changed
(whatsapp.inbound.IdentityChange; ARCHITECTURE.md Identity)."""

from datetime import datetime

import structlog
from sqlalchemy import Engine

from storage import contacts, tenants
from storage.db import session_scope
from whatsapp.inbound import IdentityChange

log = structlog.get_logger(__name__)


def store_identity_change(engine: Engine, change: IdentityChange, now: datetime) -> str:
    """Re-key the contact the change names, in a transaction of its own; returns its outcome:
    identity_change, or unknown_tenant for a number no tenant has."""
    with session_scope(engine) as session:
        tenant = tenants.get_by_phone_number_id(session, change.phone_number_id)
        if tenant is None or tenant.id is None:
            return "unknown_tenant"
        contact = contacts.rekey(session, tenant_id=tenant.id, kind=change.kind,
                                 old_wa_id=change.old_wa_id,
                                 old_user_id=change.old_user_id, new_wa_id=change.new_wa_id,
                                 new_user_id=change.new_user_id, now=now)
    log.info("contact_rekeyed", kind=change.kind, found=contact is not None)
    return "identity_change"
