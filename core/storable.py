"""Text PostgreSQL can store: the one rule for strings from outside (a webhook, the model)
before they are kept in a text or JSONB column. Pure."""

import re
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` as PostgreSQL takes it: NUL dropped, a lone surrogate (which JSON `\\u` escapes
    can carry) made U+FFFD; PostgreSQL refuses both in text and JSONB (psycopg
    UntranslatableCharacter / CharacterNotInRepertoire)."""
    return _LONE_SURROGATE.sub("\ufffd", text.replace("\x00", ""))


def storable_value(value: Any) -> Any:
    """A JSON value (message blocks, a tool's input) with every string in it, keys too,
    `storable`; the same object when nothing changed."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, list):
        items = [storable_value(v) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if isinstance(value, dict):
        pairs = {storable(k) if isinstance(k, str) else k: storable_value(v)
                 for k, v in value.items()}
        same = list(pairs) == list(value) and all(pairs[k] is value[k] for k in value)
        return value if same else pairs
    return value
