"""Issue 22: the day agenda on a phone-sized headless Chromium: book a new customer by phone
and block an hour with the page's own forms, and the page never scrolls sideways. Marked
`browser` like tests/test_console_browser.py (whose fixtures it uses)."""

from pathlib import Path

from sqlmodel import select

from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import Appointment, ScheduleBlock
from tests.console_helpers import Seeded, seed
from tests.test_console_browser import (  # noqa: F401  (fixtures: driver, env, shots)
    driver,
    env,
    pytestmark,
    shots,
    sign_in,
    snap,
    wait_for,
)


def test_the_day_agenda_on_a_phone_books_and_blocks(env: ReplayEnvironment,  # noqa: F811
                                                     driver: object,  # noqa: F811
                                                     shots: Path) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d = driver
    seeded: Seeded = seed(env)
    sign_in(d, env, seeded.salon_token)
    d.set_window_size(390, 844)  # type: ignore[attr-defined]
    d.get(env.web_url + "/console/agenda?day=2026-06-02")  # type: ignore[attr-defined]
    assert "Júlia" in d.page_source  # type: ignore[attr-defined]
    form = d.find_element(By.ID, "book-form")  # type: ignore[attr-defined]
    Select(form.find_element(By.NAME, "professional")).select_by_value("julia")
    form.find_element(By.NAME, "time").send_keys("10:00")
    form.find_element(By.NAME, "phone").send_keys("+55 21 98888-0002")
    form.find_element(By.NAME, "name").send_keys("Bia Teste")
    form.find_element(By.TAG_NAME, "button").click()
    wait_for(d, lambda b: "Agendado" in b.find_element(By.CSS_SELECTOR, ".flash").text)
    block = d.find_element(By.ID, "block-form")  # type: ignore[attr-defined]
    block.find_element(By.NAME, "time").send_keys("12:00")
    block.find_element(By.NAME, "until").send_keys("13:00")
    block.find_element(By.NAME, "note").send_keys("almoço da equipe")
    block.find_element(By.TAG_NAME, "button").click()
    wait_for(d, lambda b: "Horário bloqueado" in b.find_element(By.CSS_SELECTOR, ".flash").text)
    page = d.page_source  # type: ignore[attr-defined]
    assert "Bia Teste" in page and "almoço da equipe" in page
    wide = d.execute_script(  # type: ignore[attr-defined]
        "return [document.documentElement.scrollWidth, window.innerWidth]")
    assert wide[0] <= wide[1], f"the page scrolls sideways on a phone: {wide}"
    snap(d, shots, "agenda-day-phone")
    with session_scope(env.engine) as session:
        assert session.exec(select(ScheduleBlock)).one().note == "almoço da equipe"
        assert any(a.booked_by == "business" for a in session.exec(select(Appointment)))
