"""Several statements in one round trip (issue 43, round trips), on PostgreSQL.

A query without parameters goes by the simple query protocol, which allows several statements
separated by `;`. In READ COMMITTED each statement takes its own snapshot once the one before
has finished, so a read placed after a lock sees what the lock's holder committed
(storage/fences.py, storage/appointments.lock_for_booking, storage/job_catalogue.py,
storage/messages.refresh_delivery). Only SQL the product writes goes this way, its values our
own integers, booleans and constant strings (`literal_sql`): never text a customer or a
business typed.
"""

from typing import Any

from sqlalchemy.sql import ClauseElement
from sqlmodel import Session


def result_sets(session: Session, statements: list[str]) -> list[tuple[Any, list[Any]]]:
    """Send `statements` as one query on the caller's connection (its transaction); return
    each statement's (cursor description, rows), in order. AssertionError when the server
    answers with fewer result sets than statements."""
    result = session.connection().exec_driver_sql("; ".join(statements))
    sets: list[tuple[Any, list[Any]]] = []
    try:
        cursor = result.cursor
        assert cursor is not None, "a batched query's cursor"
        for n in range(len(statements)):
            assert n == 0 or cursor.nextset(), f"result set {n + 1} of {len(statements)}"
            description = cursor.description
            sets.append((description, list(cursor.fetchall()) if description else []))
    finally:
        result.close()
    return sets


def last_row(session: Session, statements: list[str]) -> Any:
    """The first row of the last statement's result (None when it has none)."""
    rows = result_sets(session, statements)[-1][1]
    return rows[0] if rows else None


def literal_sql(session: Session, statement: ClauseElement) -> str:
    """`statement` as one text for `result_sets`, its values written into it (our own integers,
    booleans and constant strings). ValueError when the text holds a `%`: the driver's compiler
    doubles it for its placeholders, and a query sent without parameters keeps both, so a
    `LIKE '%x'` or a modulo would silently mean something else."""
    sql = str(statement.compile(dialect=session.get_bind().dialect,
                                compile_kwargs={"literal_binds": True}))
    if "%" in sql:
        raise ValueError("a batched statement may not hold '%' (the driver doubles it): "
                         + sql[:200])
    return sql
