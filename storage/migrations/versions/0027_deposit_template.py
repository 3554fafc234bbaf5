"""deposits by Pix outside the 24-hour window (issue 48 item 1): the tenant's declared
order-details template (`deposit_template`); empty (the default) changes nothing. A
deposit records why its payment request did not go (`not_sent`).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06 05:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0027"
down_revision: str | Sequence[str] | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deposit_template", sqlmodel.sql.sqltypes.AutoString(
            length=512), nullable=False, server_default=""))
    with op.batch_alter_table("deposit", schema=None) as batch_op:
        batch_op.add_column(sa.Column("not_sent", sqlmodel.sql.sqltypes.AutoString(length=16),
                                      nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("deposit", schema=None) as batch_op:
        batch_op.drop_column("not_sent")
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.drop_column("deposit_template")
