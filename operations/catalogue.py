"""The catalogue's writes, one typed change each, and its views: the three doors (the admin
API, the console, the CLI) translate their input (a JSON body, a form, argv) into a change and
call the function that applies it, so a rule of the catalogue has one home.

    ServiceChange        → save_service            create, or change the fields given
    (code)               → remove_service          archive (kept for its appointments)
    ProfessionalChange   → save_professional       create, or change the fields given
    (code)               → remove_professional     archive
    OpeningHoursChange   → set_opening_hours       the whole week
    HoursExceptionChange → save_hours_exception    one date's hours (a holiday)
    (day)                → remove_hours_exception
    a whole catalogue    → replace_catalogue       the parts given (the API's PUT, `catalog set`)

Each raises the product's errors (operations/errors.py maps them): TenantConfigError or
Invalid naming every problem as "where: what", CatalogueConflict when a change would strand
an upcoming appointment, LookupError (or NotFound) for an unknown code or date. The rules
themselves: storage/tenant_config.py (the schema), storage/catalogue.py (the writes).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from enum import Enum
from typing import Any

from sqlmodel import Session

from operations.errors import Invalid
from operations.service import validated
from operations.settings import apply_config
from storage import catalogue
from storage.models import Professional, Service, Tenant
from storage.tenant_config import HoursExceptionSpec, ProfessionalSpec, ServiceSpec

WEEK_KEYS = ("hours", "time_off", "hours_exceptions", "durations")  # a professional's own week
CATALOGUE_KEYS = ("services", "professionals", "hours", "hours_exceptions",
                  "slot_granularity_minutes")


class Keep(Enum):
    """A field left as it is (where None means something: a price of None clears it)."""

    KEEP = "keep"


KEEP = Keep.KEEP


@dataclass(frozen=True)
class ServiceChange:
    """A service by code: created, or only the fields given changed (None or KEEP: kept). A new
    service needs `duration_minutes`; `price_cents` None clears the price (and its
    `price_from`). Bounds: storage/tenant_config.ServiceSpec."""

    code: str
    name: str | None = None
    duration_minutes: int | None = None
    price_cents: int | None | Keep = KEEP
    price_from: bool | None = None
    description: str | None = None
    buffer_minutes: int | None = None

    def given(self) -> dict[str, Any]:
        """The optional fields given, as storage/catalogue.change_service takes them."""
        fields: dict[str, Any] = {} if self.price_cents is KEEP else {
            "price_cents": self.price_cents}
        fields.update({k: v for k, v in (("price_from", self.price_from),
                                         ("description", self.description),
                                         ("buffer_minutes", self.buffer_minutes))
                       if v is not None})
        return fields


@dataclass(frozen=True)
class ProfessionalChange:
    """A professional by code: created, or only the fields given changed (None: kept). `week`:
    any of WEEK_KEYS, as ProfessionalSpec takes them (a key given applies; hours None means
    the business's hours); the spec names every problem."""

    code: str
    name: str | None = None
    services: Sequence[str] | None = None
    week: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OpeningHoursChange:
    """The business's whole week: {"mon": ["09:00-12:00", "13:00-18:00"], ...}; a day left
    out is closed. Validated on apply (storage/tenant_config.WeeklyHours)."""

    week: Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class HoursExceptionChange:
    """One date's hours (a holiday): `day` a date or its YYYY-MM-DD text (None: not given, a
    problem named), `hours` HH:MM-HH:MM intervals (none: closed all day), a `note`. Existing
    bookings stay."""

    day: date | str | None
    hours: Sequence[str] = ()
    note: str = ""


def _tenant_id(tenant: Tenant) -> int:
    assert tenant.id is not None
    return tenant.id


def save_service(session: Session, tenant: Tenant, change: ServiceChange) -> tuple[Service, bool]:
    """Apply `change`; returns (the service, created). Invalid for a code that cannot be one
    (said alone, before anything else), TenantConfigError for the rest: among them a blank
    name, and a code differing only by case from an active service's (codes are unique
    ignoring case: storage/catalogue._refuse_case_twin)."""
    validated(ServiceSpec, {"code": change.code, "duration_minutes": 5})
    return catalogue.change_service(session, _tenant_id(tenant), change.code, name=change.name,
                                    duration_minutes=change.duration_minutes, **change.given())


def remove_service(session: Session, tenant: Tenant, code: str, *, now: datetime) -> Service:
    """Archive a service and take it from every professional; LookupError when unknown,
    CatalogueConflict while it has upcoming bookings."""
    return catalogue.archive_service(session, _tenant_id(tenant), code, now=now)


def save_professional(session: Session, tenant: Tenant, change: ProfessionalChange, *,
                      now: datetime) -> tuple[Professional, bool]:
    """Apply `change`; returns (the professional, created). Invalid for a code that cannot be
    one, or a week key that is not one of WEEK_KEYS; TenantConfigError for the rest;
    CatalogueConflict when a service dropped from them has their upcoming bookings."""
    validated(ProfessionalSpec, {"code": change.code})
    stray = sorted(set(change.week) - set(WEEK_KEYS))
    if stray:
        raise Invalid(f"unknown key(s) {', '.join(stray)}; a week has {', '.join(WEEK_KEYS)}")
    services = None if change.services is None else list(change.services)
    return catalogue.change_professional(session, _tenant_id(tenant), change.code,
                                         name=change.name, services=services, now=now,
                                         **change.week)


def remove_professional(session: Session, tenant: Tenant, code: str, *,
                        now: datetime) -> Professional:
    """Archive a professional; LookupError when unknown, CatalogueConflict while they have
    upcoming bookings."""
    return catalogue.archive_professional(session, _tenant_id(tenant), code, now=now)


def set_opening_hours(session: Session, tenant: Tenant,
                      change: OpeningHoursChange) -> dict[str, list[str]]:
    """Replace the week; returns it as stored. TenantConfigError names every problem."""
    return catalogue.set_hours(session, _tenant_id(tenant),
                               {day: list(intervals) for day, intervals in change.week.items()})


def save_hours_exception(session: Session, tenant: Tenant,
                         change: HoursExceptionChange, *,
                         now: datetime | None = None) -> tuple[dict[str, Any], bool]:
    """Set one date's hours; returns (its view, created). Invalid names every problem;
    CatalogueConflict when it closes a day with upcoming bookings
    (catalogue.refuse_closing_booked; `now`: default the clock)."""
    spec = validated(HoursExceptionSpec, {"day": change.day, "hours": list(change.hours),
                                          "note": change.note})
    if not spec.hours:
        catalogue.refuse_closing_booked(session, _tenant_id(tenant), [spec.day],
                                        tenant.timezone, now or datetime.now(UTC),
                                        "a closed hours exception")
    row, created = catalogue.put_hours_exception(session, _tenant_id(tenant), spec)
    return {"day": row.day.isoformat(), "hours": row.hours, "note": row.note}, created


def remove_hours_exception(session: Session, tenant: Tenant, day: date) -> None:
    """LookupError when that date has no exception."""
    catalogue.delete_hours_exception(session, _tenant_id(tenant), day)


def replace_catalogue(session: Session, tenant: Tenant, body: Any, *,
                      now: datetime) -> dict[str, Any]:
    """Replace the parts of the catalogue given (CATALOGUE_KEYS): services and professionals
    left out are archived, hours and exceptions replaced (storage/tenants.upsert_tenant).
    Returns the catalogue's view."""
    if not isinstance(body, dict):
        raise Invalid("the catalogue must be a JSON object")
    unknown = sorted(set(body) - set(CATALOGUE_KEYS))
    if unknown:
        raise Invalid(f"unknown key(s) {', '.join(unknown)}; allowed: "
                      f"{', '.join(sorted(CATALOGUE_KEYS))}")
    apply_config(session, {**body, "phone_number_id": tenant.phone_number_id}, now=now)
    return catalogue_view(session, tenant)


def active_services(session: Session, tenant: Tenant) -> list[Service]:
    """The services a booking may name, by code."""
    return catalogue.list_services(session, _tenant_id(tenant))


# -- views -----------------------------------------------------------------------------------

def catalogue_view(session: Session, tenant: Tenant) -> dict[str, Any]:
    tenant_id = _tenant_id(tenant)
    return {
        "services": [service_view(s) for s in catalogue.list_services(session, tenant_id)],
        "professionals": [professional_view(p)
                          for p in catalogue.list_professionals(session, tenant_id)],
        "hours": catalogue.weekly_hours(session, tenant_id),
        "hours_exceptions": [{"day": e.day.isoformat(), "hours": e.hours, "note": e.note}
                             for e in catalogue.list_hours_exceptions(session, tenant_id)],
        "slot_granularity_minutes": tenant.slot_granularity_minutes,
        "timezone": tenant.timezone,
    }


def service_view(service: Service) -> dict[str, Any]:
    return {"code": service.code, "name": service.name,
            "duration_minutes": service.duration_minutes, "price_cents": service.price_cents,
            "price_from": service.price_from, "description": service.description,
            **({"buffer_minutes": service.buffer_minutes} if service.buffer_minutes else {})}


def professional_view(pro: Professional) -> dict[str, Any]:
    """Code, name, services; their own week's keys (hours, time_off, hours_exceptions,
    durations) only when set (left out: the business's hours, no time off)."""
    week = {"hours": pro.hours, "time_off": pro.time_off,
            "hours_exceptions": pro.hours_exceptions, "durations": pro.durations}
    return {"code": pro.code, "name": pro.name, "services": pro.service_codes,
            **{k: v for k, v in week.items() if v}}
