"""The database failing under a real engine, as a lost server or a refused row makes it fail:
SQLAlchemy's `before_cursor_execute` event raises before the statement reaches the driver.
No product function is replaced; the product sees what the driver would have raised."""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
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


def gets(table: str, row_id: int) -> Match:
    """The SELECT of one `table` row by its id (`session.get(Model, row_id)`)."""
    def match(statement: str, parameters: Any) -> bool:
        values = list(parameters.values() if isinstance(parameters, dict) else parameters)
        text = statement.lower()
        return text.startswith("select") and f"from {table}" in text \
            and f"where {table}.id = " in text and values == [row_id]
    return match


def counting(engine: Engine, match: Match) -> AbstractContextManager[list[str]]:
    """Within the block, the statements on `engine` that `match`, in order (none fails)."""
    return failing(engine, match, times=0)


@contextmanager
def failing(engine: Engine, match: Match = every_statement, *, skip: int = 0,
            times: int | None = None,
            error: Callable[[str, Any], BaseException] = lost_server) -> Iterator[list[str]]:
    """Within the block, statements on `engine` that `match` raise `error(statement,
    parameters)`: after the first `skip` matching ones, the next `times` (all when None).
    Yields the failed statements' SQL, in order (`times` 0: the matching ones, none failed)."""
    failed: list[str] = []
    seen = iter(range(1 << 62))

    def before(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any,
               _executemany: bool) -> None:
        if not match(statement, parameters):
            return
        n = next(seen)
        if times == 0:
            failed.append(statement)
        elif n >= skip and (times is None or n < skip + times):
            failed.append(statement)
            raise error(statement, parameters)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield failed
    finally:
        event.remove(engine, "before_cursor_execute", before)
