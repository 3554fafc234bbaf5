"""the waitlist (issue 47): one row per customer waiting for a slot in a window, with the
slot offered to it and held (storage/waitlist.py), and the tenant's waitlist settings.

Revision ID: 0025
Revises: 0022
Create Date: 2026-12-06 05:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
String = sqlmodel.sql.sqltypes.AutoString
When = sqlmodel.sql.sqltypes.UTCDateTime
OFFERED = sa.text("status = 'offered'")


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("waitlist_hold_minutes", sa.Integer(), nullable=False,
                                      server_default="15"))
        batch_op.add_column(sa.Column("waitlist_template", String(length=512), nullable=False,
                                      server_default=""))
        batch_op.add_column(sa.Column("waitlist_inside_window_only", sa.Boolean(),
                                      nullable=False, server_default=sa.false()))
    op.create_table(
        "waitlist_entry",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("contact_id", sa.Integer(), nullable=False),
        sa.Column("service_id", sa.Integer(), nullable=False),
        sa.Column("professional_id", sa.Integer(), nullable=True),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("after", String(length=5), nullable=False),
        sa.Column("before", String(length=5), nullable=False),
        sa.Column("ends_at", When(), nullable=False),
        sa.Column("status", String(length=16), nullable=False),
        sa.Column("created_at", When(), nullable=False),
        sa.Column("offer_professional_id", sa.Integer(), nullable=True),
        sa.Column("offer_start_at", When(), nullable=True),
        sa.Column("offer_end_at", When(), nullable=True),
        sa.Column("offer_expires_at", When(), nullable=True),
        sa.Column("offer_message_id", sa.Integer(), nullable=True),
        sa.Column("passed", JSON, nullable=False),
        sa.Column("appointment_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["contact_id"], ["contact.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["service_id"], ["service.id"]),
        sa.ForeignKeyConstraint(["professional_id"], ["professional.id"]),
        sa.ForeignKeyConstraint(["offer_message_id"], ["message.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["appointment_id"], ["appointment.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_waitlist_entry_contact_id"), "waitlist_entry", ["contact_id"])
    op.create_index("ix_waitlist_entry_tenant_day", "waitlist_entry", ["tenant_id", "day"])
    op.create_index("uq_waitlist_entry_offered_slot", "waitlist_entry",
                    ["offer_professional_id", "offer_start_at"], unique=True,
                    sqlite_where=OFFERED, postgresql_where=OFFERED)


def downgrade() -> None:
    op.drop_index("uq_waitlist_entry_offered_slot", table_name="waitlist_entry")
    op.drop_index("ix_waitlist_entry_tenant_day", table_name="waitlist_entry")
    op.drop_index(op.f("ix_waitlist_entry_contact_id"), table_name="waitlist_entry")
    op.drop_table("waitlist_entry")
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        for name in ("waitlist_inside_window_only", "waitlist_template",
                     "waitlist_hold_minutes"):
            batch_op.drop_column(name)
