"""The database failing under a real engine, as a lost server or a refused row makes it fail:
SQLAlchemy's `before_cursor_execute` event raises before the statement reaches the driver.
No product function is replaced; the product sees what the driver would have raised."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.exc import OperationalError

Match = Callable[[str, Any], bool]  # (SQL text, parameters) -> fail this statement?


def lost_server(statement: str, parameters: Any) -> BaseException:
    """What the driver raises when the server went away mid-request."""
    return OperationalError(statement, parameters, Exception("server closed the connection"))


def every_statement(_statement: str, _parameters: Any) -> bool:
    return True


def sql_contains(text: str) -> Match:
    """Statements whose SQL holds `text`, case-insensitive ("INSERT INTO message")."""
    return lambda statement, _parameters: text.lower() in statement.lower()


def inserts_mentioning(table: str, text: str) -> Match:
    """INSERTs into `table` whose parameters (any row of an executemany) mention `text`: the
    statement storing one given row."""
    into = f"insert into {table} "
    return lambda statement, parameters: (statement.lower().startswith(into)
                                          and text in repr(parameters))


def refused_row(statement: str, parameters: Any) -> BaseException:
    """A row the product cannot store (a bug, a value the database refuses)."""
    return RuntimeError("a row the database refuses")


@contextmanager
def failing(engine: Engine, match: Match = every_statement, *, skip: int = 0,
            times: int | None = None,
            error: Callable[[str, Any], BaseException] = lost_server) -> Iterator[list[str]]:
    """Within the block, statements on `engine` that `match` raise `error(statement,
    parameters)`: after the first `skip` matching ones, the next `times` (all when None).
    Yields the failed statements' SQL, in order."""
    failed: list[str] = []
    seen = iter(range(1 << 62))

    def before(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any,
               _executemany: bool) -> None:
        if not match(statement, parameters):
            return
        n = next(seen)
        if n >= skip and (times is None or n < skip + times):
            failed.append(statement)
            raise error(statement, parameters)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield failed
    finally:
        event.remove(engine, "before_cursor_execute", before)
