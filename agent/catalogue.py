"""The catalogue in the cached prompt (issue 21; ARCHITECTURE.md, The request layout): the
tenant's services (code, name, duration, price, description), professionals (code, name,
what they do), weekly hours, the coming dated exceptions and the house rules (the booking
limits: issue 38), as the text that ends system[0].

It is tenant-wide and cached with the tools and the instructions, so it must not change
between calls: it changes when the tenant's configuration is written (a service, a price, the
hours, an exception), and once a day at the tenant's local midnight, when the exceptions that
are past drop out (the one daily rebuild: `today` is the only input that moves with the
calendar, and it moves once a day). Nothing else of the clock enters it.

Bounds: at most EXCEPTIONS_SHOWN exceptions (and of each professional's time off and own
exceptions: issue 22), none beyond the booking horizon; the whole text
at most CATALOGUE_CHARS characters (about 2,000 tokens): services and professionals past it
are left out with a line saying how many and that `list_services` finds them.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from sqlmodel import Session

from agent.context import data_text
from storage import deposits, job_catalogue
from storage.catalogue import hours_by_day
from storage.models import HoursException, Professional, Service, Tenant
from storage.tenant_config import WEEKDAYS, price_text

CATALOGUE_CHARS = 8000  # the rendered catalogue, at most (about 2,000 tokens)
EXCEPTIONS_SHOWN = 30  # coming dated exceptions (holidays), at most
NAME_CHARS = 60
DESCRIPTION_CHARS = 160
SERVICES_NAMED = 12  # service codes in a professional's line


@dataclass(frozen=True)
class HouseRules:
    """The tenant's booking limits (storage/models.Tenant; agent/tools/scheduling.py applies
    them), stated in the prompt so the agent can say them before they refuse a booking."""

    max_upcoming_bookings: int
    cancellation_window_minutes: int
    booking_notice_minutes: int
    booking_horizon_days: int
    # issue 48: (service code, deposit text) of each service that asks a Pix deposit, and how
    # long a booking is held waiting for it (storage/deposits.service_deposit)
    deposits: tuple[tuple[str, str], ...] = ()
    deposit_hold_minutes: int = 0


def _span(minutes: int) -> str:
    if minutes and minutes % 60 == 0:
        hours = minutes // 60
        return f"{hours} hour{'s' if hours != 1 else ''}"
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def house_rules_line(rules: HouseRules) -> str:
    """One short line of the catalogue (issue 38): the limits the tools enforce."""
    window = rules.cancellation_window_minutes
    return ("House rules (say them before they apply): at most "
            f"{rules.max_upcoming_bookings} upcoming visits per customer; cancellations and moves "
            + (f"up to {_span(window)} before the start" if window else "until the start")
            + f"; bookings at least {_span(rules.booking_notice_minutes)} ahead and at most "
            f"{rules.booking_horizon_days} days ahead." + _deposits_said(rules))


def _deposits_said(rules: HouseRules) -> str:
    """The Pix deposits of the house rules (issue 48): "" when no service asks one."""
    if not rules.deposits:
        return ""
    return (" A Pix deposit holds a booking, not yet booked, for "
            f"{_span(rules.deposit_hold_minutes)} until paid (unpaid: released): "
            + ", ".join(f"{code} {amount}" for code, amount in rules.deposits) + ".")


@dataclass(frozen=True)
class CatalogueData:
    """What the catalogue text is made of (plain values: `catalogue_text` is pure)."""

    services: Sequence[Service]
    professionals: Sequence[Professional]
    hours: Mapping[str, list[str]]  # "mon" -> ["09:00-18:00"]
    exceptions: Sequence[HoursException]
    currency: str = "BRL"
    language: str = "pt-BR"
    today: date | None = None  # professionals' time off and exceptions from today ...
    last: date | None = None  # ... to the end of the booking horizon (issue 22)
    rules: HouseRules | None = None  # issue 38


def load(session: Session, tenant: Tenant, today: date) -> CatalogueData:
    """The tenant's active catalogue now, with the exceptions from `today` (the tenant's local
    date) to the end of the booking horizon. The rows and `tenant` are the job's
    (storage/job_catalogue.py): the turn's tools read them again from there, not the database."""
    tenant_id = tenant.id or 0
    job_catalogue.remember_tenant(tenant)
    last = today + timedelta(days=tenant.booking_horizon_days)
    exceptions = [e for e in job_catalogue.hours_exceptions(session, tenant_id)
                  if today <= e.day <= last]
    services = job_catalogue.services(session, tenant_id)
    return CatalogueData(services, job_catalogue.professionals(session, tenant_id),
                         hours_by_day(job_catalogue.hours(session, tenant_id)),
                         exceptions[:EXCEPTIONS_SHOWN],
                         tenant.currency, tenant.language, today, last,
                         _house_rules(tenant, services))


def _house_rules(tenant: Tenant, services: Sequence[Service]) -> HouseRules:
    owed = [(s.code, deposits.service_deposit(tenant, s)) for s in services]
    return HouseRules(tenant.max_upcoming_bookings, tenant.cancellation_window_minutes,
                      tenant.booking_notice_minutes, tenant.booking_horizon_days,
                      tuple((code, price_text(cents, tenant.currency, language=tenant.language))
                            for code, cents in owed if cents > 0),
                      tenant.deposit_hold_minutes)


