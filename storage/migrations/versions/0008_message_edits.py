"""message edits and deletions: the wamid an edit or a revoke refers to, and when the customer
deleted a message.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("message") as batch:
        batch.add_column(sa.Column("refers_to_wamid", sqlmodel.sql.sqltypes.AutoString(
            length=255), nullable=True))
        batch.add_column(sa.Column("deleted_at", sqlmodel.sql.sqltypes.UTCDateTime(),
                                   nullable=True))
    op.create_index("ix_message_refers_to_wamid", "message", ["refers_to_wamid"], unique=False,
                    sqlite_where=sa.text("refers_to_wamid IS NOT NULL"),
                    postgresql_where=sa.text("refers_to_wamid IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_message_refers_to_wamid", table_name="message",
                  sqlite_where=sa.text("refers_to_wamid IS NOT NULL"),
                  postgresql_where=sa.text("refers_to_wamid IS NOT NULL"))
    with op.batch_alter_table("message") as batch:
        batch.drop_column("deleted_at")
        batch.drop_column("refers_to_wamid")
