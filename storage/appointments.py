"""An appointment about to change: the one way to read it for a change; and the visit a row
belongs to (issue 38).

Every door that changes a booking (the agent's reschedule and cancel tools, a reminder's tap,
a staff move, the business's cancel) reads it here, locked until its transaction ends (FOR
UPDATE on PostgreSQL; SQLite's transactions are serial already) and read again from the
database, so two changes racing for one booking see each other: one wins, the other finds
it no longer upcoming.

A visit is the rows sharing one booking number (`VISIT`: `visit_id`, or the row's own id on a
row written before visits): one row per service, each with its professional and times.
"""

from collections.abc import Sequence
from datetime import date, datetime
from zoneinfo import ZoneInfo

from sqlmodel import Session, col, func, or_, select

from storage import batched
from storage.models import Appointment, Professional, Tenant

# the booking number of a row, in SQL (COUNT(DISTINCT VISIT) counts visits)
VISIT = func.coalesce(col(Appointment.visit_id), col(Appointment.id))


def locked(session: Session, appointment_id: int) -> Appointment | None:
    """Appointment `appointment_id`, locked and fresh; None when there is none."""
    return session.exec(select(Appointment).where(Appointment.id == appointment_id)
                        .with_for_update()
                        .execution_options(populate_existing=True)).first()


def visit_of(appointment: Appointment) -> int:
    """The booking number of `appointment`'s visit."""
    assert appointment.id is not None
    return appointment.visit_id or appointment.id


def number_of(appointment: Appointment) -> int:
    """The booking number the customer is told for `appointment`'s visit: consecutive per
    tenant (`lock_for_booking`); a row written before numbers: its visit's id."""
    return appointment.booking_number or visit_of(appointment)


def lock_for_booking(session: Session, tenant_id: int, professional_ids: Sequence[int], *,
                     new_visit: bool) -> tuple[int | None, int | None]:
    """Lock what a booking checks before its insert (availability.place), and for a
    `new_visit` return the tenant's next booking number and, on PostgreSQL, the id its first
    row takes (else None, None).

    On PostgreSQL, the tenant's row FOR NO KEY UPDATE first, for any placement (so two
    bookings never share a number, while rows that only reference the tenant, a new contact,
    are not held up; a move too, as a round's calls share one transaction), then the
    professionals' rows FOR UPDATE (by id; the check of their busy time and the insert
    cannot interleave with another booking's), all held until the transaction ends: the one
    order every booking takes (no deadlock). SQLite's
    transactions are serial already. The number: one more than the tenant's highest;
    numbers once told are never reused (a cancelled visit keeps its own). The id (its
    visit_id too, so the row is inserted whole: no UPDATE after) comes from the table's
    sequence.

    One round trip on PostgreSQL, a statement per lock and the read last (storage/batched.py:
    the read's snapshot is taken once the locks are granted, so it sees the number a booking
    that held them committed)."""
    if session.get_bind().dialect.name != "postgresql":
        if not new_visit:
            return None, None
        highest = session.exec(select(func.max(col(Appointment.booking_number))).where(
            Appointment.tenant_id == tenant_id)).one()
        return int(highest or 0) + 1, None
    key = int(tenant_id)  # our own integers: the query goes without parameters (several)
    ids = ", ".join(str(int(i)) for i in sorted(professional_ids))
    if not new_visit and not ids:
        return None, None
    # the tenant's row first for a move or a joining service too: a tool round is one
    # transaction (workers/turns.py `tool_round`), so a move's professional lock may be held
    # when the round's next call books a new visit; were the tenant not first, another
    # booking holding it and waiting for that professional would deadlock with it
    statements = [f"SELECT id FROM {Tenant.__tablename__} WHERE id = {key} FOR NO KEY UPDATE"]
    if ids:
        statements.append(f"SELECT id FROM {Professional.__tablename__} WHERE id IN ({ids}) "
                          "ORDER BY id FOR UPDATE")
    if new_visit:
        statements.append(f"SELECT max(booking_number), "
                          f"nextval(pg_get_serial_sequence('{_TABLE}', 'id')) "
                          f"FROM {_TABLE} WHERE tenant_id = {key}")
    row = batched.last_row(session, statements) if new_visit else None
    if row is None:
        return None, None
    return int(row[0] or 0) + 1, int(row[1])


_TABLE = Appointment.__tablename__


def by_number(session: Session, tenant_id: int, number: int) -> Appointment | None:
    """A row of the tenant's visit told as `number` (`number_of`), locked and fresh; the
    latest such row when several visits were told it (a visit written before numbers:
    its id). One indexed read."""
    return session.exec(select(Appointment).where(
        Appointment.tenant_id == tenant_id,
        or_(col(Appointment.booking_number) == number,
            col(Appointment.booking_number).is_(None) & (VISIT == number)))
        .order_by(col(Appointment.id).desc()).with_for_update()
        .execution_options(populate_existing=True)).first()


def visit_rows(session: Session, visit_id: int, *, lock: bool = False) -> list[Appointment]:
    """Every row of visit `visit_id` (booked or not), by start then id; `lock`: locked and
    fresh, as `locked`. Both conditions are indexed (the head row of a visit written before
    visits has no visit_id)."""
    statement = select(Appointment).where(or_(
        col(Appointment.visit_id) == visit_id,
        (col(Appointment.id) == visit_id) & col(Appointment.visit_id).is_(None)))
    if lock:
        statement = statement.with_for_update().execution_options(populate_existing=True)
    return list(session.exec(statement.order_by(col(Appointment.start_at),
                                                col(Appointment.id))).all())


def booked(rows: list[Appointment]) -> list[Appointment]:
    return [r for r in rows if r.status == "booked"]


def visit_start(rows: list[Appointment]) -> datetime | None:
    """When the visit starts: its first booked row's start (None: nothing booked)."""
    starts = [r.start_at for r in booked(rows)]
    return min(starts) if starts else None


def off_visit_day(rows: list[Appointment], moving: Appointment, start: datetime,
                  tz: ZoneInfo) -> date | None:
    """The visit's local day (in `tz`) when moving its service row `moving` to `start` would
    take it to another day; None when the move keeps the visit on one day (or `moving` is its
    only booked row). The rule, for every door that moves one service of a visit (the agent's
    reschedule_appointment, operations/agenda.move): a visit is one day, as its one booking
    number and its one reminder say; another day is the whole visit moving, or a new visit."""
    others = [r for r in booked(rows) if r.id != moving.id]
    if not others:
        return None
    day = min(r.start_at for r in others).astimezone(tz).date()
    return day if start.astimezone(tz).date() != day else None
