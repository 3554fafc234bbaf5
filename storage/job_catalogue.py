"""The catalogue rows one job reads once (issue 43, round trips): the tenant row, its active
services and professionals, weekly hours, hours exceptions and enabled webhook endpoints,
shared by a turn's request building and every tool it runs.

Scoped to one job: the job shell opens `job_scope()` (workers/jobs.run_coalesced) and the rows
are dropped when it ends, so nothing is cached across jobs; outside a scope (the web process,
the console, a test calling a tool directly) every read goes to the database as before. The
console and the admin API edit these rows in other processes: a job lives seconds, and the
job's view of the catalogue is the one it started with, except for a booking or a move
(agent/tools/scheduling.py book_appointment, reschedule_appointment), which forgets the rows
first and decides on the catalogue as its own transaction reads it (a day closed, a service or
professional archived meanwhile is never booked). A write through storage/catalogue.py
or to an endpoint (storage/webhooks.py) in this process forgets the tenant's rows (`forget`),
so a job never reads its own stale write (no job writes the tenant row's settings: those are
the console's and the admin API's, storage/tenants.update_settings).

The rows are read in the caller's transaction (its connection: the same snapshot and locks)
through a session of their own, so they are detached at once: the caller's rollback (a tool's
ToolError) cannot expire them, and they never enter the caller's identity map. Read them only;
a caller that changes a row reads it with its own session.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy.engine import Dialect
from sqlalchemy.orm import make_transient_to_detached
from sqlmodel import Session, col, select
from sqlmodel.sql.expression import SelectOfScalar

from storage import batched
from storage.models import (
    HoursException,
    OpeningHours,
    Professional,
    Service,
    Tenant,
    WebhookEndpoint,
)

Row = TypeVar("Row")


@dataclass
class _Rows:
    """One tenant's rows read so far in this job, by kind ("services", ...)."""

    tenant: Tenant | None = None
    lists: dict[str, list[Any]] = field(default_factory=dict)


_CURRENT: ContextVar[dict[int, _Rows] | None] = ContextVar("job_catalogue", default=None)


@contextmanager
def job_scope() -> Iterator[None]:
    """Share catalogue rows for the body's duration (one job); dropped when it ends."""
    token = _CURRENT.set({})
    try:
        yield
    finally:
        _CURRENT.reset(token)


def active() -> bool:
    """True inside a `job_scope`."""
    return _CURRENT.get() is not None


def forget(tenant_id: int) -> None:
    """Drop the tenant's rows read in this job (its catalogue was just written)."""
    rows = _CURRENT.get()
    if rows is not None:
        rows.pop(tenant_id, None)


def remember_tenant(tenant: Tenant) -> None:
    """Keep `tenant` (a row the job read already, detached or read-only) as this job's
    tenant row, so `tenant` does not read it again."""
    rows = _CURRENT.get()
    if rows is not None and tenant.id is not None:
        rows.setdefault(tenant.id, _Rows()).tenant = tenant


def tenant(session: Session, tenant_id: int) -> Tenant | None:
    """Tenant `tenant_id` (None when there is none)."""
    rows = _CURRENT.get()
    if rows is None:
        return session.get(Tenant, tenant_id)
    entry = rows.setdefault(tenant_id, _Rows())
    if entry.tenant is None:
        if session.get_bind().dialect.name == "postgresql":
            _fill(session, tenant_id, entry)
        else:
            entry.tenant = next(iter(_read(session, select(Tenant).where(
                Tenant.id == tenant_id))), None)
    return entry.tenant


def services(session: Session, tenant_id: int) -> list[Service]:
    """The active services, by code."""
    return _list(session, tenant_id, "services")


def professionals(session: Session, tenant_id: int) -> list[Professional]:
    """The active professionals, by code."""
    return _list(session, tenant_id, "professionals")


def service(session: Session, tenant_id: int, service_id: int) -> Service | None:
    """Service `service_id`: one of the tenant's active ones read in this job, else read (an
    archived one, or outside a job)."""
    if _CURRENT.get() is not None:
        found = next((s for s in services(session, tenant_id) if s.id == service_id), None)
        if found is not None:
            return found
    return session.get(Service, service_id)


def professional(session: Session, tenant_id: int, professional_id: int) -> Professional | None:
    """Professional `professional_id`, as `service` finds a service."""
    if _CURRENT.get() is not None:
        found = next((p for p in professionals(session, tenant_id) if p.id == professional_id),
                     None)
        if found is not None:
            return found
    return session.get(Professional, professional_id)


def hours(session: Session, tenant_id: int) -> list[OpeningHours]:
    """The weekly opening hours, by weekday then opening time."""
    return _list(session, tenant_id, "hours")


