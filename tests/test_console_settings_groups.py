"""The console settings page's grouped sections (privacy and calendar, waitlist, Pix deposit,
the model budget): a change saved in the console is what the admin API then reads, and a bad
value shows a clear Portuguese error beside its field and changes nothing (not even the good
values posted with it). The rules are operations/settings.py's, the API's and the CLI's own."""

from collections.abc import Iterator
from typing import Any

import pytest

from replay.environment import ReplayEnvironment
from tests.conftest import START
from tests.console_helpers import Seeded, seed
from tests.test_admin_api import OPERATOR, call
from tests.test_console import Browser


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url,
                                    admin_token=OPERATOR)
    yield environment
    environment.close()


@pytest.fixture
def seeded(env: ReplayEnvironment) -> Seeded:
    return seed(env)


def _settings(env: ReplayEnvironment) -> dict[str, Any]:
    status, body = call(env, "GET", "/admin/tenants/1", None, token=OPERATOR)
    assert status == 200
    return dict(body)


def _post(env: ReplayEnvironment, seeded: Seeded, fields: dict[str, str]) -> tuple[int, str]:
    """The settings form as the page sends it: today's values of the fields above the groups,
    and `fields`."""
    now = _settings(env)
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    status, page, _ = browser.request("/console/settings")
    assert status == 200 and 'id="group-deposits"' in page
    base = {"csrf": browser.csrf, "instructions": now["instructions"],
            "inactivity_timeout_minutes": str(now["inactivity_timeout_minutes"]),
            "retention_days": str(now["retention_days"]), "language": now["language"],
            "fact_keys": "\n".join(now["fact_keys"]), "followup_template": "",
            "followup_template_language": now["followup_template_language"]}
    status, page, _ = browser.request("/console/settings", {**base, **fields})
    return status, page


GROUPS = {
    "privacy": ({"keep_cpf": "true", "holiday_calendar": "BR-SP", "parallel_services": "corte",
                 "feed_notes": "true", "no_show_uses_session": "false"},
                {"keep_cpf": True, "holiday_calendar": "BR-SP", "parallel_services": ["corte"],
                 "feed_notes": True, "no_show_uses_session": False}),
    "waitlist": ({"waitlist_hold_minutes": "20", "waitlist_template": "",
                  "waitlist_inside_window_only": "true"},
                 {"waitlist_hold_minutes": 20, "waitlist_template": "",
                  "waitlist_inside_window_only": True}),
    "deposits": ({"deposit_cents": "R$ 1.250,50", "deposit_percent": "0",
                  "deposit_hold_minutes": "45", "deposit_refund": "owed",
                  "pix_key": "12345678000199", "pix_key_type": "CNPJ", "deposit_template": ""},
                 {"deposit_cents": 125050, "deposit_percent": 0, "deposit_hold_minutes": 45,
                  "deposit_refund": "owed", "pix_key": "12345678000199",
                  "pix_key_type": "CNPJ", "deposit_template": ""}),
    "budget": ({"model_budget_cents": "50,00", "budget_action": "handoff",
                "fallback_model": "claude-haiku-4-5"},
               {"model_budget_cents": 5000, "budget_action": "handoff",
                "fallback_model": "claude-haiku-4-5"}),
}


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_group_saved_in_the_console_is_what_the_api_reads(
        env: ReplayEnvironment, seeded: Seeded, group: str) -> None:
    posted, expected = GROUPS[group]
    status, page = _post(env, seeded, posted)
    assert status == 303, page
    now = _settings(env)
    assert {name: now[name] for name in expected} == expected
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    page = browser.request("/console/settings")[1]  # the page shows what it saved
    if group == "deposits":
        assert 'value="1.250,50"' in page and 'value="CNPJ" selected' in page
    if group == "budget":
        assert 'value="50,00"' in page and 'value="handoff" selected' in page
        assert "passar para a equipe" in page


BAD = [
    ("holiday_calendar", "XX", "não é um calendário de feriados"),
    ("parallel_services", "nao_existe", "'nao_existe' não é o código de um serviço"),
    ("waitlist_hold_minutes", "0", "deve ser no mínimo 1"),
    ("waitlist_template", "nao_declarado", "'nao_declarado' não é um dos modelos aprovados"),
    ("waitlist_inside_window_only", "talvez", "use sim ou não"),
    ("deposit_cents", "cinquenta", "'cinquenta' não é um valor (ex.: 50 ou 50,00)"),
    ("deposit_percent", "150", "deve ser no máximo 100"),
    ("pix_key_type", "RANDOM", "formato inválido"),
    ("deposit_template", "nao_declarado", "'nao_declarado' não é um dos modelos aprovados"),
    ("model_budget_cents", "muito", "'muito' não é um valor (ex.: 50 ou 50,00)"),
    ("model_budget_cents", "5,²", "'5,²' não é um valor (ex.: 50 ou 50,00)"),  # not a 500
    ("model_budget_cents", "-10", "'-10' não é um valor (ex.: 50 ou 50,00)"),
    ("model_budget_cents", "2000000", "no máximo 1000000"),
    ("budget_action", "desligar", "use fallback (modelo mais barato) ou handoff"),
    ("fallback_model", "gpt-4", "formato inválido"),
]


@pytest.mark.parametrize(("name", "value", "shown"), BAD)
def test_a_bad_value_shows_a_portuguese_error_beside_it_and_changes_nothing(
        env: ReplayEnvironment, seeded: Seeded, name: str, value: str, shown: str) -> None:
    before = _settings(env)
    status, page = _post(env, seeded, {"keep_cpf": "true", "deposit_hold_minutes": "45",
                                       name: value})
    assert status == 422
    error = page.split(f'id="error-{name}">', 1)[1].split("</p>", 1)[0]
    assert shown in error.replace("&#39;", "'"), error
    assert _settings(env) == before
