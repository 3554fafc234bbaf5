"""The one rule set for every free text the product stores about a customer: fact values
(facts_rules.content_problem), appointment notes from the agent (scheduling.checked_note) and
from staff (operations/agenda.py: console, admin API, CLI) (issue 35 item 3).

Pure: no I/O. Every check runs on a folded form (`fold`: accents, invisible and format
characters removed, case folded), so "psoríase" and "psoriase", "ig\u200bnore" are one.
Detection is by tables, each tested with the probes of tests/test_facts.py:

- NUMBER_LAYOUTS (core/numbers.py, shared with intake's masking): how a CPF (python-stdnum:
  check digits) or a payment card (Luhn) is written.
  A number is found in each stretch of digits and separators as a whole (spaced or spelled out,
  "cinco dois nove…") and as a run of consecutive digit groups laid out like one, so the
  digits that follow ("CPF 529.982.247-25 - 15h", "4111 1111 1111 1111 12/30") do not hide it.
- TOPICS: stems (and TOPIC_WORDS: whole words) of health, religion and political data.
- INSTRUCTIONS: what reads as an instruction to the agent, a privilege or a price change.
"""

import re
import unicodedata
from collections.abc import Iterator

from core.numbers import LENGTHS, NUMBER_LAYOUTS, is_card_number, is_cpf


def fold(text: str) -> str:
    """Lowercase, without accents and invisible/format characters (zero-width spaces...)."""
    decomposed = unicodedata.normalize("NFKD", text)
    kept = "".join(c for c in decomposed if unicodedata.category(c) not in ("Mn", "Cf"))
    return kept.casefold()


def mixed_scripts(text: str) -> bool:
    """Latin letters mixed with Cyrillic or Greek ones: a homoglyph trick."""
    scripts = {unicodedata.name(c, "").split(" ")[0] for c in text if c.isalpha()}
    return "LATIN" in scripts and bool(scripts & {"CYRILLIC", "GREEK"})


# -- numbers ------------------------------------------------------------------------------------

NUMBER_WORDS = {"zero": 0, "um": 1, "uma": 1, "dois": 2, "duas": 2, "tres": 3, "quatro": 4,
                "cinco": 5, "seis": 6, "meia": 6, "sete": 7, "oito": 8, "nove": 9, "one": 1,
                "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
                "nine": 9}  # folded; "meia" is how Brazilians say a six in a number
_NUMBER_WORD = re.compile(r"\b(" + "|".join(NUMBER_WORDS) + r")\b")


def _candidates(text: str, kind: str) -> Iterator[str]:
    """The digit strings of `text` that could be a number of `kind` (see the module
    docstring): each stretch without letters as a whole, all the digits together
    ("cpf5a29b982…"), and each run of consecutive groups laid out as NUMBER_LAYOUTS says."""
    spelled = _NUMBER_WORD.sub(lambda m: str(NUMBER_WORDS[m.group(1)]), fold(text))
    for stretch in [*re.split(r"[^\W\d_]+", spelled), spelled]:
        digits = re.sub(r"\D", "", stretch)
        if len(digits) in LENGTHS[kind]:
            yield digits
    groups = re.findall(r"\d+", spelled)
    if kind == "cpf" and "cpf" in spelled:  # named, then glued to other digits: "Cpf529…251"
        for group in groups:
            yield from (group[i:i + 11] for i in range(len(group) - 10))
    for layout in NUMBER_LAYOUTS[kind]:
        for start in range(len(groups) - len(layout) + 1):
            window = groups[start:start + len(layout)]
            if tuple(len(group) for group in window) == layout:
                yield "".join(window)


def has_cpf(text: str) -> bool:
    """A Brazilian CPF: 11 digits whose two check digits match (not all one digit)."""
    return any(is_cpf(d) for d in _candidates(text, "cpf"))


def has_card_number(text: str) -> bool:
    """A payment card number: 13 to 19 digits that pass the Luhn check."""
    return any(is_card_number(d) for d in _candidates(text, "card"))


# -- topics ------------------------------------------------------------------------------------

