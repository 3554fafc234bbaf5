"""the owner sees a provider outage (issue 36): stored failed calls of the Messages API and
the Graph API; a conversation's outage state (apologised once, answered late).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 22:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

When = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.add_column(sa.Column("outage_state",
                                      sqlmodel.sql.sqltypes.AutoString(length=16),
                                      nullable=False, server_default=""))
        batch_op.add_column(sa.Column("outage_at", When(), nullable=True))
    op.create_table(
        "provider_failure",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=True),
        sa.Column("conversation_id", sa.Integer(), nullable=True),
        sa.Column("provider", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("purpose", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("outcome", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("first_at", When(), nullable=False),
        sa.Column("last_at", When(), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversation.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_provider_failure_conversation_id"), "provider_failure",
                    ["conversation_id"], unique=False)
    op.create_index("ix_provider_failure_tenant_last", "provider_failure",
                    ["tenant_id", "last_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_provider_failure_tenant_last", table_name="provider_failure")
    op.drop_index(op.f("ix_provider_failure_conversation_id"), table_name="provider_failure")
    op.drop_table("provider_failure")
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.drop_column("outage_at")
        batch_op.drop_column("outage_state")
