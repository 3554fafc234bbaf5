"""The text of a customer message as it is stored: normalised in one place, then stamped."""

from datetime import datetime
from typing import Any

from intake.masking import mask
from intake.stamp import stamp
from storage import marks


def normalise(text: str, *, keep_cpf: bool = False) -> str:
    """A customer's text as it is stored (a new message, an edit, a deletion's placeholder):
    the one place it is changed before storing. Its card and CPF numbers are masked
    (intake/masking.py; a CPF kept with `keep_cpf`, the tenant's setting), and it is disarmed
    (storage/marks.py `disarm`), so it can never carry the staff mark `[equipe: NAME]`."""
    return marks.disarm(mask(text, keep_cpf))


def content(text: str, received_at: datetime, timezone: str, *,
            sent_at: datetime | None, keep_cpf: bool = False) -> list[dict[str, Any]]:
    """The stored `Message.content` of a customer's text: one text block, normalised and
    stamped with `received_at` in `timezone` (late when `sent_at` is 15 minutes earlier)."""
    return [{"type": "text", "text": stamp(normalise(text, keep_cpf=keep_cpf), received_at,
                                           timezone, sent_at=sent_at)}]
