"""A tenant's catalogue: services and professionals (archived, never deleted: appointments name
them), weekly opening hours and their exceptions (holidays). Validated by the schema of
storage/tenant_config.py; a removal that would strand an upcoming appointment raises
CatalogueConflict.
"""

from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import ValidationError
from sqlmodel import Session, col, delete, select

from storage import job_catalogue
from storage.errors import CatalogueConflict, TenantConfigError
from storage.models import (
    Appointment,
    HoursException,
    OpeningHours,
    Professional,
    Service,
)
from storage.tenant_config import (
    WEEKDAYS,
    WEEKLY_HOURS,
    HoursExceptionSpec,
    ProfessionalSpec,
    ServiceSpec,
    problems_of,
)


def professional_spec(pro: Professional) -> "ProfessionalSpec":
    """The spec of a stored professional (what a partial change keeps)."""
    return ProfessionalSpec.model_validate({
        "code": pro.code, "name": pro.name, "services": pro.service_codes, "hours": pro.hours,
        "time_off": pro.time_off, "hours_exceptions": pro.hours_exceptions,
        "durations": pro.durations})


def set_week(row: Professional, spec: "ProfessionalSpec") -> None:
    for key, value in spec.week().items():
        setattr(row, key, value)


def replace_services(session: Session, tenant_id: int, services: list[ServiceSpec],
                     professionals: list[ProfessionalSpec], *, now: datetime) -> None:
    """Make the active services and professionals exactly these (by code): others archived.
    A few statements whatever the sizes (rows read once, one flush)."""
    codes = {s.code for s in services}
    for p in professionals:
        unknown = set(p.services) - codes
        if unknown:
            raise TenantConfigError(f"professional {p.code}: unknown services "
                                    f"{', '.join(sorted(unknown))}")
    existing = {s.code: s for s in session.exec(select(Service).where(
        Service.tenant_id == tenant_id))}
    pros = {p.code: p for p in session.exec(select(Professional).where(
        Professional.tenant_id == tenant_id))}
    dropped = [s for s in existing.values() if s.active and s.code not in codes]
    gone = [p for p in pros.values() if p.active and p.code not in {q.code for q in professionals}]
    for service in dropped:
        _refuse_if_booked(session, Appointment.service_id == service.id,
                          f"service {service.code}", now)
    for pro in gone:
        _refuse_if_booked(session, Appointment.professional_id == pro.id,
                          f"professional {pro.code}", now)
    for service in dropped:
        service.active = False
        session.add(service)
    for pro in gone:
        pro.active = False
        session.add(pro)
    for spec in services:
        row = existing.get(spec.code) or Service(tenant_id=tenant_id, code=spec.code,
                                                 name=spec.name or spec.code,
                                                 duration_minutes=spec.duration_minutes)
        row.name, row.duration_minutes, row.active = (spec.name or spec.code,
                                                      spec.duration_minutes, True)
        _set_price(row, spec)
        session.add(row)
    session.flush()
    for pro_spec in professionals:
        row_pro = pros.get(pro_spec.code) or Professional(tenant_id=tenant_id, code=pro_spec.code,
                                                          name=pro_spec.name or pro_spec.code)
        if row_pro.id is not None:
            _refuse_dropping_booked(session, row_pro, pro_spec.services, now)
        row_pro.name, row_pro.active = pro_spec.name or pro_spec.code, True
        row_pro.service_codes = list(pro_spec.services)
        set_week(row_pro, pro_spec)
        session.add(row_pro)
    session.flush()
    job_catalogue.forget(tenant_id)  # this job reads the new rows


def _refuse_dropping_booked(session: Session, pro: Professional, services: list[str],
                            now: datetime) -> None:
    """A professional keeps a service while they have upcoming bookings of it."""
    removed = set(pro.service_codes) - set(services)
    if not removed:
        return
    ids = [s.id for s in session.exec(select(Service).where(
        Service.tenant_id == pro.tenant_id, col(Service.code).in_(removed)))]
    _refuse_if_booked(session, (col(Appointment.professional_id) == pro.id)
                      & col(Appointment.service_id).in_(ids),
                      f"professional {pro.code} ({', '.join(sorted(removed))})", now)


