"""issue 38's review: services a business runs at once in a visit
(`tenant.parallel_services`, the service codes that may start with the service before them,
by another professional), and the booking number a customer is told, consecutive per tenant
(`appointment.booking_number`; an existing visit keeps the number it was told, its
`visit_id`, and the tenant's next ones follow its highest).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 01:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parallel_services", JSON_TYPE, nullable=False,
                                      server_default="[]"))
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.add_column(sa.Column("booking_number", sa.Integer(), nullable=True))
    op.execute("UPDATE appointment SET booking_number = COALESCE(visit_id, id)")
    op.create_index("ix_appointment_tenant_number", "appointment",
                    ["tenant_id", "booking_number"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_appointment_tenant_number", table_name="appointment")
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.drop_column("booking_number")
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.drop_column("parallel_services")
