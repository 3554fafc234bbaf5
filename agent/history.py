"""The customer's booking history for the context block (issue 21; ARCHITECTURE.md, Memory
lifecycle): upcoming bookings and the last past ones, with their notes, and a "usual" line
computed here from that history, never by a model.

Read at session start and at compaction only (workers/facts.py `render_context_block`, the
same steps as the summary), so system[1] stays byte-identical between them and the cache holds.
A past booking counts as a visit unless it was cancelled or staff marked it a no-show (issue
22: `Appointment.outcome`, apart from `status`); the usual line also counts the contact's
no-shows. Bounds: UPCOMING_SHOWN upcoming, PAST_SHOWN past; each line's names and note are cut
(`agent/context.data_text` renders every line in the block).
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlmodel import Session, col, func, select

from storage.models import Appointment, Professional, Service

UPCOMING_SHOWN = 5
PAST_SHOWN = 5
NAME_CHARS = 40


@dataclass(frozen=True)
class Booking:
    """One appointment as the block shows it (local time already)."""

    id: int
    start: datetime  # local, in the tenant's timezone
    service_code: str
    service_name: str
    professional_code: str
    professional_name: str
    status: str  # booked or cancelled
    note: str = ""
    outcome: str = ""  # "", completed or no_show (staff mark it after the visit)


@dataclass(frozen=True)
class History:
    upcoming: Sequence[Booking]
    past: Sequence[Booking]  # most recent first
    no_shows: int = 0  # the contact's past bookings marked no_show (not cancelled ones)


def load(session: Session, tenant_id: int, contact_id: int, now: datetime,
         tz: ZoneInfo) -> History:
    """The contact's next UPCOMING_SHOWN booked appointments and last PAST_SHOWN past ones
    (any status), at `now`."""
    base = select(Appointment, Service, Professional).join(
        Service, col(Service.id) == col(Appointment.service_id)).join(
        Professional, col(Professional.id) == col(Appointment.professional_id)).where(
        Appointment.tenant_id == tenant_id, Appointment.contact_id == contact_id)
    upcoming = session.exec(base.where(Appointment.status == "booked",
                                       col(Appointment.start_at) > now)
                            .order_by(col(Appointment.start_at), col(Appointment.id))
                            .limit(UPCOMING_SHOWN)).all()
    past = session.exec(base.where(col(Appointment.start_at) <= now)
                        .order_by(col(Appointment.start_at).desc(), col(Appointment.id).desc())
                        .limit(PAST_SHOWN)).all()

    def booking(row: tuple[Appointment, Service, Professional]) -> Booking:
        appointment, service, pro = row
        return Booking(appointment.id or 0, appointment.start_at.astimezone(tz), service.code,
                       service.name, pro.code, pro.name, appointment.status, appointment.note,
                       appointment.outcome)
    no_shows = int(session.exec(select(func.count()).select_from(Appointment).where(
        Appointment.tenant_id == tenant_id, Appointment.contact_id == contact_id,
        Appointment.outcome == "no_show",
        Appointment.status != "cancelled")).one())  # as the history's lines count them
    return History([booking(r) for r in upcoming], [booking(r) for r in past], no_shows)


def _cut(text: str) -> str:
    return text if len(text) <= NAME_CHARS else text[:NAME_CHARS - 1] + "…"


def booking_line(booking: Booking, *, past: bool) -> str:
    """`#12 Tue 2026-06-02 14:00 corte (Corte feminino) with julia (Júlia), visit; note: ...`"""
    what = "cancelled" if booking.status == "cancelled" else ("visit" if past else "booked")
    if booking.status != "cancelled" and booking.outcome == "no_show":
        what = "no-show (did not come)"
    elif booking.status != "cancelled" and booking.outcome == "completed":
        what = "visit, completed"
    line = (f"#{booking.id} {booking.start:%a %Y-%m-%d %H:%M} {booking.service_code} "
            f"({_cut(booking.service_name)}) with {booking.professional_code} "
            f"({_cut(booking.professional_name)}), {what}")
    return line + (f"; note: {booking.note}" if booking.note.strip() else "")


def usual_line(history: History) -> str:
    """The most frequent service and professional of the past visits shown (cancelled ones
    left out, and no-shows), with counts; a tie goes to the most recent; then the contact's
    no-show count when there is one. "" with neither."""
    visits = [b for b in history.past if b.status != "cancelled" and b.outcome != "no_show"]
    shows = f"no-shows: {history.no_shows}" if history.no_shows else ""
    if not visits:
        return shows

    def most(values: list[str]) -> tuple[str, int]:
        counts = Counter(values)
        best = max(counts.values())
        return next(v for v in values if counts[v] == best), best  # visits: most recent first
    service, services = most([b.service_code for b in visits])
    pro, pros = most([b.professional_code for b in visits])
    return (f"usual (computed from the last {len(visits)} visit(s)): service {service} "
            f"({services} of {len(visits)}), professional {pro} ({pros} of {len(visits)})"
            + (f"; {shows}" if shows else ""))


def history_lines(history: History) -> tuple[list[str], list[str], str]:
    """(upcoming lines, past lines, usual line) for `context.context_block`."""
    return ([booking_line(b, past=False) for b in history.upcoming],
            [booking_line(b, past=True) for b in history.past], usual_line(history))
