"""The console in a real headless Chromium (Debian's chromium + chromedriver, driven by
Selenium): sign in, change the instructions and the timeout, add a service, approve a fact,
open a conversation and see its plot. Screenshots go to CONSOLE_SCREENSHOTS (default: the
test's tmp dir); `docs/console-*.png` in docs/OPERATE.md were made this way.

Marked `browser`: without /usr/bin/chromium the tests skip, which CI counts as a failure
(WAGENT_REQUIRE_SERVICES=1); `.ci/run` installs the packages when they are missing.
"""

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import select

from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import ContactFact, Conversation, Service, Tenant
from tests.conftest import START
from tests.console_helpers import SALON, Seeded, seed

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
                       reason="needs Debian's chromium and chromium-driver (docs/REPLAY.md)"),
]


@pytest.fixture
def env(redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, redis_url=redis_url)
    yield environment
    environment.close()


@pytest.fixture
def driver() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    profile = tempfile.mkdtemp(prefix="wagent-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--lang=pt-BR",
                 f"--user-data-dir={profile}", "--window-size=1280,1000"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=DriverService(CHROMEDRIVER), options=options)
    browser.implicitly_wait(5)
    yield browser
    browser.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CONSOLE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def snap(driver: object, shots: Path, name: str) -> None:
    path = shots / f"console-{name}.png"
    assert driver.save_screenshot(str(path)), name  # type: ignore[attr-defined]
    assert path.stat().st_size > 5_000, f"{name}: the screenshot is empty"


