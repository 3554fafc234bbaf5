"""The text of a customer message as it is stored: normalised in one place, then stamped."""

from datetime import datetime
from typing import Any

from intake.masking import mask
from intake.stamp import stamp
from storage import marks

# the customer-written fields of a media descriptor (whatsapp/inbound.py `media_descriptor`)
MEDIA_TEXT_FIELDS = ("caption", "filename")
# the customer-written string fields of a webhook message item (Sources: WhatsApp §3.3:
# `text.body`, a media's `caption` and `filename`, an edit's new `body`, a profile's `name`),
# masked in what the dead letters keep of it (`masked_item`); ids and structure are left
CUSTOMER_FIELDS = frozenset({"body", "caption", "filename", "name"})


def normalise(text: str, *, keep_cpf: bool = False) -> str:
    """A customer's text as it is stored (a new message, an edit, a deletion's placeholder,
    a media's caption and file name, the profile name): the one place it is changed before
    storing. Its card and CPF numbers are masked (intake/masking.py; a CPF kept with
    `keep_cpf`, the tenant's setting), and it is disarmed (storage/marks.py `disarm`), so it
    can never carry the staff mark `[equipe: NAME]`."""
    return marks.disarm(mask(text, keep_cpf))


def content(text: str, received_at: datetime, timezone: str, *,
            sent_at: datetime | None, keep_cpf: bool = False) -> list[dict[str, Any]]:
    """The stored `Message.content` of a customer's text: one text block, normalised and
    stamped with `received_at` in `timezone` (late when `sent_at` is 15 minutes earlier)."""
    return [{"type": "text", "text": stamp(normalise(text, keep_cpf=keep_cpf), received_at,
                                           timezone, sent_at=sent_at)}]


def media(descriptor: dict[str, Any] | None, *,
          keep_cpf: bool = False) -> dict[str, Any] | None:
    """A media descriptor as it is stored (`Message.media`): its caption and file name
    normalised (`normalise`), every other field as it came; None stays None."""
    if not descriptor:
        return descriptor
    return {**descriptor, **{name: normalise(value, keep_cpf=keep_cpf)
                             for name in MEDIA_TEXT_FIELDS
                             if isinstance(value := descriptor.get(name), str)}}


def masked_item(raw: Any, *, keep_cpf: bool = False) -> Any:
    """A webhook message item (any JSON value) with the strings of its CUSTOMER_FIELDS masked
    (`mask`), at any depth; ids, numbers and structure as they came. For the dead letters,
    which keep what no tenant took (issue 42: nothing customer-written is kept unmasked)."""
    if isinstance(raw, dict):
        return {key: mask(value, keep_cpf) if key in CUSTOMER_FIELDS and isinstance(value, str)
                else masked_item(value, keep_cpf=keep_cpf) for key, value in raw.items()}
    if isinstance(raw, list):
        return [masked_item(value, keep_cpf=keep_cpf) for value in raw]
    return raw
