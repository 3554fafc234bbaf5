"""the receptionist's knowledge (issue 21): an appointment's note (the customer's request for
the visit), a service's price (cents of the tenant's currency, "a partir de") and description,
the tenant's currency and whether notes may hold health content.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01 16:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.add_column(sa.Column("note", sqlmodel.sql.sqltypes.AutoString(length=200),
                                      nullable=False, server_default=""))
    with op.batch_alter_table("service", schema=None) as batch_op:
        batch_op.add_column(sa.Column("price_cents", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("price_from", sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
        batch_op.add_column(sa.Column("description",
                                      sqlmodel.sql.sqltypes.AutoString(length=300),
                                      nullable=False, server_default=""))
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("currency", sqlmodel.sql.sqltypes.AutoString(length=3),
                                      nullable=False, server_default="BRL"))
        batch_op.add_column(sa.Column("appointment_notes_sensitive", sa.Boolean(),
                                      nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.drop_column("appointment_notes_sensitive")
        batch_op.drop_column("currency")
    with op.batch_alter_table("service", schema=None) as batch_op:
        batch_op.drop_column("description")
        batch_op.drop_column("price_from")
        batch_op.drop_column("price_cents")
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.drop_column("note")