def _clip(text: str, limit: int) -> str:
    text = data_text(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def service_line(service: Service, currency: str, language: str) -> str:
    price = price_text(service.price_cents, currency, minimum=service.price_from,
                       language=language)
    parts = [f"- {service.code}: {_clip(service.name, NAME_CHARS)}",
             f"{service.duration_minutes} min", price or "price not stated"]
    line = ", ".join(parts)
    if service.description.strip():
        line += f" ({_clip(service.description, DESCRIPTION_CHARS)})"
    return line


def _more(count: int) -> str:
    """What a cut list of dated entries says it left out (the tools know the rest)."""
    left = count - EXCEPTIONS_SHOWN
    return f" (and {left} more later: find_available_slots knows them)" if left > 0 else ""


def professional_line(pro: Professional, today: date | None = None,
                      last: date | None = None) -> str:
    """A professional, what they do, and their own week (issue 22): their weekly hours when
    not the business's, other durations, and their time off and dated exceptions from `today`
    to `last` (at most EXCEPTIONS_SHOWN of each; none without `today`)."""
    codes = list(pro.service_codes)
    named = ", ".join(codes[:SERVICES_NAMED]) or "no service at the moment"
    extra = len(codes) - SERVICES_NAMED
    line = (f"- {pro.code}: {_clip(pro.name, NAME_CHARS)}; does {named}"
            + (f" and {extra} more" if extra > 0 else ""))
    if pro.hours is not None:
        line += "; works " + ", ".join(
            f"{day} {' '.join(pro.hours[day])}" if pro.hours.get(day) else f"{day} off"
            for day in WEEKDAYS)
    if pro.durations:
        line += "; takes " + ", ".join(f"{code} {minutes} min" for code, minutes
                                       in sorted(pro.durations.items()))
    if today is not None and last is not None:
        # the nearest first, then cut: the tenant file's order is not the calendar's
        off = sorted((t for t in pro.time_off if t["to"] >= today.isoformat()
                      and t["from"] <= last.isoformat()), key=lambda t: t["from"])
        if off:
            line += "; time off " + ", ".join(
                f"{t['from']} to {t['to']}" + (f" ({_clip(t['note'], NAME_CHARS)})"
                                              if t.get("note", "").strip() else "")
                for t in off[:EXCEPTIONS_SHOWN]) + _more(len(off))
        own = sorted((e for e in pro.hours_exceptions
                      if today.isoformat() <= e["day"] <= last.isoformat()),
                     key=lambda e: e["day"])
        if own:
            line += "; other hours " + ", ".join(
                f"{e['day']} {' '.join(e['hours']) if e['hours'] else 'off'}"
                for e in own[:EXCEPTIONS_SHOWN]) + _more(len(own))
    return line


def catalogue_text(data: CatalogueData) -> str:
    """The catalogue as it ends system[0]; "" for a tenant with no service. At most
    CATALOGUE_CHARS characters (module docstring). Deterministic: ordered by code and date."""
    if not data.services:
        return ""
    head = ["Catalogue of the business (configured by the business; the codes are what the "
            "tools take):", "Services (code: name, duration, price):"]
    services = [service_line(s, data.currency, data.language) for s in data.services]
    pros = [professional_line(p, data.today, data.last) for p in data.professionals]
    tail = ["Weekly opening hours: " + weekly_hours_text(data.hours)]
    if data.exceptions:
        tail.append("Dates with other hours: " + "; ".join(
            f"{e.day.isoformat()} {', '.join(e.hours) if e.hours else 'closed'}"
            + (f" ({_clip(e.note, NAME_CHARS)})" if e.note.strip() else "")
            for e in data.exceptions))
    if data.rules is not None:
        tail.append(house_rules_line(data.rules))
    budget = CATALOGUE_CHARS - sum(len(line) + 1 for line in head + tail) - 200
    kept_services, budget = _fit(services, budget)
    kept_pros, _ = _fit(pros, budget)
    lines = [*head, *kept_services]
    if len(kept_services) < len(services):
        lines.append(f"({len(services) - len(kept_services)} more services left out: "
                     "list_services with a query finds them)")
    lines.append("Professionals (code: name; services they do):")
    lines += kept_pros or ["- none"]
    if len(kept_pros) < len(pros):
        lines.append(f"({len(pros) - len(kept_pros)} more professionals left out: "
                     "list_services names them)")
    return "\n".join(lines + tail)


def weekly_hours_text(hours: Mapping[str, Sequence[str]]) -> str:
    """The week's hours (weekday code of WEEKDAYS → "HH:MM-HH:MM" ranges; absent or empty:
    closed), consecutive days with the same hours as one run: "mon-fri 09:00-18:00; sat
    09:00-13:00; sun closed". Seven equal days in one run, not seven repeats: the text is
    paid on every model call (issue 41). Pure."""
    said = [", ".join(hours.get(day) or ()) or "closed" for day in WEEKDAYS]
    runs: list[str] = []
    first = 0
    for index in range(1, len(WEEKDAYS) + 1):
        if index == len(WEEKDAYS) or said[index] != said[first]:
            days = WEEKDAYS[first] if index - 1 == first else \
                f"{WEEKDAYS[first]}-{WEEKDAYS[index - 1]}"
            runs.append(f"{days} {said[first]}")
            first = index
    return "; ".join(runs)


def _fit(lines: list[str], budget: int) -> tuple[list[str], int]:
    kept = []
    for line in lines:
        if len(line) + 1 > budget:
            break
        kept.append(line)
        budget -= len(line) + 1
    return kept, budget
