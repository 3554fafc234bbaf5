"""The cost ledger (issue 49): what a tenant's agent cost, per local day, in integer µUSD.

Two sources, both fixed at record time so a later price change never rewrites the past:
- model calls: `Usage.micro_usd`, set by workers/jobs.record_call_usage with
  `model_cost_micro_usd` (Anthropic list prices, below);
- WhatsApp: `WhatsAppCharge.micro_usd`, one row per (tenant, wamid), set by
  intake/statuses.py from the status webhook's `pricing` and the rate card
  (whatsapp/rate_card.py).

Days are the tenant's local days (`Tenant.timezone`). Purposes of model calls: turn, summary
(a summary rewritten when a fact is forgotten), compaction, facts (fact extraction); any other
purpose is counted as "other".
"""

from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal
from zoneinfo import ZoneInfo

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

from storage.db import session_scope
from storage.models import Tenant, Usage, WhatsAppCharge

# Anthropic list prices, USD per million tokens (input, output), by model family; a model whose
# id names none of them is priced as sonnet. Sources: Anthropic §6 ("Sonnet 5 and Sonnet 4.6
# $3/$15 per MTok; Haiku 4.5 $1/$5; Opus 5/4.8 $5/$25").
PRICES = {"haiku": (1.0, 5.0), "sonnet": (3.0, 15.0), "opus": (5.0, 25.0)}
# Input multipliers: cache reads 0.1×, 5-minute cache writes 1.25×, 1-hour cache writes 2×.
CACHE_READ, WRITE_5M, WRITE_1H = 0.1, 1.25, 2.0
DEFAULT_FAMILY = "sonnet"
PURPOSES = ("turn", "summary", "compaction", "facts", "other")


def model_family(model: str) -> str:
    """The price family of a model id ("claude-haiku-4-5" → "haiku"); unknown → sonnet."""
    return next((name for name in PRICES if name in model), DEFAULT_FAMILY)


def model_cost_micro_usd(model: str, input_tokens: int, cache_creation_input_tokens: int,
                         cache_creation_1h_input_tokens: int, cache_read_input_tokens: int,
                         output_tokens: int) -> int:
    """The cost of one Messages API call in integer µUSD (1 µUSD = 10⁻⁶ USD).

    A price in USD per MTok is exactly µUSD per token, so the cost is
    `price_in × (input + 0.1 read + 1.25 (writes − 1h writes) + 2 × 1h writes)
    + price_out × output`, computed exactly (Decimal) and rounded once per call to the nearest
    µUSD, halves up. `cache_creation_input_tokens` counts all cache writes (the 1-hour ones
    included: Sources: Anthropic §1.3, `usage.cache_creation.ephemeral_1h_input_tokens`).
    Negative counts raise ValueError."""
    counts = (input_tokens, cache_creation_input_tokens, cache_creation_1h_input_tokens,
              cache_read_input_tokens, output_tokens)
    if min(counts) < 0 or cache_creation_1h_input_tokens > cache_creation_input_tokens:
        raise ValueError(f"usage counts must be >= 0 and 1h writes <= writes: {counts}")
    price_in, price_out = (Decimal(str(p)) for p in PRICES[model_family(model)])
    billed_input = billed_input_tokens(input_tokens, cache_creation_input_tokens,
                                       cache_creation_1h_input_tokens, cache_read_input_tokens)
    exact = price_in * billed_input + price_out * output_tokens
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def billed_input_tokens(input_tokens: int, cache_creation_input_tokens: int,
                        cache_creation_1h_input_tokens: int,
                        cache_read_input_tokens: int) -> Decimal:
    """A call's input tokens as billed, exactly: `input + 0.1 read + 1.25 (writes − 1h
    writes) + 2 × 1h writes` (`cache_creation_input_tokens` counts every cache write)."""
    five_minutes = cache_creation_input_tokens - cache_creation_1h_input_tokens
    return (input_tokens + Decimal(str(CACHE_READ)) * cache_read_input_tokens
            + Decimal(str(WRITE_5M)) * five_minutes
            + Decimal(str(WRITE_1H)) * cache_creation_1h_input_tokens)


def purpose_bucket(purpose: str) -> str:
    """The ledger's bucket of a Usage purpose: itself when in PURPOSES, else "other"."""
    return purpose if purpose in PURPOSES else "other"


