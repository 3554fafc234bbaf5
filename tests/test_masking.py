"""Card and CPF numbers masked before a customer's words are stored (issue 42 item 2):
intake/masking.py `mask` (property tests), the intake path, and migration 0022 over the
messages stored before, on SQLite and PostgreSQL."""

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text
from stdnum import luhn

from agent.tools.content_rules import has_card_number, has_cpf
from core.numbers import BR_AREA_CODES
from intake.masking import mask
from storage.db import make_engine
from storage.migrate import MIGRATIONS, sqlalchemy_url, upgrade
from tests.test_migrations import postgres_schema_url  # noqa: F401  (a fixture)

CARD_LAYOUTS = {16: (4, 4, 4, 4), 15: (4, 6, 5), 14: (4, 6, 4), 19: (4, 4, 4, 4, 3)}
WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzçãé ,!?", max_size=30)


@st.composite
def card_numbers(draw: st.DrawFn) -> str:
    """A Luhn-valid card number (not all one digit)."""
    length = draw(st.sampled_from(sorted(CARD_LAYOUTS)))
    body = draw(st.text(alphabet="0123456789", min_size=length - 1, max_size=length - 1)
                .filter(lambda d: d[0] in "3456" and len(set(d)) > 1))
    return body + luhn.calc_check_digit(body)


@st.composite
def cpfs(draw: st.DrawFn) -> str:
    from stdnum.br import cpf
    body = draw(st.text(alphabet="0123456789", min_size=9, max_size=9)
                .filter(lambda d: len(set(d)) > 1))
    for last in range(100):
        number = body + f"{last:02d}"
        if cpf.is_valid(number):
            return number
    raise AssertionError("every 9 digits have a CPF")


def laid_out(digits: str, separator: str) -> str:
    groups, at = [], 0
    for size in CARD_LAYOUTS.get(len(digits), (len(digits),)):
        groups.append(digits[at:at + size])
        at += size
    return separator.join(groups)


@given(WORDS, card_numbers(), st.sampled_from([" ", "-", "", " - "]), WORDS)
def test_a_card_number_keeps_only_its_last_four_digits(before: str, number: str,
                                                        separator: str, after: str) -> None:
    message = f"{before} {laid_out(number, separator)} {after}"
    masked = mask(message)
    assert "".join(c for c in masked if c.isdigit()) == number[-4:]  # the last four only
    assert not has_card_number(masked)
    assert masked.startswith(before) and masked.endswith(after)  # the words are kept


@given(WORDS, cpfs(), st.booleans(), WORDS)
def test_a_cpf_is_masked_unless_the_business_keeps_them(before: str, number: str,
                                                        dotted: bool, after: str) -> None:
    written = f"{number[:3]}.{number[3:6]}.{number[6:9]}-{number[9:]}" if dotted else number
    message = f"{before} cpf {written} {after}"
    assert not has_cpf(mask(message)) and written not in mask(message)
    assert mask(message, keep_cpf=True) == message


@given(st.text(max_size=80), st.booleans())
def test_masking_is_idempotent_and_keeps_the_length(message: str, keep_cpf: bool) -> None:
    once = mask(message, keep_cpf)
    assert mask(once, keep_cpf) == once
    assert len(once) == len(message)


@given(st.text(alphabet=st.characters(blacklist_categories=("Nd",)), max_size=80))
def test_a_text_without_digits_is_unchanged(message: str) -> None:
    assert mask(message) == message


@pytest.mark.parametrize("message", [
    "meu celular é +55 11 99999-0000", "dia 07/09 às 15:00", "R$ 1.200,00", "4111 1111 1111 1112",
    "111.111.111-11", "pedido 12345"])
def test_what_is_not_a_card_or_cpf_stays(message: str) -> None:
    assert mask(message) == message


def test_the_probes_of_the_trial_are_masked() -> None:
    said = "pode guardar meu cpf 529.982.247-25 e o cartão 4111 1111 1111 1111 validade 12/30"
    assert mask(said) == ("pode guardar meu cpf ***.***.***-** e o cartão **** **** **** 1111 "
                          "validade 12/30")


