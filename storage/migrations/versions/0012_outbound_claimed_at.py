"""outbox claim time: when a part was last claimed for its Graph call (pending → sending), so
the reconciler settles a send left `sending` by a crash by how long ago it was claimed, not by
how old its row is (workers/maintenance.settle_stale_sends).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 14:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("outbound", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claimed_at", sqlmodel.sql.sqltypes.UTCDateTime(),
                                      nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbound", schema=None) as batch_op:
        batch_op.drop_column("claimed_at")
