"""What a CPF or a payment card number is, and how each is written: the one home of the checks
that refuse such numbers in stored notes and facts (agent/tools/content_rules.py) and mask them
in customer messages at intake (intake/masking.py). Pure; the check digits by python-stdnum.
"""

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
