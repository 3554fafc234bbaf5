"""The console's catalogue page: services, professionals, opening hours and holidays. Each form
is translated into its change of operations/catalogue.py, which the API and the CLI apply too."""

from datetime import date
from zoneinfo import ZoneInfo

from bot.console import holidays as public_holidays
from bot.console.frame import Page, PageResult, Redirect
from operations import catalogue as catalogue_ops
from operations.errors import Invalid
from storage.tenant_config import WEEKDAYS, parse_price


def catalog_page(p: Page) -> PageResult:
    return "catalog.html", {"catalogue": catalogue_ops.catalogue_view(p.session, p.tenant),
                            "weekdays": WEEKDAYS, "error": "",
                            "currency": p.tenant.currency,
                            "public_holidays": public_holidays.coming_holidays(p.tenant, p.now)}


def switch_public_holiday(p: Page) -> PageResult:
    """A public holiday's switch: the business opens that day, or closes again (issue 42)."""
    today = p.now.astimezone(ZoneInfo(p.tenant.timezone)).date()
    public_holidays.switch_holiday(p.session, p.tenant, str(p.form.get("day", "")),
                                   p.form.get("open") == "1", today, now=p.now)
    return Redirect("/console/catalog", p.t["saved"])


def add_service(p: Page) -> PageResult:
    code = str(p.form.get("code", "")).strip()
    name = str(p.form.get("name", "")).strip() or None
    raw = str(p.form.get("duration_minutes", "")).strip()
    if raw and not raw.isdigit():
        raise Invalid(f"{p.t['duration']}: {raw[:20]}")
    price = parse_price(str(p.form.get("price", "")))  # left empty: the price is kept
    description = str(p.form.get("description", ""))
    change = catalogue_ops.ServiceChange(
        code=code, name=name, duration_minutes=int(raw) if raw else None,
        price_cents=catalogue_ops.KEEP if price is None else price,
        price_from=None if price is None else bool(p.form.get("price_from")),
        description=description if description.strip() else None)
    row, _ = catalogue_ops.save_service(p.session, p.tenant, change)
    return Redirect("/console/catalog", f"{row.name} ✓")


def remove_service(p: Page) -> PageResult:
    catalogue_ops.remove_service(p.session, p.tenant, str(p.form.get("code", "")), now=p.now)
    return Redirect("/console/catalog", f"{p.form.get('code')} ✗")


def add_professional(p: Page) -> PageResult:
    services = [str(s) for s in p.form.get("services") or []] or None  # none ticked: kept
    change = catalogue_ops.ProfessionalChange(
        code=str(p.form.get("code", "")).strip(),
        name=str(p.form.get("name", "")).strip() or None, services=services)
    row, _ = catalogue_ops.save_professional(p.session, p.tenant, change, now=p.now)
    return Redirect("/console/catalog", f"{row.name} ✓")


def remove_professional(p: Page) -> PageResult:
    catalogue_ops.remove_professional(p.session, p.tenant, str(p.form.get("code", "")),
                                      now=p.now)
    return Redirect("/console/catalog", f"{p.form.get('code')} ✗")


def save_hours(p: Page) -> PageResult:
    hours = {day: [i.strip() for i in str(p.form.get(day, "")).split(",") if i.strip()]
             for day in WEEKDAYS}
    catalogue_ops.set_opening_hours(p.session, p.tenant, catalogue_ops.OpeningHoursChange(
        {d: v for d, v in hours.items() if v}))
    return Redirect("/console/catalog", p.t["saved"])


def add_holiday(p: Page) -> PageResult:
    hours = [i.strip() for i in str(p.form.get("hours", "")).split(",") if i.strip()]
    catalogue_ops.save_hours_exception(p.session, p.tenant, catalogue_ops.HoursExceptionChange(
        day=p.form.get("day"), hours=hours, note=str(p.form.get("note", ""))), now=p.now)
    return Redirect("/console/catalog", p.t["saved"])


def remove_holiday(p: Page) -> PageResult:
    try:
        day = date.fromisoformat(str(p.form.get("day", "")))
    except ValueError:
        raise Invalid("day: YYYY-MM-DD") from None
    catalogue_ops.remove_hours_exception(p.session, p.tenant, day)
    return Redirect("/console/catalog", p.t["saved"])
