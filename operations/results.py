"""What the agent brought a business in a week or a month (issue 49, the "Resultados" page; the
admin API and `wagent results` show the same figures): visits booked by the agent and by
staff, revenue booked at catalogue prices, confirmations, cancellations, no-shows (and their
rate before and after reminders were on), slots refilled from the waitlist, handoffs and how
fast staff answered them, the agent's answer time, and the cost per booked visit.

Periods are the tenant's local weeks (Monday to Sunday) and calendar months (`window`,
pure); each measure is one set-based query over the period's UTC bounds (no query per row).
Percentiles and medians are taken in Python over the one list a query returns (SQLite has no
percentile function). The console, the API and the CLI only render `Results`.

A visit is the rows sharing one booking number (storage/appointments.VISIT). A move
(`moved_to_id`) is neither a new booking nor a cancellation: the visit counts once, at its
first booking.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from statistics import median
from typing import Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import ColumnElement, and_, case, literal
from sqlmodel import Session, col, func, select

from storage.appointments import VISIT
from storage.marks import STAFF
from storage.models import (
    Appointment,
    Conversation,
    Message,
    Outbound,
    Reminder,
    Service,
    Tenant,
    ToolCall,
    WaitlistEntry,
)
from usage import ledger

PERIODS = ("week", "month")
SERIES_LENGTH = {"week": 8, "month": 6}  # bars in the console's charts
REPLY_LAG = timedelta(days=1)  # the 24-hour window: a later reply is not one (workers/turns.py)
HANDOFF_TOOL, HANDED_OFF = "handoff_to_human", "Handed off%"  # agent/tools/handoff.py's result


@dataclass(frozen=True)
class Window:
    """A local period [`start`, `end`) of the tenant and its UTC bounds."""

    kind: str
    start: date
    end: date
    start_at: datetime
    end_at: datetime


@dataclass(frozen=True)
class Measures:
    """The figures of one period. Durations in seconds (None: nothing to measure); money in
    integer cents of the tenant's currency and micro-dollars (µUSD) for costs."""

    window: Window
    visits_by_agent: int = 0
    visits_by_staff: int = 0
    revenue_cents: int = 0
    confirmed: int = 0
    cancelled: int = 0
    no_shows: int = 0
    completed: int = 0
    refilled: int = 0
    handoffs: int = 0
    handoffs_answered: int = 0
    staff_answer_median_s: float | None = None
    agent_answer_p50_s: float | None = None
    agent_answer_p90_s: float | None = None
    cost_musd: int | None = None

    @property
    def visits(self) -> int:
        return self.visits_by_agent + self.visits_by_staff

    @property
    def no_show_rate(self) -> float | None:
        """No-shows among the visits of the period marked after the fact (completed or not)."""
        return rate(self.no_shows, self.completed)

    @property
    def cost_per_visit_musd(self) -> int | None:
        if self.cost_musd is None or not self.visits:
            return None
        return round(self.cost_musd / self.visits)


@dataclass(frozen=True)
class Results:
    """`current` and `previous` period; `series`: the last periods, oldest first (charts);
    `reminders_on`: the first reminder ever queued (None: never), splitting the no-show rate
    into `no_show_before` and `no_show_after` (visits that started before / after it, up to
    the end of the current period)."""

    kind: str
    current: Measures
    previous: Measures
    series: tuple[Measures, ...]
    reminders_on: datetime | None
    no_show_before: float | None
    no_show_after: float | None


# -- periods (pure) ---------------------------------------------------------------------------

def period_start(kind: str, day: date) -> date:
    """The first local day of the week (Monday) or month holding `day`; ValueError for a
    kind not in PERIODS."""
    if kind == "week":
        return day - timedelta(days=day.weekday())
    if kind == "month":
        return day.replace(day=1)
    raise ValueError(f"period must be one of {', '.join(PERIODS)}, not {kind!r}")


def next_start(kind: str, start: date) -> date:
    if kind == "week":
        return start + timedelta(days=7)
    return ledger.next_month(start)


