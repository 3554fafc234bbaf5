"""`wagent tenant|catalog|facts|conversations|appointments`: the admin operations from a shell,
and the bundled scenario whose tenant is created by the CLI from a YAML file."""

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from cli.main import _parser, handler, main
from replay.runner import run_scenario_file
from storage.db import make_engine, session_scope
from storage.models import Appointment, Contact, ContactFact, Conversation, Message, Service

SCENARIO = Path(__file__).parent.parent / "replay" / "scenarios" / "clinic_cli_setup.json"
YAML_TENANT = SCENARIO.parent / "tenants" / "clinica_exemplo.yaml"
PNID = "109876543210555"


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path}/wagent.db"
    monkeypatch.setenv("DATABASE_URL", url)
    assert main(["db", "upgrade"]) == 0
    return url


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    capsys.readouterr()
    status = main(list(args))
    captured = capsys.readouterr()
    out = captured.out.strip()
    try:
        parsed = json.loads(out) if out.startswith(("{", "[")) else out
    except json.JSONDecodeError:
        parsed = out
    return status, parsed, captured.err


def test_every_admin_command_explains_itself() -> None:
    parser = _parser()
    for path in (["tenant", "update"], ["tenant", "token"], ["tenant", "show"],
                 ["catalog", "hours"], ["catalog", "exception"], ["catalog", "set"],
                 ["facts", "edit"], ["conversations", "show"], ["appointments", "cancel"]):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args([*path, "--help"])
        assert exit_info.value.code == 0


