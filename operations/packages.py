"""Session packages and health-plan authorisations (issue 46): the tenant defines packages
(`define`), staff sell one to a customer (`sell`, with an optional authorisation number and
its expiry) and adjust its count (`adjust`); a visit of the package's service uses a session
when staff mark it completed, and when marked no_show if the tenant's `no_show_uses_session`
(`use_sessions`, called by operations/agenda.set_outcome: the outcome, not the booking,
counts). The agent reads each live package in its context (`context_lines`: "pacote
Fisioterapia: 6 de 10 usadas, válido até 20/02"), with a warning when it is about to run out
or expire. Errors as operations/service.py says (NotFound, Invalid).
"""

from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session, col, select

from operations.errors import Invalid, NotFound
from operations.service import find_contact
from storage.models import Appointment, CustomerPackage, Package, Service, Tenant

RUNNING_OUT_SESSIONS = 1  # at most this many left: the context warns
EXPIRING_DAYS = 7  # expiring within this many days: the context warns
CONTEXT_PACKAGES = 3  # packages in the context, at most


class PackageSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    code: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9_-]+$")
    name: str = Field(min_length=1, max_length=200)
    service: str = Field(min_length=1, max_length=64, description="service code")
    sessions: int = Field(ge=1, le=200)
    validity_days: int = Field(ge=1, le=1830)
    price_cents: int | None = Field(None, ge=0, le=100_000_000)


