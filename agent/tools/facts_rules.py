"""Contact facts: the closed key catalogue and the validation every proposal goes through.

Pure: no I/O. A fact is short, closed-key and checked in code before anything is written
(ARCHITECTURE.md, Memory lifecycle): allowed key; short single-line value; a source that is one of
this conversation's customer messages; no national id (CPF with check digits) or card number
(Luhn), digits read after every separator is removed and number words are read as digits; no
health, religion or political data unless the key is meant for it; nothing that reads as an
instruction to the agent. Above all, each key has a value shape (an allow-list, `FactKey.shape`):
a name looks like a name, a period or a weekday is one of a few words, a service or a
professional is a code of the tenant's catalogue (an unambiguous name is normalised to its
code); anything else is refused. Free-text keys never enter as confirmed: a person reviews them.
"""

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agent.tools.base import echo, some_codes
from agent.tools.content_rules import (  # noqa: F401  (the one rule set: issue 35 item 3)
    fold,
    has_card_number,
    has_cpf,
    instruction_kind,
    mixed_scripts,
    reads_as_instruction,
    sensitive_topic,
)
from storage.fact_keys import DEFAULT_KEYS, KINDS, SHAPES, FactKey, resolve_keys  # noqa: F401

MAX_VALUE_CHARS = 80
MAX_FACTS_IN_CONTEXT = 20


@dataclass(frozen=True)
class Proposal:
    """A candidate fact: from extraction (`origin` "extracted") or the remember_fact tool."""

    key: str
    value: str
    source_message_id: int | None
    stated: bool  # the customer said it in so many words (vs. inferred from behaviour)


@dataclass(frozen=True)
class SourceMessage:
    id: int
    conversation_id: int
    role: str
    direction: str


@dataclass(frozen=True)
class Catalogue:
    """The tenant's active services and professionals, code → name: what a fact of a
    `service` or `professional` key may name (storage.catalogue.catalogue_names)."""

    services: Mapping[str, str] = field(default_factory=dict)
    professionals: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """The outcome of `validate`: `reason` None means the fact may be written, as `value`
    (normalised to its key's shape: a catalogue code, a canonical period or weekday)."""

    value: str
    reason: str | None = None


def validate(proposal: Proposal, *, keys: Mapping[str, FactKey], catalogue: Catalogue,
             conversation_id: int, source: SourceMessage | None) -> Verdict:
    """Whether the proposal may be written, and as what; see the module docstring.

    The content checks run on a folded form of the value (accents, invisible and format
    characters removed, case folded), so "alérgica", "ig\u200bnore" or "529 982 247 25" are
    caught; the shape check runs last, so a refusal names the most telling reason.
    """
    key = keys.get(proposal.key)
    if key is None:
        return Verdict("", f"key {echo(proposal.key)} is not allowed for this business")
    if source is None:
        return Verdict("", "the source message does not exist")
    if source.conversation_id != conversation_id:
        return Verdict("", "the source message is not in this conversation")
    if source.role != "user" or source.direction != "inbound":
        return Verdict("", "the source message is not the customer's")
    value = proposal.value.strip() if isinstance(proposal.value, str) else ""
    reason = content_problem(value, key)
    if reason is not None:
        return Verdict("", reason)
    return shaped(value, key, catalogue)


def content_problem(value: str, key: FactKey) -> str | None:
    """What no value of any shape may hold; None when there is nothing."""
    if not value:
        return "empty value"
    if len(value) > MAX_VALUE_CHARS or any(unicodedata.category(c) in ("Cc", "Zl", "Zp")
                                           for c in value):
        return f"value longer than {MAX_VALUE_CHARS} characters or on several lines"
    if any(unicodedata.category(c) == "Cs" for c in value) or mixed_scripts(value):
        return "value mixes alphabets or holds invalid characters"
    if has_cpf(value):
        return "looks like a CPF (national id)"
    if has_card_number(value):
        return "looks like a payment card number"
    if not key.sensitive and (topic := sensitive_topic(value)):
        return f"{topic} data is not allowed for this key"
    if (kind := instruction_kind(value)) is not None:
        return "changes a price" if kind == "price" else "reads as an instruction to the agent"
    return None


