"""Issue 49: the results page on a phone-sized headless Chromium (390 px): it never scrolls
sideways, its two charts are on screen with their text alternative, the labels are
Portuguese, every figure is shown within 2,000 px of height. Saves
docs/console-results-phone.png. Marked `browser` like tests/test_console_browser.py (whose
fixtures it uses)."""

import shutil
from datetime import timedelta
from pathlib import Path

from sqlmodel import select

from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import Appointment, Professional, Reminder, Service, Tenant
from tests.console_helpers import SALON, Seeded, seed
from tests.test_console_browser import (  # noqa: F401  (fixtures: driver, env, shots)
    driver,
    env,
    pytestmark,
    shots,
    sign_in,
    snap,
)

DOCS = Path(__file__).parent.parent / "docs"


def eight_weeks_of_visits(env: ReplayEnvironment) -> None:  # noqa: F811
    """Visits booked over the last weeks (some by staff), marked completed or no-show, a price
    on the corte, reminders on from three weeks ago: the charts have bars to show."""
    now = env.clock.now()
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant).where(
            Tenant.phone_number_id == SALON["phone_number_id"])).one()
        corte = session.exec(select(Service).where(Service.tenant_id == tenant.id)).first()
        pro = session.exec(select(Professional).where(Professional.tenant_id == tenant.id)
                           ).first()
        first = session.exec(select(Appointment).where(Appointment.tenant_id == tenant.id)
                             ).first()
        assert corte and pro and first
        corte.price_cents = 9000
        for week in range(1, 8):
            for n in range(2 + week % 4):
                start = now - timedelta(weeks=week, hours=n * 2)
                row = Appointment(tenant_id=tenant.id or 0, contact_id=first.contact_id,
                                  service_id=corte.id or 0, professional_id=pro.id or 0,
                                  start_at=start, end_at=start + timedelta(hours=1),
                                  created_at=start - timedelta(days=1),
                                  booked_by="business" if n == 0 else "customer",
                                  outcome="no_show" if (n + week) % 3 == 0 else "completed")
                session.add(row)
        session.add(Reminder(tenant_id=tenant.id or 0, appointment_id=first.id or 0,
                             lead_minutes=60, status="queued", created_at=now,
                             queued_at=now - timedelta(weeks=3)))


def test_the_results_page_fits_a_phone_with_its_charts(env: ReplayEnvironment,  # noqa: F811
                                                        driver: object,  # noqa: F811
                                                        shots: Path) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    d = driver
    # a model takes seconds to a minute: the answer times read as a business would see them
    seeded: Seeded = seed(env, answer_delays=("6s", "14s", "9s", "25s", "48s"))
    eight_weeks_of_visits(env)
    sign_in(d, env, seeded.salon_token)
    d.set_window_size(390, 844)  # type: ignore[attr-defined]
    d.get(env.web_url + "/console/results")  # type: ignore[attr-defined]
    assert "Resultados" in d.title  # type: ignore[attr-defined]
    page = d.find_element(By.TAG_NAME, "main").text  # type: ignore[attr-defined]
    for label in ("Visitas agendadas pelo assistente", "Receita agendada", "Taxa de faltas",
                  "Tempo de resposta do assistente", "Custo por visita agendada"):
        assert label in page, label
    answer = d.find_element(  # type: ignore[attr-defined]
        By.CSS_SELECTOR, '[data-figure="agent_answer"] b').text
    assert answer == "metade das respostas em até 14 s; 9 em 10 em até 48 s", answer
    charts = d.find_elements(By.CSS_SELECTOR, "section.chart svg")  # type: ignore[attr-defined]
    assert len(charts) == 2
    for chart in charts:
        assert chart.is_displayed() and chart.size["width"] > 200, chart.size
        assert chart.size["width"] <= 390
        assert chart.find_element(By.TAG_NAME, "title").get_attribute("textContent")
        assert len(chart.find_elements(By.TAG_NAME, "rect")) == 8
    wide = d.execute_script(  # type: ignore[attr-defined]
        "return [document.documentElement.scrollWidth, window.innerWidth]")
    assert wide[0] <= wide[1], f"the page scrolls sideways on a phone: {wide}"
    cards = d.find_elements(By.CSS_SELECTOR, "#results-figures .card")  # type: ignore[attr-defined]
    assert len(cards) == 15 and all(card.is_displayed() for card in cards)
    height = d.execute_script("return document.documentElement.scrollHeight")  # type: ignore[attr-defined]
    # every figure in two columns of tight cards and short charts: 2,921 px before, 1,760 after
    assert int(height) <= 2000, f"the page is {height} px long on a phone"
    d.set_window_size(390, min(int(height) + 140, 4000))  # type: ignore[attr-defined]
    snap(d, shots, "results-phone")
    shutil.copyfile(shots / "console-results-phone.png", DOCS / "console-results-phone.png")
