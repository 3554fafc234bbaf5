"""Dead letters: each records its tenant and the identifiers it names when it is written, so
erasure finds them by index (never by reading every body), and they expire after
DEAD_LETTER_RETENTION_DAYS. SQLite and PostgreSQL.
"""

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, inspect, text
from sqlmodel import select

from intake import ingest
from storage import dead_letters
from storage.db import session_scope
from storage.models import DeadLetter, DeadLetterRef, Tenant
from storage.rights import find_contact, forget_contact
from storage.tenants import upsert_tenant
from tests import database_faults
from tests.conftest import START
from tests.factories import ANA, BRUNO, PHONE_NUMBER_ID, TENANT, text_body

OTHER_NUMBER = "109876543210555"  # another tenant
NOT_ONBOARDED = "100000000000001"  # a number being onboarded: no tenant yet
ANA_PHONE, ANA_USER = ANA
SECRET = "meu exame deu positivo, cpf 529.982.247-25"


@pytest.fixture
def tenants(engine: Engine) -> Iterator[Engine]:
    with session_scope(engine) as session:
        upsert_tenant(session, TENANT, now=START)
        upsert_tenant(session, {**TENANT, "phone_number_id": OTHER_NUMBER, "name": "Oficina"},
                      now=START)
    yield engine


def _ingest(engine: Engine, body: dict[str, Any] | bytes) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    ingest.ingest_body(engine, raw, now=START)


def _message(text_: str, n: int, **kwargs: Any) -> dict[str, Any]:
    return text_body(text_, n, sent_at=START, **kwargs)