def check_value(value: str, key: FactKey, catalogue: Catalogue) -> Verdict:
    """The content and shape rules of `validate` alone, for a value a person typed (no source
    message): the value to store, or the reason it may not be."""
    person = SourceMessage(0, 0, "user", "inbound")
    return validate(Proposal(key.name, value, 0, True), keys={key.name: key},
                    catalogue=catalogue, conversation_id=0, source=person)


def initial_state(proposal: Proposal, key: FactKey) -> str:
    """High-risk and free-text keys wait for a person (pending_review: kept out of the context
    until approved); shaped low-risk ones stated by the customer are confirmed; inferred ones
    are suggested (shown to the agent as "to confirm")."""
    if key.risk == "high" or key.shape == "text":
        return "pending_review"
    return "confirmed" if proposal.stated else "suggested"


# -- shapes ------------------------------------------------------------------------------------

MAX_NAME_WORDS = 4
MAX_NAME_CHARS = 40
_NAME_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*\.?")
# canonical word: its folded spellings (accents and case aside), Portuguese and English
PERIODS = {"manhã": ("manha", "morning"), "tarde": ("tarde", "afternoon"),
           "noite": ("noite", "evening", "night")}
WEEKDAYS = {"segunda": ("segunda", "segunda-feira", "seg", "monday", "mon"),
            "terça": ("terca", "terca-feira", "ter", "tuesday", "tue"),
            "quarta": ("quarta", "quarta-feira", "qua", "wednesday", "wed"),
            "quinta": ("quinta", "quinta-feira", "qui", "thursday", "thu"),
            "sexta": ("sexta", "sexta-feira", "sex", "friday", "fri"),
            "sábado": ("sabado", "sab", "saturday", "sat"),
            "domingo": ("domingo", "dom", "sunday", "sun")}
# leading words a spoken value carries: "de manhã", "às sextas", "com a Júlia", "the morning"
_LEAD = {"a", "o", "as", "os", "de", "da", "do", "das", "dos", "na", "no", "nas", "nos", "em",
         "pela", "pelo", "com", "sempre", "the", "in", "on", "at", "with", "every"}


def shaped(value: str, key: FactKey, catalogue: Catalogue) -> Verdict:
    """`value` normalised to the shape of `key`, or the reason it does not have it."""
    if key.shape == "name":
        return _name(value)
    if key.shape == "period":
        return _word(value, PERIODS, "a period of the day")
    if key.shape == "weekday":
        return _word(value, WEEKDAYS, "a day of the week")
    if key.shape == "service":
        return _code(value, catalogue.services, "service")
    if key.shape == "professional":
        return _code(value, catalogue.professionals, "professional")
    return Verdict(" ".join(value.split()))


def describe_shape(key: FactKey, catalogue: Catalogue) -> str:
    """What a value of `key` must be, for the model (the extraction prompt)."""
    if key.shape == "name":
        return "a name the customer goes by (1 to 4 words, letters only)"
    if key.shape in ("period", "weekday"):
        words = PERIODS if key.shape == "period" else WEEKDAYS
        return "one of " + ", ".join(words)
    if key.shape in ("service", "professional"):
        codes = sorted(catalogue.services if key.shape == "service" else catalogue.professionals)
        return f"a {key.shape} code: {some_codes(codes)}"
    return "a short free text (a person reviews it before it is used)"


def _name(value: str) -> Verdict:
    words = value.split()
    if not 1 <= len(words) <= MAX_NAME_WORDS or len(" ".join(words)) > MAX_NAME_CHARS or \
            not all(_NAME_WORD.fullmatch(word) for word in words):
        return Verdict("", f"not a name: {MAX_NAME_WORDS} words at most, letters only")
    return Verdict(" ".join(words))


def _phrase(value: str) -> str:
    """Folded words, without a parenthesised aside, punctuation or the leading words of speech:
    "Júlia (corte)" → "julia", "de manhã!" → "manha", "Dra. Lia" → "dra lia"."""
    words = re.sub(r"[.,;:!?]", " ", re.sub(r"\([^)]*\)", " ", fold(value))).split()
    while len(words) > 1 and words[0] in _LEAD:
        words.pop(0)
    return " ".join(words)


