"""deposits by Pix (issue 48): the tenant's and a service's deposit rule, the Pix key, the
refund rule; the `deposit` a held visit waits for and the `paymentevent` record of every
confirmation received. New columns take the defaults that change nothing (no deposit).

Revision ID: 0026
Revises: 0022
Create Date: 2026-12-06 04:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0026"
down_revision: str | Sequence[str] | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

String = sqlmodel.sql.sqltypes.AutoString
When = sqlmodel.sql.sqltypes.UTCDateTime
TENANT_COLUMNS = ("deposit_cents", "deposit_percent", "deposit_hold_minutes", "pix_key",
                  "pix_key_type", "deposit_refund")


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deposit_cents", sa.Integer(), nullable=False,
                                      server_default="0"))
        batch_op.add_column(sa.Column("deposit_percent", sa.Integer(), nullable=False,
                                      server_default="0"))
        batch_op.add_column(sa.Column("deposit_hold_minutes", sa.Integer(), nullable=False,
                                      server_default="30"))
        batch_op.add_column(sa.Column("pix_key", String(length=77), nullable=False,
                                      server_default=""))
        batch_op.add_column(sa.Column("pix_key_type", String(length=8), nullable=False,
                                      server_default=""))
        batch_op.add_column(sa.Column("deposit_refund", String(length=24), nullable=False,
                                      server_default="kept_inside_window"))
    with op.batch_alter_table("service", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deposit_cents", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("deposit_percent", sa.Integer(), nullable=True))
    _create_deposit()
    op.create_table(
        "paymentevent",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=True),
        sa.Column("provider", String(length=32), nullable=False),
        sa.Column("event_id", String(length=128), nullable=False),
        sa.Column("reference", String(length=64), nullable=False),
        sa.Column("charge_id", String(length=64), nullable=False),
        sa.Column("amount_cents", sa.Integer(), nullable=True),
        sa.Column("outcome", String(length=24), nullable=False),
        sa.Column("received_at", When(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("provider", "event_id", name="uq_payment_event"),
    )
    op.create_index(op.f("ix_paymentevent_tenant_id"), "paymentevent", ["tenant_id"])
    op.create_index(op.f("ix_paymentevent_reference"), "paymentevent", ["reference"])
    op.create_index("ix_paymentevent_pending", "paymentevent", ["id"],
                    sqlite_where=sa.text("outcome = 'pending'"),
                    postgresql_where=sa.text("outcome = 'pending'"))


def _create_deposit() -> None:
    op.create_table(
        "deposit",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("visit_id", sa.Integer(), nullable=False),
        sa.Column("contact_id", sa.Integer(), nullable=False),
        sa.Column("reference", String(length=64), nullable=False),
        sa.Column("amount_cents", sa.Integer(), nullable=False),
        sa.Column("currency", String(length=3), nullable=False),
        sa.Column("status", String(length=16), nullable=False),
        sa.Column("hold_until", When(), nullable=False),
        sa.Column("provider", String(length=32), nullable=False),
        sa.Column("charge_id", String(length=64), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("paid_cents", sa.Integer(), nullable=False),
        sa.Column("paid_at", When(), nullable=True),
        sa.Column("paid_by", String(length=16), nullable=False),
        sa.Column("released_at", When(), nullable=True),
        sa.Column("refund", String(length=8), nullable=False),
        sa.Column("requested_at", When(), nullable=True),
        sa.Column("told", String(length=16), nullable=False),
        sa.Column("created_at", When(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["contact_id"], ["contact.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("reference"),
    )
    op.create_index(op.f("ix_deposit_tenant_id"), "deposit", ["tenant_id"])
    op.create_index(op.f("ix_deposit_visit_id"), "deposit", ["visit_id"])
    op.create_index(op.f("ix_deposit_contact_id"), "deposit", ["contact_id"])
    op.create_index("ix_deposit_held_until", "deposit", ["hold_until"],
                    sqlite_where=sa.text("status = 'held'"),
                    postgresql_where=sa.text("status = 'held'"))


def downgrade() -> None:
    op.drop_table("paymentevent")
    op.drop_table("deposit")
    with op.batch_alter_table("service", schema=None) as batch_op:
        batch_op.drop_column("deposit_percent")
        batch_op.drop_column("deposit_cents")
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        for name in reversed(TENANT_COLUMNS):
            batch_op.drop_column(name)
