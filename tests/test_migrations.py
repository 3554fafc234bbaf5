"""Alembic migrations: a fresh database upgraded to head has exactly the models' schema.

On SQLite (a tmp file) and on PostgreSQL (a schema of its own, dropped after; TEST_POSTGRES_URL,
default postgresql://postgres@127.0.0.1:5432/test). Nothing is excluded from the comparison.
"""

import os
import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, SQLModel

from storage.db import make_engine
from storage.migrate import MIGRATIONS, current, make_config, sqlalchemy_url, upgrade
from storage.models import Contact, Conversation, Tenant

POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
NOW = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)


def _head(url: str) -> str:
    head = ScriptDirectory.from_config(make_config(url)).get_current_head()
    assert head is not None
    return head


def _schema_diff(engine: Engine) -> list[object]:
    with engine.connect() as connection:
        return list(compare_metadata(MigrationContext.configure(connection), SQLModel.metadata))


def _table_names(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def _check_one_open_conversation_per_contact(engine: Engine) -> None:
    """The partial unique index: a second *open* conversation fails, closed ones do not."""
    with Session(engine) as session:
        tenant = Tenant(phone_number_id=f"pn-{uuid.uuid4().hex[:8]}", name="Salão", created_at=NOW)
        session.add(tenant)
        session.flush()
        assert tenant.id is not None
        contact = Contact(tenant_id=tenant.id, wa_id="5511999990000", created_at=NOW)
        session.add(contact)
        session.flush()
        assert contact.id is not None
        tenant_id, contact_id = tenant.id, contact.id

        def conversation(status: str) -> Conversation:
            return Conversation(tenant_id=tenant_id, contact_id=contact_id, status=status,
                                last_activity_at=NOW, due_at=NOW, opened_at=NOW,
                                closed_at=NOW if status == "closed" else None)

        session.add_all([conversation("closed"), conversation("closed"), conversation("open")])
        session.commit()
        session.add(conversation("open"))
        with pytest.raises(IntegrityError, match="uq_conversation_open_per_contact|UNIQUE"):
            session.commit()
        session.rollback()


def _check_migrated(url: str, engine: Engine) -> None:
    assert current(url) is None
    upgrade(url)
    head = _head(url)
    assert current(url) == head
    assert _schema_diff(engine) == []
    assert _table_names(engine) == set(SQLModel.metadata.tables) | {"alembic_version"}
    _check_one_open_conversation_per_contact(engine)

    # A second upgrade is a no-op: same revision, same schema, the rows are still there.
    upgrade(url)
    assert current(url) == head
    assert _schema_diff(engine) == []
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM conversation")).scalar_one() == 3

    # The downgrade of every revision works and leaves only Alembic's version table.
    command.downgrade(make_config(url), "base")
    assert current(url) is None
    assert _table_names(engine) == {"alembic_version"}


def test_sqlite_upgrade_matches_models(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/var/wagent.db"  # the directory is created by upgrade
    engine = make_engine(url)
    try:
        _check_migrated(url, engine)
        with engine.connect() as connection:  # migrating switched no pragma off for good
            assert connection.execute(text("PRAGMA foreign_keys")).scalar_one() == 1
    finally:
        engine.dispose()


def test_sqlite_partial_index_ddl(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/wagent.db"
    upgrade(url)
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            sql = connection.execute(text(
                "SELECT sql FROM sqlite_master WHERE name = 'uq_conversation_open_per_contact'"
            )).scalar_one()
    finally:
        engine.dispose()
    assert "UNIQUE INDEX" in sql and "WHERE status = 'open'" in sql


BATCH_REVISION = '''
import sqlalchemy as sa
from alembic import op

revision = "9001"
down_revision = "PACKAGED_HEAD"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # "move and copy": tenant is recreated, which drops the old table under its referrers
    with op.batch_alter_table("tenant", recreate="always") as batch_op:
        batch_op.add_column(sa.Column("extra", sa.Integer(), nullable=True))
    BROKEN


def downgrade() -> None:
    pass
'''


def _packaged_head() -> str:
    head = ScriptDirectory.from_config(make_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def _with_revision_0002(tmp_path: Path, url: str, broken: str) -> Config:
    """A copy of the packaged script directory plus a batch revision on top, ending in
    `broken`."""
    scripts = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "versions" / "9001_batch.py").write_text(
        BATCH_REVISION.replace("BROKEN", broken).replace("PACKAGED_HEAD", _packaged_head()),
        encoding="utf-8")
    config = make_config(url)
    config.set_main_option("script_location", str(scripts))
    return config


def _tenant_with_service(engine: Engine) -> None:
    with engine.begin() as connection:
        tenant_id = connection.execute(text(
            "INSERT INTO tenant (phone_number_id, name, timezone, language, instructions, "
            "inactivity_timeout_minutes, compaction_threshold_tokens, keep_messages, agent_model, "
            "summary_model, slot_granularity_minutes, retention_days, fact_keys, created_at) "
            "VALUES ('pn', 'Salão', 'UTC', 'pt-BR', '', 1, 1, 1, 'a', 'b', 30, 1, '[]', "
            "'2026-06-01 13:00:00.000000') RETURNING id")).scalar_one()
        connection.execute(text("INSERT INTO service (tenant_id, code, name, duration_minutes) "
                                "VALUES (:t, 'cut', 'Corte', 30)"), {"t": tenant_id})


def test_sqlite_batch_migration_keeps_referencing_rows(tmp_path: Path) -> None:
    """With PRAGMA foreign_keys=ON, recreating `tenant` would cascade-delete its services."""
    url = f"sqlite:///{tmp_path}/wagent.db"
    config = _with_revision_0002(tmp_path, url, broken="pass")
    command.upgrade(config, _packaged_head())
    engine = make_engine(url)
    try:
        _tenant_with_service(engine)
        command.upgrade(config, "head")
        assert current(url) == "9001"
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM service")).scalar_one() == 1
            assert "extra" in {c["name"] for c in inspect(connection).get_columns("tenant")}
    finally:
        engine.dispose()


def test_sqlite_failed_upgrade_changes_nothing(tmp_path: Path) -> None:
    """A revision leaving a dangling foreign key aborts, and the whole upgrade is rolled back."""
    url = f"sqlite:///{tmp_path}/wagent.db"
    broken = ("op.execute(\"INSERT INTO service (tenant_id, code, name, duration_minutes) "
              "VALUES (999, 'x', 'x', 1)\")")
    config = _with_revision_0002(tmp_path, url, broken=broken)
    with pytest.raises(RuntimeError, match="foreign key violation"):
        command.upgrade(config, "head")
    assert current(url) is None  # 0001 was rolled back too: one transaction
    engine = make_engine(url)
    try:
        assert _table_names(engine) <= {"alembic_version"}
    finally:
        engine.dispose()


@pytest.fixture
def postgres_schema_url() -> Iterator[str]:
    """The URL of a fresh, empty PostgreSQL schema (first in search_path), dropped afterwards."""
    admin = create_engine(sqlalchemy_url(POSTGRES_URL), connect_args={"connect_timeout": 3})
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # any failure to connect means "no PostgreSQL here"
        admin.dispose()
        pytest.skip(f"PostgreSQL not reachable at {POSTGRES_URL} (TEST_POSTGRES_URL): {exc}")
    schema = f"wagent_mig_{uuid.uuid4().hex[:10]}"
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        # `options=-csearch_path=<schema>` percent-encodes to `%3D`: also checks that the URL
        # survives Alembic's ConfigParser interpolation.
        yield make_url(POSTGRES_URL).update_query_dict(
            {"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.mark.postgres
def test_postgres_upgrade_matches_models(postgres_schema_url: str) -> None:
    engine = make_engine(sqlalchemy_url(postgres_schema_url))
    try:
        with engine.connect() as connection:
            schema = connection.execute(text("SELECT current_schema()")).scalar_one()
        assert schema.startswith("wagent_mig_")
        _check_migrated(postgres_schema_url, engine)
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgres_index_and_json_types(postgres_schema_url: str) -> None:
    upgrade(postgres_schema_url)
    engine = make_engine(sqlalchemy_url(postgres_schema_url))
    try:
        with engine.connect() as connection:
            indexdef = connection.execute(text(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "AND indexname = 'uq_conversation_open_per_contact'")).scalar_one()
            json_types: dict[str, str] = dict(connection.execute(text(
                "SELECT table_name || '.' || column_name, data_type "
                "FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND column_name IN ('fact_keys', 'service_codes', 'content', 'input')")).all())
            created_at = connection.execute(text(
                "SELECT data_type FROM information_schema.columns WHERE table_schema = "
                "current_schema() AND table_name = 'tenant' AND column_name = 'created_at'"
            )).scalar_one()
    finally:
        engine.dispose()
    assert "UNIQUE INDEX" in indexdef and "WHERE" in indexdef and "'open'" in indexdef
    assert json_types == {"tenant.fact_keys": "jsonb", "professional.service_codes": "jsonb",
                          "message.content": "jsonb", "toolcall.input": "jsonb"}
    assert created_at == "timestamp with time zone"


LEGACY_REPLIES = [  # (the aggregate the old code left, the parts' statuses, their error codes)
    ("pending", ["refused"], [None]),  # the product's own 24-hour refusal: no webhook came
    ("pending", ["failed"], [131030]),  # refused by Meta at send time
    ("pending", ["unknown"], [None]),
    ("sent", ["sent", "failed"], [None, 131026]),
    ("read", ["delivered", "read"], [None, None]),
    ("pending", ["pending"], [None]),
]


def _legacy_replies(engine: Engine) -> None:
    """Replies as revision 0007's code stored them."""
    _tenant_with_service(engine)
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO contact (tenant_id, wa_id, created_at) VALUES (1, '5511999990001', "
            "'2026-06-01 13:00:00.000000')"))
        connection.execute(text(
            "INSERT INTO conversation (tenant_id, contact_id, status, summary, "
            "summarized_until_id, pruned_until_id, context_block, context_built, compactions, "
            "last_input_tokens, last_activity_at, due_at, opened_at) VALUES (1, 1, 'open', '', "
            "0, 0, '', false, 0, 0, '2026-06-01 13:00:00.000000', "
            "'2026-06-02 13:00:00.000000', '2026-06-01 13:00:00.000000')"))
        for n, (aggregate, statuses, codes) in enumerate(LEGACY_REPLIES, start=1):
            connection.execute(text(
                "INSERT INTO message (id, tenant_id, conversation_id, role, direction, content, "
                "received_at, starts_turn, delivery_status) VALUES (:n, 1, 1, 'assistant', "
                "'outbound', '[]', '2026-06-01 13:00:00.000000', false, :aggregate)"),
                {"n": n, "aggregate": aggregate})
            for part, (status, code) in enumerate(zip(statuses, codes, strict=True)):
                connection.execute(text(
                    "INSERT INTO outbound (tenant_id, conversation_id, message_id, part, kind, "
                    "body, status, attempts, error_code, created_at) VALUES (1, 1, :n, :part, "
                    "'text', 'x', :status, 0, :code, '2026-06-01 13:00:00.000000')"),
                    {"n": n, "part": part, "status": status, "code": code})


def test_0009_recomputes_every_replys_delivery_state_from_its_parts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/wagent.db"
    upgrade(url, "0007")
    engine = make_engine(url)
    try:
        _legacy_replies(engine)
        upgrade(url, "0009")
        with engine.connect() as connection:
            states = connection.execute(text(
                "SELECT delivery_status FROM message ORDER BY id")).scalars().all()
            refused = connection.execute(text(
                "SELECT error_code, error_cause FROM outbound WHERE status = 'refused'")).one()
    finally:
        engine.dispose()
    assert states == ["failed", "failed", "unknown", "failed", "delivered", "queued"]
    assert tuple(refused) == (131047, "window_closed")


def _dead_letters_before_0010(url: str) -> None:
    """Dead letters as 0007 stored them: a whole body, and an item without its envelope."""
    command.upgrade(make_config(url), "0007")
    engine = make_engine(sqlalchemy_url(url))
    try:
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO tenant (phone_number_id, name, timezone, language, instructions, "
                "inactivity_timeout_minutes, compaction_threshold_tokens, "
                "compaction_min_gain_tokens, keep_messages, prune_after_user_turns, agent_model, "
                "summary_model, slot_granularity_minutes, retention_days, followup_template, "
                "sending_paused_reason, followup_template_language, fact_keys, created_at) "
                "VALUES ('109876543210987', 'Salão', 'UTC', 'pt-BR', '', 1, 1, 1, 1, 1, 'a', "
                "'b', 30, 1, '', '', 'pt_BR', '[]', '2026-06-01 13:00:00+00')"))
            for body in (b'{"entry": [{"changes": [{"value": {"metadata": {"phone_number_id": '
                         b'"109876543210987"}, "messages": [{"from": "5511999990001"}]}}]}]}',
                         b'{"from": "5511999990001", "from_user_id": "BR.1", "type": "text"}'):
                connection.execute(text("INSERT INTO deadletter (received_at, reason, body) "
                                        "VALUES ('2026-06-01 13:00:00+00', 'x', :b)"), {"b": body})
        upgrade(url)
        with engine.connect() as connection:
            letters = connection.execute(text(
                "SELECT id, tenant_id FROM deadletter ORDER BY id")).all()
            refs = connection.execute(text(
                "SELECT dead_letter_id, name, value FROM deadletter_ref ORDER BY id")).all()
    finally:
        engine.dispose()
    assert [tenant for _, tenant in letters] == [1, None]
    first, second = (letter_id for letter_id, _ in letters)
    assert sorted(tuple(r) for r in refs) == sorted([
        (first, "phone_number_id", "109876543210987"), (first, "wa_id", "5511999990001"),
        (second, "user_id", "BR.1"), (second, "wa_id", "5511999990001")])


def test_sqlite_upgrade_indexes_the_dead_letters_already_stored(tmp_path: Path) -> None:
    _dead_letters_before_0010(f"sqlite:///{tmp_path}/wagent.db")


@pytest.mark.postgres
def test_postgres_upgrade_indexes_the_dead_letters_already_stored(
        postgres_schema_url: str) -> None:
    _dead_letters_before_0010(postgres_schema_url)


def _check_usage_backfill(url: str) -> None:
    """0028 prices the usage rows stored before it as usage/ledger.model_cost_micro_usd does
    (large counts too: the products are BIGINT on PostgreSQL)."""
    from usage.ledger import model_cost_micro_usd

    upgrade(url, "0027")
    engine = make_engine(url)
    calls = [("claude-sonnet-4-6", 200, 4000, 4000, 0, 150),
             ("claude-haiku-4-5", 5, 2, 0, 5, 0),
             ("claude-opus-5", 1_000_000, 900_000, 300_000, 2_000_000, 64_000),
             ("a-model-of-no-family", 10, 0, 0, 0, 10)]
    try:
        _tenant_with_service(engine)
        with engine.begin() as connection:
            for call in calls:
                connection.execute(text(
                    "INSERT INTO usage (tenant_id, purpose, model, input_tokens, "
                    "cache_creation_input_tokens, cache_creation_1h_input_tokens, "
                    "cache_read_input_tokens, output_tokens, created_at) VALUES "
                    "(1, 'turn', :m, :i, :w, :h, :r, :o, '2026-06-01 13:00:00')"),
                    dict(zip(("m", "i", "w", "h", "r", "o"), call, strict=True)))
        upgrade(url)
        with engine.connect() as connection:
            stored = list(connection.execute(text("SELECT micro_usd FROM usage ORDER BY id"))
                          .scalars())
    finally:
        engine.dispose()
    assert stored == [model_cost_micro_usd(*call) for call in calls]


def test_sqlite_0028_prices_the_usage_rows_already_stored(tmp_path: Path) -> None:
    _check_usage_backfill(f"sqlite:///{tmp_path}/wagent.db")


@pytest.mark.postgres
def test_postgres_0028_prices_the_usage_rows_already_stored(postgres_schema_url: str) -> None:
    _check_usage_backfill(postgres_schema_url)
