"""The console's cost block and budget (issue 49, a newcomer's findings): the home page shows
this month's and today's cost (model + WhatsApp) and, with a budget, the month's model spend
against it; a budget saved below the month's spend shows its banner at once, by every door
(operations/settings.apply_settings); costs read to the cent, "< US$ 0,01" under one."""

import html
import re
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlmodel import select

from bot.console.results_texts import usd_text
from operations.costs import usd_cents
from replay.environment import ReplayEnvironment
from storage import budgets, webhooks
from storage.db import session_scope
from storage.models import BudgetAlert, Tenant, Usage, WebhookEvent
from storage.tenant_config import KNOWN_MODELS
from tests.conftest import START
from tests.console_helpers import SALON, Seeded, seed
from tests.test_admin_api import OPERATOR, call
from tests.test_console import Browser
from tests.test_console_settings_groups import _post
from usage.ledger import month_model_micro_usd


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url,
                                    admin_token=OPERATOR)
    yield environment
    environment.close()


@pytest.fixture
def seeded(env: ReplayEnvironment) -> Seeded:
    return seed(env)


def _salon_spends(env: ReplayEnvironment, micro_usd: int) -> int:
    """Top the salon's month of model cost up to exactly `micro_usd` with one usage row;
    returns the tenant id."""
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant).where(
            Tenant.phone_number_id == SALON["phone_number_id"])).one()
        tid = int(tenant.id or 0)
        month = budgets.month_of(tenant, env.clock.now())
    spent = month_model_micro_usd(env.engine, tid, month)
    assert spent < micro_usd  # the seeded turns cost less
    with session_scope(env.engine) as session:
        session.add(Usage(tenant_id=tid, conversation_id=None, purpose="turn",
                          model="claude-sonnet-5-5", input_tokens=1, output_tokens=1,
                          created_at=env.clock.now(), micro_usd=micro_usd - spent))
    return tid


def _home(env: ReplayEnvironment, seeded: Seeded) -> str:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    status, page, _ = browser.request("/console/")
    assert status == 200
    return html.unescape(page)


def test_home_shows_the_months_and_todays_cost_and_the_budget_used(
        env: ReplayEnvironment, seeded: Seeded) -> None:
    _salon_spends(env, 3_200_000)
    page = _home(env, seeded)
    month = re.search(r'data-figure="cost-month"><b>([^<]*)</b>', page)
    today = re.search(r'data-figure="cost-today"><b>([^<]*)</b>', page)
    assert month and today and month.group(1) == today.group(1) == "US$ 3,20"  # one day
    assert 'id="budget-used"' not in page  # no budget: no line
    assert "O orçamento conta só o modelo de IA" in page
    status, _ = _post(env, seeded, {"model_budget_cents": "10,00", "budget_action": "fallback",
                                    "fallback_model": "claude-haiku-4-5"})
    assert status == 303
    page = _home(env, seeded)
    assert "Orçamento do mês (só o modelo): US$ 3,20 de US$ 10,00 — 32%" in page
    assert "passou de 80%" not in page and "foi atingido" not in page


def test_a_budget_saved_below_the_months_spend_shows_the_banner_at_once(
        env: ReplayEnvironment, seeded: Seeded) -> None:
    tid = _salon_spends(env, 3_200_000)
    with session_scope(env.engine) as session:
        webhooks.create_endpoint(session, tid, url="https://hooks.example/budget",
                                 events=["budget.warning", "budget.reached"],
                                 now=env.clock.now())
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    settings = html.unescape(browser.request("/console/settings")[1])
    assert "Gasto do modelo neste mês até agora: US$ 3,20" in settings
    offered = re.search(r'<select id="fallback_model" name="fallback_model">(.*?)</select>',
                        settings)  # a select of the known models, not a free-text field
    assert offered and re.findall(r'value="([^"]+)"', offered.group(1)) == list(KNOWN_MODELS)
    assert 'value="claude-haiku-4-5" selected' in offered.group(1)
    assert "no webhook" not in settings  # plain words
    status, _ = _post(env, seeded, {"model_budget_cents": "3,00", "budget_action": "fallback",
                                    "fallback_model": "claude-haiku-4-5"})
    assert status == 303
    assert "O orçamento do agente para este mês foi atingido" in _home(env, seeded)
    with session_scope(env.engine) as session:
        levels = sorted(a.level for a in session.exec(
            select(BudgetAlert).where(BudgetAlert.tenant_id == tid)))
    assert levels == [budgets.REACHED, budgets.WARNING]  # no customer turn needed
    with session_scope(env.engine) as session:
        events = sorted(e.type for e in session.exec(
            select(WebhookEvent).where(WebhookEvent.tenant_id == tid)))
    assert events == ["budget.reached", "budget.warning"]  # the owner's systems told too
    # the admin API's door too: raised, the banner goes; lowered to 91 %, the warning shows
    assert call(env, "PATCH", f"/admin/tenants/{tid}", {"model_budget_cents": 4000},
                token=OPERATOR)[0] == 200
    page = _home(env, seeded)
    assert "foi atingido" not in page and "passou de 80%" not in page
    assert "US$ 3,20 de US$ 40,00 — 8%" in page
    assert call(env, "PATCH", f"/admin/tenants/{tid}", {"model_budget_cents": 350},
                token=OPERATOR)[0] == 200
    page = _home(env, seeded)
    assert "foi atingido" not in page and "passou de 80%" in page
    assert "US$ 3,20 de US$ 3,50 — 91%" in page


def test_a_budget_above_the_spend_records_nothing(env: ReplayEnvironment,
                                                  seeded: Seeded) -> None:
    tid = _salon_spends(env, 3_200_000)
    assert call(env, "PATCH", f"/admin/tenants/{tid}", {"model_budget_cents": 500},
                token=OPERATOR)[0] == 200  # 3,20 of 5,00 = 64 %
    with session_scope(env.engine) as session:
        assert session.exec(select(BudgetAlert).where(BudgetAlert.tenant_id == tid)).all() == []
    page = _home(env, seeded)
    assert "— 64%" in page and "passou de 80%" not in page


@pytest.mark.parametrize(("musd", "pt", "en"), [
    (0, "US$ 0,00", "US$ 0.00"), (1, "< US$ 0,01", "< US$ 0.01"),
    (9_999, "< US$ 0,01", "< US$ 0.01"), (10_000, "US$ 0,01", "US$ 0.01"),
    (187_585, "US$ 0,19", "US$ 0.19"), (1_234_567_890, "US$ 1.234,57", "US$ 1,234.57")])
def test_costs_read_to_the_cent(musd: int, pt: str, en: str) -> None:
    assert usd_text(musd, "pt-BR") == pt and usd_text(musd, "en") == en
    assert usd_text(None, "pt-BR") == "—"


@given(st.integers(min_value=10_000, max_value=10**13))
def test_the_console_rounds_as_the_api(musd: int) -> None:
    """The console's text is the API's `usd` (operations/costs.usd_cents) in US$."""
    assert usd_text(musd, "en").replace(",", "") == "US$ " + usd_cents(musd)
