"""Recurrence rules of visit series (issue 46): RFC 5545 RRULE text checked and expanded with
python-dateutil's `rrule` (the RFC's semantics: FREQ, INTERVAL, BYDAY, COUNT, UNTIL), never our
own date arithmetic. Pure: local wall-clock times in, local wall-clock times out (the caller
turns them into instants in the tenant's zone, so a series keeps its 19:00 across DST)."""

from datetime import date, datetime

from dateutil.relativedelta import relativedelta
from dateutil.rrule import DAILY, MONTHLY, WEEKLY, rrule, rrulestr

MAX_OCCURRENCES = 60  # one series, at most (a rule with UNTIL is cut there too)
RULE_CHARS = 200  # VisitSeries.rule
_FREQUENCIES = {DAILY, WEEKLY, MONTHLY}  # finer ones would book several visits a day
# the largest INTERVAL of each FREQ (a visit every 90 days, 12 weeks, 12 months), and the
# longest series: its last visit at most MAX_SPAN after its first (a typed INTERVAL=100000
# or a COUNT of 60 visits a year apart would book slots decades ahead)
MAX_INTERVAL = {DAILY: 90, WEEKLY: 12, MONTHLY: 12}
_FREQ_NAMES = {DAILY: "DAILY", WEEKLY: "WEEKLY", MONTHLY: "MONTHLY"}
MAX_SPAN = relativedelta(years=2)
# parts that would move the series off its first visit's time, or restate its start
_REFUSED_PARTS = ("DTSTART", "BYHOUR", "BYMINUTE", "BYSECOND")
# the parts a series is written with; the others (BYMONTH, BYYEARDAY, BYWEEKNO, BYSETPOS,
# BYEASTER), and BYDAY with BYMONTHDAY, can make a rule no day ever matches, and dateutil then
# walks every period to the year 9999 (seconds of CPU a call, from one customer's message)
_PARTS = ("FREQ", "INTERVAL", "COUNT", "UNTIL", "BYDAY", "BYMONTHDAY", "WKST")


class RuleError(ValueError):
    """A recurrence rule that cannot be a series; the message says why, for the caller."""


def checked_rule(text: object, first: datetime | None = None) -> str:
    """An RRULE as typed ("FREQ=WEEKLY;COUNT=4", with or without "RRULE:") → its canonical
    text without the prefix; RuleError naming the problem: not an RFC 5545 RRULE, a frequency
    finer than DAILY or coarser than MONTHLY, a part that changes the time of day, a part
    other than FREQ, INTERVAL, BYDAY or BYMONTHDAY (not both), COUNT, UNTIL, WKST, neither
    COUNT nor UNTIL (a series ends), COUNT over MAX_OCCURRENCES, an UNTIL in UTC ("Z"), an
    INTERVAL over MAX_INTERVAL of its FREQ, or a last visit more than MAX_SPAN (2 years) after
    the first: from `first` (naive, local: the series' first visit) when given, COUNT or
    UNTIL; else COUNT visits from a sample start (a month's 29th to 31st skips the months
    without it: give `first`)."""
    if not isinstance(text, str) or not text.strip() or len(text) > RULE_CHARS:
        raise RuleError(f"not an RFC 5545 RRULE of at most {RULE_CHARS} characters, e.g. "
                        "FREQ=WEEKLY;COUNT=10")
    rule = text.strip().upper().removeprefix("RRULE:")
    parts = dict(part.partition("=")[::2] for part in rule.split(";") if part)
    if "FREQ" not in parts:
        raise RuleError("not an RFC 5545 RRULE (FREQ=...;COUNT=...)")
    if any(key in parts for key in _REFUSED_PARTS):
        raise RuleError("a series keeps the first visit's time: no DTSTART, BYHOUR, BYMINUTE "
                        "or BYSECOND")
    others = [key for key in parts if key not in _PARTS]
    if others or ("BYDAY" in parts and "BYMONTHDAY" in parts):
        raise RuleError(f"a series repeats by FREQ, INTERVAL and BYDAY or BYMONTHDAY (not "
                        f"{', '.join(others[:3]) or 'both'}), and ends by COUNT or UNTIL")
    if "COUNT" not in parts and "UNTIL" not in parts:
        raise RuleError("the RRULE needs COUNT (visits) or UNTIL (YYYYMMDD): a series ends")
    if parts.get("UNTIL", "").endswith("Z"):
        raise RuleError("UNTIL is a local date, YYYYMMDD (no Z)")
    try:
        parsed = _parse(rule, datetime(2000, 1, 3, 12, 0))
    except (ValueError, TypeError, KeyError) as exc:
        raise RuleError(f"not an RFC 5545 RRULE ({exc})") from None
    if parsed._freq not in _FREQUENCIES:
        raise RuleError("the RRULE's FREQ must be DAILY, WEEKLY or MONTHLY")
    if parsed._count is not None and not 2 <= parsed._count <= MAX_OCCURRENCES:
        raise RuleError(f"COUNT must be from 2 to {MAX_OCCURRENCES}")
    _check_span(parsed, rule, first)
    return rule


def _check_span(parsed: rrule, rule: str, first: datetime | None) -> None:
    """RuleError when the INTERVAL is over MAX_INTERVAL of the FREQ, or the last visit is
    more than MAX_SPAN after the first (see checked_rule)."""
    freq, most = _FREQ_NAMES[parsed._freq], MAX_INTERVAL[parsed._freq]
    if not 1 <= parsed._interval <= most:
        raise RuleError(f"INTERVAL must be from 1 to {most} for FREQ={freq}; for rarer "
                        "visits book them one by one")
    if first is not None:
        visits = [start for _, start in occurrences(rule, first, through=date.max)]
    elif parsed._count is not None:
        visits = list(parsed.xafter(datetime(2000, 1, 3, 12, 0), count=parsed._count,
                                    inc=True))
    else:
        return
    if visits and visits[-1] > visits[0] + MAX_SPAN:
        raise RuleError(f"a series spans at most 2 years: the last visit of {rule} is over "
                        "2 years after the first; lower COUNT, UNTIL or INTERVAL")


def _parse(rule: str, first: datetime) -> rrule:
    parsed = rrulestr(rule, dtstart=first)
    if not isinstance(parsed, rrule):  # an RRULE line only: never a set
        raise ValueError("one RRULE")
    return parsed


def occurrences(rule: str, first: datetime, *, after: date | None = None,
                through: date) -> list[tuple[int, datetime]]:
    """The series' visits as (position from 1, local start) whose local day is after `after`
    (None: from the first) and on or before `through`; `first` (naive, local) is DTSTART, the
    first visit (`starts_on_rule` checks it is one of the rule's). At most MAX_OCCURRENCES
    positions in all."""
    starts = _parse(rule, first).xafter(first, count=MAX_OCCURRENCES, inc=True)
    return [(n, start) for n, start in enumerate(starts, start=1)
            if (after is None or start.date() > after) and start.date() <= through]


def starts_on_rule(rule: str, first: datetime) -> bool:
    """Whether `first` is the rule's first visit (RFC 5545 3.8.5.3: a DTSTART off the rule
    makes the set undefined; a series refuses it)."""
    found = occurrences(rule, first, through=first.date())
    return bool(found) and found[0][1] == first


def total(rule: str, first: datetime) -> int:
    """How many visits the series has in all (at most MAX_OCCURRENCES)."""
    return len(occurrences(rule, first, through=date.max))
