"""monthly model budgets (issue 49 item 3): the tenant's `model_budget_cents` (US cents;
NULL: none), `budget_action` (fallback | handoff) and `fallback_model`; `budgetalert`, one
row per tenant, month and level (warning at 80 %, reached at 100 %), so the owner is told
once per month each.

Revision ID: 0030
Revises: 0028
Create Date: 2026-12-06 07:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0030"
down_revision: str | Sequence[str] | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

String = sqlmodel.sql.sqltypes.AutoString
When = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("model_budget_cents", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("budget_action", String(length=16), nullable=False,
                                      server_default="fallback"))
        batch_op.add_column(sa.Column("fallback_model", String(length=64), nullable=False,
                                      server_default="claude-haiku-4-5"))
    op.create_table(
        "budgetalert",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("month", sa.Date(), nullable=False),
        sa.Column("level", String(length=16), nullable=False),
        sa.Column("spent_micro_usd", sa.BigInteger(), nullable=False),
        sa.Column("budget_cents", sa.Integer(), nullable=False),
        sa.Column("created_at", When(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "month", "level", name="uq_budget_alert_month_level"),
    )


def downgrade() -> None:
    op.drop_table("budgetalert")
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        for name in ("fallback_model", "budget_action", "model_budget_cents"):
            batch_op.drop_column(name)
