"""The business's days off: its hours exceptions and the public holidays of its calendar
(issue 42 item 3), as the one Mapping the slot search, the booking check, the agenda and the
handoff's next opening read (`availability.business_exceptions`).

A public holiday (core/holidays.py: the tenant's `holiday_calendar`, default the country of
its timezone) is closed ([]) unless the business opens it: its date in `open_holidays`, or an
hours exception of its own for that date (which then applies as any exception does).
"""

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import date

from core.holidays import holidays_between

LocalIntervals = Sequence[tuple[str, str]]
CLOSED = {"pt-BR": "fechado", "en": "closed"}  # "fechado: Independência do Brasil"


def closed_label(language: str, name: str) -> str:
    """How a tool result names a closed holiday, in the tenant's language (the agent may
    relay it): "fechado: Independência do Brasil"."""
    return f"{CLOSED.get(language, CLOSED['pt-BR'])}: {name}"


class DaysOff(Mapping[date, LocalIntervals]):
    """Dates whose opening hours differ from their weekday's ([] = closed): the exceptions,
    then the closed public holidays. Iterating yields the exceptions only (the holidays are
    looked up by date, a year of the calendar at a time)."""

    def __init__(self, exceptions: Mapping[date, LocalIntervals], *, calendar: str,
                 timezone: str, language: str, open_days: Iterable[str] = ()) -> None:
        self.exceptions = dict(exceptions)
        self.calendar, self.timezone, self.language = calendar, timezone, language
        self.open_days = {str(d) for d in open_days}
        self._years: dict[int, dict[date, str]] = {}

    def public_holiday(self, day: date) -> str | None:
        """The name of the public holiday on `day`, whether the business opens or not."""
        if day.year not in self._years:
            self._years[day.year] = holidays_between(
                self.calendar, self.timezone, self.language, date(day.year, 1, 1),
                date(day.year, 12, 31))
        return self._years[day.year].get(day)

    def holiday(self, day: date) -> str | None:
        """The name of the public holiday that closes the business on `day`, else None."""
        if day in self.exceptions or day.isoformat() in self.open_days:
            return None
        return self.public_holiday(day)

    def __contains__(self, day: object) -> bool:
        return isinstance(day, date) and (day in self.exceptions or self.holiday(day) is not None)

    def __getitem__(self, day: date) -> LocalIntervals:
        if day in self.exceptions:
            return self.exceptions[day]
        if self.holiday(day) is not None:
            return []
        raise KeyError(day)

    def __iter__(self) -> Iterator[date]:
        return iter(self.exceptions)

    def __len__(self) -> int:
        return len(self.exceptions)

    def closed_between(self, first: date, last: date) -> dict[date, str]:
        """The closed public holidays from `first` to `last` -> their names."""
        names = holidays_between(self.calendar, self.timezone, self.language, first, last)
        return {day: name for day, name in names.items() if self.holiday(day) is not None}
