"""The WhatsApp rate card: what Meta bills per delivered message, by market (the recipient's
country) and category, each rate from the UTC day it applies (the cost ledger, issue 49).

One JSON file the operator can update: the bundled `whatsapp/rate_card.json`, or the file
RATE_CARD_PATH names (core/settings.py; entry points call `use_rate_card`). Its shape:

    {"fallback_market": "BR", "calling_codes": {"55": "BR"},
     "rates": [{"market": "BR", "category": "utility", "from": "2025-07-01", "usd": "0.0068"}]}

`usd` is a decimal string (or number) of whole µUSD (at most 6 decimals), 0 to MAX_RATE_USD.
A bad file raises RateCardError naming the entry at load: nothing is guessed. The `pricing` of a
status (`billable`, `pricing_model`, `type`, `category`; on `sent` and one of delivered/read):
Sources: WhatsApp §3.5; service replies billed at the market's utility rate since 2026-10-01:
Sources: MBA §1a.
"""

import json
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

BUNDLED = Path(__file__).with_name("rate_card.json")
# a rate above this is a typo (Meta's dearest rates are tenths of a dollar), and 6,800 USD in
# µUSD would not fit the 32-bit `rate_micro_usd`/`micro_usd` columns: every charge refused
MAX_RATE_USD = Decimal(100)
FREE_TYPES = ("free_entry_point",)  # pricing types Meta never bills (besides billable: false)


class RateCardError(ValueError):
    """The rate card file is missing, not JSON, or an entry is wrong (the message says which)."""


@dataclass(frozen=True)
class Pricing:
    """A status's `pricing` object; any field may be missing (None / "")."""

    billable: bool | None
    pricing_model: str
    category: str
    type: str


@dataclass(frozen=True)
class Charge:
    """What one message costs: `market` whose rate applied, `rate_micro_usd` that rate,
    `micro_usd` the charge (0 when not billable or free), `market_known` False when the
    recipient's market was not on the card (the fallback market's rate applied)."""

    market: str
    rate_micro_usd: int
    micro_usd: int
    market_known: bool


@dataclass(frozen=True)
class RateCard:
    """A loaded card: `rates[(market, category)]` = [(from, µUSD)] sorted by date."""

    fallback_market: str
    calling_codes: dict[str, str]
    rates: dict[tuple[str, str], list[tuple[date, int]]]

    def rate(self, market: str, category: str, day: date) -> int | None:
        """µUSD per message of `category` in `market` on `day`: the entry with the latest
        `from` <= day; None when the card has none."""
        applicable = [r for since, r in self.rates.get((market, category), []) if since <= day]
        return applicable[-1] if applicable else None

    def newest_rates(self, category: str) -> dict[str, int]:
        """µUSD per message of `category` by market, each market's newest entry."""
        return {market: entries[-1][1] for (market, name), entries in self.rates.items()
                if name == category}

    def market_of(self, recipient_id: str | None, recipient_user_id: str | None) -> str | None:
        """The recipient's market: the longest calling code on the card that starts its
        phone number (55... → BR), else a business-scoped user id's country prefix
        ("BR.9000…" → BR) when on the card; None when unknown."""
        digits = (recipient_id or "").lstrip("+")
        for length in range(min(len(digits), 4), 0, -1):
            if digits[:length] in self.calling_codes:
                return self.calling_codes[digits[:length]]
        prefix = (recipient_user_id or "").partition(".")[0]
        markets = {market for market, _ in self.rates}
        return prefix if prefix and prefix in markets else None

    def charge(self, pricing: Pricing, market: str | None, day: date) -> Charge:
        """The charge of one message: 0 when `billable` is false or its type is free
        (FREE_TYPES); else the rate of its market (unknown: the fallback market's) and
        category on `day` (none on the card: 0, the caller logs it)."""
        known = market is not None
        applied = market if market is not None else self.fallback_market
        rate = self.rate(applied, pricing.category, day) or 0
        free = pricing.billable is False or pricing.type in FREE_TYPES
        return Charge(applied, rate, 0 if free else rate, known)


def load_rate_card(path: Path | str | None = None) -> RateCard:
    """The card in `path` (None or "": the bundled one). Raises RateCardError."""
    source = Path(path) if path else BUNDLED
    try:
        document = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RateCardError(f"rate card {source}: {exc}") from exc
    return parse_rate_card(document, str(source))


def parse_rate_card(document: Any, where: str = "rate card") -> RateCard:
    """A RateCard from the decoded JSON; RateCardError naming the first wrong entry."""
    if not isinstance(document, dict) or not isinstance(document.get("rates"), list):
        raise RateCardError(f"{where}: an object with a list `rates` is required")
    codes = document.get("calling_codes", {})
    if not isinstance(codes, dict) or not all(
            isinstance(k, str) and k.isdigit() and isinstance(v, str) and v
            for k, v in codes.items()):
        raise RateCardError(f"{where}: `calling_codes` maps digits to a market, "
                            'e.g. {"55": "BR"}')
    rates: dict[tuple[str, str], list[tuple[date, int]]] = {}
    for n, entry in enumerate(document["rates"]):
        market, category, since, micro_usd = _entry(entry, f"{where}: rates[{n}]")
        if any(d == since for d, _ in rates.get((market, category), [])):
            raise RateCardError(f"{where}: rates[{n}]: {market} {category} from {since} twice")
        rates.setdefault((market, category), []).append((since, micro_usd))
    fallback = document.get("fallback_market")
    if not isinstance(fallback, str) or not any(m == fallback for m, _ in rates):
        raise RateCardError(f"{where}: `fallback_market` must name a market with rates, "
                            f"got {fallback!r}")
    return RateCard(fallback, dict(codes), {k: sorted(v) for k, v in rates.items()})


def _entry(entry: Any, where: str) -> tuple[str, str, date, int]:
    if not isinstance(entry, dict):
        raise RateCardError(f"{where}: an object is required")
    market, category = entry.get("market"), entry.get("category")
    if not isinstance(market, str) or not market or not isinstance(category, str) \
            or not category:
        raise RateCardError(f"{where}: `market` and `category` are required strings")
    try:
        since = date.fromisoformat(str(entry.get("from")))
    except ValueError as exc:
        raise RateCardError(f"{where}: `from` must be a date YYYY-MM-DD") from exc
    try:
        usd = Decimal(str(entry.get("usd")))
    except InvalidOperation as exc:
        raise RateCardError(f"{where}: `usd` must be a decimal number") from exc
    micro = usd * 1_000_000 if usd.is_finite() else usd
    if not usd.is_finite() or not 0 <= usd <= MAX_RATE_USD \
            or micro != micro.to_integral_value():
        raise RateCardError(f"{where}: `usd` must be >= 0 and <= {MAX_RATE_USD} with at most 6 "
                            f"decimals, got {usd}")
    return market, category, since, int(micro)


_ACTIVE: list[RateCard] = []


def use_rate_card(path: Path | str | None) -> RateCard:
    """Load the card at `path` (empty: the bundled one) and make it the process's card
    (`active_rate_card`); entry points call it with RATE_CARD_PATH, so a bad file stops
    them at start. Raises RateCardError."""
    card = load_rate_card(path)
    _ACTIVE[:] = [card]
    return card


def active_rate_card() -> RateCard:
    """The process's card: the one `use_rate_card` loaded, else the bundled one."""
    if not _ACTIVE:
        _ACTIVE.append(load_rate_card(None))
    return _ACTIVE[0]
