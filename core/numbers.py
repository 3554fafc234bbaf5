"""What a CPF, a payment card number and a Brazilian phone number are, and how each is written:
the one home of the checks that refuse such numbers in stored notes and facts
(agent/tools/content_rules.py) and mask them in customer messages at intake
(intake/masking.py). Pure; the check digits by python-stdnum. Digits are ASCII: a caller
folds other Unicode decimal digits first (`ascii_digits`).
"""

import unicodedata

from stdnum import luhn
from stdnum.br import cpf

# the digit groups of a written number, in order (a group alone: its whole length)
NUMBER_LAYOUTS: dict[str, tuple[tuple[int, ...], ...]] = {
    "cpf": ((11,), (9, 2), (3, 3, 3, 2), (3, 3, 5), (6, 5)),
    "card": tuple((n,) for n in range(13, 20)) + (
        (4, 4, 4, 4), (4, 4, 4, 4, 3), (4, 4, 4, 4, 2), (4, 4, 4, 4, 4, 3), (4, 6, 5),
        (4, 6, 4), (4, 4, 4, 1), (4, 4, 4, 2), (4, 4, 4, 3), (4, 4, 5), (6, 13), (8, 8)),
}
LENGTHS = {"cpf": range(11, 12), "card": range(13, 20)}


def is_cpf(digits: str) -> bool:
    """11 digits whose two CPF check digits match, not all one digit."""
    return len(digits) in LENGTHS["cpf"] and len(set(digits)) > 1 and cpf.is_valid(digits)


def is_card_number(digits: str) -> bool:
    """13 to 19 digits that pass the Luhn check, not all one digit."""
    return len(digits) in LENGTHS["card"] and len(set(digits)) > 1 and luhn.is_valid(digits)


IS_NUMBER = {"cpf": is_cpf, "card": is_card_number}


# Brazil's area codes (DDD), ANATEL's numbering plan (Plano Geral de Códigos Nacionais)
BR_AREA_CODES = frozenset(
    "11 12 13 14 15 16 17 18 19 21 22 24 27 28 31 32 33 34 35 37 38 41 42 43 44 45 46 47 48 "
    "49 51 53 54 55 61 62 63 64 65 66 67 68 69 71 73 74 75 77 79 81 82 83 84 85 86 87 88 89 "
    "91 92 93 94 95 96 97 98 99".split())
BR_COUNTRY_CODE = "55"


def ascii_digits(digits: str) -> str:
    """Unicode decimal digits (full-width "４", Arabic-Indic...) as ASCII ("4")."""
    return "".join(str(unicodedata.decimal(c)) for c in digits)


def is_br_mobile(digits: str) -> bool:
    """11 digits shaped like a Brazilian mobile: a DDD, then 9 and eight digits (ANATEL:
    every mobile number has had nine digits, led by 9, since 2016)."""
    return len(digits) == 11 and digits[:2] in BR_AREA_CODES and digits[2] == "9"


def phone_variants(digits: str) -> list[str]:
    """The other spelling of a Brazilian mobile number: with and without the ninth digit
    (55 + area code + 9 + 8 digits ↔ 55 + area code + 8 digits; WhatsApp's wa_id often lacks
    it). [] for other numbers."""
    if digits.startswith("55") and len(digits) == 13 and digits[4] == "9":
        return [digits[:4] + digits[5:]]
    if digits.startswith("55") and len(digits) == 12 and digits[4] in "6789":
        return [digits[:4] + "9" + digits[4:]]
    return []
