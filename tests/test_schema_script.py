"""`storage.db.create_schema` on an empty database runs the DDL of `create_all` as one script
(issue 44 item 4: each ReplayEnvironment makes a schema): the same tables, columns, indexes
and constraints as `SQLModel.metadata.create_all`, on SQLite and PostgreSQL."""

import uuid
from collections.abc import Iterator
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlmodel import SQLModel

from replay.schemas import Schemas
from storage.db import _schema_script, create_schema, is_postgres, make_engine, session_scope
from storage.tenants import upsert_tenant
from tests.conftest import START as NOW
from tests.conftest import require_postgres


def _catalogue(engine: Engine, schema: str | None) -> list[tuple[str, ...]]:
    """Every table, column, index and constraint as the database describes it."""
    with engine.connect() as connection:
        if not is_postgres(engine):
            return [tuple(str(v) for v in row) for row in connection.execute(text(
                "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"))]
        rows = connection.execute(text(
            "SELECT 'index', indexname, tablename, replace(indexdef, :schema || '.', '') "
            "FROM pg_indexes WHERE schemaname = :schema UNION ALL "
            "SELECT 'column', column_name, table_name, concat_ws(' ', data_type, is_nullable, "
            "column_default, character_maximum_length) FROM information_schema.columns "
            "WHERE table_schema = :schema UNION ALL "
            "SELECT 'constraint', conname, conrelid::regclass::text, pg_get_constraintdef(oid) "
            "FROM pg_constraint WHERE connamespace = CAST(:schema AS regnamespace) "
            "ORDER BY 1, 3, 2"), {"schema": schema})
        return [tuple(str(v) for v in row) for row in rows]


def _made(url: str, *, script: bool) -> Iterator[tuple[Engine, str | None]]:
    schema = None
    if make_url(url).get_backend_name() == "postgresql":
        schema = f"wagent_script_{uuid.uuid4().hex[:10]}"
        with make_engine(url).begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = make_url(url).update_query_dict({"options": f"-csearch_path={schema}"}) \
            .render_as_string(hide_password=False)
    engine = make_engine(url)
    try:
        if script:
            create_schema(engine)
        else:
            SQLModel.metadata.create_all(engine)
        yield engine, schema
    finally:
        engine.dispose()
        if schema is not None:
            with make_engine(url).begin() as connection:
                connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


def _same_as_create_all(first_url: str, second_url: str) -> None:
    for (scripted, schema), (created, other) in zip(_made(first_url, script=True),
                                                    _made(second_url, script=False),
                                                    strict=True):
        with scripted.connect() as connection:
            assert compare_metadata(MigrationContext.configure(connection),
                                    SQLModel.metadata) == []
        mine = _catalogue(scripted, schema)
        theirs = [tuple(v.replace(str(other), str(schema)) for v in row)
                  for row in _catalogue(created, other)]
        assert len(mine) > 100 and mine == theirs


def test_the_script_makes_the_schema_create_all_makes_on_sqlite(tmp_path: Path) -> None:
    _same_as_create_all(f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db")


def test_the_script_makes_the_schema_create_all_makes_on_postgres() -> None:
    url = require_postgres()
    _same_as_create_all(url, url)


def test_a_database_with_tables_gets_only_the_missing_ones(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/c.db")
    leaf = SQLModel.metadata.sorted_tables[-1].name  # no table refers to it
    try:
        create_schema(engine)
        with engine.begin() as connection:
            connection.execute(text(f'DROP TABLE "{leaf}"'))
        create_schema(engine)  # tables there: create_all adds the one missing
        with engine.connect() as connection:
            assert compare_metadata(MigrationContext.configure(connection),
                                    SQLModel.metadata) == []
    finally:
        engine.dispose()
    assert _schema_script("sqlite").count("CREATE TABLE") == len(SQLModel.metadata.tables)


def test_a_schema_given_back_comes_back_empty_with_its_ids_from_1() -> None:
    url = require_postgres()
    pool = Schemas()
    pool.reuse = True
    try:
        engine, schema = pool.take(url, "wagent_pool")
        for number in ("1", "2"):
            with session_scope(engine) as session:
                upsert_tenant(session, {"phone_number_id": number, "name": "Um"}, now=NOW)
        pool.give_back(engine, url, schema)
        again, same = pool.take(url, "wagent_pool")
        assert same == schema
        with again.begin() as connection:
            assert connection.execute(text("SELECT count(*) FROM tenant")).scalar_one() == 0
        with session_scope(again) as session:
            assert upsert_tenant(session, {"phone_number_id": "3", "name": "Três"},
                                 now=NOW).id == 1  # as in a new schema
        with again.begin() as connection:
            connection.execute(text("ALTER TABLE outbound ADD CONSTRAINT no_replies "
                                    "CHECK (body = '') NOT VALID"))  # tests/test_secrets.py
        pool.give_back(again, url, same)  # its catalogue changed: dropped, not kept
        third, other = pool.take(url, "wagent_pool")
        assert other != same
        with make_engine(url).connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM pg_namespace WHERE nspname = "
                                           ":s"), {"s": same}).scalar_one() == 0
        pool.give_back(third, url, other)
    finally:
        pool.drop_spares()