def wait_for(driver: object, condition: object, seconds: float = 15) -> None:
    """Wait until `condition(driver)` holds: a click returns before the next page loads."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    # an element read just before the old page goes away is stale, or Chromium's inspector says
    # "Node with given id does not belong to the document": try again until the page is there
    WebDriverWait(driver, seconds, ignored_exceptions=(StaleElementReferenceException,
                                                       WebDriverException)).until(
        condition)  # type: ignore[arg-type]


def sign_in(driver: object, env: ReplayEnvironment, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(env.web_url + "/console/")  # type: ignore[attr-defined]
    assert "/console/login" in driver.current_url  # type: ignore[attr-defined]
    driver.find_element(By.ID, "token").send_keys(token)  # type: ignore[attr-defined]
    driver.find_element(By.ID, "sign-in").click()  # type: ignore[attr-defined]
    wait_for(driver, lambda d: d.current_url.endswith("/console/"))  # the click returns early


def test_an_owner_configures_the_agent_reviews_a_fact_and_reads_a_conversation(
        env: ReplayEnvironment, driver: object, shots: Path) -> None:
    from selenium.webdriver.common.by import By

    d = driver
    seeded: Seeded = seed(env)
    sign_in(d, env, seeded.salon_token)
    assert "Fatos para revisar" in d.page_source  # type: ignore[attr-defined]
    snap(d, shots, "home")

    # settings: new instructions and timeout, saved and shown in the preview
    d.find_element(By.CSS_SELECTOR, "nav a[data-page=settings]").click()  # type: ignore
    instructions = d.find_element(By.ID, "instructions")  # type: ignore[attr-defined]
    instructions.clear()
    instructions.send_keys("Ofereça hidratação a quem marcar corte.")
    timeout = d.find_element(By.ID, "inactivity_timeout_minutes")  # type: ignore
    timeout.clear()
    timeout.send_keys("90")
    d.find_element(By.ID, "save-settings").click()  # type: ignore[attr-defined]
    assert "Alterações salvas" in d.find_element(By.CSS_SELECTOR, ".flash").text  # type: ignore
    assert "Ofereça hidratação" in d.find_element(By.ID, "preview-instructions").text  # type: ignore
    snap(d, shots, "settings")
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant).where(
            Tenant.phone_number_id == SALON["phone_number_id"])).one()
        assert tenant.instructions == "Ofereça hidratação a quem marcar corte."
        assert tenant.inactivity_timeout_minutes == 90
        conversation = session.get(Conversation, seeded.salon_conversation_id)
        assert conversation is not None
        assert conversation.due_at - conversation.last_activity_at == \
            __import__("datetime").timedelta(minutes=90)

    # a field error is shown beside its field
    timeout = d.find_element(By.ID, "inactivity_timeout_minutes")  # type: ignore
    timeout.clear()
    timeout.send_keys("0")
    d.find_element(By.ID, "save-settings").click()  # type: ignore[attr-defined]
    assert d.find_element(By.ID, "error-inactivity_timeout_minutes").is_displayed()  # type: ignore

    # catalogue: add a service
    d.find_element(By.CSS_SELECTOR, "nav a[data-page=catalog]").click()  # type: ignore
    d.find_element(By.ID, "service-code").send_keys("hidratacao")  # type: ignore
    d.find_element(By.ID, "service-name").send_keys("Hidratação")  # type: ignore
    d.find_element(By.ID, "service-duration").send_keys("40")  # type: ignore
    d.find_element(By.ID, "add-service").click()  # type: ignore[attr-defined]
    wait_for(d, lambda d: "Hidratação" in d.find_element(By.ID, "services").text)
    snap(d, shots, "catalog")
    with session_scope(env.engine) as session:
        added = session.exec(select(Service).where(Service.code == "hidratacao")).one()
        assert added.duration_minutes == 40 and added.active

    # review: approve the fact in review
    d.find_element(By.CSS_SELECTOR, "nav a[data-page=review]").click()  # type: ignore
    fact = d.find_element(By.ID, f"fact-{seeded.salon_fact_id}")  # type: ignore
    assert "amônia" in fact.text
    snap(d, shots, "review")
    fact.find_element(By.CSS_SELECTOR, "button.approve").click()
    assert d.find_element(By.ID, "nothing-to-review").is_displayed()  # type: ignore
    with session_scope(env.engine) as session:
        assert session.get(ContactFact, seeded.salon_fact_id).state == "confirmed"
        assert session.get(ContactFact, seeded.garage_fact_id).state == "pending_review"

    # conversations: open one and see its plot and cache-read share
    d.find_element(By.CSS_SELECTOR, "nav a[data-page=conversations]").click()  # type: ignore
    d.find_element(By.CSS_SELECTOR,  # type: ignore[attr-defined]
                   f"a[href='/console/conversations/{seeded.salon_conversation_id}']").click()
    plot = d.find_element(By.CSS_SELECTOR, "#plot svg polyline")  # type: ignore
    heights = [float(point.split(",")[1]) for point in plot.get_attribute("points").split()]
    with session_scope(env.engine) as session:
        from storage.models import Usage

        turn_calls = session.exec(select(Usage).where(
            Usage.conversation_id == seeded.salon_conversation_id,
            Usage.purpose == "turn")).all()
        compactions = session.get(Conversation, seeded.salon_conversation_id).compactions
    assert len(heights) == len(turn_calls) > 1, "one point per turn call"
    assert compactions >= 1 and any(b > a for a, b in zip(heights, heights[1:], strict=False)), \
        "the context drops after a compaction (SVG y grows downwards)"
    share = d.find_element(By.ID, "cache-read-share").text  # type: ignore[attr-defined]
    assert "Leitura de cache" in share and "%" in share
    assert "15h" in d.find_element(By.ID, "transcript").text  # type: ignore[attr-defined]
    assert d.find_elements(By.CSS_SELECTOR, "#transcript details")  # type: ignore
    snap(d, shots, "conversation")

    # the agenda, on a phone-sized screen
    d.set_window_size(390, 844)  # type: ignore[attr-defined]
    d.get(env.web_url + "/console/appointments?week=2026-06-01")  # type: ignore
    assert "Corte feminino" in d.page_source and "Ana Teste" in d.page_source  # type: ignore
    width = d.execute_script("return document.documentElement.scrollWidth")  # type: ignore
    assert width <= 400, "no horizontal scrolling on a phone"
    snap(d, shots, "agenda-phone")


def test_another_tenants_conversation_is_not_found_in_the_browser(
        env: ReplayEnvironment, driver: object, shots: Path) -> None:
    from selenium.webdriver.common.by import By

    seeded = seed(env)
    sign_in(driver, env, seeded.garage_token)
    driver.get(f"{env.web_url}/console/conversations/{seeded.salon_conversation_id}")  # type: ignore
    assert driver.find_element(By.ID, "message").text == "Não encontrado."  # type: ignore
    assert "amônia" not in driver.page_source  # type: ignore[attr-defined]


# the selects whose chosen option's text is wider than the select leaves it (its padding and
# arrow taken off), measured with the select's own font
CUT_SELECTS = """
const ctx = document.createElement('canvas').getContext('2d');
return [...document.querySelectorAll('select')].filter(s => {
  const style = getComputedStyle(s); ctx.font = style.font;
  const text = s.options[s.selectedIndex] ? s.options[s.selectedIndex].text : '';
  const room = s.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)
               - 20;
  return ctx.measureText(text).width > room;
}).map(s => s.name + ': ' + s.options[s.selectedIndex].text);
"""
PHONE_PAGES = ("/console/", "/console/settings", "/console/catalog", "/console/review",
               "/console/conversations", "/console/conversations/{conversation}",
               "/console/attention", "/console/appointments?week=2026-06-01",
               "/console/agenda?day=2026-06-02", "/console/webhooks",
               "/console/results", "/console/results?period=month")


def test_no_console_page_scrolls_sideways_on_a_phone(
        env: ReplayEnvironment, driver: object, shots: Path) -> None:
    """Issue 36: at 390 × 844 every page fits its width (the catalogue was 455 px wide and
    Conversas 408 px)."""
    d = driver
    seeded: Seeded = seed(env)
    sign_in(d, env, seeded.salon_token)
    d.set_window_size(390, 844)  # type: ignore[attr-defined]
    wide: dict[str, list[int]] = {}
    for page in PHONE_PAGES:
        d.get(env.web_url + page.format(  # type: ignore[attr-defined]
            conversation=seeded.salon_conversation_id))
        assert "/console/login" not in d.current_url  # type: ignore[attr-defined]
        width = d.execute_script(  # type: ignore[attr-defined]
            "return [document.documentElement.scrollWidth, window.innerWidth]")
        if width[0] > width[1]:
            wide[page] = width
            snap(d, shots, "phone-" + page.strip("/").replace("/", "-").split("?")[0])
    assert wide == {}, f"pages that scroll sideways on a phone: {wide}"
    d.get(env.web_url + "/console/settings")  # type: ignore[attr-defined]
    cut = d.execute_script(  # type: ignore[attr-defined]
        CUT_SELECTS)  # the budget's "Ao atingir 100%" read "responder com o r" at 390 px
    assert cut == [], f"settings selects whose chosen text is cut on a phone: {cut}"
