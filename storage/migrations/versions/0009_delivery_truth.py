"""delivery truth: an outbox part waits for `retry_at` (rate limit, unreachable Graph API) and
names a failure without a Meta code in `error_cause`; every reply's `delivery_status` is
recomputed from its parts (replies refused without a status webhook stayed "pending").

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# storage/delivery.py's fold as of this revision, in SQL (a migration must not change when
# the code does): failed if any part failed or was refused, else unknown if any part is, else
# the least advanced part.
FOLD = """
UPDATE message SET delivery_status = (
  SELECT CASE
    WHEN SUM(CASE WHEN o.status IN ('failed', 'refused') THEN 1 ELSE 0 END) > 0 THEN 'failed'
    WHEN SUM(CASE WHEN o.status = 'unknown' THEN 1 ELSE 0 END) > 0 THEN 'unknown'
    WHEN SUM(CASE WHEN o.status = 'pending' THEN 1 ELSE 0 END) > 0 THEN 'queued'
    WHEN SUM(CASE WHEN o.status = 'sending' THEN 1 ELSE 0 END) > 0 THEN 'sending'
    WHEN SUM(CASE WHEN o.status = 'sent' THEN 1 ELSE 0 END) > 0 THEN 'sent'
    WHEN SUM(CASE WHEN o.status = 'delivered' THEN 1 ELSE 0 END) > 0 THEN 'delivered'
    ELSE 'read' END
  FROM outbound o WHERE o.message_id = message.id)
WHERE EXISTS (SELECT 1 FROM outbound o WHERE o.message_id = message.id)
"""


def upgrade() -> None:
    with op.batch_alter_table("outbound", schema=None) as batch_op:
        batch_op.add_column(sa.Column("error_cause", sqlmodel.sql.sqltypes.AutoString(length=32),
                                      nullable=True))
        batch_op.add_column(sa.Column("retry_at", sqlmodel.sql.sqltypes.UTCDateTime(),
                                      nullable=True))
    # the product's own 24-hour refusals were stored without a code: they are Meta's 131047
    op.execute("UPDATE outbound SET error_code = 131047, error_cause = 'window_closed' "
               "WHERE status = 'refused' AND error_code IS NULL")
    op.execute("UPDATE outbound SET error_cause = 'crashed' WHERE status = 'unknown' "
               "AND error_reason LIKE 'the worker stopped during the send%'")
    op.execute(FOLD)


def downgrade() -> None:
    op.execute("UPDATE message SET delivery_status = 'pending' WHERE delivery_status = 'queued'")
    with op.batch_alter_table("outbound", schema=None) as batch_op:
        batch_op.drop_column("retry_at")
        batch_op.drop_column("error_cause")
