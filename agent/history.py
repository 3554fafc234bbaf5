"""The customer's booking history for the context block (issue 21; ARCHITECTURE.md, Memory
lifecycle): upcoming bookings and the last past ones, with their notes, and a "usual" line
computed here from that history, never by a model.

Read at session start and at compaction only (workers/facts.py `render_context_block`, the
same steps as the summary), so system[1] stays byte-identical between them and the cache holds.
A past booking counts as a visit unless it was cancelled or staff marked it a no-show (issue
22: `Appointment.outcome`, apart from `status`); the usual line also counts the contact's
no-shows. Everything is over visits (issue 38): a drop-off of three services is one line and
counts once, its usual "service" the visit's services together ("oleo+alinhamento").
Bounds: UPCOMING_SHOWN upcoming, PAST_SHOWN past; each line's names and note are cut
(`agent/context.data_text` renders every line in the block).
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlmodel import Session, col, func, select

from storage import deposits
from storage.appointments import VISIT, number_of, visit_of
from storage.models import Appointment, Professional, Service

UPCOMING_SHOWN = 5  # visits
PAST_SHOWN = 5  # visits
MAX_VISIT_SERVICES = 5  # agent/tools/availability.MAX_VISIT_SERVICES: rows read per visit
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
    # a visit of several services (issue 38): the others after the first, each (service
    # code, service name, professional code, professional name); who it is for; the staff's
    # note on what was done (set with the outcome)
    more: tuple[tuple[str, str, str, str], ...] = ()
    for_name: str = ""
    outcome_note: str = ""
    deposit: str = ""  # issue 48: storage/deposits.status_note, "" when none was asked

    @property
    def services(self) -> str:
        """The visit's service codes, in order: "oleo+alinhamento"."""
        return "+".join([self.service_code, *(m[0] for m in self.more)])

    @property
    def professionals(self) -> str:
        """Who did the visit, in order, each once: "pedro+rafa"."""
        return "+".join(dict.fromkeys([self.professional_code, *(m[2] for m in self.more)]))


@dataclass(frozen=True)
class History:
    upcoming: Sequence[Booking]
    past: Sequence[Booking]  # most recent first
    no_shows: int = 0  # the contact's past bookings marked no_show (not cancelled ones)


def load(session: Session, tenant_id: int, contact_id: int, now: datetime,
         tz: ZoneInfo) -> History:
    """The contact's next UPCOMING_SHOWN booked visits and last PAST_SHOWN past ones (any
    status), at `now`; a visit of several services is one Booking (issue 38)."""
    base = select(Appointment, Service, Professional).join(
        Service, col(Service.id) == col(Appointment.service_id)).join(
        Professional, col(Professional.id) == col(Appointment.professional_id)).where(
        Appointment.tenant_id == tenant_id, Appointment.contact_id == contact_id)
    rows_per_visit = MAX_VISIT_SERVICES
    upcoming = session.exec(base.where(Appointment.status == "booked",
                                       col(Appointment.start_at) > now)
                            .order_by(col(Appointment.start_at), col(Appointment.id))
                            .limit(UPCOMING_SHOWN * rows_per_visit)).all()
    past = session.exec(base.where(col(Appointment.start_at) <= now)
                        .order_by(col(Appointment.start_at).desc(), col(Appointment.id).desc())
                        .limit(PAST_SHOWN * rows_per_visit)).all()
    no_shows = int(session.exec(select(func.count(func.distinct(VISIT))).where(
        Appointment.tenant_id == tenant_id, Appointment.contact_id == contact_id,
        Appointment.outcome == "no_show",
        Appointment.status != "cancelled")).one())  # as the history's lines count them
    notes = {visit: deposits.status_note(d, tz) for visit, d in deposits.of_visits(
        session, [visit_of(r[0]) for r in [*upcoming, *past]]).items()}
    return History(_visits(upcoming, tz, notes)[:UPCOMING_SHOWN],
                   _visits(past, tz, notes, newest_first=True)[:PAST_SHOWN], no_shows)


def _visits(rows: Sequence[tuple[Appointment, Service, Professional]], tz: ZoneInfo,
            notes: dict[int, str], *, newest_first: bool = False) -> list[Booking]:
    """Rows grouped by visit (and status: a service cancelled apart is its own line), each
    group's services by start."""
    groups: dict[tuple[int, str], list[tuple[Appointment, Service, Professional]]] = {}
    for row in rows:
        groups.setdefault((visit_of(row[0]), row[0].status), []).append(row)
    visits = []
    for group in groups.values():
        group.sort(key=lambda r: (r[0].start_at, r[0].id or 0))
        (appointment, service, pro), rest = group[0], group[1:]
        visits.append(Booking(
            number_of(appointment), appointment.start_at.astimezone(tz), service.code,
            service.name, pro.code, pro.name, appointment.status, appointment.note,
            appointment.outcome,
            more=tuple((s.code, s.name, p.code, p.name) for _, s, p in rest),
            for_name=appointment.for_name, outcome_note=appointment.outcome_note,
            deposit=notes.get(visit_of(appointment), "")))
    return sorted(visits, key=lambda b: (b.start, b.id), reverse=newest_first)


def _cut(text: str) -> str:
    return text if len(text) <= NAME_CHARS else text[:NAME_CHARS - 1] + "…"


def booking_line(booking: Booking, *, past: bool) -> str:
    """`#12 Tue 2026-06-02 14:00 corte (Corte feminino) with julia (Júlia), visit; note: ...`;
    a visit of several services names each ("... with julia (Júlia) + escova (Escova) with
    bia (Bia), ..."), then who it is for and the staff's note on what was done."""
    what = "cancelled" if booking.status == "cancelled" else ("visit" if past else "booked")
    if booking.status != "cancelled" and booking.outcome == "no_show":
        what = "no-show (did not come)"
    elif booking.status != "cancelled" and booking.outcome == "completed":
        what = "visit, completed"
    services = " + ".join(
        f"{code} ({_cut(name)}) with {pro_code} ({_cut(pro_name)})" for code, name, pro_code,
        pro_name in [(booking.service_code, booking.service_name, booking.professional_code,
                      booking.professional_name), *booking.more])
    line = f"#{booking.id} {booking.start:%a %Y-%m-%d %H:%M} {services}, {what}"
    return (line + (f"; for: {booking.for_name}" if booking.for_name.strip() else "")
            + (f"; note: {booking.note}" if booking.note.strip() else "")
            + (f"; staff: {booking.outcome_note}" if booking.outcome_note.strip() else "")
            + (f"; {booking.deposit}" if booking.deposit else ""))


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
    service, services = most([b.services for b in visits])  # a visit counts once
    pro, pros = most([b.professionals for b in visits])
    return (f"usual (computed from the last {len(visits)} visit(s)): service {service} "
            f"({services} of {len(visits)}), professional {pro} ({pros} of {len(visits)})"
            + (f"; {shows}" if shows else ""))


def history_lines(history: History) -> tuple[list[str], list[str], str]:
    """(upcoming lines, past lines, usual line) for `context.context_block`."""
    return ([booking_line(b, past=False) for b in history.upcoming],
            [booking_line(b, past=True) for b in history.past], usual_line(history))
