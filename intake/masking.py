"""Masking a customer's card and CPF numbers before their words are stored (issue 42 item 2).

Pure. A customer's text, caption, transcript or edit goes through `mask` once, before it is
stored, logged or sent on (intake/ingest.py `stamp`, workers/media.py), and migration 0022 ran
it over the messages stored before. A number is a run of digit groups joined by spaces
and at most one dash, dot, slash or comma laid out as core/numbers.NUMBER_LAYOUTS says;
the checks are core/numbers' (python-stdnum: Luhn, CPF check digits), those that refuse such
numbers in notes and facts. A run right after "+" is a phone number, never a card.
"""

import re

from core.numbers import IS_NUMBER, NUMBER_LAYOUTS

MASK = "*"
KEEP_CARD_DIGITS = 4  # PCI DSS 3.4: at most the last four digits are shown
_GROUP = re.compile(r"\d+")
# what may join two groups of one number: spaces, a dash, dot, slash or comma between them
_JOIN = re.compile(r"\s{0,4}[-./,\u2010-\u2015]?\s{0,4}")


def mask(text: str, keep_cpf: bool = False) -> str:
    """`text` with every payment card number masked but its last four digits
    ("4111 1111 1111 1111" -> "**** **** **** 1111") and, unless `keep_cpf`, every CPF masked
    whole ("529.982.247-25" -> "***.***.***-**"); separators and everything else kept.
    Idempotent: a masked number has too few digits to be found again."""
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


def _numbers(text: str, run: list[Span], kind: str) -> list[Span]:
    """The (first, last) group indexes of `run`, last exclusive, that form a valid number of
    `kind`: laid out as NUMBER_LAYOUTS says, its check digits right; longest layouts first."""
    found: list[Span] = []
    lengths = [end - start for start, end in run]
    layouts = sorted(NUMBER_LAYOUTS[kind], key=lambda layout: -sum(layout))
    for layout in layouts:
        for first in range(len(run) - len(layout) + 1):
            last = first + len(layout)
            if tuple(lengths[first:last]) != layout:
                continue
            if any(first < b and a < last for a, b in found):
                continue
            if kind == "card" and run[first][0] > 0 and text[run[first][0] - 1] == "+":
                continue  # "+55 11 ...": a phone number
            digits = "".join(text[s:e] for s, e in run[first:last])
            if IS_NUMBER[kind](digits):
                found.append((first, last))
    return found


def _blank(chars: list[str], groups: list[Span], keep: int) -> None:
    """Replace the digits of `groups` by MASK, but the last `keep` of them."""
    positions = [i for start, end in groups for i in range(start, end)]
    for i in positions[:len(positions) - keep]:
        chars[i] = MASK
