"""Schema-driven fuzzing of the admin API (issue 6): the OpenAPI document validates, and
schemathesis, run against the whole app on loopback, gets no 5xx from any operation.

Each test starts the replay environment's web app (SQLite, and PostgreSQL in CI), seeds two
tenants with their catalogues, a conversation with a booking and facts in review, then runs
`st run` (the schemathesis CLI, in a subprocess) over every operation of
GET /admin/openapi.json with the operator token or a tenant token. Generation is positive and
negative (`--mode all`: the coverage phase's boundary and mutated values, then the fuzzing
phase), with a fixed seed, no example database and no cache, so a run is repeatable. Only
`not_a_server_error` is checked: the contract here is "4xx for bad input, never 5xx".

Random ids would almost always be 404, so the seeded ids (and a few awkward strings that once
caused 500s) are offered through schemathesis dictionaries: most cases act on real rows.

The regression tests at the end pin each 5xx the fuzzer found (and a tenant created with the
name "None"), one by one.
"""

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate as validate_openapi
from sqlmodel import select

from bot.admin.api import ROUTES
from bot.admin.openapi import openapi_document
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import Appointment, Contact, ContactFact, Conversation
from tests.conftest import START
from tests.factories import ANA, TENANT, text_body

OPERATOR = "operator-token-for-fuzz"
OTHER = {"phone_number_id": "109876543210999", "name": "Oficina Exemplo",
         "services": [{"code": "revisao", "name": "Revisão", "duration_minutes": 120}],
         "professionals": [{"code": "caio", "name": "Caio", "services": ["revisao"]}],
         "hours": {"mon": ["08:00-17:00"]}}
SEED = 20260601
# The operator run is the thorough one: the coverage phase (boundary values and systematic
# mutations of every parameter and body field: about 1,850 cases) and then the fuzzing phase.
# The tenant-token run fuzzes the same operations through the authorisation paths (its own
# tenant, the other one: 404, operator-only routes: 403). Examples are per operation and mode.
PHASES = {"operator": "coverage,fuzzing", "tenant": "fuzzing"}
EXAMPLES = {"operator": 15, "tenant": 8}
MIN_CASES = {"operator": 2000, "tenant": 180}
# Offered to every string (5% of the time): those that once reached a 500 (see the regression
# tests), and a few around the rule that reads a short digit string as a contact id.
AWKWARD = ["America", "Etc", "zone.tab", "²", "١٢", "𝟘", "9" * 12, "-1", "0"]
ZONES = ["America/Sao_Paulo", "UTC", "America", "Europe", "Etc", "zone.tab", "Mars/Base", ""]


@dataclass
class Seeded:
    env: ReplayEnvironment
    salon: int
    garage: int
    conversation: int
    appointment: int
    contact: int
    facts: list[int]
    tenant_token: str
    tenant_token_id: int