def put_service(session: Session, tenant_id: int, spec: ServiceSpec) -> tuple[Service, bool]:
    """Create or update (and re-activate) a service by code. Returns (service, created)."""
    _refuse_case_twin(spec.code, "service", [s.code for s in list_services(session, tenant_id)])
    service = session.exec(select(Service).where(Service.tenant_id == tenant_id,
                                                 Service.code == spec.code)).first()
    created = service is None
    if service is None:
        service = Service(tenant_id=tenant_id, code=spec.code, name=spec.name or spec.code,
                          duration_minutes=spec.duration_minutes)
    service.name, service.duration_minutes = spec.name or spec.code, spec.duration_minutes
    _set_price(service, spec)
    service.active = True
    session.add(service)
    session.flush()
    job_catalogue.forget(tenant_id)  # this job reads the new rows
    return service, created


def _refuse_case_twin(code: str, what: str, active: list[str]) -> None:
    """Codes are unique ignoring case among the active ones: the agent matches a code the
    customer says ignoring case (agent/tools/scheduling._one_service), so "Corte" beside
    "corte" would be ambiguous. TenantConfigError names the code already there."""
    twin = next((c for c in active if c != code and c.casefold() == code.casefold()), None)
    if twin is not None:
        raise TenantConfigError(f"code: {code!r} differs only by case from {what} {twin!r} "
                                "(codes are compared ignoring case); use that code")


def _set_price(row: Service, spec: ServiceSpec) -> None:
    row.price_cents, row.price_from = spec.price_cents, spec.price_from
    row.description = spec.description
    row.buffer_minutes = spec.buffer_minutes
    row.deposit_cents, row.deposit_percent = spec.deposit_cents, spec.deposit_percent


def change_service(session: Session, tenant_id: int, code: str, *, name: str | None = None,
                   duration_minutes: int | None = None,
                   **fields: Any) -> tuple[Service, bool]:
    """Create a service, or change only the fields given (None keeps the current value; in
    `fields`, price_cents, price_from and description: a key given applies, price_cents None
    clears the price). A new service needs a duration. Raises TenantConfigError naming the
    problem."""
    current = session.exec(select(Service).where(Service.tenant_id == tenant_id,
                                                 Service.code == code)).first()
    if current is None and duration_minutes is None:
        raise TenantConfigError("duration_minutes: required for a new service")
    kept = {"price_cents": current.price_cents, "price_from": current.price_from,
            "description": current.description,
            "buffer_minutes": current.buffer_minutes, "deposit_cents": current.deposit_cents,
            "deposit_percent": current.deposit_percent} if current else {}
    if fields.get("price_cents", 0) is None:
        kept["price_from"] = False  # no price, no minimum
    spec = _valid(ServiceSpec, {
        "code": code, **_name(name, current),
        "duration_minutes": duration_minutes if duration_minutes is not None
        else (current.duration_minutes if current else 0),
        **kept, **fields})
    return put_service(session, tenant_id, spec)


def change_professional(session: Session, tenant_id: int, code: str, *,
                        name: str | None = None, services: list[str] | None = None,
                        now: datetime | None = None,
                        **week: Any) -> tuple[Professional, bool]:
    """Create a professional, or change only the fields given (None keeps the current value;
    in `week`, hours, time_off, hours_exceptions, durations: a key given applies, hours None
    means the business's hours). TenantConfigError names every problem."""
    current = session.exec(select(Professional).where(Professional.tenant_id == tenant_id,
                                                      Professional.code == code)).first()
    kept = ({"hours": current.hours, "time_off": current.time_off,
             "hours_exceptions": current.hours_exceptions, "durations": current.durations}
            if current else {})
    spec = _valid(ProfessionalSpec, {
        "code": code, **_name(name, current),
        "services": services if services is not None
        else (current.service_codes if current else []), **kept, **week})
    return put_professional(session, tenant_id, spec, now)


def _name(name: str | None, current: Service | Professional | None) -> dict[str, str]:
    """The name of a change as its spec takes it: given (a blank one refused by the spec),
    else the current one, else none (the code)."""
    if name is not None:
        return {"name": name}
    return {"name": current.name} if current is not None and current.name else {}


