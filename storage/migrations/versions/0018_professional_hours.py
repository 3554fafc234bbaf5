"""scheduling that matches a real shop (issue 22): each professional's hours, time off, date
exceptions and durations; a service's buffer; an appointment's outcome after the visit and who
booked it; blocks of a professional's time.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01 17:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
When = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    with op.batch_alter_table("professional", schema=None) as batch_op:
        batch_op.add_column(sa.Column("hours", JSON, nullable=True))
        batch_op.add_column(sa.Column("time_off", JSON, nullable=False,
                                      server_default=sa.text("'[]'")))
        batch_op.add_column(sa.Column("hours_exceptions", JSON, nullable=False,
                                      server_default=sa.text("'[]'")))
        batch_op.add_column(sa.Column("durations", JSON, nullable=False,
                                      server_default=sa.text("'{}'")))
    with op.batch_alter_table("service", schema=None) as batch_op:
        batch_op.add_column(sa.Column("buffer_minutes", sa.Integer(), nullable=False,
                                      server_default=sa.text("0")))
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.add_column(sa.Column("outcome", sqlmodel.sql.sqltypes.AutoString(length=16),
                                      nullable=False, server_default=""))
        batch_op.add_column(sa.Column("outcome_at", When(), nullable=True))
        batch_op.add_column(sa.Column("booked_by",
                                      sqlmodel.sql.sqltypes.AutoString(length=16),
                                      nullable=False, server_default="customer"))
    op.create_table(
        "schedule_block",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("professional_id", sa.Integer(), nullable=False),
        sa.Column("start_at", When(), nullable=False),
        sa.Column("end_at", When(), nullable=False),
        sa.Column("note", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("created_at", When(), nullable=False),
        sa.ForeignKeyConstraint(["professional_id"], ["professional.id"]),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_schedule_block_professional_start", "schedule_block",
                    ["professional_id", "start_at"], unique=False)
    op.create_index(op.f("ix_schedule_block_tenant_id"), "schedule_block", ["tenant_id"],
                    unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_schedule_block_tenant_id"), table_name="schedule_block")
    op.drop_index("ix_schedule_block_professional_start", table_name="schedule_block")
    op.drop_table("schedule_block")
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.drop_column("booked_by")
        batch_op.drop_column("outcome_at")
        batch_op.drop_column("outcome")
    with op.batch_alter_table("service", schema=None) as batch_op:
        batch_op.drop_column("buffer_minutes")
    with op.batch_alter_table("professional", schema=None) as batch_op:
        batch_op.drop_column("durations")
        batch_op.drop_column("hours_exceptions")
        batch_op.drop_column("time_off")
        batch_op.drop_column("hours")