def _item(body: dict[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = body["entry"][0]["changes"][0]["value"]["messages"][0]
    return item


def _letters(engine: Engine) -> list[tuple[int | None, set[tuple[str, str]], str]]:
    with session_scope(engine) as session:
        letters = session.exec(select(DeadLetter).order_by(DeadLetter.id)).all()
        refs = session.exec(select(DeadLetterRef)).all()
        return [(letter.tenant_id, {(r.name, r.value) for r in refs
                                    if r.dead_letter_id == letter.id}, letter.reason)
                for letter in letters]


def _ana_dead_letters(engine: Engine) -> None:
    """The issue's items dead-lettered alone, each naming Ana: a message without an id, a
    failed update, a message to a number not onboarded yet, a status without an id, and a body
    cut short (it does not parse)."""
    no_id = _message(SECRET, 1)
    del _item(no_id)["id"]
    _ingest(engine, no_id)
    with database_faults.failing(engine, database_faults.inserts_mentioning("message", "000002"),
                                 error=database_faults.refused_row):
        _ingest(engine, _message(SECRET, 2))
    _ingest(engine, _message(SECRET, 3, phone_number_id=NOT_ONBOARDED))
    status = _message("x", 4)
    value = status["entry"][0]["changes"][0]["value"]
    value["statuses"] = [{"status": "delivered", "recipient_id": ANA_PHONE,
                          "recipient_user_id": ANA_USER}]
    del value["messages"], value["contacts"]
    _ingest(engine, status)
    _ingest(engine, json.dumps(_message(SECRET, 5)).encode()[:-40])


def test_each_dead_letter_records_its_tenant_and_the_identifiers_it_names(
        tenants: Engine) -> None:
    _ana_dead_letters(tenants)
    with session_scope(tenants) as session:
        salon = session.exec(select(Tenant.id).where(
            Tenant.phone_number_id == PHONE_NUMBER_ID)).one()
    ana = {("wa_id", ANA_PHONE), ("user_id", ANA_USER)}
    letters = _letters(tenants)
    assert [(tenant, refs) for tenant, refs, _ in letters] == [
        (salon, {("phone_number_id", PHONE_NUMBER_ID), *ana}),  # no id: the envelope's number
        (salon, {("phone_number_id", PHONE_NUMBER_ID), *ana}),  # a failed update
        (None, {("phone_number_id", NOT_ONBOARDED), *ana}),  # no tenant yet, the number kept
        (salon, {("phone_number_id", PHONE_NUMBER_ID), *ana}),  # a status: its recipient ids
        (salon, {("phone_number_id", PHONE_NUMBER_ID), *ana}),  # cut short: read in the bytes
    ]
    assert "unparsable body" in letters[4][2] and "without id" in letters[0][2]


def _tables_naming(engine: Engine, *needles: str) -> set[str]:
    found = set()
    with engine.connect() as connection:
        for table in inspect(connection).get_table_names():
            for row in connection.execute(text(f'SELECT * FROM "{table}"')):
                cells = [v.decode(errors="ignore") if isinstance(v, bytes) else str(v)
                         for v in row]
                if any(needle in cell for needle in needles for cell in cells):
                    found.add(table)
    return found


def test_forget_erases_every_dead_letter_naming_the_contact_and_only_those(
        tenants: Engine) -> None:
    """After `wagent contact forget`, neither the phone number nor the text is left in any
    dead letter of this tenant, of a number not onboarded yet (no tenant owns it), or naming
    no number; another tenant's dead letter naming the same person, and other customers'
    ones, stay."""
    _ana_dead_letters(tenants)
    _ingest(tenants, _message("olá", 6))  # Ana's contact, stored
    other_tenant = _message(SECRET, 7, phone_number_id=OTHER_NUMBER)
    del _item(other_tenant)["id"]
    _ingest(tenants, other_tenant)
    bruno = _message("oi", 8, who=BRUNO)
    del _item(bruno)["id"]
    _ingest(tenants, bruno)
    with session_scope(tenants) as session:
        dead_letters.add_dead_letter(session, body=json.dumps({"from": ANA_PHONE}).encode(),
                                     reason="no envelope at all", now=START)
        contact = find_contact(session, 1, ANA_PHONE)
        assert contact is not None
        counts = forget_contact(session, contact, now=START)
    assert counts["dead_letters"] == 6
    remaining = _letters(tenants)
    assert [refs for _, refs, _ in remaining] == [
        {("phone_number_id", OTHER_NUMBER), ("wa_id", ANA_PHONE), ("user_id", ANA_USER)},
        {("phone_number_id", PHONE_NUMBER_ID), ("wa_id", BRUNO[0]), ("user_id", BRUNO[1])}]
    assert _tables_naming(tenants, ANA_PHONE, SECRET) == {"deadletter", "deadletter_ref"}, \
        "only the other tenant's dead letter still names her"
    with session_scope(tenants) as session:
        assert session.exec(select(DeadLetterRef).where(
            DeadLetterRef.value == PHONE_NUMBER_ID)).all()  # Bruno's: its refs stayed


def test_erasure_never_reads_the_dead_letters_bodies(tenants: Engine) -> None:
    """Indexed statements only: no dead letter's body is read (the old erasure loaded every
    dead letter of every tenant into memory)."""
    with session_scope(tenants) as session:
        for n in range(50):
            dead_letters.add_dead_letter(
                session, body=json.dumps(_message("oi", n, who=(f"55119{n:08d}", f"BR.{n}")))
                .encode(), reason="x", now=START, phone_number_id=PHONE_NUMBER_ID)
    _ingest(tenants, _message("olá", 99))
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(tenants, "before_cursor_execute", record)
    try:
        with session_scope(tenants) as session:
            contact = find_contact(session, 1, ANA_PHONE)
            assert contact is not None
            forget_contact(session, contact, now=START)
    finally:
        event.remove(tenants, "before_cursor_execute", record)
    touching = [s for s in statements if "deadletter" in s]
    assert touching and all(s.lstrip().upper().startswith("DELETE") for s in touching), touching
    assert len(_letters(tenants)) == 50


def test_dead_letters_expire_after_the_retention_in_batches(
        tenants: Engine) -> None:
    from core.settings import Settings
    from workers.maintenance import purge_all

    default = Settings().dead_letter_retention_days
    assert default == 30

    with session_scope(tenants) as session:
        for age_days in (40, 35, 31, 31, 30, 29, 1, 0, 31):
            dead_letters.add_dead_letter(session, body=json.dumps({"from": ANA_PHONE}).encode(),
                                         reason=f"{age_days} days old",
                                         now=START - timedelta(days=age_days, seconds=1))
    assert purge_all(tenants, now=START, dead_letter_retention_days=default,
                     dead_letter_batch=3) == 6
    assert sorted(reason for _, _, reason in _letters(tenants)) == [
        "0 days old", "1 days old", "29 days old"]
    with session_scope(tenants) as session:
        assert len(session.exec(select(DeadLetterRef)).all()) == 3, "refs go with them"
    settings = Settings.from_env({"DEAD_LETTER_RETENTION_DAYS": "1"}, require=False)
    assert purge_all(tenants, now=START,
                     dead_letter_retention_days=settings.dead_letter_retention_days) == 2


def test_identifiers_are_read_from_any_depth_and_from_bytes_that_do_not_parse() -> None:
    deep = b'{"a": ' * 5000 + b'{"from": "5511999990009"}' + b"}" * 5000
    assert dead_letters.identifiers(deep) == {("wa_id", "5511999990009")}
    assert dead_letters.identifiers(b'{"entry": [{"from": 5511999990001, "user_id": "BR.1"') \
        == {("wa_id", "5511999990001"), ("user_id", "BR.1")}
    assert dead_letters.identifiers(json.dumps([{"contacts": [{"wa_id": "1"}]}, {
        "system": {"user_id": "BR.2"}}, {"phone_number_id": "9"}]).encode()) == {
        ("wa_id", "1"), ("user_id", "BR.2"), ("phone_number_id", "9")}
    assert dead_letters.identifiers(b"\xff\xfe not json") == set()


def _echo_body() -> dict[str, Any]:
    """An owner's reply from the WhatsApp Business app, to Ana (tests/test_staff.py's echo:
    the shared fixture smb_message_echo_owner_reply.json)."""
    from tests.test_staff import echo
    return echo(to=ANA)


# issue 35 item 5: every field of dead_letters.REF_NAMES (and any *user_id), each alone in a
# dead-lettered body: (where in a body, the field, the value naming Ana)
PERSON_FIELDS = [
    ("messages", "from", ANA_PHONE), ("messages", "from_user_id", ANA_USER),
    ("message_echoes", "to", ANA_PHONE), ("message_echoes", "to_user_id", ANA_USER),
    ("contacts", "wa_id", ANA_PHONE), ("contacts", "user_id", ANA_USER),
    ("statuses", "recipient_id", ANA_PHONE), ("statuses", "recipient_user_id", ANA_USER),
    ("system", "wa_id", ANA_PHONE), ("system", "user_id", ANA_USER),
    ("phones", "phone", "+" + ANA_PHONE[:2] + " (" + ANA_PHONE[2:4] + ") " + ANA_PHONE[4:9]
     + "-" + ANA_PHONE[9:]),
    ("phones", "wa_id", ANA_PHONE), ("referral", "parent_user_id", ANA_USER),
]


def test_the_person_fields_are_the_ones_listed() -> None:
    listed = {key for key, name in dead_letters.REF_NAMES.items() if name != "phone_number_id"}
    assert listed <= {field for _, field, _ in PERSON_FIELDS}


@pytest.mark.parametrize(("where", "field", "value"), PERSON_FIELDS)
def test_forget_erases_a_dead_letter_naming_the_contact_in_any_person_field(
        tenants: Engine, where: str, field: str, value: str) -> None:
    _ingest(tenants, _message("olá", 1))  # Ana's contact, stored
    item = {"id": "wamid.x", field: value, "text": {"body": SECRET}}
    body = {"entry": [{"changes": [{"value": {
        "metadata": {"phone_number_id": PHONE_NUMBER_ID}, where: [item]}}]}]}
    with session_scope(tenants) as session:
        dead_letters.add_dead_letter(session, body=json.dumps(body).encode(),
                                     reason="a bug while storing", now=START)
        contact = find_contact(session, 1, ANA_PHONE)
        assert contact is not None and contact.user_id == ANA_USER
        assert forget_contact(session, contact, now=START)["dead_letters"] == 1
    assert _tables_naming(tenants, SECRET) == set()


def test_forget_erases_a_dead_lettered_owner_echo(tenants: Engine) -> None:
    """The shared fixture as it comes: the owner's text, to Ana, dead-lettered whole."""
    _ingest(tenants, _message("olá", 1))
    body = json.dumps(_echo_body()).encode()
    with session_scope(tenants) as session:
        dead_letters.add_dead_letter(session, body=body, reason="a bug while storing",
                                     now=START, phone_number_id=PHONE_NUMBER_ID)
        contact = find_contact(session, 1, ANA_PHONE)
        assert contact is not None
        assert forget_contact(session, contact, now=START)["dead_letters"] == 1
    assert _tables_naming(tenants, ANA_PHONE, ANA_USER, "Consigo te encaixar") == set()