def window(kind: str, now: datetime, tz: ZoneInfo, *, back: int = 0) -> Window:
    """The period holding `now` in `tz` (back=1: the one before, ...), with UTC bounds taken
    at local midnight (so a week across a DST change is 167 or 169 hours long)."""
    start = period_start(kind, now.astimezone(tz).date())
    for _ in range(back):
        start = period_start(kind, start - timedelta(days=1))
    end = next_start(kind, start)
    return Window(kind, start, end, *ledger.local_bounds(tz, start, end))


def rate(hits: int, others: int) -> float | None:
    total = hits + others
    return hits / total if total else None


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile (`share` 0.5: the median's upper neighbour for an even
    count; 0.9: p90) of `values`; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * share // 1))
    return ordered[int(rank) - 1]


# -- the measures (one query each) -------------------------------------------------------------

def results(session: Session, tenant: Tenant, kind: str, *, now: datetime) -> Results:
    """The tenant's results for the `kind` period holding `now` and the ones before it
    (`SERIES_LENGTH`), costs from the ledger (`_costs`). ValueError for a
    kind not in PERIODS."""
    period_start(kind, now.date())  # checks kind
    tz = ZoneInfo(tenant.timezone)
    assert tenant.id is not None
    windows = [window(kind, now, tz, back=n) for n in range(SERIES_LENGTH[kind] - 1, -1, -1)]
    costs = _costs(session, tenant.id, windows)
    series = tuple(replace(measure(session, tenant.id, w), cost_musd=cost)
                   for w, cost in zip(windows, costs, strict=True))
    reminders_on = session.exec(select(func.min(col(Reminder.queued_at))).where(
        Reminder.tenant_id == tenant.id)).one()
    on = _aware_or_none(reminders_on)
    before, after = _no_show_split(session, tenant.id, on, windows[-1].end_at)
    return Results(kind, series[-1], series[-2], series, on, before, after)


def measure(session: Session, tenant_id: int, w: Window) -> Measures:
    """Every figure of window `w` for the tenant but its cost."""
    by_agent, by_staff = _visits(session, tenant_id, w)
    no_shows, completed = _outcomes(session, tenant_id, w)
    handoffs, answered, staff_median = _handoffs(session, tenant_id, w)
    waits = _agent_waits(session, tenant_id, w)
    return replace(
        Measures(w), visits_by_agent=by_agent, visits_by_staff=by_staff,
        revenue_cents=_revenue(session, tenant_id, w),
        confirmed=_count_visits(session, tenant_id, col(Appointment.confirmed_at), w),
        cancelled=_count_visits(session, tenant_id, col(Appointment.cancelled_at), w,
                                col(Appointment.moved_to_id).is_(None)),
        no_shows=no_shows, completed=completed, refilled=_refilled(session, tenant_id, w),
        handoffs=handoffs, handoffs_answered=answered, staff_answer_median_s=staff_median,
        agent_answer_p50_s=percentile(waits, 0.5), agent_answer_p90_s=percentile(waits, 0.9))


def _costs(session: Session, tenant_id: int, windows: list[Window]) -> list[int]:
    """Each window's cost in µUSD, model calls and billed WhatsApp messages: the ledger's
    local days (usage/ledger.costs_in, read once for the whole series), summed."""
    days = ledger.costs_in(session, tenant_id, windows[0].start, windows[-1].end)
    return [sum(d.total for d in days if w.start <= d.day < w.end) for w in windows]


def _in(column: Any, w: Window) -> ColumnElement[bool]:
    return and_(column >= w.start_at, column < w.end_at)


def _booked_in(tenant_id: int, w: Window) -> list[ColumnElement[bool]]:
    """Rows booked in `w`: not the new row of a move (its visit counted when first booked)."""
    moved_to = select(col(Appointment.moved_to_id)).where(
        Appointment.tenant_id == tenant_id, col(Appointment.moved_to_id).is_not(None))
    return [col(Appointment.tenant_id) == tenant_id, _in(col(Appointment.created_at), w),
            col(Appointment.id).not_in(moved_to)]


