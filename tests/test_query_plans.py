"""The per-turn queries read a handful of rows whatever the conversation's length (issue 43).

A conversation with 100,000 messages (inserted with one `INSERT ... SELECT generate_series`)
on PostgreSQL; each per-turn query runs through its own function while a listener records the
SQL it sends, then each recorded statement runs again under `EXPLAIN (ANALYZE, FORMAT JSON)`
with the same parameters. The test fails when a plan reads the conversation's messages: a
sequential scan of `message`, or a node on `message` that reads (returns or filters out) more
than ROWS_READ rows. Without `LIMIT 1`, `ORDER BY position DESC ... .first()` returns every
inbound row of the conversation to the client before taking the first.
"""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.engine import make_url

from storage.db import create_schema, make_engine, session_scope
from storage.models import Contact, Conversation, Tenant
from tests.conftest import require_postgres
from workers.choices import turn_offer
from workers.media import resolve_media
from workers.receipts import latest_customer_wamid
from workers.turns import _latest_customer_message

pytestmark = pytest.mark.postgres

MESSAGES = 100_000
ROWS_READ = 50  # a per-turn query reads a few rows: the latest ones of the turn in progress
NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def long_conversation() -> Iterator[tuple[Engine, int]]:
    """(engine, conversation id): a fresh schema holding one conversation of MESSAGES
    messages, every third inbound (answered, no media), outbound, internal in turn, the
    latest turn's internal rounds after the last reply; analysed."""
    url = require_postgres()
    schema = f"wagent_test_{uuid.uuid4().hex[:10]}"
    admin = make_engine(url)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    engine = make_engine(make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
                         .render_as_string(hide_password=False))
    try:
        create_schema(engine)
        with session_scope(engine) as session:
            tenant = Tenant(phone_number_id="plans", name="Plans", created_at=NOW)
            session.add(tenant)
            session.flush()
            contact = Contact(tenant_id=tenant.id, wa_id="5511900000000", created_at=NOW)
            session.add(contact)
            session.flush()
            conversation = Conversation(tenant_id=tenant.id, contact_id=contact.id,
                                        status="open", last_activity_at=NOW, due_at=NOW,
                                        opened_at=NOW)
            session.add(conversation)
            session.flush()
            ids = (int(tenant.id or 0), int(conversation.id or 0))
        with engine.begin() as connection:
            connection.execute(text("""
                INSERT INTO message (tenant_id, conversation_id, role, direction, position,
                                     content, wamid, received_at, starts_turn, answered_at)
                SELECT :tenant, :conversation,
                       CASE n % 3 WHEN 1 THEN 'user' ELSE 'assistant' END,
                       CASE n % 3 WHEN 1 THEN 'inbound' WHEN 2 THEN 'outbound'
                                  ELSE 'internal' END,
                       n, CAST('[{"type": "text", "text": "oi"}]' AS jsonb),
                       CASE n % 3 WHEN 1 THEN 'wamid.plans.' || n END,
                       :now, true, :now
                FROM generate_series(1, :count) AS n"""),
                {"tenant": ids[0], "conversation": ids[1], "now": NOW, "count": MESSAGES})
            connection.execute(text("ANALYZE message"))
        yield engine, ids[1]
    finally:
        engine.dispose()
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def _statements(engine: Engine, call: Any) -> list[tuple[str, Any]]:
    """The SELECTs on `message` that `call()` sends, with their parameters."""
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM message" in statement:
            sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        call()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return sent


def _message_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if plan.get("Relation Name") == "message":
        yield plan
    for child in plan.get("Plans", []):
        yield from _message_nodes(child)


def _rows_read(engine: Engine, statement: str, parameters: Any) -> tuple[int, list[str]]:
    """(rows the plan's `message` nodes read, their node types) under EXPLAIN ANALYZE."""
    with engine.connect() as connection:
        explained = connection.exec_driver_sql(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", parameters).scalar_one()
    nodes = list(_message_nodes(explained[0]["Plan"]))
    read = sum(int(node["Actual Rows"]) * int(node.get("Actual Loops", 1))
               + int(node.get("Rows Removed by Filter", 0)) for node in nodes)
    return read, [str(node["Node Type"]) for node in nodes]


def _per_turn_queries(engine: Engine, conversation_id: int) -> dict[str, Any]:
    runtime = SimpleNamespace(engine=engine)

    def in_session(query: Any) -> Any:
        def call() -> None:
            with session_scope(engine) as session:
                query(session, conversation_id)
        return call

    return {
        "turns._latest_customer_message": in_session(_latest_customer_message),
        "receipts.latest_customer_wamid": lambda: latest_customer_wamid(
            runtime, conversation_id),  # type: ignore[arg-type]
        "choices.turn_offer": in_session(turn_offer),
        "media.resolve_media": lambda: resolve_media(
            runtime, conversation_id, language="pt-BR"),  # type: ignore[arg-type]
    }


@pytest.mark.parametrize("name", ["turns._latest_customer_message",
                                  "receipts.latest_customer_wamid", "choices.turn_offer",
                                  "media.resolve_media"])
def test_per_turn_query_reads_a_few_rows_of_a_100k_message_conversation(
        long_conversation: tuple[Engine, int], name: str) -> None:
    engine, conversation_id = long_conversation
    statements = _statements(engine, _per_turn_queries(engine, conversation_id)[name])
    assert statements, f"{name} sent no SELECT on message"
    for statement, parameters in statements:
        read, nodes = _rows_read(engine, statement, parameters)
        assert "Seq Scan" not in nodes, f"{name}: sequential scan of message\n{statement}"
        assert read <= ROWS_READ, (f"{name}: the plan reads {read} rows of a "
                                   f"{MESSAGES}-message conversation ({nodes})\n{statement}")


def test_the_check_catches_a_query_without_limit(long_conversation: tuple[Engine, int]) -> None:
    """The measure itself: the same lookup without LIMIT reads every inbound row."""
    engine, conversation_id = long_conversation
    read, _ = _rows_read(engine, "SELECT id FROM message WHERE conversation_id = %(c)s AND "
                         "direction = 'inbound' ORDER BY position DESC", {"c": conversation_id})
    assert read > ROWS_READ
