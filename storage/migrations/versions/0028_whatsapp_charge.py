"""the cost ledger (issue 49): `whatsapp_charge`, one row per (tenant, wamid) with what Meta
bills for the message (category, pricing type, market, the rate applied, µUSD), fixed at
record time; `usage.micro_usd`, each model call's cost at record time, backfilled here at the
list prices of 2026-12 (usage/ledger.PRICES then: haiku 1/5, sonnet 3/15, opus 5/25 USD per
MTok; reads 0.1×, 5-minute writes 1.25×, 1-hour writes 2×; rounded per call, halves up), and
an index (tenant_id, created_at) on usage for the month's sum.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-06 07:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0028"
down_revision: str | Sequence[str] | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

String = sqlmodel.sql.sqltypes.AutoString
When = sqlmodel.sql.sqltypes.UTCDateTime


# The cost in 1e-5 µUSD: price in milli-µUSD per token × input weights in hundredths.
_PRICE_IN = ("CASE WHEN model LIKE '%haiku%' THEN 1000 WHEN model LIKE '%sonnet%' THEN 3000 "
             "WHEN model LIKE '%opus%' THEN 5000 ELSE 3000 END")
_PRICE_OUT = ("CASE WHEN model LIKE '%haiku%' THEN 5000 WHEN model LIKE '%sonnet%' THEN 15000 "
              "WHEN model LIKE '%opus%' THEN 25000 ELSE 15000 END")
BACKFILL = (
    f"UPDATE usage SET micro_usd = CAST(((CAST({_PRICE_IN} AS BIGINT) * (100 * input_tokens"
    " + 10 * cache_read_input_tokens"
    " + 125 * (cache_creation_input_tokens - cache_creation_1h_input_tokens)"
    f" + 200 * cache_creation_1h_input_tokens) + CAST({_PRICE_OUT} AS BIGINT) * 100"
    " * output_tokens + 50000) / 100000) AS INTEGER)")


def upgrade() -> None:
    with op.batch_alter_table("usage", schema=None) as batch_op:
        batch_op.add_column(sa.Column("micro_usd", sa.Integer(), nullable=False,
                                      server_default="0"))
        batch_op.create_index("ix_usage_tenant_created", ["tenant_id", "created_at"])
    op.execute(BACKFILL)
    op.create_table(
        "whatsapp_charge",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("wamid", String(length=128), nullable=False),
        sa.Column("billable", sa.Boolean(), nullable=False),
        sa.Column("pricing_model", String(length=16), nullable=False),
        sa.Column("category", String(length=32), nullable=False),
        sa.Column("pricing_type", String(length=32), nullable=False),
        sa.Column("market", String(length=8), nullable=False),
        sa.Column("rate_micro_usd", sa.Integer(), nullable=False),
        sa.Column("micro_usd", sa.Integer(), nullable=False),
        sa.Column("charged_at", When(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "wamid", name="uq_whatsapp_charge_wamid"),
    )
    op.create_index("ix_whatsapp_charge_tenant_at", "whatsapp_charge",
                    ["tenant_id", "charged_at"])


def downgrade() -> None:
    op.drop_index("ix_whatsapp_charge_tenant_at", table_name="whatsapp_charge")
    op.drop_table("whatsapp_charge")
    with op.batch_alter_table("usage", schema=None) as batch_op:
        batch_op.drop_index("ix_usage_tenant_created")
        batch_op.drop_column("micro_usd")