def _valid(model: Any, data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise TenantConfigError(*problems_of(exc)) from None


def archive_service(session: Session, tenant_id: int, code: str, *, now: datetime) -> Service:
    """Remove a service from the catalogue (kept for its past appointments) and from every
    professional. LookupError when unknown; CatalogueConflict when it has upcoming bookings."""
    service = session.exec(select(Service).where(Service.tenant_id == tenant_id,
                                                 Service.code == code,
                                                 col(Service.active).is_(True))).first()
    if service is None:
        raise LookupError(f"no service {code!r}")
    _refuse_if_booked(session, Appointment.service_id == service.id, f"service {code}", now)
    service.active = False
    session.add(service)
    for pro in list_professionals(session, tenant_id):
        if code in pro.service_codes:
            pro.service_codes = [c for c in pro.service_codes if c != code]
            session.add(pro)
    session.flush()
    job_catalogue.forget(tenant_id)  # this job reads the new rows
    return service


def put_professional(session: Session, tenant_id: int, spec: ProfessionalSpec,
                     now: datetime | None = None) -> tuple[Professional, bool]:
    """Create or update (and re-activate) a professional by code; its services must exist."""
    known = {s.code for s in list_services(session, tenant_id)}
    unknown = set(spec.services) - known
    if unknown:
        raise TenantConfigError(f"services: unknown {', '.join(sorted(unknown))} "
                                f"(known: {', '.join(sorted(known)) or 'none'})")
    _refuse_case_twin(spec.code, "professional",
                      [p.code for p in list_professionals(session, tenant_id)])
    pro = session.exec(select(Professional).where(Professional.tenant_id == tenant_id,
                                                  Professional.code == spec.code)).first()
    created = pro is None
    if pro is None:
        pro = Professional(tenant_id=tenant_id, code=spec.code, name=spec.name or spec.code)
    elif now is not None:
        _refuse_dropping_booked(session, pro, spec.services, now)
    pro.name, pro.service_codes = spec.name or spec.code, list(dict.fromkeys(spec.services))
    set_week(pro, spec)
    pro.active = True
    session.add(pro)
    session.flush()
    job_catalogue.forget(tenant_id)  # this job reads the new rows
    return pro, created


def archive_professional(session: Session, tenant_id: int, code: str, *,
                         now: datetime) -> Professional:
    pro = session.exec(select(Professional).where(Professional.tenant_id == tenant_id,
                                                  Professional.code == code,
                                                  col(Professional.active).is_(True))).first()
    if pro is None:
        raise LookupError(f"no professional {code!r}")
    _refuse_if_booked(session, Appointment.professional_id == pro.id, f"professional {code}",
                      now)
    pro.active = False
    session.add(pro)
    session.flush()
    job_catalogue.forget(tenant_id)  # this job reads the new rows
    return pro


def _refuse_if_booked(session: Session, condition: Any, what: str, now: datetime) -> None:
    upcoming = session.exec(select(Appointment.id).where(
        condition, Appointment.status == "booked", col(Appointment.end_at) > now)).all()
    if upcoming:
        raise CatalogueConflict(f"{what} has {len(upcoming)} upcoming appointment(s) "
                                f"(#{', #'.join(str(i) for i in upcoming[:10])}), cancel or "
                                "move them first")


def refuse_closing_booked(session: Session, tenant_id: int, days: Any, timezone: str,
                          now: datetime, what: str) -> None:
    """CatalogueConflict when the local `days` (dates in `timezone`) about to close (`what`:
    "a closed hours exception", "closing the public holiday") hold upcoming bookings, as a
    removal that would strand them is refused (`_refuse_if_booked`): the business cancels or
    moves them first. One indexed read per day."""
    tz = ZoneInfo(timezone)
    today, last = now.astimezone(tz).date(), date.max - timedelta(days=1)
    for day in sorted(days):
        if not today <= day < last:  # no upcoming booking can lie there (and the next day
            continue                 # of date.max is not a date)
        since = datetime.combine(day, time(0), tzinfo=tz)
        until = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz)
        _refuse_if_booked(session, (col(Appointment.tenant_id) == tenant_id)
                          & (col(Appointment.start_at) < until)
                          & (col(Appointment.end_at) > since),
                          f"{what} on {day.isoformat()}: that day", now)


