"""who holds each WhatsApp thread beside Meta Business Agent, and the tenant settings of
issue 45: `busy_thread_rule`, `agent_allowlist`, and `standby_seen_at` (the console's banner).

`contact.thread_owner` starts empty (idle): the next event sets it (storage/threads.py). The
downgrade drops the columns.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 04:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("busy_thread_rule",
                                      sqlmodel.sql.sqltypes.AutoString(length=16),
                                      nullable=False, server_default="skip_and_show"))
        batch_op.add_column(sa.Column("agent_allowlist", JSON, nullable=False,
                                      server_default="[]"))
        batch_op.add_column(sa.Column("standby_seen_at", sqlmodel.sql.sqltypes.UTCDateTime(),
                                      nullable=True))
    with op.batch_alter_table("contact", schema=None) as batch_op:
        batch_op.add_column(sa.Column("thread_owner",
                                      sqlmodel.sql.sqltypes.AutoString(length=16),
                                      nullable=True))
        batch_op.add_column(sa.Column("thread_owner_at", sqlmodel.sql.sqltypes.UTCDateTime(),
                                      nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("contact", schema=None) as batch_op:
        for name in ("thread_owner_at", "thread_owner"):
            batch_op.drop_column(name)
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        for name in ("standby_seen_at", "agent_allowlist", "busy_thread_rule"):
            batch_op.drop_column(name)