def hours_exceptions(session: Session, tenant_id: int) -> list[HoursException]:
    """The dated exceptions to the weekly hours, by day."""
    return _list(session, tenant_id, "exceptions")


def endpoints(session: Session, tenant_id: int) -> list[WebhookEndpoint]:
    """The tenant's enabled webhook endpoints (storage/webhooks.emit)."""
    return _list(session, tenant_id, "endpoints")


def _statement(kind: str, tenant_id: int) -> SelectOfScalar[Any]:
    """The read of one kind of the tenant's rows."""
    if kind == "services":
        return select(Service).where(Service.tenant_id == tenant_id,
                                     col(Service.active).is_(True)).order_by(col(Service.code))
    if kind == "professionals":
        return select(Professional).where(
            Professional.tenant_id == tenant_id, col(Professional.active).is_(True)
        ).order_by(col(Professional.code))
    if kind == "hours":
        return select(OpeningHours).where(OpeningHours.tenant_id == tenant_id).order_by(
            col(OpeningHours.weekday), col(OpeningHours.opens))
    if kind == "exceptions":
        return select(HoursException).where(HoursException.tenant_id == tenant_id).order_by(
            col(HoursException.day))
    assert kind == "endpoints", kind
    return select(WebhookEndpoint).where(
        WebhookEndpoint.tenant_id == tenant_id, col(WebhookEndpoint.disabled_at).is_(None)
    ).order_by(col(WebhookEndpoint.id))


KINDS = ("services", "professionals", "hours", "exceptions", "endpoints")


def _list(session: Session, tenant_id: int, kind: str) -> list[Any]:
    rows = _CURRENT.get()
    if rows is None:
        return list(session.exec(_statement(kind, tenant_id)).all())
    entry = rows.setdefault(tenant_id, _Rows())
    if kind not in entry.lists:
        if session.get_bind().dialect.name == "postgresql":
            _fill(session, tenant_id, entry)
        else:
            entry.lists[kind] = _read(session, _statement(kind, tenant_id))
    return list(entry.lists[kind])  # a copy: a caller's filtering never reaches the next one


def _fill(session: Session, tenant_id: int, entry: _Rows) -> None:
    """On PostgreSQL, the tenant row (when not held yet) and every kind not read yet, in one
    round trip (issue 43): a job wants them all, and a booking reads them again after
    `forget`."""
    missing = [k for k in KINDS if k not in entry.lists]
    statements = [_statement(k, tenant_id) for k in missing]
    if entry.tenant is None:
        statements.append(select(Tenant).where(Tenant.id == tenant_id))
    found = _read_many(session, statements)
    entry.lists.update(zip(missing, found, strict=False))
    if entry.tenant is None:
        entry.tenant = next(iter(found[-1]), None)


def _read(session: Session, statement: SelectOfScalar[Row]) -> list[Row]:
    """`statement`'s rows, read on the caller's connection (its transaction) by a session of
    their own, detached when it closes (module docstring)."""
    with Session(bind=session.connection(), expire_on_commit=False) as reader:
        return list(reader.exec(statement).all())


def _read_many(session: Session, statements: list[SelectOfScalar[Any]]) -> list[list[Any]]:
    """Each statement's rows (each selects one table's entity), on PostgreSQL in one round
    trip on the caller's connection (storage/batched.py; the statements' only values are our
    own integers and booleans), each result set made into detached rows, as `_read` leaves
    them."""
    connection = session.connection()
    found: list[list[Any]] = []
    for statement, (description, rows) in zip(statements, batched.result_sets(session, [
            batched.literal_sql(session, s) for s in statements]), strict=True):
        model = statement.column_descriptions[0]["entity"]
        columns = _processed(model, description or (), connection.dialect)
        found.append([_detached(model, {name: value if process is None else process(value)
                                        for (name, process), value in zip(
                                            columns, row, strict=True)})
                      for row in rows])
    return found


def _processed(model: type[Any], description: Any,
               dialect: Dialect) -> list[tuple[str, Callable[[Any], Any] | None]]:
    """Each column's name and its type's result processing, as a query through the ORM
    applies it (UTCDateTime gives UTC whatever the session's TimeZone; storage/models.py)."""
    table = model.__table__
    return [(c[0], table.c[c[0]].type.dialect_impl(dialect).result_processor(dialect, c[1]))
            for c in description]


def _detached(model: type[Row], values: dict[str, Any]) -> Row:
    """A row of `model` with `values` (its columns as read), detached as a session leaves it."""
    row = model(**values)
    make_transient_to_detached(row)
    return row