def set_hours(session: Session, tenant_id: int, hours: Any) -> dict[str, list[str]]:
    """Replace the weekly opening hours: {"mon": ["09:00-12:00", "13:00-18:00"], ...}; a day
    left out is closed. Validated here (`WeeklyHours`); TenantConfigError names every problem.
    Returns the hours as stored."""
    try:
        valid = WEEKLY_HOURS.validate_python(hours)
    except ValidationError as exc:
        raise TenantConfigError(*(f"hours.{p}" for p in problems_of(exc))) from None
    session.exec(delete(OpeningHours).where(col(OpeningHours.tenant_id) == tenant_id))
    for day, intervals in valid.items():
        for interval in intervals:
            session.add(OpeningHours(tenant_id=tenant_id, weekday=WEEKDAYS.index(day),
                                     opens=interval[:5], closes=interval[6:]))
    session.flush()
    job_catalogue.forget(tenant_id)  # this job reads the new rows
    return weekly_hours(session, tenant_id)


def weekly_hours(session: Session, tenant_id: int) -> dict[str, list[str]]:
    return hours_by_day(list_hours(session, tenant_id))


def hours_by_day(rows: Sequence[OpeningHours]) -> dict[str, list[str]]:
    """Opening hours rows (by weekday, then opening) as {"mon": ["09:00-18:00"], ...}."""
    hours: dict[str, list[str]] = {}
    for row in rows:
        hours.setdefault(WEEKDAYS[row.weekday], []).append(f"{row.opens}-{row.closes}")
    return hours


def replace_hours_exceptions(session: Session, tenant_id: int,
                             specs: list[HoursExceptionSpec]) -> None:
    session.exec(delete(HoursException).where(col(HoursException.tenant_id) == tenant_id))
    session.flush()
    job_catalogue.forget(tenant_id)  # this job reads the new rows
    for spec in specs:
        put_hours_exception(session, tenant_id, spec)


def put_hours_exception(session: Session, tenant_id: int,
                        spec: HoursExceptionSpec) -> tuple[HoursException, bool]:
    """Set the hours of one date (created or replaced). Existing bookings stay: the business
    cancels them explicitly."""
    row = session.exec(select(HoursException).where(HoursException.tenant_id == tenant_id,
                                                    HoursException.day == spec.day)).first()
    created = row is None
    if row is None:
        row = HoursException(tenant_id=tenant_id, day=spec.day)
    row.hours, row.note = list(spec.hours), spec.note
    session.add(row)
    session.flush()
    job_catalogue.forget(tenant_id)  # this job reads the new rows
    return row, created


def delete_hours_exception(session: Session, tenant_id: int, day: date) -> None:
    row = session.exec(select(HoursException).where(HoursException.tenant_id == tenant_id,
                                                    HoursException.day == day)).first()
    if row is None:
        raise LookupError(f"no exception on {day.isoformat()}")
    session.delete(row)
    session.flush()
    job_catalogue.forget(tenant_id)  # this job reads the new rows


def list_hours_exceptions(session: Session, tenant_id: int) -> list[HoursException]:
    return list(session.exec(select(HoursException).where(HoursException.tenant_id == tenant_id)
                             .order_by(col(HoursException.day))).all())


def list_services(session: Session, tenant_id: int) -> list[Service]:
    """The active services, by code."""
    return list(session.exec(select(Service).where(Service.tenant_id == tenant_id,
                                                   col(Service.active).is_(True))
                             .order_by(col(Service.code))).all())


def list_professionals(session: Session, tenant_id: int) -> list[Professional]:
    """The active professionals, by code."""
    return list(session.exec(select(Professional).where(Professional.tenant_id == tenant_id,
                                                        col(Professional.active).is_(True))
                             .order_by(col(Professional.code))).all())


def catalogue_names(session: Session,
                    tenant_id: int) -> tuple[dict[str, str], dict[str, str]]:
    """The active services and professionals as code → name (what a fact may name)."""
    return ({s.code: s.name for s in list_services(session, tenant_id)},
            {p.code: p.name for p in list_professionals(session, tenant_id)})


def list_hours(session: Session, tenant_id: int) -> list[OpeningHours]:
    return list(session.exec(select(OpeningHours).where(OpeningHours.tenant_id == tenant_id)
                             .order_by(col(OpeningHours.weekday), col(OpeningHours.opens))).all())
