"""Pure parts of the slot search: opening intervals of a day, overlaps, the notice, and the
wall-clock grid in the tenant's zone (DST). The search itself: agent/tools/availability.py."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo


@dataclass(frozen=True)
class Slot:
    start: datetime  # aware UTC
    end: datetime
    professional_id: int


Interval = tuple[datetime, datetime]
WeeklyHours = Mapping[int, Sequence[tuple[str, str]]]
HoursExceptions = Mapping[date, Sequence[tuple[str, str]]]


def opening_intervals(day: date, hours: WeeklyHours,
                      exceptions: HoursExceptions | None = None) -> Sequence[tuple[str, str]]:
    """The local ("HH:MM", "HH:MM") intervals of `day`: its exception (a holiday: none) when it
    has one, else its weekday's."""
    if exceptions is not None and day in exceptions:
        return exceptions[day]
    return hours.get(day.weekday(), ())


def overlaps(a: Interval, b: Interval) -> bool:
    """Half-open intervals [start, end) overlap."""
    return a[0] < b[1] and b[0] < a[1]


def local_to_utc(day: date, hhmm: str | time, tz: ZoneInfo) -> datetime:
    at = hhmm if isinstance(hhmm, time) else time.fromisoformat(hhmm)
    return datetime.combine(day, at, tzinfo=tz).astimezone(ZoneInfo("UTC"))


def too_soon(start: datetime, now: datetime, notice: timedelta) -> bool:
    """Past, now, or less than the tenant's minimum notice ahead."""
    return start <= now or start < now + notice


# -- wall-clock grids (issue 22: each professional's week; time zones and DST) ---------------

UTC = ZoneInfo("UTC")


def local_exists(day: date, at: time, tz: ZoneInfo) -> bool:
    """False for a wall-clock time in a spring-forward gap (it never shows on a clock)."""
    naive = datetime.combine(day, at)
    there = naive.replace(tzinfo=tz).astimezone(UTC).astimezone(tz)
    return there.replace(tzinfo=None) == naive


def wall_starts(day: date, opens: str, closes: str, step: timedelta, duration: timedelta,
                tz: ZoneInfo) -> list[datetime]:
    """The aware UTC starts of a local opening interval's grid: every `step` of wall-clock
    time from `opens`, skipping times in a spring-forward gap, an ambiguous fall-back time
    taken at its first occurrence (fold 0), each fitting `duration` of real time before
    `closes`. Each local time is offered once, as `book_appointment` reads it back."""
    first = datetime.combine(day, time.fromisoformat(opens))
    end = datetime.combine(day, time.fromisoformat(closes))
    limit = local_to_utc(day, closes, tz)
    starts, wall = [], first
    while wall < end:
        if local_exists(day, wall.time(), tz):
            start = local_to_utc(day, wall.time(), tz)
            if start + duration <= limit:
                starts.append(start)
        wall += step
    return starts


def on_wall_grid(start: datetime, opens: str, step: timedelta, tz: ZoneInfo) -> bool:
    """`start` is one of `wall_starts`' times: a whole number of `step`s of wall-clock time
    after `opens`, and the first occurrence of its local time (docs/SETTINGS.md,
    `slot_granularity_minutes`)."""
    local = start.astimezone(tz)
    if local_to_utc(local.date(), local.time().replace(fold=0), tz) != start:
        return False  # the second occurrence of a fall-back hour
    opened = datetime.combine(local.date(), time.fromisoformat(opens))
    return (local.replace(tzinfo=None) - opened) % step == timedelta(0)


def intersect(a: Sequence[tuple[str, str]],
              b: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The local intervals in both (HH:MM strings compare as times)."""
    out = []
    for a0, a1 in a:
        for b0, b1 in b:
            lo, hi = max(a0, b0), min(a1, b1)
            if lo < hi:
                out.append((lo, hi))
    return sorted(out)
