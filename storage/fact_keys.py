"""The closed catalogue of fact keys a tenant allows (kinds, shapes, validity, review, risk)."""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

KINDS = ("preference", "agreement", "restriction", "registration", "occurrence")
# what a value of the key must look like (agent/tools/facts_rules.py): a person's name, one
# of a few period or weekday words, a code of the tenant's catalogue; "text" is free text,
# which never enters as confirmed (a person reviews it)
SHAPES = ("text", "name", "period", "weekday", "service", "professional")


@dataclass(frozen=True)
class FactKey:
    """One allowed key. Days are validity and review periods; `risk` "high" waits for a person's
    approval; `sensitive` allows health, religion or political content (e.g. allergies);
    `shape` is what a value must look like (SHAPES)."""

    name: str
    kind: str
    validity_days: int
    review_days: int
    risk: str = "low"
    sensitive: bool = False
    shape: str = "text"


DEFAULT_KEYS: dict[str, FactKey] = {k.name: k for k in (
    FactKey("preferred_name", "registration", 730, 365, shape="name"),
    FactKey("usual_service", "preference", 365, 180, shape="service"),
    FactKey("preferred_professional", "preference", 365, 180, shape="professional"),
    FactKey("preferred_period", "preference", 365, 180, shape="period"),
    FactKey("preferred_weekday", "preference", 365, 180, shape="weekday"),
    FactKey("communication_preference", "agreement", 365, 180),
    FactKey("allergies", "restriction", 730, 180, risk="high", sensitive=True),
    FactKey("accessibility_needs", "restriction", 730, 180, risk="high", sensitive=True),
)}


def resolve_keys(spec: Iterable[Any]) -> dict[str, FactKey]:
    """A tenant's `fact_keys` (names of default keys, or objects {"name", "kind",
    "validity_days", "review_days", "risk", "sensitive", "shape"}) → its catalogue.

    Raises ValueError naming an unknown default or a malformed entry.
    """
    keys: dict[str, FactKey] = {}
    for entry in spec:
        if isinstance(entry, str):
            if entry not in DEFAULT_KEYS:
                raise ValueError(f"unknown fact key {entry!r}: define it with kind and "
                                 f"validity_days, or use one of {', '.join(DEFAULT_KEYS)}")
            keys[entry] = DEFAULT_KEYS[entry]
            continue
        if not isinstance(entry, Mapping) or not re.fullmatch(r"[a-z][a-z0-9_]{1,40}",
                                                               str(entry.get("name", ""))):
            raise ValueError(f"fact key {entry!r}: needs a snake_case name")
        if entry.get("kind") not in KINDS or entry.get("risk", "low") not in ("low", "high"):
            raise ValueError(f"fact key {entry['name']}: kind one of {KINDS}, risk low|high")
        if entry.get("shape", "text") not in SHAPES:
            raise ValueError(f"fact key {entry['name']}: shape one of {', '.join(SHAPES)}")
        validity = int(entry.get("validity_days", 365))
        keys[str(entry["name"])] = FactKey(
            str(entry["name"]), str(entry["kind"]), validity,
            int(entry.get("review_days", max(validity - 30, 1))), str(entry.get("risk", "low")),
            bool(entry.get("sensitive", False)), str(entry.get("shape", "text")))
    return keys