@dataclass(frozen=True)
class DayCost:
    """One local day of a tenant's costs, µUSD. `model_micro_usd`: by purpose (every key of
    PURPOSES present); `whatsapp_micro_usd`: by category (only categories seen that day);
    `model_calls`: Messages API calls; `billed_messages`: WhatsApp charges with micro_usd > 0
    (`whatsapp_messages`: every message with a pricing, billed or free)."""

    day: date
    model_micro_usd: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PURPOSES, 0))
    whatsapp_micro_usd: dict[str, int] = field(default_factory=dict)
    model_calls: int = 0
    whatsapp_messages: int = 0
    billed_messages: int = 0

    @property
    def model_total(self) -> int:
        return sum(self.model_micro_usd.values())

    @property
    def whatsapp_total(self) -> int:
        return sum(self.whatsapp_micro_usd.values())

    @property
    def total(self) -> int:
        return self.model_total + self.whatsapp_total

    def as_json(self) -> dict[str, object]:
        """A JSON-ready dict (the admin API's and `wagent costs --json`'s row)."""
        return {"day": self.day.isoformat(), "model_micro_usd": dict(self.model_micro_usd),
                "whatsapp_micro_usd": dict(self.whatsapp_micro_usd),
                "model_calls": self.model_calls, "whatsapp_messages": self.whatsapp_messages,
                "billed_messages": self.billed_messages, "model_total": self.model_total,
                "whatsapp_total": self.whatsapp_total, "total": self.total}


def local_bounds(tz: ZoneInfo, start: date, end: date) -> tuple[datetime, datetime]:
    """The aware UTC instants of local midnight of `start` and of `end` in `tz` (the one rule
    of a local period's bounds: the ledger's days and months, the results page's periods)."""
    return (datetime.combine(start, time(), tzinfo=tz).astimezone(UTC),
            datetime.combine(end, time(), tzinfo=tz).astimezone(UTC))


def next_month(day: date) -> date:
    """The first day of the month after the one holding `day`."""
    return (day.replace(day=28) + timedelta(days=4)).replace(day=1)


def zone_of(session: Session, tenant_id: int) -> ZoneInfo:
    """The tenant's ZoneInfo; LookupError when the tenant does not exist."""
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise LookupError(f"no tenant {tenant_id}")
    return ZoneInfo(tenant.timezone)


def tenant_costs(engine: Engine, tenant_id: int, start: date, end: date) -> list[DayCost]:
    """One DayCost per local day of the tenant's timezone in [start, end), days without cost
    included (zeros), oldest first. LookupError: no such tenant; ValueError: end < start."""
    with session_scope(engine) as session:
        return costs_in(session, tenant_id, start, end)


def costs_in(session: Session, tenant_id: int, start: date, end: date) -> list[DayCost]:
    """`tenant_costs` in an open session (the admin API's and the console's)."""
    if end < start:
        raise ValueError(f"end {end} is before start {start}")
    tz = zone_of(session, tenant_id)
    since, until = local_bounds(tz, start, end)
    days = {start + timedelta(days=n): DayCost(start + timedelta(days=n))
            for n in range((end - start).days)}
    for at, purpose, micro_usd in session.exec(
            select(Usage.created_at, Usage.purpose, Usage.micro_usd).where(
                Usage.tenant_id == tenant_id, col(Usage.created_at) >= since,
                col(Usage.created_at) < until)):
        day = days[at.astimezone(tz).date()]
        day.model_micro_usd[purpose_bucket(purpose)] += micro_usd
        days[day.day] = replace(day, model_calls=day.model_calls + 1)
    for at, category, micro_usd in session.exec(
            select(WhatsAppCharge.charged_at, WhatsAppCharge.category,
                   WhatsAppCharge.micro_usd).where(
                WhatsAppCharge.tenant_id == tenant_id, col(WhatsAppCharge.charged_at) >= since,
                col(WhatsAppCharge.charged_at) < until)):
        day = days[at.astimezone(tz).date()]
        day.whatsapp_micro_usd[category] = day.whatsapp_micro_usd.get(category, 0) + micro_usd
        days[day.day] = replace(day, whatsapp_messages=day.whatsapp_messages + 1,
                                billed_messages=day.billed_messages + (micro_usd > 0))
    return list(days.values())


def month_model_micro_usd(engine: Engine, tenant_id: int, month_start: date) -> int:
    """The tenant's model cost in µUSD in the local month of `month_start` (its day is
    ignored: the month runs from local midnight of the 1st to that of the next 1st): one SUM
    over the (tenant_id, created_at) index of usage, cheap enough to run on every turn.
    LookupError: no such tenant."""
    first = month_start.replace(day=1)
    following = next_month(first)
    with session_scope(engine) as session:  # one transaction: the zone, then the sum
        since, until = local_bounds(zone_of(session, tenant_id), first, following)
        total = session.exec(select(func.coalesce(func.sum(Usage.micro_usd), 0)).where(
            Usage.tenant_id == tenant_id, col(Usage.created_at) >= since,
            col(Usage.created_at) < until)).one()
    return int(total)


def totals(days: list[DayCost]) -> DayCost:
    """The sum of `days` as one DayCost (its `day`: the first day; empty list: date.min)."""
    model = dict.fromkeys(PURPOSES, 0)
    whatsapp: dict[str, int] = {}
    for d in days:
        for purpose, value in d.model_micro_usd.items():
            model[purpose] = model.get(purpose, 0) + value
        for category, value in d.whatsapp_micro_usd.items():
            whatsapp[category] = whatsapp.get(category, 0) + value
    return DayCost(days[0].day if days else date.min, model, whatsapp,
                   sum(d.model_calls for d in days), sum(d.whatsapp_messages for d in days),
                   sum(d.billed_messages for d in days))
