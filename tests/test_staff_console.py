"""The console's side of a person taking over (issue 23): the "Atendimento" page with its counts
in the navigation, the reply box and the hand-back button on a conversation; CSRF, XSS and
tenant isolation over HTTP, then the same in a real headless Chromium at a phone's width.
"""

import json
import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import col, select

from replay.environment import ReplayEnvironment
from storage import staff
from storage.conversations import with_staff
from storage.db import session_scope
from storage.models import Conversation, Message, Tenant
from tests.conftest import START
from tests.console_helpers import Seeded, seed
from tests.factories import text_body
from tests.test_console import Browser
from tests.test_console_browser import (  # noqa: F401  (driver, shots: fixtures)
    CHROMEDRIVER,
    CHROMIUM,
    driver,
    shots,
    sign_in,
    snap,
    wait_for,
)

XSS = "<script>alert('x')</script><img src=x onerror=alert(1)>"


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    yield environment
    environment.close()


def handed_off(env: ReplayEnvironment) -> Seeded:
    """The seeded salon conversation handed to staff (as the tool does)."""
    seeded = seed(env)
    with session_scope(env.engine) as session:
        conversation = session.get(Conversation, seeded.salon_conversation_id)
        assert conversation is not None
        tenant = session.get(Tenant, conversation.tenant_id)
        assert tenant is not None
        assert staff.start_handoff(session, conversation, tenant, reason="reclamação",
                                   summary="quer falar com a dona", now=env.clock.now())
    return seeded


def staff_messages(env: ReplayEnvironment) -> list[Message]:
    with session_scope(env.engine) as session:
        return list(session.exec(select(Message).where(col(Message.author).is_not(None))))


def test_the_attention_page_lists_the_handoff_with_counts_in_the_navigation(
        env: ReplayEnvironment) -> None:
    seeded = handed_off(env)
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    status, page, _ = browser.request("/console/attention")
    assert status == 200
    assert f'href="/console/conversations/{seeded.salon_conversation_id}"' in page
    assert "Esperando alguém da equipe" in page and "quer falar com a dona" in page
    count = re.search(r'id="attention-count">(\d+)<', page)
    assert count is not None and int(count.group(1)) == 2  # the handoff and the fact in review
    assert f"/console/conversations/{seeded.garage_conversation_id}\"" not in page
    garage = Browser(env.web_url)
    garage.sign_in(seeded.garage_token)
    status, page, _ = garage.request("/console/attention")
    assert status == 200 and "quer falar com a dona" not in page


def test_the_reply_box_needs_csrf_escapes_what_it_shows_and_stays_in_its_tenant(
        env: ReplayEnvironment) -> None:
    seeded = handed_off(env)
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    cid = seeded.salon_conversation_id
    path = f"/console/conversations/{cid}"
    status, _, _ = browser.request(path + "/reply", {"csrf": "wrong", "text": "oi"})
    assert status == 403 and staff_messages(env) == []
    browser.request(path)
    status, _, headers = browser.request(path + "/reply", {"csrf": browser.csrf, "text": XSS,
                                                           "author": XSS})
    assert status == 303 and headers["Location"] == path
    env.drain()
    assert env.graph_api.sends[-1].body["text"]["body"] == XSS
    status, page, _ = browser.request(path)
    assert status == 200 and XSS not in page and "<script>alert" not in page
    assert "&lt;script&gt;alert(" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert 'class="bubble staff' in page
    # the garage's conversation is another tenant's: not found, nothing stored or sent
    sends = len(env.graph_api.sends)
    status, _, _ = browser.request(f"/console/conversations/{seeded.garage_conversation_id}"
                                   "/reply", {"csrf": browser.csrf, "text": "oi"})
    assert status == 404
    status, _, _ = browser.request(f"/console/conversations/{seeded.garage_conversation_id}"
                                   "/hand-back", {"csrf": browser.csrf})
    assert status == 404
    env.drain()
    assert len(staff_messages(env)) == 1 and len(env.graph_api.sends) == sends
    status, _, _ = browser.request(path + "/hand-back", {"csrf": "wrong"})
    assert status == 403
    status, _, _ = browser.request(path + "/hand-back", {"csrf": browser.csrf})
    assert status == 303
    with session_scope(env.engine) as session:
        conversation = session.get(Conversation, cid)
        assert conversation is not None and not with_staff(conversation, env.clock.now())


