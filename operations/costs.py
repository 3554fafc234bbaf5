"""The cost ledger's doors (issue 49): what the admin API (GET /admin/tenants/{id}/costs), the
CLI (`wagent costs`) and the console show of usage/ledger.py. Amounts are integer µUSD
(1 µUSD = 10⁻⁶ USD); `usd_cents` rounds a sum to the cent, halves up, only for display.
Days are the tenant's local days, `from` and `to` both included."""

from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlmodel import Session

from operations.errors import Invalid
from storage.budgets import MICRO_USD_PER_CENT
from storage.models import Tenant
from usage.ledger import DayCost, costs_in, totals

MAX_DAYS = 366


class CostQuery(BaseModel):
    """`from`/`to`: first and last local day (default: the 1st of this month, today)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    date_from: date | None = Field(None, alias="from", description="first local day, YYYY-MM-DD "
                                   "(default: the 1st of this month)")
    date_to: date | None = Field(None, alias="to", description="last local day, YYYY-MM-DD "
                                 "(default: today)")

    @model_validator(mode="after")
    def _ordered(self) -> "CostQuery":
        if self.date_from and self.date_to and self.date_to < self.date_from:
            raise ValueError("`to` is before `from`")
        if self.date_from and self.date_to and (self.date_to - self.date_from).days >= MAX_DAYS:
            raise ValueError(f"at most {MAX_DAYS} days")
        return self


def cents_of(micro_usd: int) -> int:
    """µUSD to whole US cents, halves up: 185_000 → 19 (the one rounding rule of the doors)."""
    return (micro_usd + MICRO_USD_PER_CENT // 2) // MICRO_USD_PER_CENT


def usd_cents(micro_usd: int) -> str:
    """µUSD as USD to the cent, halves up: 187_585 → "0.19"."""
    cents = cents_of(micro_usd)
    return f"{cents // 100}.{cents % 100:02d}"


MICRO_USD_PER_TEN_THOUSANDTH = 100  # US$ 0.0001


def usd_fine(micro_usd: int) -> str:
    """µUSD as USD to four decimals, halves up (cents_of's rule at US$ 0.0001), for the few
    calls whose cost is a fraction of a cent: 16_302 → "0.0163", 50 → "0.0001"."""
    sign = "-" if micro_usd < 0 else ""
    units = (abs(micro_usd) + MICRO_USD_PER_TEN_THOUSANDTH // 2) // MICRO_USD_PER_TEN_THOUSANDTH
    return f"{sign}{units // 10_000}.{units % 10_000:04d}"


def local_today(tenant: Tenant, now: datetime) -> date:
    return now.astimezone(ZoneInfo(tenant.timezone)).date()


def cost_report(session: Session, tenant: Tenant, query: CostQuery, *,
                now: datetime) -> dict[str, Any]:
    """The tenant's costs per local day in [from, to] and their total: {"tenant_id",
    "timezone", "from", "to", "days": [DayCost.as_json()], "total": {... "usd": "0.19"}}.
    Invalid (422) when the range is longer than MAX_DAYS, reversed, or touches the first or
    last day of the calendar (0001-01-01, 9999-12-31: their local midnights in UTC, or the
    day after, do not exist as a `datetime`)."""
    today = local_today(tenant, now)
    first = query.date_from or (query.date_to or today).replace(day=1)
    last = query.date_to or max(today, first)
    if (last - first).days >= MAX_DAYS or last < first:
        raise Invalid(f"from {first} to {last}: at most {MAX_DAYS} days, from <= to")
    if not date.min < first <= last < date.max:  # a local midnight a zone can shift past
        raise Invalid(f"from {first} to {last}: days between {date.min + timedelta(days=1)} "
                      f"and {date.max - timedelta(days=1)}")
    days = costs_in(session, int(tenant.id or 0), first, last + timedelta(days=1))
    return {"tenant_id": tenant.id, "timezone": tenant.timezone, "from": first.isoformat(),
            "to": last.isoformat(), "days": [d.as_json() for d in days],
            "total": _total(days)}


def _total(days: list[DayCost]) -> dict[str, Any]:
    total = totals(days)
    return {**{k: v for k, v in total.as_json().items() if k != "day"},
            "usd": usd_cents(total.total)}


def cost_block(session: Session, tenant: Tenant, *, now: datetime) -> dict[str, Any]:
    """The console's compact cost block: this local month to date and today, each
    {"model_micro_usd", "whatsapp_micro_usd", "total_micro_usd", "usd", "model_calls",
    "billed_messages", "by_purpose", "by_category"}, plus "month" (YYYY-MM) and "today"."""
    today = local_today(tenant, now)
    days = costs_in(session, int(tenant.id or 0), today.replace(day=1),
                    today + timedelta(days=1))
    return {"month": f"{today:%Y-%m}", "today": today.isoformat(),
            "month_to_date": _block(totals(days)), "today_costs": _block(days[-1])}


def _block(day: DayCost) -> dict[str, Any]:
    return {"model_micro_usd": day.model_total, "whatsapp_micro_usd": day.whatsapp_total,
            "total_micro_usd": day.total, "usd": usd_cents(day.total),
            "model_calls": day.model_calls, "billed_messages": day.billed_messages,
            "by_purpose": dict(day.model_micro_usd), "by_category": dict(day.whatsapp_micro_usd)}
