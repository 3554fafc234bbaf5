"""a person takes over: the staff state of a conversation (staff_until, who, why, the handoff
waiting and its alert), the author of a staff message, and the tenant's handoff settings and
templates (storage/staff.py).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 16:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("handoff_text", sa.Text(), nullable=False,
                                      server_default=""))
        batch_op.add_column(sa.Column("staff_timeout_minutes", sa.Integer(), nullable=False,
                                      server_default="720"))
        batch_op.add_column(sa.Column("handoff_alert_minutes", sa.Integer(), nullable=False,
                                      server_default="30"))
        batch_op.add_column(sa.Column("echo_pause_minutes", sa.Integer(), nullable=False,
                                      server_default="120"))
        batch_op.add_column(sa.Column("templates", JSON, nullable=False,
                                      server_default="[]"))
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.add_column(sa.Column("staff_until", sqlmodel.sql.sqltypes.UTCDateTime(),
                                      nullable=True))
        batch_op.add_column(sa.Column("staff_by", sqlmodel.sql.sqltypes.AutoString(length=100),
                                      nullable=False, server_default=""))
        batch_op.add_column(sa.Column("staff_reason",
                                      sqlmodel.sql.sqltypes.AutoString(length=500),
                                      nullable=False, server_default=""))
        batch_op.add_column(sa.Column("handoff_at", sqlmodel.sql.sqltypes.UTCDateTime(),
                                      nullable=True))
        batch_op.add_column(sa.Column("handoff_alerted_at",
                                      sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.add_column(sa.Column("author", sqlmodel.sql.sqltypes.AutoString(length=120),
                                      nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_column("author")
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        for name in ("handoff_alerted_at", "handoff_at", "staff_reason", "staff_by",
                     "staff_until"):
            batch_op.drop_column(name)
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        for name in ("templates", "echo_pause_minutes", "handoff_alert_minutes",
                     "staff_timeout_minutes", "handoff_text"):
            batch_op.drop_column(name)
