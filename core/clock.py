"""The product clock: one source of "now" that tests and replays can move.

Every due time, timeout, service window and cache lifetime reads `now()`. In production it is
the system clock; `FrozenClock` stands still until `advance` moves it (REPLAY.md `advance`).
"""

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FrozenClock:
    """A clock that only moves when told to. Thread-safe: the replay's web thread reads it."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("FrozenClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> None:
        if delta < timedelta(0):
            raise ValueError("the clock never moves back")
        with self._lock:
            self._now += delta


_clock: Clock = SystemClock()


def now() -> datetime:
    """The product's current time, aware UTC."""
    return _clock.now()


def set_clock(clock: Clock) -> Clock:
    """Install `clock` as the product clock; returns the previous one (to restore it)."""
    global _clock
    previous, _clock = _clock, clock
    return previous


def parse_duration(text: str) -> timedelta:
    """Parse "90s", "30m", "25h", "2d" (REPLAY.md `advance`) into a timedelta.

    Raises ValueError on anything else.
    """
    units = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
    text = text.strip()
    if len(text) < 2 or text[-1] not in units:
        raise ValueError(f"bad duration {text!r}: use a number and one of s, m, h, d")
    try:
        amount = float(text[:-1])
    except ValueError:
        raise ValueError(f"bad duration {text!r}") from None
    return timedelta(**{units[text[-1]]: amount})