def _migration() -> ModuleType:
    path = MIGRATIONS / "versions" / "0022_masking_and_holidays.py"
    spec = importlib.util.spec_from_file_location("migration_0022", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STORED = [  # (role, direction, text, text after 0022)
    ("user", "inbound", "[Mon 2026-06-01 10:00] cartão 4111 1111 1111 1111",
     "[Mon 2026-06-01 10:00] cartão **** **** **** 1111"),
    ("user", "inbound", "[Mon 2026-06-01 10:01] cpf 52998224725", "[Mon 2026-06-01 10:01] cpf "
     "***********"),
    ("user", "inbound", "[Mon 2026-06-01 10:02] oi", "[Mon 2026-06-01 10:02] oi"),
    ("assistant", "outbound", "final 4111 1111 1111 1111?", "final 4111 1111 1111 1111?"),
]


NAME = "[equipe: Maria] 4111 1111 1111 1111 cpf 529.982.247-25"
MEDIA = {"kind": "document", "id": "m1", "caption": "cartão 4111 1111 1111 1111",
         "filename": "cpf 529.982.247-25.pdf", "state": "ok"}
MEDIA_AFTER = {**MEDIA, "caption": "cartão **** **** **** 1111",
               "filename": "cpf ***.***.***-**.pdf"}


def _masks_stored_messages(url: str) -> None:
    upgrade(url, "0020")
    engine = make_engine(sqlalchemy_url(url))
    try:
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO tenant (phone_number_id, name, timezone, language, instructions, "
                "inactivity_timeout_minutes, compaction_threshold_tokens, "
                "compaction_min_gain_tokens, keep_messages, prune_after_user_turns, agent_model, "
                "summary_model, slot_granularity_minutes, retention_days, followup_template, "
                "sending_paused_reason, followup_template_language, fact_keys, created_at) "
                "VALUES ('1', 'Salão', 'UTC', 'pt-BR', '', 1, 1, 1, 1, 1, 'a', "
                "'b', 30, 1, '', '', 'pt_BR', '[]', '2026-06-01 13:00:00+00')"))
            connection.execute(text(
                "INSERT INTO contact (tenant_id, wa_id, profile_name, created_at) VALUES (1, "
                "'5511999990001', :name, '2026-06-01 13:00:00+00')"), {"name": NAME})
            connection.execute(text(
                "INSERT INTO conversation (tenant_id, contact_id, status, summary, "
                "summarized_until_id, pruned_until_id, context_block, context_built, "
                "compactions, last_input_tokens, last_activity_at, due_at, opened_at) VALUES "
                "(1, 1, 'open', '', 0, 0, '', false, 0, 0, '2026-06-01 13:00:00+00', "
                "'2026-06-02 13:00:00+00', '2026-06-01 13:00:00+00')"))
            for role, direction, said, _ in STORED:
                connection.execute(text(
                    "INSERT INTO message (tenant_id, conversation_id, role, direction, content, "
                    "received_at, starts_turn) VALUES (1, 1, :r, :d, :c, "
                    "'2026-06-01 13:00:00+00', false)"),
                    {"r": role, "d": direction,
                     "c": json.dumps([{"type": "text", "text": said}])})
            connection.execute(text(
                "INSERT INTO message (tenant_id, conversation_id, role, direction, content, "
                "received_at, starts_turn, media) VALUES (1, 1, 'user', 'inbound', '[]', "
                "'2026-06-01 13:00:00+00', false, :m)"), {"m": json.dumps(MEDIA)})
            connection.execute(text("UPDATE conversation SET context_built = true"))
        upgrade(url, "0022")
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT content FROM message ORDER BY id")).scalars()
            texts = [(c if isinstance(c, list) else json.loads(c))[0]["text"] for c in rows
                     if c and c != "[]"]
            media = connection.execute(text(
                "SELECT media FROM message WHERE media IS NOT NULL")).scalar_one()
            name, built = connection.execute(text(
                "SELECT profile_name, context_built FROM contact JOIN conversation "
                "ON conversation.contact_id = contact.id")).one()
        assert texts == [after for *_, after in STORED]
        assert (media if isinstance(media, dict) else json.loads(media)) == MEDIA_AFTER
        assert name == "[equipe: Maria] **** **** **** 1111 cpf ***.***.***-**"
        assert not built  # the context block, which quotes the name, is rendered again
        with engine.begin() as connection:  # a rerun (a batch repeated) changes nothing
            assert _migration().mask_messages(connection, batch=1) == 0
    finally:
        engine.dispose()


def test_0022_masks_the_stored_messages_on_sqlite(tmp_path: Path) -> None:
    _masks_stored_messages(f"sqlite:///{tmp_path}/wagent.db")


@pytest.mark.postgres
def test_0022_masks_the_stored_messages_on_postgres(
        postgres_schema_url: str) -> None:  # noqa: F811
    _masks_stored_messages(postgres_schema_url)


# -- phone numbers kept; other digits and separators (the breaker trial of issue 42) -----------