TOPICS: dict[str, tuple[str, ...]] = {  # stems, matched anywhere in the folded text
    "health": ("diabet", "cancer", "hiv", "gravid", "gestant", "pregnan", "depress", "ansiedad",
               "anxiety", "remedio", "medicament", "medication", "doenc", "disease", "alerg",
               "allerg", "cirurgi", "surgery", "tratament", "therapy", "terapia", "asma",
               "asthma", "quimio", "chemo", "hipertens", "pressao alta", "epilep", "autis",
               "deficien", "sindrome", "syndrome", "psiqui", "psych", "insulin", "covid",
               "soropositiv", "lupus", "dialis", "dengue", "tdah", "adhd", "hepatit",
               "tubercul", "transtorno", "disorder", "bipolar", "esquizofren", "alzheimer",
               "parkinson", "fibromialg", "endometrios", "zika", "chikungunya",
               # issue 35: skin, pregnancy and nursing, mobility, implants, chronic pain
               "psoria", "dermatit", "eczem", "vitiligo", "amament", "lactant", "breastfeed",
               "cadeirant", "wheelchair", "marca-passo", "marca passo", "marcapasso",
               "pacemaker", "enxaquec", "migrain", "enxaqueca", "celiac", "menopaus",
               "gestacao", "embaraz", "protese", "prosthe", "quimioterap", "radioterap",
               "convuls", "derrame", "avc", "infart", "cardiac", "cardiopat", "trombos",
               "anemi", "obesi", "bariatric", "hormon", "hemofil", "tireoid", "thyroid"),
    "religion": ("evangelic", "catolic", "catholic", "umband", "candombl", "espirit",
                 "muculman", "muslim", "judeu", "judia", "judaism", "jewish", "igreja", "church",
                 "crente", "ateu", "ateia", "atheist", "budist", "buddhist", "islam"),
    "political": ("petista", "bolsonar", "lulist", "partido", "political party", "esquerdist",
                  "direitist", "comunist", "communist", "conservador", "socialist"),
}
TOPIC_WORDS: dict[str, tuple[str, ...]] = {  # short words: matched whole only
    "health": ("aids", "sida", "dst", "dpoc", "hpv", "pcd"),
}
_TOPIC_WORD = {topic: re.compile(r"\b(" + "|".join(words) + r")\b")
               for topic, words in TOPIC_WORDS.items()}


def sensitive_topic(text: str) -> str | None:
    """The topic ("health", "religion", "political") `text` touches, else None."""
    lowered = fold(text)
    for topic, stems in TOPICS.items():
        if any(stem in lowered for stem in stems):
            return topic
        word = _TOPIC_WORD.get(topic)
        if word is not None and word.search(lowered):
            return topic
    return None


# -- instructions and prices --------------------------------------------------------------------

INSTRUCTIONS: dict[str, tuple[str, ...]] = {  # regular expressions on the folded text
    "instruction": (
        r"ignor", r"desconsider", r"disregard", r"esquec", r"olvid", r"oublie", r"vergiss",
        r"instruc", r"instruction", r"system", r"prompt", r"you must", r"you are",
        r"voce deve", r"voce e ", r"sempre respond", r"always (answer|reply|say)",
        r"never (ask|say)", r"nunca pergunt", r"act as", r"aja como", r"finja", r"pretend",
        r"a partir de agora", r"from now on", r"de agora em diante", r"regra", r"rule",
        r"cancel\w* (todos|tudo|all)", r"assistant", r"assistente", r"tool", r"ferramenta",
        r"execut", r"comando", r"command", r"respond", r"answer in",
        # issue 35: how the agent should treat the customer next time
        r"\bagent", r"\bagente\b", r"\bbot\b", r"should (book|always)",
        r"next time", r"proxima vez", r"without (asking|confirm)",
        r"sem (confirmar|confirmacao|perguntar|consultar|checar|verificar)",
        r"quantos? (\w+ )?(quiser|quer)", r"quantas? (\w+ )?(quiser|quer)",
        r"(pode|deve|podem) (marcar|agendar|cancelar|remarcar)",
        r"\bvip\b", r"prioridade", r"priority", r"(passar|furar) (a )?fila", r"sem limite",
        r"unlimited", r"any number of",
        r"<", r">", r"\{", r"\}", r"\[", r"\]", r"`", r"#", r"\*\*", r":\s*$", r"^\w+:"),
    "price": (
        r"desconto", r"discount", r"gratis", r"de graca", r"free of charge", r"cortesia",
        r"\d+\s*%", r"\bpor ?cento\b", r"percent", r"\boff\b", r"metade do (preco|valor)",
        r"pela metade", r"half (price|off)", r"\bcobr(ar|a|e|em|ando)\b", r"\bcharge",
        r"sem (cobrar|custo|pagar)", r"nao (cobrar|pagar|paga)", r"\bpreco",
        r"\bvalor (especial|diferente|menor|fixo)", r"price", r"\bfree\b", r"r\$\s*\d"),
}
_INSTRUCTION = {kind: re.compile("|".join(f"(?:{p})" for p in patterns))
                for kind, patterns in INSTRUCTIONS.items()}


def instruction_kind(text: str) -> str | None:
    """"price" when `text` changes a price or grants a discount, "instruction" when it reads
    as an instruction to the agent (or a privilege it should grant), else None."""
    lowered = fold(text)
    for kind in ("instruction", "price"):
        if _INSTRUCTION[kind].search(lowered):
            return kind
    return None


def reads_as_instruction(text: str) -> bool:
    """Whether `text` reads as an instruction to the agent or a price change."""
    return instruction_kind(text) is not None