def call(env: ReplayEnvironment, method: str, path: str, body: Any = None, *,
         token: str | None = OPERATOR) -> tuple[int, Any]:
    """(status, JSON body, or the raw text when it is not JSON: a 500's is not)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(env.web_url + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            payload, status = response.read(), response.status
    except urllib.error.HTTPError as exc:
        payload, status = exc.read(), exc.code
    try:
        return status, json.loads(payload) if payload else None
    except ValueError:
        return status, payload.decode("utf-8", "replace")


def _seed(env: ReplayEnvironment) -> Seeded:
    env.add_tenant({**TENANT, "fact_keys": ["preferred_name", "allergies"]})
    env.add_tenant(OTHER)
    status, tenants = call(env, "GET", "/admin/tenants")
    assert status == 200
    by_number = {t["phone_number_id"]: t["id"] for t in tenants}
    salon, garage = by_number[TENANT["phone_number_id"]], by_number[OTHER["phone_number_id"]]
    # a conversation in which the agent books (the messages double plays Claude)
    env.messages_api.script("turn", [
        {"tool": "book_appointment", "input": {"service": "corte", "start": "2026-06-02T10:00"}},
        {"text": "Marcado!"}])
    body = text_body("corte amanhã 10h; sou a Ana, alergia a amônia", 1, sent_at=env.clock.now())
    assert env.post_webhook(json.dumps(body).encode()) == 200
    env.drain()
    assert call(env, "PUT", f"/admin/tenants/{salon}/hours-exceptions/2026-06-09",
                {"hours": ["09:00-12:00"], "note": "meio período"})[0] == 201
    with session_scope(env.engine) as session:
        conversation = session.exec(select(Conversation)).one()
        appointment = session.exec(select(Appointment)).one()
        contact = session.exec(select(Contact)).one()
        facts = []
        for key, value, state in (("allergies", "amônia", "pending_review"),
                                  ("preferred_name", "Ana", "suggested")):
            fact = ContactFact(tenant_id=salon, contact_id=contact.id or 0,
                               conversation_id=conversation.id, key=key, value=value,
                               state=state, source_message_id=1,
                               created_at=datetime.now().astimezone())
            session.add(fact)
            session.flush()
            facts.append(int(fact.id or 0))
        ids = (int(conversation.id or 0), int(appointment.id or 0), int(contact.id or 0))
    status, created = call(env, "POST", f"/admin/tenants/{salon}/tokens", {"label": "fuzz"})
    assert status == 201
    return Seeded(env, salon, garage, *ids, facts=facts, tenant_token=created["token"],
                  tenant_token_id=created["id"])


@pytest.fixture
def seeded(database_url: str | None, redis_url: str | None) -> Iterator[Seeded]:
    env = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url,
                            admin_token=OPERATOR)
    try:
        yield _seed(env)
    finally:
        env.close()


def _toml(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # JSON strings, numbers and arrays are TOML


def _config(s: Seeded, examples: int) -> str:
    """schemathesis.toml: generation settings, and the seeded ids as dictionaries."""
    dictionaries = {
        "tenants": [s.salon, s.garage],
        "conversations": [s.conversation],
        "appointments": [s.appointment],
        "facts": s.facts,
        "tokens": [s.tenant_token_id],
        "contacts": [ANA[0], ANA[1], str(s.contact), "²", "١٢"],
        "codes": ["corte", "julia", "revisao", "caio", "nova"],
        "days": ["2026-06-02", "2026-06-09", "9999-12-31", "0001-01-01"],
        "zones": ZONES,
        "awkward": AWKWARD,
    }
    parameters = {
        "path.tenant_id": ("tenants", 0.85), "path.conversation_id": ("conversations", 0.7),
        "path.appointment_id": ("appointments", 0.7), "path.fact_id": ("facts", 0.7),
        "path.token_id": ("tokens", 0.5), "path.contact": ("contacts", 0.7),
        "query.contact": ("contacts", 0.5), "path.code": ("codes", 0.6),
        "path.day": ("days", 0.6), "body.timezone": ("zones", 0.5),
    }
    lines = [f"seed = {SEED}", "workers = 1", "", "[cache]", "enabled = false", "",
             "[generation]", 'mode = "all"', f"max-examples = {examples}",
             'database = "none"', "", "[generation.dictionaries.string]",
             'dictionary = "awkward"', "probability = 0.05", ""]
    for name, values in dictionaries.items():
        lines += [f"[dictionaries.{name}]", f"values = {_toml(values)}", ""]
    lines.append("[parameters]")
    lines += [f'"{key}" = {{ dictionary = "{name}", probability = {p} }}'
              for key, (name, p) in parameters.items()]
    return "\n".join(lines) + "\n"


def _schemathesis(s: Seeded, who: str, workdir: Path) -> tuple[int, str]:
    token = OPERATOR if who == "operator" else s.tenant_token
    config = workdir / "schemathesis.toml"
    config.write_text(_config(s, EXAMPLES[who]), encoding="utf-8")
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
               f"{s.env.web_url}/admin/openapi.json", "-H", f"Authorization: Bearer {token}",
               "--phases", PHASES[who], "--checks", "not_a_server_error",
               "--request-timeout", "10", "--no-color", "--output-truncate", "false"]
    result = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout + result.stderr


def _failures(output: str) -> str:
    """The FAILURES section of the CLI's report (each failing case with its curl command)."""
    start = output.find(" FAILURES ")
    return output[output.rfind("\n", 0, max(start, 0)) + 1:][:20_000] if start >= 0 \
        else output[-20_000:]