def _commands(parser: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every runnable command of the parser: (its words, its `run` default)."""
    found = []
    for action in parser._actions:  # argparse keeps subparsers only here
        for name, sub in getattr(action, "choices", None).items() \
                if action.__class__.__name__ == "_SubParsersAction" else ():
            run = sub.get_default("run")
            found += [((*path, name), run)] if run is not None else _commands(sub, (*path, name))
    return found


def test_every_command_names_a_handler_that_exists() -> None:
    parser = _parser()
    commands = _commands(parser)
    top = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert {words[0] for words, _ in commands} == set(top.choices)
    assert {("tenant", "update"), ("catalog", "remove-exception"), ("web",)} <= set(
        dict(commands))
    for words, name in commands:
        assert isinstance(name, str) and ":" in name, words
        assert callable(handler(name)), words


def test_help_imports_no_database_http_or_sdk_code() -> None:
    """`wagent --help` builds every parser from light modules; the handlers' modules are
    imported only when their command runs (cli/main.py)."""
    code = ("import sys; from cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('aiohttp', 'anthropic', 'rq', 'sqlmodel', 'sqlalchemy', "
            "'redis', 'pydantic', 'operations', 'storage', 'workers', 'bot') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True, cwd=Path(__file__).parent.parent)
    assert done.stdout.splitlines()[-1] == "[]"


def test_tenant_from_yaml_then_update_show_and_token(database: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "tenant", "create", str(YAML_TENANT))
    assert status == 0 and "Clínica Exemplo" in out
    status, shown, _ = run(capsys, "tenant", "show", PNID)
    assert status == 0 and shown["inactivity_timeout_minutes"] == 120
    assert shown["counts"]["contacts"] == 0
    status, updated, _ = run(capsys, "tenant", "update", PNID, "--set",
                             "inactivity_timeout_minutes=45", "--set", "name=Clínica Nova")
    assert status == 0 and sorted(updated.splitlines()) == [  # what changed, one line a key
        "inactivity_timeout_minutes: 120 → 45", 'name: "Clínica Exemplo" → "Clínica Nova"']
    status, shown, _ = run(capsys, "tenant", "show", PNID)
    assert (shown["inactivity_timeout_minutes"], shown["name"]) == (45, "Clínica Nova")
    status, updated, _ = run(capsys, "tenant", "update", PNID, "--set", "name=Clínica Nova",
                             "--set", "instructions=" + "Seja breve. " * 20)
    assert status == 0 and updated.startswith('instructions: "') and "\n" not in updated
    assert updated.endswith("…") and len(updated.split(" → ")[1]) == 80
    assert run(capsys, "tenant", "update", PNID, "--set", "name=Clínica Nova")[1] == \
        "nothing changed: the settings already had these values"
    status, _, err = run(capsys, "tenant", "update", PNID, "--set", "keep_messages=0",
                         "--set", "timezone=Mars/Base")
    assert status == 2 and "keep_messages" in err and "timezone" in err
    assert run(capsys, "tenant", "update", "000", "--set", "name=X")[0] == 2
    status, token, _ = run(capsys, "tenant", "token", PNID, "--label", "dona")
    assert status == 0 and token["token"].startswith("wat_")
    assert run(capsys, "tenant", "revoke-token", PNID, str(token["id"]))[0] == 0
    status, tenants, _ = run(capsys, "tenant", "list")
    assert [t["phone_number_id"] for t in tenants] == [PNID]


def test_tenant_create_names_every_problem_of_a_bad_file(database: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("phone_number_id: '1'\nname: X\nhours: {mon: ['18:00-09:00']}\n"
                   "services: [{code: a, duration_minutes: 0}]\n")
    status, _, err = run(capsys, "tenant", "create", str(bad))
    assert status == 2 and "hours.mon" in err and "duration_minutes" in err
    bad.write_text("phone_number_id: [unclosed\n")
    status, _, err = run(capsys, "tenant", "create", str(bad))
    assert status == 2 and "YAML" in err


def test_catalogue_commands(database: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "tenant", "create", str(YAML_TENANT))[0] == 0
    assert run(capsys, "facts", "review", PNID) == (0, "no facts waiting for review", ""), \
        "an empty review queue says so instead of printing nothing"
    assert run(capsys, "catalog", "service", PNID, "retorno", "--name", "Retorno",
               "--duration", "20")[0] == 0
    status, _, err = run(capsys, "catalog", "professional", PNID, "dr_rui", "--services",
                         "retorno,cirurgia")
    assert status == 2 and "cirurgia" in err
    assert run(capsys, "catalog", "professional", PNID, "dr_rui", "--name", "Dr. Rui",
               "--services", "retorno")[0] == 0
    assert run(capsys, "catalog", "hours", PNID, "tue=14:00-18:00",
               "wed=08:00-12:00,13:00-17:00")[0] == 0
    assert run(capsys, "catalog", "hours", PNID, "wed=17:00-08:00")[0] == 2
    status, _, err = run(capsys, "catalog", "hours", PNID, "mon=09:00-25:00")
    assert status == 2 and "'09:00-25:00': use HH:MM-HH:MM" in err and "[01]" not in err, \
        "the owner reads what the hours must look like, not a regular expression"
    status, _, err = run(capsys, "catalog", "service", PNID, "corte feminino", "--name", "Corte",
                         "--duration", "30")
    assert status == 2 and "starting with a letter or digit" in err and "^[" not in err
    status, _, err = run(capsys, "catalog", "hours", PNID, "mon=09:00-12:00", "mon=13:00-18:00")
    assert status == 2 and "twice" in err
    assert run(capsys, "catalog", "professional", PNID, "dr_rui", "--name", "Dr. Rui Lima")[0] == 0
    status, pros, _ = run(capsys, "catalog", "show", PNID)
    assert {"code": "dr_rui", "name": "Dr. Rui Lima", "services": ["retorno"]} in \
        pros["professionals"], "--name alone keeps the services"
    assert run(capsys, "catalog", "service", PNID, "retorno", "--duration", "25")[0] == 0
    assert {"code": "retorno", "name": "Retorno", "duration_minutes": 25, "price_cents": None,
            "price_from": False, "description": ""} in \
        run(capsys, "catalog", "show", PNID)[1]["services"], "--duration alone keeps the name"
    assert run(capsys, "catalog", "service", PNID, "retorno", "--price", "R$ 1.200,50",
               "--price-from", "--description", "Revisão  do tratamento")[0] == 0
    assert run(capsys, "catalog", "service", PNID, "retorno", "--duration", "30")[0] == 0
    assert {"code": "retorno", "name": "Retorno", "duration_minutes": 30, "price_cents": 120050,
            "price_from": True, "description": "Revisão do tratamento"} in \
        run(capsys, "catalog", "show", PNID)[1]["services"], "the price is kept when left out"
    status, _, err = run(capsys, "catalog", "service", PNID, "retorno", "--price", "80,5x")
    assert status == 2 and "is not an amount" in err
    assert run(capsys, "catalog", "service", PNID, "retorno", "--price", "")[0] == 0
    assert [(s["price_cents"], s["price_from"]) for s in run(capsys, "catalog", "show", PNID)[1]
            ["services"] if s["code"] == "retorno"] == [(None, False)], "cleared, no minimum"
    status, _, err = run(capsys, "catalog", "service", PNID, "novo", "--name", "Novo")
    assert status == 2 and "duration_minutes" in err
    assert run(capsys, "catalog", "exception", PNID, "2026-06-04", "--note", "feriado")[0] == 0
    assert run(capsys, "catalog", "exception", PNID, "2026-06-10", "--hours",
               "08:00-10:00")[0] == 0
    status, catalogue, _ = run(capsys, "catalog", "show", PNID)
    assert [s["code"] for s in catalogue["services"]] == ["consulta", "retorno"]
    assert catalogue["hours"] == {"tue": ["14:00-18:00"],
                                  "wed": ["08:00-12:00", "13:00-17:00"]}
    assert catalogue["hours_exceptions"] == [
        {"day": "2026-06-04", "hours": [], "note": "feriado"},
        {"day": "2026-06-10", "hours": ["08:00-10:00"], "note": ""}]
    assert run(capsys, "catalog", "remove-exception", PNID, "2026-06-04")[0] == 0
    assert run(capsys, "catalog", "remove-exception", PNID, "2026-06-04")[0] == 2
    assert run(capsys, "catalog", "remove-professional", PNID, "dr_rui")[0] == 0
    assert run(capsys, "catalog", "remove-service", PNID, "retorno")[0] == 0
    assert run(capsys, "catalog", "remove-service", PNID, "retorno")[0] == 2


def test_conversations_appointments_and_fact_edit(database: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "tenant", "create", str(YAML_TENANT))[0] == 0
    now = datetime(2026, 6, 1, 13, tzinfo=UTC)
    with session_scope(make_engine(database)) as session:
        contact = Contact(tenant_id=1, wa_id="5511999990003", created_at=now)
        session.add(contact)
        session.flush()
        conversation = Conversation(tenant_id=1, contact_id=contact.id or 0,
                                    last_activity_at=now, due_at=now, opened_at=now)
        session.add(conversation)
        session.flush()
        message = Message(tenant_id=1, conversation_id=conversation.id or 0, role="user",
                          direction="inbound", content=[{"type": "text", "text": "sou a Carla"}],
                          received_at=now)
        session.add(message)
        session.flush()
        service = session.exec(select(Service)).one()
        session.add(Appointment(tenant_id=1, contact_id=contact.id or 0,
                                service_id=service.id or 0, professional_id=1,
                                start_at=datetime(2027, 6, 1, 17, 30, tzinfo=UTC),  # upcoming
                                end_at=datetime(2027, 6, 1, 18, tzinfo=UTC), created_at=now))
        session.add(ContactFact(tenant_id=1, contact_id=contact.id or 0, key="preferred_name",
                                value="Carlinha", state="suggested",
                                source_message_id=message.id, created_at=now))
    status, listed, _ = run(capsys, "conversations", "list", PNID, "--contact", "5511999990003")
    assert status == 0 and listed[0]["contact"]["wa_id"] == "5511999990003"
    status, one, _ = run(capsys, "conversations", "show", PNID, str(listed[0]["id"]))
    assert one["messages"][0]["content"][0]["text"] == "sou a Carla"
    status, appointments, _ = run(capsys, "appointments", "list", PNID, "--from", "2027-06-01",
                                  "--to", "2027-06-01")
    assert [(a["start"], a["status"]) for a in appointments] == [("2027-06-01T14:30", "booked")]
    number = str(appointments[0]["booking_number"])  # the customer's number, not the row id
    assert run(capsys, "appointments", "cancel", PNID, number)[0] == 0
    assert run(capsys, "appointments", "cancel", PNID, number)[0] == 2
    status, edited, _ = run(capsys, "facts", "edit", PNID, "1", "Carla", "--reason",
                            "ela prefere o nome")
    assert status == 0 and (edited["value"], edited["state"]) == ("Carla", "confirmed")
    status, _, err = run(capsys, "facts", "edit", PNID, "2", "CPF 529.982.247-25",
                         "--reason", "x")
    assert status == 2 and "CPF" in err


def test_the_cli_scenario_books_in_its_hours_and_the_new_timeout_closes_the_session(
        database_url: str | None, redis_url: str | None) -> None:
    result = run_scenario_file(SCENARIO, database_url=database_url or "",
                               redis_url=redis_url or "", cli=main)
    assert result.passed, result.failures
    assert result.tool_errors == 1, "the booking outside the file's hours was refused"


def test_bad_ids_and_text_are_clear_errors_not_tracebacks(database: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    assert run(capsys, "tenant", "create", str(YAML_TENANT))[0] == 0
    with pytest.raises(SystemExit) as exit_info:
        main(["conversations", "show", PNID, "99999999999"])
    assert exit_info.value.code == 2 and "not an id" in capsys.readouterr().err
    status, _, err = run(capsys, "tenant", "update", PNID, "--set", 'instructions="a\\u0000b"')
    assert status == 2 and "NUL" in err
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 3000 + "]" * 3000 + "\n")
    status, _, err = run(capsys, "tenant", "create", str(deep))
    assert status == 2 and "cannot create tenant" in err


def test_facts_approve_refuses_a_fact_that_is_not_in_review(
        database: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "tenant", "create", str(YAML_TENANT))[0] == 0
    now = datetime(2026, 6, 1, 13, tzinfo=UTC)
    with session_scope(make_engine(database)) as session:
        contact = Contact(tenant_id=1, wa_id="5511999990003", created_at=now)
        session.add(contact)
        session.flush()
        session.add(ContactFact(tenant_id=1, contact_id=contact.id or 0, key="preferred_name",
                                value="Carla", state="rejected", created_at=now))
    status, _, err = run(capsys, "facts", "approve", "1")
    assert status == 2 and "not in review" in err
    with session_scope(make_engine(database)) as session:
        assert session.get(ContactFact, 1).state == "rejected"


def test_a_professionals_week_and_the_agenda_from_the_cli(
        database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 22: `catalog professional --week` names every problem of a bad week and keeps
    the professional; `appointments book|block|day|outcome` act on the same agenda."""
    tenant = tmp_path / "t.json"
    tenant.write_text(json.dumps({"phone_number_id": PNID, "name": "Clínica Exemplo",
                                  "services": [{"code": "consulta", "duration_minutes": 30}],
                                  "professionals": [{"code": "lia", "services": ["consulta"]}],
                                  "hours": {"tue": ["09:00-12:00"]}}))
    assert run(capsys, "tenant", "create", str(tenant))[0] == 0
    bad = tmp_path / "week.yaml"
    bad.write_text("hours: {tue: ['09:00-11:00', '10:00-12:00']}\n"
                   "time_off: [{from: 2026-06-10, to: 2026-06-08}]\n"
                   "durations: {retorno: 20}\n")
    status, _, err = run(capsys, "catalog", "professional", PNID, "lia", "--week", str(bad))
    assert status == 2 and "overlap" in err and "before it starts" in err
    assert "retorno: not a service this professional does" in err
    good = tmp_path / "good.yaml"
    good.write_text("hours: {tue: ['10:00-12:00']}\n")
    status, pro, _ = run(capsys, "catalog", "professional", PNID, "lia", "--week", str(good))
    assert status == 0 and pro["hours"] == {"tue": ["10:00-12:00"]}
    status, booked, err = run(capsys, "appointments", "book", PNID, "--service", "consulta",
                              "--start", "2030-06-04T10:00", "--phone", "5511988887777")
    assert status == 0 and booked["professional"] == "lia", err
    # issue 35 item 3: a staff note is held to the rules of every text about a customer
    for note in ("CPF 529.982.247-25 - 15h", "cobrar metade do preço sempre", "grávida"):
        status, _, err = run(capsys, "appointments", "book", PNID, "--service", "consulta",
                             "--start", "2030-06-04T11:00", "--phone", "5511988887777",
                             "--note", note)
        assert status == 2 and "note not recorded" in err and note not in err, (note, err)
    status, _, err = run(capsys, "appointments", "book", PNID, "--service", "consulta",
                         "--start", "2030-06-04T09:30", "--phone", "5511988887777")
    assert status == 2 and "lia does not work" not in err and "outside" in err
    status, _, err = run(capsys, "appointments", "block", PNID, "--professional", "lia",
                         "--start", "2030-06-04T10:00", "--end", "2030-06-04T11:00")
    assert status == 2 and f"#{booked['id']}" in err
    status, day, _ = run(capsys, "appointments", "day", PNID, "2030-06-04")
    assert status == 0 and day["professionals"][0]["hours"] == ["10:00-12:00"]
    status, _, err = run(capsys, "appointments", "outcome", PNID, f"#{booked['booking_number']}",
                         "no_show")
    assert status == 2 and "not started yet" in err


def test_tenant_update_help_names_every_setting_a_business_may_change(
        capsys: pytest.CaptureFixture[str]) -> None:
    from storage.tenant_config import TenantSettings
    with pytest.raises(SystemExit):
        main(["tenant", "update", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert all(key in shown for key in TenantSettings.model_fields)
    assert "reminder_text" in shown and "cancellation_window_minutes" in shown


def test_catalog_refuses_duplicate_codes_and_a_blank_name_keeping_the_catalogue(
        database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "tenant", "create", str(YAML_TENANT))[0] == 0
    before = run(capsys, "catalog", "show", PNID)[1]
    doubled = tmp_path / "catalogue.json"
    doubled.write_text(json.dumps({
        "services": [{"code": "retorno", "duration_minutes": 20},
                     {"code": "Retorno", "duration_minutes": 30}],
        "professionals": [{"code": "dr_rui", "services": ["retorno"]},
                          {"code": "dr_rui", "services": []}]}))
    status, _, err = run(capsys, "catalog", "set", PNID, str(doubled))
    assert status == 2 and "(case ignored): Retorno, retorno" in err \
        and "(case ignored): dr_rui" in err, err
    status, _, err = run(capsys, "catalog", "service", PNID, "novo", "--name", "",
                         "--duration", "20")
    assert status == 2 and "name: must not be blank" in err, err
    assert run(capsys, "catalog", "show", PNID)[1] == before