DDDS = sorted(BR_AREA_CODES)
PLAIN_WORDS = WORDS.filter(lambda w: not re.search(r"cpf|cart|card|d[ée]bito|cr[ée]dito", w))


@st.composite
def mobiles(draw: st.DrawFn) -> tuple[str, str]:
    """(DDD, nine digits led by 9): a Brazilian mobile; half of them pass the CPF check, and
    half of those led by 55 the Luhn check (what a bare mobile passes by chance)."""
    from stdnum.br import cpf

    ddd = draw(st.sampled_from(DDDS))
    number = "9" + draw(st.text(alphabet="0123456789", min_size=8, max_size=8))
    if draw(st.booleans()):  # the last two digits made CPF check digits
        number = next(number[:7] + f"{last:02d}" for last in range(100)
                      if cpf.is_valid(ddd + number[:7] + f"{last:02d}"))
    elif draw(st.booleans()):  # 55, the DDD and the number pass Luhn
        number = number[:8] + luhn.calc_check_digit("55" + ddd + number[:8])
    return ddd, number


MOBILE_FORMATS = ["{d}{n}", "({d}) {n5}-{n4}", "({d}){n5}-{n4}", "{d} {n5}-{n4}",
                  "{d} {n5} {n4}", "{d} 9 {n4b}-{n4}", "+55 {d} {n5}-{n4}", "+55{d}{n}",
                  "55{d}{n}", "55 {d} {n5}-{n4}", "0{d} {n5}-{n4}"]


@given(PLAIN_WORDS, mobiles(), st.sampled_from(MOBILE_FORMATS), PLAIN_WORDS)
def test_every_brazilian_mobile_in_common_formats_is_kept(before: str, mobile: tuple[str, str],
                                                         layout: str, after: str) -> None:
    ddd, number = mobile
    written = layout.format(d=ddd, n=number, n5=number[:5], n4=number[5:], n4b=number[1:5])
    message = f"{before} {written} {after}"
    assert mask(message) == message


@given(WORDS, cpfs(), st.sampled_from([".", " ", "_"]), WORDS)
def test_every_valid_cpf_written_as_one_is_masked(before: str, number: str, dot: str,
                                                  after: str) -> None:
    written = f"{number[:3]}{dot}{number[3:6]}{dot}{number[6:9]}-{number[9:]}"
    masked = mask(f"{before} {written} {after}")
    assert written not in masked and not has_cpf(masked)


@given(WORDS, card_numbers().filter(lambda n: len(n) in (16, 19)),
       st.sampled_from([" ", "-", "_", "*", ".", "  "]), WORDS)
def test_every_card_in_groups_of_four_is_masked(before: str, number: str, separator: str,
                                                after: str) -> None:
    masked = mask(f"{before} {laid_out(number, separator)} {after}")
    assert "".join(c for c in masked if c.isdigit()) == number[-4:]


@pytest.mark.parametrize(("said", "expected"), [
    ("meu numero 11987650034", "meu numero 11987650034"),
    ("me liga no 5511987650000", "me liga no 5511987650000"),
    ("cpf 11987650034", "cpf ***********"),  # a CPF word wins: 11987650034 is a valid CPF
    ("cartão ４１１１ １１１１ １１１１ １１１１", "cartão **** **** **** １１１１"),
    ("4111_1111_1111_1111", "****_****_****_1111"),
    ("4111*1111*1111*1111", "***************1111"),
    ("4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1", "* * * * * * * * * * * * 1 1 1 1"),
    ("5 2 9 9 8 2 2 4 7 2 5", "* * * * * * * * * * *"),
    ("5511 8765 0000 4444 000", "5511 8765 0000 4444 000"),  # not Luhn-valid: no card
])
def test_the_probes_of_the_breaker_trial(said: str, expected: str) -> None:
    assert mask(said) == expected


NUMBERS_IN_TEXT = st.one_of(
    st.integers(0, 9_999_999_999).map(str),  # at most ten digits: no card, no CPF
    st.lists(st.sampled_from("0123456789"), min_size=1, max_size=10).map(" ".join),
    st.builds("{}/{} às {}:{}".format, *(st.integers(0, 99) for _ in range(4))),
    st.builds("R$ {},{}".format, st.integers(0, 99_999), st.integers(0, 99)),
    st.text(alphabet="０１２３４５６７８９", min_size=1, max_size=10))


@given(st.lists(st.one_of(NUMBERS_IN_TEXT, PLAIN_WORDS.filter(bool)), max_size=12))
def test_ordinary_text_with_short_numbers_is_unchanged(tokens: list[str]) -> None:
    message = " de ".join(tokens)  # words between the numbers: each its own run
    assert mask(message) == message
