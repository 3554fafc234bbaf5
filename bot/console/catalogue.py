"""The console's catalogue page: services, professionals, opening hours and holidays."""

from datetime import date
from typing import Any

from bot.console.frame import Page, PageResult, Redirect, _tenant_id
from operations import service
from storage.catalogue import (
    archive_professional,
    archive_service,
    change_professional,
    change_service,
    delete_hours_exception,
    put_hours_exception,
    set_hours,
)
from storage.tenant_config import (
    WEEKDAYS,
    HoursExceptionSpec,
    ProfessionalSpec,
    ServiceSpec,
    parse_price,
)


def catalog_page(p: Page) -> PageResult:
    return "catalog.html", {"catalogue": service.catalogue_view(p.session, p.tenant),
                            "weekdays": WEEKDAYS, "error": "",
                            "currency": p.tenant.currency}


def add_service(p: Page) -> PageResult:
    code = str(p.form.get("code", "")).strip()
    name = str(p.form.get("name", "")).strip() or None
    raw = str(p.form.get("duration_minutes", "")).strip()
    if raw and not raw.isdigit():
        raise service.Invalid(f"{p.t['duration']}: {raw[:20]}")
    service.validated(ServiceSpec, {"code": code, "duration_minutes": 5})
    fields: dict[str, Any] = {}
    price = parse_price(str(p.form.get("price", "")))  # left empty: the price is kept
    if price is not None:
        fields["price_cents"], fields["price_from"] = price, bool(p.form.get("price_from"))
    if str(p.form.get("description", "")).strip():
        fields["description"] = str(p.form.get("description"))
    row, _ = change_service(p.session, _tenant_id(p), code, name=name,
                            duration_minutes=int(raw) if raw else None, **fields)
    return Redirect("/console/catalog", f"{row.name} ✓")


def remove_service(p: Page) -> PageResult:
    archive_service(p.session, _tenant_id(p), str(p.form.get("code", "")), now=p.now)
    return Redirect("/console/catalog", f"{p.form.get('code')} ✗")


def add_professional(p: Page) -> PageResult:
    code = str(p.form.get("code", "")).strip()
    service.validated(ProfessionalSpec, {"code": code})
    services = [str(s) for s in p.form.get("services") or []] or None  # none ticked: kept
    row, _ = change_professional(p.session, _tenant_id(p), code,
                                 name=str(p.form.get("name", "")).strip() or None,
                                 services=services, now=p.now)
    return Redirect("/console/catalog", f"{row.name} ✓")


def remove_professional(p: Page) -> PageResult:
    archive_professional(p.session, _tenant_id(p), str(p.form.get("code", "")), now=p.now)
    return Redirect("/console/catalog", f"{p.form.get('code')} ✗")


def save_hours(p: Page) -> PageResult:
    hours = {day: [i.strip() for i in str(p.form.get(day, "")).split(",") if i.strip()]
             for day in WEEKDAYS}
    set_hours(p.session, _tenant_id(p), {d: v for d, v in hours.items() if v})
    return Redirect("/console/catalog", p.t["saved"])


def add_holiday(p: Page) -> PageResult:
    hours = [i.strip() for i in str(p.form.get("hours", "")).split(",") if i.strip()]
    spec = service.validated(HoursExceptionSpec, {"day": p.form.get("day"), "hours": hours,
                                                  "note": str(p.form.get("note", ""))})
    put_hours_exception(p.session, _tenant_id(p), spec)
    return Redirect("/console/catalog", p.t["saved"])


def remove_holiday(p: Page) -> PageResult:
    try:
        day = date.fromisoformat(str(p.form.get("day", "")))
    except ValueError:
        raise service.Invalid("day: YYYY-MM-DD") from None
    delete_hours_exception(p.session, _tenant_id(p), day)
    return Redirect("/console/catalog", p.t["saved"])
