"""a visit of several services as one booking (issue 38): `appointment.visit_id` (the booking
number, every existing booking a one-service visit of its own id), `appointment.for_name`,
`appointment.outcome_note` (the staff's note on what was done), and the visit start a reminder
was scheduled for (`reminder.start_at`).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 22:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

When = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.add_column(sa.Column("visit_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("for_name", sqlmodel.sql.sqltypes.AutoString(length=100),
                                      nullable=False, server_default=""))
        batch_op.add_column(sa.Column("outcome_note",
                                      sqlmodel.sql.sqltypes.AutoString(length=200),
                                      nullable=False, server_default=""))
    op.execute("UPDATE appointment SET visit_id = id")
    op.create_index("ix_appointment_visit_id", "appointment", ["visit_id"], unique=False)
    with op.batch_alter_table("reminder", schema=None) as batch_op:
        batch_op.add_column(sa.Column("start_at", When(), nullable=True))
    op.execute("UPDATE reminder SET start_at = (SELECT start_at FROM appointment "
               "WHERE appointment.id = reminder.appointment_id)")


def downgrade() -> None:
    with op.batch_alter_table("reminder", schema=None) as batch_op:
        batch_op.drop_column("start_at")
    op.drop_index("ix_appointment_visit_id", table_name="appointment")
    with op.batch_alter_table("appointment", schema=None) as batch_op:
        batch_op.drop_column("outcome_note")
        batch_op.drop_column("for_name")
        batch_op.drop_column("visit_id")