def _visits(session: Session, tenant_id: int, w: Window) -> tuple[int, int]:
    """(by the agent, by staff): distinct visits booked in `w` by `booked_by`."""
    rows = session.exec(select(Appointment.booked_by, func.count(func.distinct(VISIT)))
                        .where(*_booked_in(tenant_id, w)).group_by(Appointment.booked_by)).all()
    counts = dict(rows)
    return int(counts.get("customer", 0)), int(counts.get("business", 0))


def _revenue(session: Session, tenant_id: int, w: Window) -> int:
    """Catalogue prices (cents) of the services booked in `w` and not cancelled since (a
    move keeps it); a service without a price counts 0."""
    total = session.exec(select(func.coalesce(func.sum(Service.price_cents), 0))
                         .select_from(Appointment)
                         .join(Service, col(Service.id) == col(Appointment.service_id))
                         .where(*_booked_in(tenant_id, w),
                                (col(Appointment.status) != "cancelled")
                                | col(Appointment.moved_to_id).is_not(None))).one()
    return int(total or 0)


def _count_visits(session: Session, tenant_id: int, column: Any,
                  w: Window, *more: ColumnElement[bool]) -> int:
    return int(session.exec(select(func.count(func.distinct(VISIT))).where(
        Appointment.tenant_id == tenant_id, _in(column, w), *more)).one())


def _outcomes(session: Session, tenant_id: int, w: Window) -> tuple[int, int]:
    """(no-shows, completed): visits starting in `w` by the outcome staff marked."""
    rows = session.exec(select(Appointment.outcome, func.count(func.distinct(VISIT))).where(
        Appointment.tenant_id == tenant_id, _in(col(Appointment.start_at), w),
        col(Appointment.outcome).in_(("no_show", "completed")))
        .group_by(Appointment.outcome)).all()
    counts = dict(rows)
    return int(counts.get("no_show", 0)), int(counts.get("completed", 0))


def _no_show_split(session: Session, tenant_id: int, on: datetime | None,
                   until: datetime) -> tuple[float | None, float | None]:
    """The no-show rate of visits that started before reminders were on and after (up to
    `until`); (all of them, None) when reminders never went out."""
    after = case((col(Appointment.start_at) >= on, literal(True)), else_=literal(False)) \
        if on is not None else literal(False)
    rows = session.exec(select(after, Appointment.outcome, func.count(func.distinct(VISIT)))
                        .where(Appointment.tenant_id == tenant_id,
                               col(Appointment.start_at) < until,
                               col(Appointment.outcome).in_(("no_show", "completed")))
                        .group_by(after, Appointment.outcome)).all()
    counts = {(bool(side), outcome): int(n) for side, outcome, n in rows}

    def side(later: bool) -> float | None:
        return rate(counts.get((later, "no_show"), 0), counts.get((later, "completed"), 0))
    return side(False), (side(True) if on is not None else None)


def _refilled(session: Session, tenant_id: int, w: Window) -> int:
    """Waitlist entries that booked a freed slot in `w` (workers/waitlist.py)."""
    return int(session.exec(select(func.count()).select_from(WaitlistEntry)
                            .join(Appointment,
                                  col(Appointment.id) == col(WaitlistEntry.appointment_id))
                            .where(WaitlistEntry.tenant_id == tenant_id,
                                   WaitlistEntry.status == "booked",
                                   _in(col(Appointment.created_at), w))).one())


