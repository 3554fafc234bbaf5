"""recurring visits and calendar feeds (issue 46): the `visitseries` table,
`appointment.series_id`, the `calendarfeed` table and the tenants' `feed_notes`.

A series is a recurrence rule with its services and professional; its visits are ordinary
appointment rows carrying `series_id` (NULL on every row written before). A calendar feed is a
URL token per professional or for the business. The downgrade drops them all; the visits stay
as single visits.

Revision ID: 0024
Revises: 0022
Create Date: 2026-12-06 04:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "visitseries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("contact_id", sa.Integer(), nullable=False),
        sa.Column("professional_id", sa.Integer(), nullable=False),
        sa.Column("services", JSON, nullable=False),
        sa.Column("rule", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("first_local", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("booked_through", sa.Date(), nullable=False),
        sa.Column("pending", JSON, nullable=False),
        sa.Column("note", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("for_name", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("booked_by", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("ended_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["contact_id"], ["contact.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["professional_id"], ["professional.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_visitseries_tenant_id", "visitseries", ["tenant_id"])
    op.create_index("ix_visitseries_contact_id", "visitseries", ["contact_id"])
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.add_column(sa.Column("series_id", sa.Integer(), nullable=True))
        batch_op.create_index("ix_appointment_series_id", ["series_id"])
    op.create_table(
        "calendarfeed",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("professional_id", sa.Integer(), nullable=True),
        sa.Column("token", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("revoked_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["professional_id"], ["professional.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token"),
    )
    op.create_index("ix_calendarfeed_tenant_id", "calendarfeed", ["tenant_id"])
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("feed_notes", sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
        batch_op.add_column(sa.Column("no_show_uses_session", sa.Boolean(), nullable=False,
                                      server_default=sa.true()))
    op.create_table(
        "package",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("code", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("service_code", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("sessions", sa.Integer(), nullable=False),
        sa.Column("validity_days", sa.Integer(), nullable=False),
        sa.Column("price_cents", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "code"),
    )
    op.create_index("ix_package_tenant_id", "package", ["tenant_id"])
    op.create_table(
        "customerpackage",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("contact_id", sa.Integer(), nullable=False),
        sa.Column("package_id", sa.Integer(), nullable=False),
        sa.Column("sessions", sa.Integer(), nullable=False),
        sa.Column("used", sa.Integer(), nullable=False),
        sa.Column("authorisation", sqlmodel.sql.sqltypes.AutoString(length=64),
                  nullable=False),
        sa.Column("expires_on", sa.Date(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["contact_id"], ["contact.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["package_id"], ["package.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_customerpackage_tenant_id", "customerpackage", ["tenant_id"])
    op.create_index("ix_customerpackage_contact_id", "customerpackage", ["contact_id"])


def downgrade() -> None:
    op.drop_index("ix_customerpackage_contact_id", table_name="customerpackage")
    op.drop_index("ix_customerpackage_tenant_id", table_name="customerpackage")
    op.drop_table("customerpackage")
    op.drop_index("ix_package_tenant_id", table_name="package")
    op.drop_table("package")
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.drop_column("no_show_uses_session")
        batch_op.drop_column("feed_notes")
    op.drop_index("ix_calendarfeed_tenant_id", table_name="calendarfeed")
    op.drop_table("calendarfeed")
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.drop_index("ix_appointment_series_id")
        batch_op.drop_column("series_id")
    op.drop_index("ix_visitseries_contact_id", table_name="visitseries")
    op.drop_index("ix_visitseries_tenant_id", table_name="visitseries")
    op.drop_table("visitseries")
