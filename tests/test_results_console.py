"""Issue 49: the results page in the console and the same figures in the admin API, over HTTP
(no browser): the seeded salon's booking by the agent shows, the garage's page shows only its
own (zeros), another tenant's results are not found, and the page reads in both languages."""

import html
import json
import re
from collections.abc import Iterator

import pytest

from cli.main import main
from replay.environment import ReplayEnvironment
from tests.conftest import START
from tests.console_helpers import SALON, Seeded, seed
from tests.test_admin_api import call
from tests.test_console import Browser


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    yield environment
    environment.close()


@pytest.fixture
def seeded(env: ReplayEnvironment) -> Seeded:
    return seed(env)


def figure(page: str, key: str) -> str:
    found = re.search(rf'data-figure="{key}"><span>[^<]*</span><b>([^<]*)</b>', page)
    assert found, key
    return html.unescape(found.group(1))


def test_the_owner_reads_the_week_and_the_month_in_portuguese(
        env: ReplayEnvironment, seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    status, page, headers = browser.request("/console/results")
    assert status == 200 and 'data-page="results">Resultados<' in page and ">Resultados<" in page
    assert figure(page, "visits_agent") == "1" and figure(page, "visits_staff") == "0"
    assert figure(page, "revenue") == "R$ 0,00"  # the seeded corte has no price
    assert re.fullmatch(r"metade das respostas em até \d+\xa0s; 9 em 10 em até \d+\xa0s",
                        figure(page, "agent_answer"))
    assert "p50" not in page and "p90" not in page  # no jargon
    assert "Nenhum lembrete enviado ainda" in page
    assert re.findall(r'class="card" data-figure="(\w+)"', page) == [
        "visits_agent", "visits_staff", "revenue", "confirmed", "cancelled", "no_shows",
        "no_show_rate", "no_show_before", "no_show_after", "refilled", "handoffs",
        "staff_answer", "agent_answer", "cost", "cost_per_visit"]
    assert figure(page, "no_show_before") == "—" and figure(page, "no_show_after") == "—"
    assert page.count("<svg") == 2 and page.count("<title id=") == 2
    assert "Visitas agendadas por semana" in page
    assert not re.search(r'(src|href)="(https?:)?//', page)  # no external request
    assert "script" not in page.lower()
    status, month, _ = browser.request("/console/results?period=month")
    assert status == 200 and "Visitas agendadas por mês" in month
    assert 'id="period-month" class="here"' in month or \
        'class="here" id="period-month"' in month
    assert browser.request("/console/results?period=year")[0] == 200  # read as week
    browser.request("/console/language", {"csrf": browser.csrf, "language": "en",
                                          "next": "/console/results"})
    english = browser.request("/console/results")[1]
    assert "Visits booked by the assistant" in english and "No reminder sent yet" in english


def test_another_tenant_sees_only_its_own_results(env: ReplayEnvironment,
                                                   seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.garage_token)
    page = browser.request("/console/results")[1]
    assert figure(page, "visits_agent") == "0" and figure(page, "revenue") == "R$ 0,00"
    assert figure(page, "no_show_rate") == "—" and figure(page, "cost_per_visit") == "—"
    status, tenants = call(env, "GET", "/admin/tenants", token=seeded.salon_token)
    salon_id = tenants[0]["id"]
    status, body = call(env, "GET", f"/admin/tenants/{salon_id}/results?period=month",
                        token=seeded.salon_token)
    assert status == 200 and body["period"] == "month"
    assert body["current"]["visits_by_agent"] == 1 and body["current"]["start"] == "2026-06-01"
    assert len(body["series"]) == 6 and body["reminders_on"] is None
    assert call(env, "GET", f"/admin/tenants/{salon_id}/results",
                token=seeded.garage_token)[0] == 404
    status, refused = call(env, "GET", f"/admin/tenants/{salon_id}/results?period=year",
                           token=seeded.salon_token)
    assert status == 422 and refused["error"]["problems"]


def test_wagent_results_prints_the_same_figures(env: ReplayEnvironment, seeded: Seeded,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DATABASE_URL", env.engine.url.render_as_string(hide_password=False))
    capsys.readouterr()
    assert main(["results", SALON["phone_number_id"], "--period", "month"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["period"] == "month" and out["current"]["visits_by_agent"] == 1
    assert main(["results", "000000"]) == 2