@pytest.mark.fuzz  # 30-200 s of CPU each: the README's fuzz-command
@pytest.mark.parametrize("who", ["operator", "tenant"])
def test_schemathesis_finds_no_server_error(seeded: Seeded, who: str, tmp_path: Path) -> None:
    status, served = call(seeded.env, "GET", "/admin/openapi.json", token=None)
    assert status == 200 and served == openapi_document(ROUTES)
    validate_openapi(served)
    started = time.monotonic()
    code, output = _schemathesis(seeded, who, tmp_path)
    took = time.monotonic() - started
    match = re.search(r"(\d+) generated", output)
    cases = int(match.group(1)) if match else 0
    sys.stdout.write(f"\nschemathesis ({who} token): {cases} cases in {took:.1f} s\n")
    assert code == 0, f"schemathesis found server errors or failed:\n{_failures(output)}"
    tested = re.search(r"Tested: (\d+)", output)
    assert tested and int(tested.group(1)) >= len(ROUTES), f"not every operation:\n{output}"
    assert cases >= MIN_CASES[who], f"too few cases ({cases}):\n{output[-3000:]}"
    assert not re.search(r"\b[1-9]\d* (failed|errored)\b", output), output[-5000:]


# -- regressions: each 5xx the fuzzer found, now a 4xx ------------------------------------------

@pytest.fixture
def env(redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, redis_url=redis_url, admin_token=OPERATOR)
    environment.add_tenant(TENANT)
    yield environment
    environment.close()


def _salon(env: ReplayEnvironment) -> int:
    return int(call(env, "GET", "/admin/tenants")[1][0]["id"])


@pytest.mark.parametrize("zone", ["America", "Europe", "Etc", "zone.tab"])
def test_a_timezone_that_is_a_directory_or_not_a_zone_file_is_422(
        env: ReplayEnvironment, zone: str) -> None:
    """ZoneInfo("America") raises IsADirectoryError (an OSError, not a ValueError): was 500."""
    salon = _salon(env)
    status, body = call(env, "PATCH", f"/admin/tenants/{salon}", {"timezone": zone})
    assert status == 422 and "timezone" in body["error"]["problems"][0], body
    status, body = call(env, "POST", "/admin/tenants", {"phone_number_id": "42", "name": "X",
                                                        "timezone": zone})
    assert status == 422 and "timezone" in body["error"]["message"], body
    assert call(env, "GET", f"/admin/tenants/{salon}")[1]["timezone"] == "America/Sao_Paulo"


@pytest.mark.parametrize("ref", ["²", "١٢", "𝟘"])
def test_a_contact_reference_of_non_ascii_digits_is_404(env: ReplayEnvironment, ref: str) -> None:
    """"²".isdigit() is true but int("²") raises ValueError: the contact lookup was 500."""
    base = f"/admin/tenants/{_salon(env)}"
    quoted = urllib.parse.quote(ref)
    assert call(env, "GET", f"{base}/contacts/{quoted}/export")[0] == 404
    assert call(env, "DELETE", f"{base}/contacts/{quoted}")[0] == 404
    assert call(env, "GET", f"{base}/conversations?contact={quoted}")[0] == 404
    assert call(env, "GET", f"{base}/appointments?contact={quoted}")[0] == 404


def test_a_new_tenant_needs_a_name_not_null(env: ReplayEnvironment) -> None:
    """`"name": null` passed validation and created a tenant called "None"."""
    status, body = call(env, "POST", "/admin/tenants", {"phone_number_id": "43", "name": None})
    assert status == 422 and "name" in body["error"]["message"], body
    status, created = call(env, "POST", "/admin/tenants", {"phone_number_id": "43",
                                                           "name": "  Barbearia  "})
    assert status == 201 and created["name"] == "Barbearia"