class Sale(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    contact: str = Field(min_length=1, max_length=160, description="id, phone or user id")
    package: str = Field(min_length=1, max_length=64, description="package code")
    authorisation: str = Field("", max_length=64, description="a health plan's number")
    expires_on: date | None = Field(None, description="default: the package's validity")


class Adjustment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    used: int = Field(ge=0, le=200, description="sessions used so far (0 to its sessions)")


def definitions(session: Session, tenant: Tenant) -> list[dict[str, Any]]:
    """The tenant's packages by code, as `define` returns each."""
    return [_definition(row) for row in session.exec(select(Package).where(
        Package.tenant_id == tenant.id).order_by(col(Package.code))).all()]


def _definition(row: Package) -> dict[str, Any]:
    return {"code": row.code, "name": row.name, "service": row.service_code,
            "sessions": row.sessions, "validity_days": row.validity_days,
            "price_cents": row.price_cents}


def define(session: Session, tenant: Tenant, spec: PackageSpec) -> dict[str, Any]:
    """Create or change package `spec.code`; Invalid for an unknown service."""
    if session.exec(select(Service).where(Service.tenant_id == tenant.id,
                                          Service.code == spec.service)).first() is None:
        raise Invalid(f"unknown service {spec.service!r}", [f"service: unknown {spec.service!r}"])
    row = session.exec(select(Package).where(Package.tenant_id == tenant.id,
                                             Package.code == spec.code)).first() \
        or Package(tenant_id=tenant.id or 0, code=spec.code, name=spec.name,
                   service_code=spec.service, sessions=spec.sessions,
                   validity_days=spec.validity_days)
    row.name, row.service_code, row.sessions = spec.name, spec.service, spec.sessions
    row.validity_days, row.price_cents = spec.validity_days, spec.price_cents
    session.add(row)
    session.flush()
    return _definition(row)


def sell(session: Session, tenant: Tenant, sale: Sale, *, now: datetime) -> dict[str, Any]:
    """A package for a customer, valid until `sale.expires_on` or the package's validity
    from today (local); NotFound for an unknown contact or package."""
    contact = find_contact(session, tenant, sale.contact)
    package = session.exec(select(Package).where(Package.tenant_id == tenant.id,
                                                 Package.code == sale.package)).first()
    if package is None:
        raise NotFound(f"no package {sale.package!r}")
    today = now.astimezone(ZoneInfo(tenant.timezone)).date()
    row = CustomerPackage(tenant_id=tenant.id or 0, contact_id=contact.id or 0,
                          package_id=package.id or 0, sessions=package.sessions,
                          authorisation=sale.authorisation,
                          expires_on=sale.expires_on or today + timedelta(
                              days=package.validity_days), created_at=now)
    session.add(row)
    session.flush()
    return view(session, row)


def adjust(session: Session, tenant: Tenant, package_id: int, *, used: int) -> dict[str, Any]:
    """Staff set the sessions used of customer package `package_id` (0 to its sessions)."""
    row = session.get(CustomerPackage, package_id)
    if row is None or row.tenant_id != tenant.id:
        raise NotFound(f"no customer package #{package_id}")
    if not 0 <= used <= row.sessions:
        raise Invalid(f"used must be from 0 to {row.sessions}",
                      [f"used: from 0 to {row.sessions}"])
    row.used = used
    session.add(row)
    session.flush()
    return view(session, row)


def view(session: Session, row: CustomerPackage,
         today: date | None = None) -> dict[str, Any]:
    """A customer package: {id, contact_id, package, name, sessions, used, left,
    authorisation, expires_on (ISO date)}, and with `today`, `usable`: not expired and
    sessions left (what `of_contact` keeps)."""
    package = session.get(Package, row.package_id)
    usable = {} if today is None else {
        "usable": row.expires_on >= today and row.used < row.sessions}
    return {**usable, "id": row.id, "contact_id": row.contact_id,
            "package": package.code if package else None,
            "name": package.name if package else None, "sessions": row.sessions,
            "used": row.used, "left": row.sessions - row.used,
            "authorisation": row.authorisation, "expires_on": row.expires_on.isoformat()}


def of_customer(session: Session, tenant: Tenant, contact: str,
                now: datetime) -> list[dict[str, Any]]:
    """Every package of contact `contact` (id, phone or user id; NotFound when unknown), the
    newest first, each as `view` with `usable` (expired or used up: false), for staff."""
    found = find_contact(session, tenant, contact)
    today = now.astimezone(ZoneInfo(tenant.timezone)).date()
    rows = session.exec(select(CustomerPackage).where(
        CustomerPackage.tenant_id == tenant.id, CustomerPackage.contact_id == found.id)
        .order_by(col(CustomerPackage.id).desc())).all()
    return [view(session, row, today) for row in rows]


def of_contact(session: Session, tenant_id: int, contact_id: int,
               today: date) -> list[tuple[CustomerPackage, Package]]:
    """The contact's live packages (not expired, sessions left), the soonest to expire
    first."""
    rows = session.exec(select(CustomerPackage, Package).join(
        Package, col(Package.id) == col(CustomerPackage.package_id)).where(
        CustomerPackage.tenant_id == tenant_id, CustomerPackage.contact_id == contact_id,
        col(CustomerPackage.expires_on) >= today,
        col(CustomerPackage.used) < col(CustomerPackage.sessions))
        .order_by(col(CustomerPackage.expires_on), col(CustomerPackage.id))).all()
    return [(cp, p) for cp, p in rows]


def use_sessions(session: Session, tenant: Tenant, rows: list[Appointment], outcome: str,
                 *, now: datetime) -> int:
    """A visit marked `outcome` uses one session of the customer's live package of each of
    its services (the soonest to expire), when completed, or no_show with the tenant's
    `no_show_uses_session`; returns how many sessions were used."""
    if outcome != "completed" and not (outcome == "no_show" and tenant.no_show_uses_session):
        return 0
    today = now.astimezone(ZoneInfo(tenant.timezone)).date()
    used = 0
    for row in rows:
        service = session.get(Service, row.service_id)
        live = [cp for cp, p in of_contact(session, tenant.id or 0, row.contact_id, today)
                if service is not None and p.service_code == service.code]
        if live:
            live[0].used += 1
            session.add(live[0])
            used += 1
    session.flush()
    return used


def context_lines(session: Session, tenant: Tenant, contact_id: int, now: datetime) -> list[str]:
    """The contact's live packages as the agent's context shows them, in the tenant's
    language: "pacote Fisioterapia: 6 de 10 usadas, válido até 20/02" (pt-BR), with
    "(acabando)" at RUNNING_OUT_SESSIONS or fewer left, "(vence em breve)" within
    EXPIRING_DAYS; at most CONTEXT_PACKAGES."""
    today = now.astimezone(ZoneInfo(tenant.timezone)).date()
    english = tenant.language.startswith("en")
    lines = []
    for cp, package in of_contact(session, tenant.id or 0, contact_id, today)[
            :CONTEXT_PACKAGES]:
        left = cp.sessions - cp.used
        warn = [("running out" if english else "acabando")] if left <= RUNNING_OUT_SESSIONS \
            else []
        if (cp.expires_on - today).days <= EXPIRING_DAYS:
            warn.append("expires soon" if english else "vence em breve")
        said = (f"package {package.name}: {cp.used} of {cp.sessions} used, valid until "
                f"{cp.expires_on:%m/%d}" if english else
                f"pacote {package.name}: {cp.used} de {cp.sessions} usadas, válido até "
                f"{cp.expires_on:%d/%m}")
        lines.append(said + (f", autorização {cp.authorisation}" if cp.authorisation
                             and not english else f", authorisation {cp.authorisation}"
                             if cp.authorisation else "")
                     + (f" ({', '.join(warn)})" if warn else ""))
    return lines
