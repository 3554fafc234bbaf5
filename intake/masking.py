"""Masking a customer's card and CPF numbers before their words are stored (issue 42 item 2).

Pure. A customer's text, caption, file name, transcript, edit and profile name goes through
`mask` once, before it is stored, logged or sent on (intake/text.py `normalise`,
workers/media.py), and migration 0022 ran it over what was stored before. A number is a run of
digit groups joined by spaces and at most one dash, dot, slash, comma, underscore or star,
laid out as core/numbers.NUMBER_LAYOUTS says, or written one digit at a time ("4 1 1 1 ...");
any Unicode decimal digit counts ("４１１１", folded by core/numbers `ascii_digits`). The checks
are core/numbers' (python-stdnum: Luhn, CPF check digits), those that refuse such numbers in
notes and facts.

Phone numbers are kept. About 1 in 100 bare 11-digit Brazilian mobiles pass the CPF check, and
1 in 10 thirteen-digit "55..." numbers pass Luhn, so a number that passes is still a phone
number, and kept, when:
- it follows "+" ("+55 11 ...");
- it is 12 or 13 digits led by 55 and a valid DDD (a card has 13 to 19 digits: a 16-digit
  card led by 55 is still a card; a real 13-digit card is an old Visa, led by 4);
- it is 11 digits shaped like a mobile (a valid DDD, then 9: core/numbers `is_br_mobile`),
  unless written as a CPF is (3.3.3-2 groups);
- a phone word (telefone, celular, whats, zap, número, liga, ...) is the nearest keyword in the
  30 characters before it and it has at most 13 digits, unless written as a CPF is.
A CPF word ("cpf") or a card word (cartão, crédito, ...) as the nearest keyword wins over all
but "+": "cpf 11987650034" is masked. The trade-off: a CPF sent bare, with no "cpf" before it,
whose digits look like a mobile (about 1 in 9 CPFs: a valid DDD and a 9 third) is kept; a
13-digit card after a phone word is kept.
"""

import re

from core.numbers import (
    BR_AREA_CODES,
    BR_COUNTRY_CODE,
    IS_NUMBER,
    LENGTHS,
    NUMBER_LAYOUTS,
    ascii_digits,
    is_br_mobile,
)

MASK = "*"
KEEP_CARD_DIGITS = 4  # PCI DSS 3.4: at most the last four digits are shown
_GROUP = re.compile(r"\d+")  # any Unicode decimal digit (Nd), folded for the checks
# what may join two groups of one number: spaces, and one dash, dot, slash, comma, underscore
# or star between them
_JOIN = re.compile(r"\s{0,4}[-./,_*\u2010-\u2015]?\s{0,4}")
CPF_WRITTEN = (3, 3, 3, 2)  # "529.982.247-25": a CPF as it is written, never a phone
MAX_PHONE_DIGITS = 13  # 55, a DDD and a mobile's nine digits
_LOOK_BEHIND = 30  # characters before a number read for its keyword
_KEYWORD = re.compile(
    r"\b(?:(?P<phone>telefone|tel|fone|celular|cel|whats\w*|wpp|zap\w*|n[úu]mero|num|liga\w*|"
    r"contato)|(?P<document>cpf|cart[ãa]o|cartoes|cart[õo]es|card|cr[ée]dito|d[ée]bito))\b",
    re.IGNORECASE)


def mask(text: str, keep_cpf: bool = False) -> str:
    """`text` with every payment card number masked but its last four digits
    ("4111 1111 1111 1111" -> "**** **** **** 1111") and, unless `keep_cpf`, every CPF masked
    whole ("529.982.247-25" -> "***.***.***-**"); phone numbers (module docstring),
    separators and everything else kept. Idempotent: a masked number has too few digits to be
    found again."""
    if not any(c.isdigit() for c in text):
        return text
    chars = list(text)
    for run in _runs(text):
        taken: list[tuple[int, int]] = []
        for kind in ("card", "cpf"):
            if kind == "cpf" and keep_cpf:
                continue
            for first, last in _numbers(text, run, kind):
                if any(first < b and a < last for a, b in taken):
                    continue
                taken.append((first, last))
                keep = KEEP_CARD_DIGITS if kind == "card" else 0
                _blank(chars, run[first:last], keep)
    return "".join(chars)


Span = tuple[int, int]


def _runs(text: str) -> list[list[Span]]:
    """The digit groups of `text` ((start, end) each), in runs of groups joined as one number
    may be; a group glued to a letter or another digit run's "+" starts a run of its own."""
    runs: list[list[Span]] = []
    previous: Span | None = None
    for match in _GROUP.finditer(text):
        span = match.span()
        gap = "" if previous is None else text[previous[1]:span[0]]
        joined = previous is not None and gap != "" and _JOIN.fullmatch(gap)
        if joined:
            runs[-1].append(span)
        else:
            runs.append([span])
        previous = span
    return runs


def _layouts(kind: str, lengths: list[int]) -> list[tuple[int, ...]]:
    """The layouts a number of `kind` may have in a run of groups of `lengths`: NUMBER_LAYOUTS
    and, where the run has single digits, those written one digit at a time; longest first."""
    singles = [(1,) * n for n in LENGTHS[kind] if n <= lengths.count(1)]
    return sorted([*NUMBER_LAYOUTS[kind], *singles], key=lambda layout: -sum(layout))


def _numbers(text: str, run: list[Span], kind: str) -> list[Span]:
    """The (first, last) group indexes of `run`, last exclusive, that form a valid number of
    `kind`: laid out as `_layouts` says, its check digits right, not a phone number
    (`_is_phone`); longest layouts first."""
    found: list[Span] = []
    lengths = [end - start for start, end in run]
    for layout in _layouts(kind, lengths):
        for first in range(len(run) - len(layout) + 1):
            last = first + len(layout)
            if tuple(lengths[first:last]) != layout:
                continue
            if any(first < b and a < last for a, b in found):
                continue
            digits = ascii_digits("".join(text[s:e] for s, e in run[first:last]))
            if IS_NUMBER[kind](digits) and not _is_phone(text, run[first][0], digits, layout):
                found.append((first, last))
    return found


def _is_phone(text: str, start: int, digits: str, layout: tuple[int, ...]) -> bool:
    """Whether the number of `digits` written at `start` in `layout` is a phone number (the
    rule in the module docstring)."""
    if start > 0 and text[start - 1] == "+":
        return True
    said = _keyword_before(text, start)
    if said == "document" or layout == CPF_WRITTEN:
        return False
    if len(digits) in (12, 13) and digits.startswith(BR_COUNTRY_CODE) \
            and digits[2:4] in BR_AREA_CODES:
        return True
    return is_br_mobile(digits) or said == "phone" and len(digits) <= MAX_PHONE_DIGITS


def _keyword_before(text: str, start: int) -> str:
    """"phone", "document" (a CPF or card word) or "": the nearest keyword in the
    _LOOK_BEHIND characters before `start`."""
    found = list(_KEYWORD.finditer(text[max(0, start - _LOOK_BEHIND):start]))
    return "" if not found else "phone" if found[-1].group("phone") else "document"


def _blank(chars: list[str], groups: list[Span], keep: int) -> None:
    """Replace the digits of `groups` by MASK, but the last `keep` of them."""
    positions = [i for start, end in groups for i in range(start, end)]
    for i in positions[:len(positions) - keep]:
        chars[i] = MASK
