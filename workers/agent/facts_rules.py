"""Contact facts: the closed key catalogue and the validation every proposal goes through.

Pure: no I/O. A fact is short, closed-key and checked in code before anything is written
(DESIGN.md, Memory lifecycle): allowed key; short single-line value; a source that is one of
this conversation's customer messages; no national id (CPF with check digits), card number
(Luhn), health, religion or political data unless the key is meant for it; nothing that reads
as an instruction to the agent.
"""

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from storage.fact_keys import DEFAULT_KEYS, KINDS, FactKey, resolve_keys  # noqa: F401
from workers.agent.tools.base import echo

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


def validate(proposal: Proposal, *, keys: Mapping[str, FactKey], conversation_id: int,
             source: SourceMessage | None) -> str | None:
    """None when the proposal may be written, else the reason it is rejected.

    The checks run on a folded form of the value (accents, invisible and format characters
    removed, case folded), so "alérgica", "ig\u200bnore" or "529 982 247 25" are caught.
    """
    key = keys.get(proposal.key)
    if key is None:
        return f"key {echo(proposal.key)} is not allowed for this business"
    value = proposal.value.strip() if isinstance(proposal.value, str) else ""
    if not value:
        return "empty value"
    if len(value) > MAX_VALUE_CHARS or any(unicodedata.category(c) in ("Cc", "Zl", "Zp")
                                           for c in value):
        return f"value longer than {MAX_VALUE_CHARS} characters or on several lines"
    if any(unicodedata.category(c) == "Cs" for c in value) or mixed_scripts(value):
        return "value mixes alphabets or holds invalid characters"
    value = fold(value)
    if source is None:
        return "the source message does not exist"
    if source.conversation_id != conversation_id:
        return "the source message is not in this conversation"
    if source.role != "user" or source.direction != "inbound":
        return "the source message is not the customer's"
    if has_cpf(value):
        return "looks like a CPF (national id)"
    if has_card_number(value):
        return "looks like a payment card number"
    if not key.sensitive and (topic := sensitive_topic(value)):
        return f"{topic} data is not allowed for this key"
    if reads_as_instruction(value):
        return "reads as an instruction to the agent"
    return None


def value_problem(value: str, key: FactKey) -> str | None:
    """The content rules of `validate` alone, for a value a person typed (no source message):
    None when it may be written, else the reason."""
    person = SourceMessage(0, 0, "user", "inbound")
    return validate(Proposal(key.name, value, 0, True), keys={key.name: key},
                    conversation_id=0, source=person)


def initial_state(proposal: Proposal, key: FactKey) -> str:
    """High-risk keys wait for a person (pending_review); low-risk ones stated by the customer
    are confirmed; inferred ones are suggested (shown to the agent as "to confirm")."""
    if key.risk == "high":
        return "pending_review"
    return "confirmed" if proposal.stated else "suggested"


def validity(key: FactKey, now: datetime) -> tuple[datetime, datetime]:
    """(valid_until, review_at) of a fact recorded at `now`."""
    return now + timedelta(days=key.validity_days), now + timedelta(days=key.review_days)


def fold(text: str) -> str:
    """Lowercase, without accents and invisible/format characters (zero-width spaces...)."""
    decomposed = unicodedata.normalize("NFKD", text)
    kept = "".join(c for c in decomposed if unicodedata.category(c) not in ("Mn", "Cf"))
    return kept.casefold()


def mixed_scripts(text: str) -> bool:
    """Latin letters mixed with Cyrillic or Greek ones: a homoglyph trick."""
    scripts = {unicodedata.name(c, "").split(" ")[0] for c in text if c.isalpha()}
    return "LATIN" in scripts and bool(scripts & {"CYRILLIC", "GREEK"})


# digits separated by anything but letters and digits (spaces, dots, commas, any dash...), at
# most 3 characters at a time: "529.982.247-25", "529 . 982 . 247 - 25", "4111,1111,1111,1111"
_DIGIT_RUN = re.compile(r"(?<!\d)\d(?:[^\w]{0,3}\d)+(?!\d)")


