"""card and CPF numbers masked in stored customer messages, and the tenant settings of issue 42:
`keep_cpf`, `holiday_calendar`, `open_holidays`.

Every stored customer message's text blocks and its media's caption and file name go through
intake/masking.py `mask` (the rule intake applies to new ones), in batches by id, and so does
every contact's profile name; a conversation whose contact's name changed renders its context
block again at its next turn (`context_built` false: the block quotes the name). Masking is
idempotent, so a rerun (or a batch repeated after a failure) changes nothing more. The
tenants' `keep_cpf` is false here (the column is new): CPF numbers are masked too. The
downgrade drops the columns; masked digits cannot come back.

Revision ID: 0022
Revises: 0020
Create Date: 2026-12-06 01:00:00.000000
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op
from sqlalchemy.dialects import postgresql

from intake.masking import mask

# revision identifiers, used by Alembic.
revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BATCH = 500


def upgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("keep_cpf", sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
        batch_op.add_column(sa.Column("holiday_calendar",
                                      sqlmodel.sql.sqltypes.AutoString(length=64),
                                      nullable=False, server_default=""))
        batch_op.add_column(sa.Column("open_holidays", JSON, nullable=False,
                                      server_default="[]"))
    mask_messages(op.get_bind())
    mask_profile_names(op.get_bind())


def masked_content(content: Any) -> Any:
    """`content` (a message's blocks) with each text block masked; the same object when
    nothing changed."""
    if not isinstance(content, list):
        return content
    changed = False
    blocks = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text" \
                and isinstance(block.get("text"), str):
            text = mask(block["text"])
            if text != block["text"]:
                block, changed = {**block, "text": text}, True
        blocks.append(block)
    return blocks if changed else content


MEDIA_TEXT_FIELDS = ("caption", "filename")  # intake/text.py (kept here: a migration is frozen)


def masked_media(media: Any) -> Any:
    """`media` (a message's media descriptor) with its caption and file name masked; the same
    object when nothing changed."""
    if not isinstance(media, dict):
        return media
    masked = {name: mask(media[name]) for name in MEDIA_TEXT_FIELDS
              if isinstance(media.get(name), str) and mask(media[name]) != media[name]}
    return {**media, **masked} if masked else media


def mask_messages(connection: sa.Connection, batch: int = BATCH) -> int:
    """Mask the customer messages (role user, inbound: their text blocks, their media's
    caption and file name) in batches of `batch` by id; returns how many rows changed."""
    message = sa.table("message", sa.column("id", sa.Integer()), sa.column("role"),
                       sa.column("direction"), sa.column("content", JSON),
                       sa.column("media", JSON))
    last, changed = 0, 0
    while True:
        rows = connection.execute(
            sa.select(message.c.id, message.c.content, message.c.media)
            .where(message.c.id > last, message.c.role == "user",
                   message.c.direction == "inbound")
            .order_by(message.c.id).limit(batch)).all()
        if not rows:
            return changed
        for row in rows:
            values = {"content": masked_content(row.content), "media": masked_media(row.media)}
            # only what changed is written: a None media would be written as JSON null
            values = {k: v for k, v in values.items() if v is not getattr(row, k)}
            if values:
                connection.execute(message.update().where(message.c.id == row.id)
                                   .values(**values))
                changed += 1
        last = rows[-1].id


def mask_profile_names(connection: sa.Connection, batch: int = BATCH) -> int:
    """Mask every contact's profile name in batches of `batch` by id, and mark the context
    block of its conversations to be rendered again; returns how many contacts changed."""
    contact = sa.table("contact", sa.column("id", sa.Integer()),
                       sa.column("profile_name", sa.String()))
    conversation = sa.table("conversation", sa.column("contact_id", sa.Integer()),
                            sa.column("context_built", sa.Boolean()))
    last, changed = 0, 0
    while True:
        rows = connection.execute(
            sa.select(contact.c.id, contact.c.profile_name)
            .where(contact.c.id > last).order_by(contact.c.id).limit(batch)).all()
        if not rows:
            return changed
        for row in rows:
            if row.profile_name and mask(row.profile_name) != row.profile_name:
                connection.execute(contact.update().where(contact.c.id == row.id)
                                   .values(profile_name=mask(row.profile_name)))
                connection.execute(conversation.update()
                                   .where(conversation.c.contact_id == row.id)
                                   .values(context_built=False))
                changed += 1
        last = rows[-1].id


def downgrade() -> None:
    with op.batch_alter_table("tenant", schema=None) as batch_op:
        for name in ("open_holidays", "holiday_calendar", "keep_cpf"):
            batch_op.drop_column(name)
