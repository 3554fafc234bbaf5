"""reminders and one-tap confirmations (issue 25): the tenant's reminder settings, an
appointment's `confirmed_at`, one reminder per appointment and lead time, and the notices of
changes the business made (storage/reminders.py).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01 17:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
String = sqlmodel.sql.sqltypes.AutoString
When = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reminder_lead_minutes", JSON, nullable=False,
                                      server_default="[1440]"))
        batch_op.add_column(sa.Column("quiet_hours", String(length=11), nullable=False,
                                      server_default="21:00-08:00"))
        batch_op.add_column(sa.Column("reminder_template", String(length=512), nullable=False,
                                      server_default=""))
        batch_op.add_column(sa.Column("reminder_text", sa.Text(), nullable=False,
                                      server_default=""))
        batch_op.add_column(sa.Column("cancellation_window_minutes", sa.Integer(),
                                      nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("coexistence", sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
        batch_op.add_column(sa.Column("address", String(length=300), nullable=False,
                                      server_default=""))
        batch_op.add_column(sa.Column("notice_template", String(length=512), nullable=False,
                                      server_default=""))
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.add_column(sa.Column("confirmed_at", When(), nullable=True))
        batch_op.add_column(sa.Column("moved_to_id", sa.Integer(), nullable=True))
    op.create_table(
        "reminder",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("appointment_id", sa.Integer(), nullable=False),
        sa.Column("lead_minutes", sa.Integer(), nullable=False),
        sa.Column("due_at", When(), nullable=True),
        sa.Column("status", String(length=16), nullable=False),
        sa.Column("reason", String(length=300), nullable=False),
        sa.Column("message_id", sa.Integer(), nullable=True),
        sa.Column("created_at", When(), nullable=False),
        sa.Column("queued_at", When(), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["appointment_id"], ["appointment.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["message_id"], ["message.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("appointment_id", "lead_minutes",
                            name="uq_reminder_appointment_lead"),
    )
    op.create_index(op.f("ix_reminder_tenant_id"), "reminder", ["tenant_id"])
    op.create_index(op.f("ix_reminder_appointment_id"), "reminder", ["appointment_id"])
    op.create_index("ix_reminder_scheduled_due", "reminder", ["due_at"],
                    sqlite_where=sa.text("status = 'scheduled'"),
                    postgresql_where=sa.text("status = 'scheduled'"))
    op.create_table(
        "notice",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("appointment_id", sa.Integer(), nullable=False),
        sa.Column("kind", String(length=16), nullable=False),
        sa.Column("status", String(length=16), nullable=False),
        sa.Column("reason", String(length=300), nullable=False),
        sa.Column("message_id", sa.Integer(), nullable=True),
        sa.Column("created_at", When(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["appointment_id"], ["appointment.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["message_id"], ["message.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_notice_tenant_id"), "notice", ["tenant_id"])
    op.create_index(op.f("ix_notice_appointment_id"), "notice", ["appointment_id"])
    op.create_index("ix_notice_pending", "notice", ["id"],
                    sqlite_where=sa.text("status = 'pending'"),
                    postgresql_where=sa.text("status = 'pending'"))


def downgrade() -> None:
    op.drop_index("ix_notice_pending", table_name="notice")
    op.drop_index(op.f("ix_notice_appointment_id"), table_name="notice")
    op.drop_index(op.f("ix_notice_tenant_id"), table_name="notice")
    op.drop_table("notice")
    op.drop_index("ix_reminder_scheduled_due", table_name="reminder")
    op.drop_index(op.f("ix_reminder_appointment_id"), table_name="reminder")
    op.drop_index(op.f("ix_reminder_tenant_id"), table_name="reminder")
    op.drop_table("reminder")
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.drop_column("moved_to_id")
        batch_op.drop_column("confirmed_at")
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        for name in ("notice_template", "address", "coexistence",
                     "cancellation_window_minutes", "reminder_text", "reminder_template",
                     "quiet_hours", "reminder_lead_minutes"):
            batch_op.drop_column(name)
