"""The received-time stamp of a customer message, and the times it is made of (pure: no I/O).

The console and fact extraction import `unstamp`; the media worker `STAMP`.
"""

import functools
import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from storage.models import Tenant

LATE_AFTER = timedelta(minutes=15)  # Meta redelivers after outages, sometimes hours late


def stamp(text: str, received_at: datetime, tenant: Tenant | str, *,
          sent_at: datetime | None = None) -> str:
    """Prefix the received time in the tenant's timezone, e.g. "[Mon 2026-06-01 10:00] oi".

    The time lives in the message itself so `system` stays byte-identical between turns and the
    cached prefix survives (ARCHITECTURE.md: time without cache misses). A message delivered more
    than 15 minutes after the customer sent it says so, so the answer can acknowledge the delay:
    ", delivered late: sent Mon 10:00" on the day it arrived, with the date on any other day
    (", sent Sun 2025-11-30 10:00"). `unstamp` takes it off again (the console, fact
    extraction's length). `text` is stamped as given: a customer's text is normalised first
    (`intake.text.normalise`, which `intake.text.content` applies).
    """
    local = received_at.astimezone(zone(tenant if isinstance(tenant, str) else tenant.timezone))
    late = ""
    if sent_at is not None and received_at - sent_at > LATE_AFTER:
        late = f", delivered late: sent {local_when(sent_at, local)}"
    return f"[{local:%a %Y-%m-%d %H:%M}{late}] {text}"


STAMP = re.compile(r"^\[[A-Z][a-z]{2} \d{4}-\d{2}-\d{2} \d{2}:\d{2}[^\]\n]*\] ?", re.MULTILINE)


def unstamp(text: str) -> str:
    """`text` without the stamps `stamp` wrote: one at the start of each line that begins with
    one (texts of several stored blocks are joined by newlines), text elsewhere untouched.
    "[Mon 2026-06-01 10:00] oi" -> "oi"; "[nota] oi" stays as it is.
    """
    return STAMP.sub("", text)


def local_when(moment: datetime, reference: datetime) -> str:
    """`moment` in the zone of `reference` (aware, local): "Mon 10:00" on the same local day,
    "Sun 2025-11-30 10:00" on any other (a weekday alone is ambiguous past a week)."""
    local = moment.astimezone(reference.tzinfo)
    if local.date() == reference.date():
        return f"{local:%a %H:%M}"
    return f"{local:%a %Y-%m-%d %H:%M}"


@functools.lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    """The IANA zone `name` (cached: a group stamps hundreds of messages)."""
    return ZoneInfo(name)


def customer_sent_at(meta_timestamp: datetime | None, now: datetime) -> datetime:
    """When the customer sent it: Meta's timestamp, never in the future. It starts the 24-hour
    customer service window (Sources: WhatsApp §6), not our receipt time.
    """
    return min(meta_timestamp, now) if meta_timestamp is not None else now


def arrival(received_at: datetime, index: int) -> datetime:
    """A customer message's `received_at`: the POST's receipt time plus one microsecond per
    earlier customer message in the same POST. `messages.assign_positions` orders a burst by
    Meta's second, then this, then the row id; a group inserts in wamid order (so that two
    groups lock a shared redelivery in one order), so the row id alone would not keep the
    order of a burst Meta batched in one POST."""
    return received_at + timedelta(microseconds=index)


def latest(current: datetime | None, candidate: datetime) -> datetime:
    """The later of two times, `current` possibly unknown."""
    return candidate if current is None or candidate > current else current