def _handoffs(session: Session, tenant_id: int,
              w: Window) -> tuple[int, int, float | None]:
    """(handoffs, answered, median seconds to the first staff message): the agent's
    handoff_to_human calls in `w` that handed off (not the no-op while staff already had it)."""
    first_staff = select(func.min(col(Message.received_at))).where(
        col(Message.conversation_id) == col(ToolCall.conversation_id),
        col(Message.author).startswith(STAFF),
        col(Message.received_at) >= col(ToolCall.created_at)).scalar_subquery()
    rows = session.exec(select(ToolCall.created_at, first_staff)
                        .join(Conversation, col(Conversation.id) == col(ToolCall.conversation_id))
                        .where(Conversation.tenant_id == tenant_id, ToolCall.name == HANDOFF_TOOL,
                               col(ToolCall.is_error).is_(False),
                               col(ToolCall.result).like(HANDED_OFF),
                               _in(col(ToolCall.created_at), w))).all()
    waits = [(_aware(answered) - _aware(asked)).total_seconds()
             for asked, answered in rows if answered is not None]
    return len(rows), len(waits), (median(waits) if waits else None)


def _agent_waits(session: Session, tenant_id: int, w: Window) -> list[float]:
    """Seconds from each customer message received in `w` that the agent answered to the
    first part of that answer sent. The turn stores the reply's outbox rows with the same
    `now` as the messages' `answered_at` (workers/turns.py), so the two sets are matched on
    (conversation, that time) in Python: two range reads on indexed tenant columns, where a
    correlated lookup per message scanned a conversation's outbox each time (bench/
    results_page.py). Messages staff handled, or answered with an apology or not at all
    (`status_reason` set), are left out; a reply is looked for up to a day after `w` (the
    24-hour window: later, the message is marked window-closed)."""
    asked = session.exec(select(Message.conversation_id, Message.received_at,
                                Message.answered_at).where(
        Message.tenant_id == tenant_id, Message.direction == "inbound",
        col(Message.answered_at).is_not(None), col(Message.status_reason).is_(None),
        _in(col(Message.received_at), w))).all()
    sends = session.exec(select(Outbound.conversation_id, Outbound.created_at,
                                func.min(col(Outbound.sent_at))).where(
        Outbound.tenant_id == tenant_id, col(Outbound.created_at) >= w.start_at,
        col(Outbound.created_at) < w.end_at + REPLY_LAG)
        .group_by(col(Outbound.conversation_id), col(Outbound.created_at))).all()
    first_sent: dict[tuple[int, datetime | None], datetime] = {
        (c, _aware(at)): _aware(sent) for c, at, sent in sends if sent is not None}
    waits = []
    for conversation_id, received, answered in asked:
        sent = first_sent.get((conversation_id, _aware_or_none(answered)))
        if sent is not None:
            waits.append((sent - _aware(received)).total_seconds())
    return waits


def _aware(value: datetime) -> datetime:
    """A stored time as aware UTC (SQLite gives it back naive)."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _aware_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else _aware(value)


# -- the admin API's and the CLI's view ---------------------------------------------------------

class ResultsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    period: Literal["week", "month"] = Field("week", description="week (Monday to Sunday) or "
                                             "month, in the tenant's time zone")


def measures_view(m: Measures) -> dict[str, Any]:
    """One period as JSON: local `start`/`end` (end excluded), counts, `revenue_cents`,
    seconds, µUSD; rates 0..1 (None: nothing to measure)."""
    figures = {name: getattr(m, name) for name in Measures.__dataclass_fields__
               if name != "window"}
    return {"start": m.window.start.isoformat(), "end": m.window.end.isoformat(), **figures,
            "visits": m.visits, "no_show_rate": m.no_show_rate,
            "cost_per_visit_musd": m.cost_per_visit_musd}


def results_view(found: Results) -> dict[str, Any]:
    """`Results` as JSON (the admin API's GET /admin/tenants/{id}/results, `wagent results`)."""
    return {"period": found.kind, "current": measures_view(found.current),
            "previous": measures_view(found.previous),
            "series": [measures_view(m) for m in found.series],
            "reminders_on": found.reminders_on.isoformat() if found.reminders_on else None,
            "no_show_rate_before_reminders": found.no_show_before,
            "no_show_rate_with_reminders": found.no_show_after}
