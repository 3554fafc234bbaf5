"""turn fences and the reconciler's index: a fencing token per conversation, bumped when a turn
takes the conversation's lock and checked by every transaction of that turn (storage/fences.py);
a partial index on the messages no turn has handled yet (workers/maintenance.find_pending).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "turnfence",
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversation.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("conversation_id"),
    )
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.create_index(
            "ix_message_unanswered",
            ["received_at"],
            unique=False,
            sqlite_where=sa.text("answered_at IS NULL"),
            postgresql_where=sa.text("answered_at IS NULL"),
        )


def downgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_message_unanswered",
            sqlite_where=sa.text("answered_at IS NULL"),
            postgresql_where=sa.text("answered_at IS NULL"),
        )
    op.drop_table("turnfence")
