"""outbound webhooks: endpoints per tenant, events, and one delivery per event and endpoint
(storage/webhooks.py).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 16:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
String = sqlmodel.sql.sqltypes.AutoString
When = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    op.create_table(
        "webhook_endpoint",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("url", String(length=2000), nullable=False),
        sa.Column("secret", String(length=128), nullable=False),
        sa.Column("previous_secret", String(length=128), nullable=True),
        sa.Column("previous_until", When(), nullable=True),
        sa.Column("events", JSON, nullable=False),
        sa.Column("description", String(length=200), nullable=False),
        sa.Column("failing_since", When(), nullable=True),
        sa.Column("disabled_at", When(), nullable=True),
        sa.Column("disabled_reason", String(length=200), nullable=False),
        sa.Column("created_at", When(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_webhook_endpoint_tenant_id"), "webhook_endpoint", ["tenant_id"])
    op.create_table(
        "webhook_event",
        sa.Column("id", String(length=40), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("type", String(length=40), nullable=False),
        sa.Column("data", JSON, nullable=False),
        sa.Column("created_at", When(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_webhook_event_tenant_id"), "webhook_event", ["tenant_id"])
    op.create_table(
        "webhook_delivery",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("endpoint_id", sa.Integer(), nullable=False),
        sa.Column("event_id", String(length=40), nullable=False),
        sa.Column("status", String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", When(), nullable=True),
        sa.Column("claimed_at", When(), nullable=True),
        sa.Column("last_attempt_at", When(), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", String(length=32), nullable=True),
        sa.Column("delivered_at", When(), nullable=True),
        sa.Column("created_at", When(), nullable=False),
        sa.ForeignKeyConstraint(["endpoint_id"], ["webhook_endpoint.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["event_id"], ["webhook_event.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenant.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_delivery_endpoint_event"),
    )
    op.create_index(op.f("ix_webhook_delivery_tenant_id"), "webhook_delivery", ["tenant_id"])
    op.create_index("ix_webhook_delivery_status_due", "webhook_delivery",
                    ["status", "next_attempt_at"])
    op.create_index("ix_webhook_delivery_endpoint_id", "webhook_delivery", ["endpoint_id", "id"])


def downgrade() -> None:
    op.drop_table("webhook_delivery")
    op.drop_table("webhook_event")
    op.drop_table("webhook_endpoint")
