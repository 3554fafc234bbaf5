"""Public holidays: which calendar a tenant follows, and the holidays of a date range (issue 42).

Pure but for reading the tz database's zone.tab once (the `tzdata` package). A calendar is
"CC" (an ISO 3166 country) or "CC-SUB" (a state or city the `holidays` library knows,
e.g. "BR-SP", "BR-São Paulo Capital"); "" means the country of the tenant's timezone
(America/Sao_Paulo -> BR); "none" means no public holidays. Holidays are the library's
public ones, named in the tenant's language when the library has it (else the country's own).
"""

import functools
from datetime import date
from importlib import resources

import holidays

NO_CALENDAR = "none"
# the tenant's language -> the `holidays` library's locale
LOCALES = {"pt-BR": "pt_BR", "en": "en_US"}


@functools.lru_cache(maxsize=1)
def _zone_countries() -> dict[str, str]:
    """IANA zone -> ISO 3166 country code, from the tz database's zone.tab."""
    text = resources.files("tzdata").joinpath("zoneinfo/zone.tab").read_text(encoding="utf-8")
    rows = (line.split("\t") for line in text.splitlines() if line and not line.startswith("#"))
    return {row[2]: row[0] for row in rows if len(row) >= 3}


def zone_country(zone: str) -> str | None:
    """The country of an IANA zone ("America/Sao_Paulo" -> "BR"); None for "UTC" and the like."""
    return _zone_countries().get(zone)


def parse_calendar(text: str) -> tuple[str, str | None] | None:
    """ "BR" -> ("BR", None); "BR-SP" -> ("BR", "SP"); "none" or "" -> None.
    Raises ValueError naming the fault: a country or subdivision the library does not know."""
    value = text.strip()
    if not value or value.lower() == NO_CALENDAR:
        return None
    country, _, subdiv = value.partition("-")
    country = country.upper()
    supported = holidays.list_supported_countries()
    if country not in supported:
        raise ValueError(f"{country!r} is not a country the holidays library knows "
                         "(an ISO 3166 code, e.g. BR)")
    if not subdiv:
        return country, None
    known = {s.casefold(): s for s in supported[country]}
    if subdiv.strip().casefold() not in known:
        raise ValueError(f"{subdiv!r} is not a subdivision of {country}: "
                         + ", ".join(supported[country][:40]))
    return country, known[subdiv.strip().casefold()]


def calendar_of(setting: str, timezone: str) -> tuple[str, str | None] | None:
    """The (country, subdivision) a tenant follows: its `holiday_calendar` setting, or, when
    that is empty, the country of its timezone; None: no holidays."""
    if setting.strip():
        return parse_calendar(setting)
    country = zone_country(timezone)
    if country is None or country not in holidays.list_supported_countries():
        return None
    return country, None


def holidays_between(setting: str, timezone: str, language: str, first: date,
                     last: date) -> dict[date, str]:
    """The public holidays from `first` to `last` (inclusive) -> their names."""
    calendar = calendar_of(setting, timezone)
    if calendar is None or last < first:
        return {}
    return {day: name for day, name in _calendar(calendar, language, first.year, last.year)
            if first <= day <= last}


@functools.lru_cache(maxsize=256)
def _calendar(calendar: tuple[str, str | None], language: str, first_year: int,
              last_year: int) -> tuple[tuple[date, str], ...]:
    country, subdiv = calendar
    locale = LOCALES.get(language)
    localized = holidays.list_localized_countries().get(country, [])
    found = holidays.country_holidays(
        country, subdiv=subdiv, years=range(first_year, last_year + 1),
        language=locale if locale in localized else None)
    return tuple(sorted(found.items()))
