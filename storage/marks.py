"""The product's own messages: who wrote them (the `Message.author` column) and the marks that
label them for the model, and what keeps customer text from forging those marks.

A stored outbound message is the agent's reply when `author` is None, a staff message when it
is `staff:NAME` (storage/staff.py), and a message the product itself sent when it is
`product:KIND` (KINDS: a reminder, a business notice, the "still calling the team" alert, the
handoff's message, the acknowledgement of a tap, a template follow-up, the outage apology).
`agent/timeline.py` renders each for the model, led by a mark; a mark is recognised only through
this column, never from a message's text (issue 35, item 2).

Customer text (messages, captions, transcripts, contact cards, list titles echoed back, the
profile name) goes through `disarm`: any bracketed lead-in that folds to a mark is neutralised.
Folding: NFKC, then the Unicode confusables skeleton (the `confusable_homoglyphs` data of
UTS #39 confusables.txt, plus small capitals by name), accents, ignorables (U+034F, variation
selectors, zero-width and other format characters) and every non-letter removed, lower case.
"""

import functools
import re
import unicodedata

from confusable_homoglyphs import confusables

PRODUCT = "product:"
STAFF = "staff:"
KINDS = ("reminder", "notice", "alert", "handoff", "tap_ack", "template", "apology")
# a third author (issue 45): another sender holding the thread (Meta Business Agent, another
# app) wrote it, or Meta's summary when it passed the thread to us (intake/standby.py)
OTHER = "other:"
OTHER_KINDS = ("meta_agent", "other_app", "handover")

# The lead words of every mark the product writes before a message's text (agent/timeline.py
# LABELS, storage/staff.py), as `fold` reads them. A customer's bracket followed by one of these
# is neutralised; the product's own customer-text leads ("[tapped button", "[reaction",
# "[shared", "[sent a", a stamp's date) are not marks and are left alone.
MARK_WORDS = ("equipe", "before this message", "lembrete", "botoes", "aviso", "mensagem automatica",
              "resposta automatica", "modelo enviado", "enviado ao cliente", "reminder",
              "the business", "follow up template", "notice template", "staff",
              "agente da meta", "outro aplicativo", "resumo do agente")
NEUTRAL = "("  # what a neutralised lead-in's bracket becomes
_LOOK_AHEAD = 160  # characters after a bracket read to fold its lead-in
_SMALL_CAPITAL = re.compile(r"LATIN LETTER SMALL CAPITAL ([A-Z])\b")


def product_author(kind: str) -> str:
    """The `author` of a message the product sent: `product:KIND`, KIND one of KINDS."""
    if kind not in KINDS:
        raise ValueError(f"unknown product message kind {kind!r} (known: {', '.join(KINDS)})")
    return PRODUCT + kind


def other_author(kind: str) -> str:
    """The `author` of a message another sender wrote: `other:KIND`, KIND one of OTHER_KINDS."""
    if kind not in OTHER_KINDS:
        raise ValueError(f"unknown sender {kind!r} (known: {', '.join(OTHER_KINDS)})")
    return OTHER + kind


def staff_author(name: str) -> str:
    return STAFF + name


def author_kind(author: str | None) -> tuple[str, str]:
    """(kind, name) of a stored message's `author`: ("agent", "") for None, ("staff", NAME),
    (KIND, "") of a product message or of another sender's (OTHER_KINDS). An unknown value
    reads as the agent's."""
    if author and author.startswith(STAFF):
        return "staff", author.removeprefix(STAFF)
    if author and author.startswith(OTHER) and author.removeprefix(OTHER) in OTHER_KINDS:
        return author.removeprefix(OTHER), ""
    if author and author.startswith(PRODUCT) and author.removeprefix(PRODUCT) in KINDS:
        return author.removeprefix(PRODUCT), ""
    return "agent", ""


@functools.lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    """One character as `fold` reads it: "" for ignorables and non-letters, else ASCII
    lower-case letters (a look-alike becomes the letter it passes for)."""
    out = []
    for part in unicodedata.normalize("NFKC", char):
        if part.isascii():
            out.append(part.lower() if part.isalpha() else "")
            continue
        if unicodedata.category(part) in ("Mn", "Me", "Cf") or not part.isalpha():
            continue  # combining marks (U+034F, variation selectors), zero-width, colons...
        latin = [h["c"] for h in (confusables.is_confusable(
            part, greedy=True, preferred_aliases=["latin"]) or [{}])[0].get("homoglyphs", [])
            if len(h["c"]) == 1 and h["c"].isascii() and h["c"].isalpha()]
        if latin:
            out.append(latin[0].lower())
            continue
        small = _SMALL_CAPITAL.search(unicodedata.name(part, ""))
        if small:
            out.append(small.group(1).lower())
            continue
        bare = "".join(c for c in unicodedata.normalize("NFD", part)
                       if unicodedata.category(c) != "Mn")
        out.append(bare.lower() if bare.isascii() and bare.isalpha() else "")
    return "".join(out)


def fold(text: str) -> str:
    """`text` as the mark check reads it: letters only, look-alikes as the ASCII letters they
    pass for, lower case ("［Equіpe∶ Jú" → "equipeju")."""
    return "".join(_fold_char(c) for c in text)


_MARK_FOLDS = tuple(fold(word) for word in MARK_WORDS)


@functools.lru_cache(maxsize=1024)
def _opens(char: str) -> bool:
    """True for an opening bracket of any kind but "(" (the neutral one): `[`, `{`, `<`,
    `〚`, `⁅`, `【`, full-width forms, look-alikes of `[`."""
    folded = unicodedata.normalize("NFKC", char)
    if not folded or folded[0] == NEUTRAL:
        return False
    if unicodedata.category(folded[0]) in ("Ps", "Pi") or folded[0] in "[{<":
        return True
    found = confusables.is_confusable(char, greedy=True, preferred_aliases=["common"]) or []
    return any(h["c"] in "[{<" for f in found for h in f.get("homoglyphs", []))


def forges_mark(text: str, index: int) -> bool:
    """True when the bracket at `index` leads text that folds to one of the product's marks."""
    lead = fold(text[index + 1:index + 1 + _LOOK_AHEAD])
    return any(lead.startswith(mark) for mark in _MARK_FOLDS)


def disarm(text: str) -> str:
    """Customer text that can never carry a mark only the product writes: each opening bracket
    (of any kind) whose lead-in folds to a mark becomes `(`; everything else is returned as it
    came (accents, emoji, other brackets). Idempotent."""
    if not any(not c.isalnum() and not c.isspace() for c in text):
        return text
    chars = list(text)
    for index, char in enumerate(text):
        if not char.isalnum() and not char.isspace() and _opens(char) \
                and forges_mark(text, index):
            chars[index] = NEUTRAL
    return "".join(chars)
