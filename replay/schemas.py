"""PostgreSQL schemas of a process's own for replays and tests: made fresh, or emptied and
handed out again (issue 44 item 4).

Every ReplayEnvironment on PostgreSQL gets a schema of its own. Making one (CREATE SCHEMA and
the ~100 statements of `storage.db.create_schema`) and dropping it cost 1.2-2 s on the shared
2-core CI machine under load, and the main test tier makes some 500. With `SCHEMAS.reuse` on
(tests/conftest.py turns it on; `wagent replay` leaves it off) a schema given back is emptied
instead, DELETE FROM every table, children first, and its sequences set back to 1: 10-40 ms,
and the next `take` hands it out as good as new. A schema whose catalogue changed meanwhile
(a test added a constraint, a trigger or a table: tests/test_secrets.py does) or that could not
be emptied (a lock held past LOCK_TIMEOUT) is dropped instead. The schemas still kept when the
process ends are dropped then (atexit).
"""

import atexit
import threading
import uuid

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlmodel import SQLModel

from storage.db import create_schema, make_engine

LOCK_TIMEOUT = "5s"  # a leaked connection holding a lock: give up emptying, drop the schema
# what makes a schema's catalogue: its relations (tables, indexes, sequences), constraints
# and triggers, counted
_FINGERPRINT = text(
    "SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid), "
    "(SELECT count(*) FROM pg_constraint WHERE connamespace = n.oid), "
    "(SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
    "WHERE c.relnamespace = n.oid) FROM pg_namespace n WHERE n.nspname = :schema")


def _emptying_script() -> str:
    deletes = "; ".join(f'DELETE FROM "{table.name}"'
                        for table in reversed(SQLModel.metadata.sorted_tables))
    return (f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'; {deletes}; "
            "SELECT setval(c.oid, 1, false) FROM pg_class c "
            "WHERE c.relkind = 'S' AND c.relnamespace = current_schema()::regnamespace")


def schema_url(database_url: str, schema: str) -> str:
    """`database_url` with `schema` first on the search path (psycopg's `options`)."""
    return make_url(database_url).update_query_dict(
        {"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)


class Schemas:
    """Fresh schemas on a PostgreSQL server, and with `reuse` the emptied ones kept for the next
    `take` (per database URL, this process only)."""

    def __init__(self) -> None:
        self.reuse = False
        self._spare: dict[str, list[str]] = {}
        self._fresh: dict[str, tuple[int, ...]] = {}  # database URL -> a new schema's counts
        self._lock = threading.Lock()
        atexit.register(self.drop_spares)

    def take(self, database_url: str, prefix: str) -> tuple[Engine, str]:
        """An engine on an empty, migrated schema of this process's own and the schema's name
        (`prefix` + random hex when a new one is made)."""
        with self._lock:
            spare = self._spare.get(database_url, [])
            schema = spare.pop() if spare else None
        if schema is not None:
            return make_engine(schema_url(database_url, schema)), schema
        schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
        admin = make_engine(database_url)
        try:
            with admin.begin() as connection:
                connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        finally:
            admin.dispose()
        engine = make_engine(schema_url(database_url, schema))
        create_schema(engine)
        if self.reuse and database_url not in self._fresh:
            self._fresh[database_url] = self._fingerprint(engine, schema)
        return engine, schema

    def give_back(self, engine: Engine, database_url: str, schema: str) -> None:
        """Done with `schema` (`engine` on it, disposed here): kept emptied for the next `take`
        when `reuse` is on and its catalogue is as made, else dropped."""
        kept = False
        try:
            if self.reuse and self._fingerprint(engine, schema) == self._fresh.get(database_url):
                raw = engine.raw_connection()
                try:
                    cursor = raw.cursor()
                    cursor.execute(_emptying_script())  # no parameters: one round trip
                    cursor.close()
                    raw.commit()
                    kept = True
                finally:
                    raw.close()
        except Exception:  # a lock not released, a broken connection: drop it instead
            kept = False
        engine.dispose()
        if kept:
            with self._lock:
                self._spare.setdefault(database_url, []).append(schema)
            return
        self._drop(database_url, [schema])

    def drop_spares(self) -> None:
        """Drop every kept schema (at exit)."""
        with self._lock:
            spares, self._spare = self._spare, {}
        for database_url, schemas in spares.items():
            try:
                self._drop(database_url, schemas)
            except Exception:  # the server went away first: nothing to tidy
                continue

    @staticmethod
    def _fingerprint(engine: Engine, schema: str) -> tuple[int, ...]:
        with engine.connect() as connection:
            return tuple(connection.execute(_FINGERPRINT, {"schema": schema}).one())

    @staticmethod
    def _drop(database_url: str, schemas: list[str]) -> None:
        if not schemas:
            return
        admin = make_engine(database_url)
        try:
            with admin.begin() as connection:
                for schema in schemas:
                    connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        finally:
            admin.dispose()


SCHEMAS = Schemas()