def _word(value: str, words: Mapping[str, tuple[str, ...]], what: str) -> Verdict:
    phrase = _phrase(value)
    for canonical, spellings in words.items():
        if phrase in spellings or (phrase.endswith("s") and phrase[:-1] in spellings):
            return Verdict(canonical)
    return Verdict("", f"not {what}: one of {', '.join(words)}")


def _code(value: str, entries: Mapping[str, str], what: str) -> Verdict:
    """The code of `entries` that `value` names: by its code or its whole name, else by words
    of one name only ("Júlia" for "Júlia Souza"); refused when none or several match."""
    phrase = _phrase(value)
    exact = [code for code, name in entries.items() if phrase in (_phrase(code), _phrase(name))]
    partial = [code for code, name in entries.items()
               if phrase and f" {phrase} " in f" {_phrase(name)} "]
    for matches in (exact, partial):
        if len(matches) == 1:
            return Verdict(matches[0])
        if len(matches) > 1:
            return Verdict("", f"more than one {what} goes by that name "
                               f"({some_codes(sorted(matches))}): give its code")
    return Verdict("", f"not a {what} of this business: one of "
                       f"{some_codes(sorted(entries))}")


def validity(key: FactKey, now: datetime) -> tuple[datetime, datetime]:
    """(valid_until, review_at) of a fact recorded at `now`."""
    return now + timedelta(days=key.validity_days), now + timedelta(days=key.review_days)


def render_fact_lines(facts: Iterable[tuple[str, str, str, datetime | None]],
                      now: datetime) -> list[str]:
    """Context-block lines for (key, value, state, review_at): stable order (by key), bounded;
    suggested facts and those due for review are marked "to confirm with the customer"."""
    lines = []
    for key, value, state, review_at in sorted(facts)[:MAX_FACTS_IN_CONTEXT]:
        unsure = state == "suggested" or (review_at is not None and review_at <= now)
        lines.append(f"{key}: {value}" + (" (to confirm with the customer)" if unsure else ""))
    return lines


AWAITING_LABEL = "stated by the customer on {day}, awaiting staff review: not verified"


def render_awaiting_lines(facts: Iterable[tuple[str, str, str]]) -> list[str]:
    """Context-block lines for facts awaiting a person (key, value, local date stated as
    YYYY-MM-DD): suggested and pending_review ones, labelled so the agent neither denies nor
    relies on them (issue 21). Stable order (by key), bounded like the facts."""
    return [f"{key}: {value} ({AWAITING_LABEL.format(day=day)})"
            for key, value, day in sorted(facts)[:MAX_FACTS_IN_CONTEXT]]


MAX_NOTE_CHARS = 200  # an appointment's note (issue 21)


def note_problem(note: str, *, health_allowed: bool) -> str | None:
    """Why an appointment note (one line, already whitespace-collapsed) may not be stored, as
    the instruction to the model; None when it may. The fact value checks above: no CPF or card
    number, no mixed alphabets, nothing that reads as an instruction or changes a price
    (content_rules.py, the one rule set); health content only when the tenant allows it
    (`appointment_notes_sensitive`), religion and politics never. The agent's tools and staff
    (operations/agenda.py) both ask it."""
    if len(note) > MAX_NOTE_CHARS:
        return f"at most {MAX_NOTE_CHARS} characters; write the request shorter"
    if any(unicodedata.category(c) in ("Cs", "Cc") for c in note) or mixed_scripts(note):
        return "it mixes alphabets or holds invalid characters"
    if has_cpf(note) or has_card_number(note):
        return ("it looks like a CPF or a card number; record the request without any "
                "document or card number")
    topic = sensitive_topic(note)
    if topic == "health" and not health_allowed:
        return ("this business does not keep health details in appointment notes; record "
                "the request without the health detail")
    if topic is not None and topic != "health":
        return f"{topic} data is not kept in appointment notes; record the request without it"
    kind = instruction_kind(note)
    if kind == "price":
        return ("prices come from the business's catalogue and a note cannot change them; tell "
                "the customer a person at the business decides on prices, and record only "
                "what they ask for the visit")
    if kind is not None:
        return ("it reads as an instruction to the agent; record only what the customer asks "
                "for the visit")
    return None
