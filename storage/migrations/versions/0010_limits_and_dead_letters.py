"""booking limits per tenant; dead letters with their tenant, identifiers and an age index.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # noqa: F401  (autogenerate renders AutoString, UTCDateTime)
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIMITS = (("booking_horizon_days", "90"), ("booking_notice_minutes", "60"),
          ("max_upcoming_bookings", "5"))
BATCH = 200


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        for name, default in LIMITS:
            batch_op.add_column(sa.Column(name, sa.Integer(), nullable=False,
                                          server_default=default))
    with op.batch_alter_table("deadletter", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tenant_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key("fk_deadletter_tenant_id_tenant", "tenant", ["tenant_id"],
                                    ["id"], ondelete="CASCADE")
        batch_op.create_index(batch_op.f("ix_deadletter_tenant_id"), ["tenant_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_deadletter_received_at"), ["received_at"],
                              unique=False)
    op.create_table(
        "deadletter_ref",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dead_letter_id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("value", sqlmodel.sql.sqltypes.AutoString(length=160), nullable=False),
        sa.ForeignKeyConstraint(["dead_letter_id"], ["deadletter.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("deadletter_ref", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_deadletter_ref_dead_letter_id"), ["dead_letter_id"],
                              unique=False)
        batch_op.create_index("ix_deadletter_ref_value_name", ["value", "name"], unique=False)
    _index_existing_dead_letters()


def _index_existing_dead_letters() -> None:
    """The dead letters stored before this revision get their tenant and identifiers, read
    from their bodies by the product's own rule, BATCH bodies in memory at a time. An item
    dead-lettered alone before did not keep its envelope's phone_number_id: it names no number
    and so is erased with any tenant's contact it names (storage/dead_letters.forget_contact).
    """
    from storage.dead_letters import identifiers  # the rule of today's code, on purpose

    bind = op.get_bind()
    owners: dict[str, int] = dict(bind.execute(sa.text(
        "SELECT phone_number_id, id FROM tenant")).all())
    last = 0
    while rows := bind.execute(sa.text(
            "SELECT id, body FROM deadletter WHERE id > :last ORDER BY id LIMIT :n"),
            {"last": last, "n": BATCH}).all():
        for letter_id, body in rows:
            refs = sorted(identifiers(bytes(body)))
            if refs:
                bind.execute(sa.text("INSERT INTO deadletter_ref (dead_letter_id, name, value) "
                                     "VALUES (:d, :n, :v)"),
                             [{"d": letter_id, "n": n, "v": v} for n, v in refs])
            tenants = {owners[v] for n, v in refs if n == "phone_number_id" and v in owners}
            if len(tenants) == 1:
                bind.execute(sa.text("UPDATE deadletter SET tenant_id = :t WHERE id = :d"),
                             {"t": tenants.pop(), "d": letter_id})
        last = rows[-1][0]


def downgrade() -> None:
    with op.batch_alter_table("deadletter_ref", schema=None) as batch_op:
        batch_op.drop_index("ix_deadletter_ref_value_name")
        batch_op.drop_index(batch_op.f("ix_deadletter_ref_dead_letter_id"))
    op.drop_table("deadletter_ref")
    with op.batch_alter_table("deadletter", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_deadletter_received_at"))
        batch_op.drop_index(batch_op.f("ix_deadletter_tenant_id"))
        batch_op.drop_constraint("fk_deadletter_tenant_id_tenant", type_="foreignkey")
        batch_op.drop_column("tenant_id")
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        for name, _ in reversed(LIMITS):
            batch_op.drop_column(name)