def _digit_runs(text: str) -> list[list[int]]:
    return [[int(d) for d in re.sub(r"\D", "", m.group(0))]
            for m in _DIGIT_RUN.finditer(fold(text))]


def has_cpf(text: str) -> bool:
    """A Brazilian CPF: 11 digits, any separators, whose two check digits match."""
    for digits in _digit_runs(text):
        if len(digits) != 11 or len(set(digits)) == 1:
            continue
        first = (sum(d * w for d, w in zip(digits[:9], range(10, 1, -1), strict=True)) * 10) % 11
        second = (sum(d * w for d, w in zip(digits[:10], range(11, 1, -1), strict=True)) * 10) % 11
        if digits[9] == first % 10 and digits[10] == second % 10:
            return True
    return False


def has_card_number(text: str) -> bool:
    """13 to 19 digits (any separators) that pass the Luhn check."""
    for digits in _digit_runs(text):
        if not 13 <= len(digits) <= 19:
            continue
        total = 0
        for position, digit in enumerate(reversed(digits)):
            if position % 2:
                digit = digit * 2 - 9 if digit * 2 > 9 else digit * 2
            total += digit
        if total % 10 == 0:
            return True
    return False


_TOPICS = {  # stems, matched on the folded text (no accents, lower case)
    "health": ("diabet", "cancer", "hiv", "gravid", "gestant", "pregnan", "depress", "ansiedad",
               "anxiety", "remedio", "medicament", "medication", "doenc", "disease", "alerg",
               "allerg", "cirurgi", "surgery", "tratament", "therapy", "terapia", "asma",
               "asthma", "quimio", "chemo", "hipertens", "pressao alta", "epilep", "autis",
               "deficien", "sindrome", "syndrome", "psiqui", "psych", "insulin", "covid"),
    "religion": ("evangelic", "catolic", "catholic", "umband", "candombl", "espirit",
                 "muculman", "muslim", "judeu", "judia", "judaism", "jewish", "igreja", "church",
                 "crente", "ateu", "ateia", "atheist", "budist", "buddhist", "islam"),
    "political": ("petista", "bolsonar", "lulist", "partido", "political party", "esquerdist",
                  "direitist", "comunist", "communist", "conservador", "socialist"),
}
_INSTRUCTION = re.compile(  # matched on the folded text (no accents, lower case)
    r"(ignor|desconsider|disregard|esquec|olvid|oublie|vergiss|instruc|instruction|"
    r"system|prompt|you must|you are|voce deve|voce e |sempre respond|always (answer|reply|"
    r"say)|never (ask|say)|nunca pergunt|act as|aja como|finja|pretend|a partir de agora|"
    r"from now on|de agora em diante|regra|rule|cancel\w* (todos|tudo|all)|assistant|"
    r"assistente|tool|ferramenta|execut|comando|command|respond|answer in|desconto|discount|"
    r"gratis|de graca|free of charge|<|>|\{|\}|\[|\]|`|#|\*\*|:\s*$|^\w+:)")


def sensitive_topic(text: str) -> str | None:
    lowered = fold(text)
    for topic, stems in _TOPICS.items():
        if any(stem in lowered for stem in stems):
            return topic
    return None


def reads_as_instruction(text: str) -> bool:
    return bool(_INSTRUCTION.search(fold(text)))


def render_fact_lines(facts: Iterable[tuple[str, str, str, datetime | None]],
                      now: datetime) -> list[str]:
    """Context-block lines for (key, value, state, review_at): stable order (by key), bounded;
    suggested facts and those due for review are marked "to confirm with the customer"."""
    lines = []
    for key, value, state, review_at in sorted(facts)[:MAX_FACTS_IN_CONTEXT]:
        unsure = state == "suggested" or (review_at is not None and review_at <= now)
        lines.append(f"{key}: {value}" + (" (to confirm with the customer)" if unsure else ""))
    return lines