def test_a_reply_outside_the_window_comes_back_with_the_reason(env: ReplayEnvironment) -> None:
    seeded = handed_off(env)
    env.clock.advance(timedelta(hours=25))
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    path = f"/console/conversations/{seeded.salon_conversation_id}"
    browser.request(path)
    status, _, headers = browser.request(path + "/reply", {"csrf": browser.csrf,
                                                           "text": "ainda quer marcar?"})
    assert status == 303 and headers["Location"] == path
    status, page, _ = browser.request(path)
    assert "passaram mais de 24 horas desde a última mensagem do cliente" in page
    assert staff_messages(env) == []


@pytest.mark.browser
@pytest.mark.skipif(not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
                    reason="needs Debian's chromium and chromium-driver (docs/REPLAY.md)")
def test_on_a_phone_the_owner_finds_the_handoff_replies_and_hands_back(
        env: ReplayEnvironment, shots: Path, driver: object) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    d = driver
    seeded = handed_off(env)
    d.set_window_size(390, 844)  # type: ignore[attr-defined]
    sign_in(d, env, seeded.salon_token)
    d.find_element(By.CSS_SELECTOR, "nav a[data-page=attention]").click()  # type: ignore
    wait_for(d, lambda d: d.current_url.endswith("/console/attention"))
    assert d.find_element(By.ID, "attention-count").text == "2"  # type: ignore[attr-defined]
    snap(d, shots, "attention")
    d.find_element(By.CSS_SELECTOR, "#with-staff a").click()  # type: ignore[attr-defined]
    wait_for(d, lambda d: "/console/conversations/" in d.current_url)
    box = d.find_element(By.ID, "reply-text")  # type: ignore[attr-defined]
    assert box.is_displayed() and box.size["width"] <= 390
    box.send_keys("Oi Ana, aqui é a Júlia. Já resolvo pra você!")
    d.find_element(By.ID, "reply-author").send_keys("Júlia")  # type: ignore[attr-defined]
    d.find_element(By.ID, "reply-send").click()  # type: ignore[attr-defined]
    wait_for(d, lambda d: "Resposta enviada" in d.find_element(By.CSS_SELECTOR, ".flash").text)
    assert "Já resolvo pra você!" in d.find_element(  # type: ignore[attr-defined]
        By.CSS_SELECTOR, ".bubble.staff").text
    scroll = d.execute_script(  # type: ignore[attr-defined]
        "return document.documentElement.scrollWidth")
    assert scroll <= 400, "no sideways scrolling on a phone"
    snap(d, shots, "reply-box")
    env.drain()
    assert env.graph_api.sends[-1].body["text"]["body"] == (
        "Oi Ana, aqui é a Júlia. Já resolvo pra você!")
    assert staff_messages(env)[-1].author == "staff:Júlia"
    d.find_element(By.ID, "hand-back").click()  # type: ignore[attr-defined]
    wait_for(d, lambda d: "voltou para o agente" in d.find_element(By.CSS_SELECTOR,
                                                                     ".flash").text)
    with session_scope(env.engine) as session:
        conversation = session.get(Conversation, seeded.salon_conversation_id)
        assert conversation is not None and not with_staff(conversation, env.clock.now())



def test_a_console_reply_reaches_the_model_labelled_when_the_agent_resumes(
        env: ReplayEnvironment) -> None:
    """Issue 37: a staff reply typed in the console, then a hand-back and the customer
    writes: the turn request carries the reply with its `[equipe: NAME]` label, as context
    on the user side (agent/timeline.py)."""
    seeded = handed_off(env)
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    path = f"/console/conversations/{seeded.salon_conversation_id}"
    browser.request(path)
    status, _, _ = browser.request(path + "/reply", {
        "csrf": browser.csrf, "text": "Oi Ana, aqui é a Júlia: seu corte de terça está mantido.",
        "author": "Júlia"})
    assert status == 303
    env.drain()
    status, _, _ = browser.request(path + "/hand-back", {"csrf": browser.csrf})
    assert status == 303
    env.clock.advance(timedelta(minutes=2))
    env.messages_api.script("turn", [{"text": "Combinado, até terça!"}])
    body = text_body("obrigada, Júlia!", 77, sent_at=env.clock.now())
    assert env.post_webhook(json.dumps(body).encode()) == 200
    env.drain()
    request = env.messages_api.last_requests["turn"]
    last = request["messages"][-1]
    assert last["role"] == "user" and env.messages_api.api_errors == 0
    texts = [b.get("text", "") for b in last["content"]]
    assert "[equipe: Júlia] Oi Ana, aqui é a Júlia: seu corte de terça está mantido." in texts
    assert texts[-1].endswith("obrigada, Júlia!")
