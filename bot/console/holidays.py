"""The catalogue page's public holidays (issue 42): the coming ones of the tenant's calendar,
each with a switch that opens or closes the business that day (`open_holidays`, the setting
the CLI and the admin API change too; core/holidays.py)."""

from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from core.holidays import calendar_of, holidays_between
from operations.errors import Invalid
from operations.settings import apply_settings, settings_change
from storage.models import Tenant

AHEAD_DAYS = 365  # the holidays listed: the coming year


def coming_holidays(tenant: Tenant, now: datetime) -> dict[str, Any]:
    """{"calendar": "BR" (or "BR-SP"; "" for none), "days": [{"day", "name", "open"}]} for
    the coming AHEAD_DAYS, local days."""
    today = now.astimezone(ZoneInfo(tenant.timezone)).date()
    try:
        calendar = calendar_of(tenant.holiday_calendar, tenant.timezone)
    except ValueError:  # a calendar the library no longer knows: none listed
        calendar = None
    names = holidays_between(tenant.holiday_calendar, tenant.timezone, tenant.language, today,
                             today + timedelta(days=AHEAD_DAYS)) if calendar else {}
    opened = set(tenant.open_holidays or [])
    return {"calendar": "-".join(p for p in calendar if p) if calendar else "",
            "days": [{"day": day.isoformat(), "name": name, "open": day.isoformat() in opened}
                     for day, name in names.items()]}


def switch_holiday(session: Any, tenant: Tenant, day_text: str, open_day: bool,
                   today: date, *, now: datetime | None = None) -> None:
    """Open (or close again) the business on the public holiday `day_text` (YYYY-MM-DD);
    past days are dropped from the list on the way. Raises operations' Invalid; closing a
    day with upcoming bookings: CatalogueConflict (operations/settings.apply_settings)."""
    try:
        day = date.fromisoformat(day_text)
    except ValueError:
        raise Invalid("day: YYYY-MM-DD") from None
    kept = {d for d in tenant.open_holidays or [] if d >= today.isoformat()} - {day.isoformat()}
    if open_day:
        kept.add(day.isoformat())
    apply_settings(session, tenant, settings_change({"open_holidays": sorted(kept)}), now=now)
