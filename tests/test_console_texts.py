"""The console's Portuguese pages have no English left: the product's notes in a transcript,
the chart's labels, the prompt preview's headings; a conversation without calls shows no chart."""

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from bot.console.texts import TEXTS, translate_notes
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import Contact, Conversation, Tenant
from tests.conftest import START
from tests.console_helpers import Seeded, seed
from tests.test_console import Browser
from tests.test_edits import follow_up
from whatsapp.inbound import DELETED, edit_text, render_text


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    yield environment
    environment.close()


NOTES: list[tuple[dict[str, Any], str]] = [
    ({"type": "text", "text": {"body": ""}}, "text"),
    ({"type": "reaction", "reaction": {"emoji": "👍"}}, "reaction"),
    ({"type": "reaction", "reaction": {}}, "reaction"),
    ({"type": "button", "button": {"text": "Sim", "payload": "yes"}}, "button"),
    ({"type": "interactive", "interactive": {"type": "button_reply",
                                             "button_reply": {"id": "b1", "title": "Sim"}}},
     "interactive"),
    ({"type": "interactive", "interactive": {"type": "list_reply", "list_reply": {
        "id": "l1", "title": "Corte", "description": "60 min"}}}, "interactive"),
    ({"type": "interactive", "interactive": {"type": "nfm_reply",
                                             "nfm_reply": {"response_json": "{}"}}},
     "interactive"),
    ({"type": "interactive", "interactive": {"type": "other"}}, "interactive"),
    ({"type": "location", "location": {"name": "Salão", "latitude": -23.5,
                                       "longitude": -46.6}}, "location"),
    ({"type": "image", "image": {"caption": "meu cabelo"}}, "image"),
    ({"type": "audio", "audio": {"voice": True}}, "audio"),
    ({"type": "document", "document": {"filename": "guia.pdf"}}, "document"),
    ({"type": "sticker", "sticker": {}}, "sticker"),
    ({"type": "contacts", "contacts": [{"name": {"formatted_name": "Bia"}}]}, "contacts"),
    ({"type": "contacts", "contacts": []}, "contacts"),
    ({"type": "order", "order": {"product_items": [{}, {}]}}, "order"),
    ({"type": "unsupported", "unsupported": {"type": "poll"}}, "unsupported"),
]
ENGLISH = re.compile(r"\b(the|an|of|to|sent|we|cannot|tapped|picked|shared|reaction|"
                     r"message|button|reply|removed|template|window)\b", re.IGNORECASE)


@pytest.mark.parametrize(("item", "wa_type"), NOTES)
def test_every_note_the_product_writes_reads_in_portuguese(item: dict[str, Any],
                                                            wa_type: str) -> None:
    note, _ = render_text(item, wa_type)
    shown = translate_notes(note, "pt-BR")
    words = ENGLISH.findall(re.sub(r'"[^"]*"|\(id [^)]*\)|\(payload [^)]*\)', "", shown))
    assert not words, (note, shown)
    assert translate_notes(note, "en") == note


def test_edits_deletions_and_follow_ups_read_in_portuguese() -> None:
    assert translate_notes(edit_text("às 15h", "Mon 10:00"), "pt-BR") == \
        "[o cliente editou a mensagem de Mon 10:00 para:] às 15h"
    assert translate_notes(edit_text("às 15h", None), "pt-BR") == \
        "[o cliente editou uma mensagem anterior para:] às 15h"
    assert translate_notes(DELETED, "pt-BR") == "[o cliente apagou uma mensagem]"
    assert translate_notes("[follow-up template retorno: the reply window had closed]",
                           "pt-BR").startswith("[modelo de retorno retorno:")
    assert translate_notes("oi, tudo bem? [sic]", "pt-BR") == "oi, tudo bem? [sic]"


def test_the_portuguese_conversation_page_has_no_english_and_no_chart_without_calls(
        env: ReplayEnvironment) -> None:
    seeded: Seeded = seed(env)
    env.messages_api.script("turn", [{"text": "Combinado, às 15h."}])
    edit = follow_up("edit", "wamid.E.CONSOLE", "wamid.TEST0001000001", text="às 15h",
                     ts=int(env.clock.now().timestamp()))
    assert env.post_webhook(json.dumps(edit).encode()) == 200
    env.drain()
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    _, page, _ = browser.request(f"/console/conversations/{seeded.salon_conversation_id}")
    assert "[o cliente editou a mensagem de" in page and "the customer edited" not in page
    assert "chamada nº (" in page and "call #" not in page
    assert '<div id="plot">' in page

    with session_scope(env.engine) as session:  # a conversation the model never saw
        tenant = session.get(Tenant, session.get(Conversation,
                                                 seeded.salon_conversation_id).tenant_id)
        contact = Contact(tenant_id=tenant.id, wa_id="5511999990077", created_at=START)
        session.add(contact)
        session.flush()
        quiet = Conversation(tenant_id=tenant.id, contact_id=contact.id, opened_at=START,
                             last_activity_at=START, due_at=START)
        session.add(quiet)
        session.flush()
        quiet_id = quiet.id
    status, page, _ = browser.request(f"/console/conversations/{quiet_id}")
    assert status == 200 and '<div id="plot">' not in page and "<svg" not in page
    assert TEXTS["pt-BR"]["no_calls"] in page


def test_the_prompt_preview_has_portuguese_headings(env: ReplayEnvironment) -> None:
    seeded: Seeded = seed(env)
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    _, page, _ = browser.request("/console/settings")
    pt = TEXTS["pt-BR"]
    for heading in (pt["preview_rules"], pt["preview_yours"], pt["preview_example"]):
        assert f"<h3>{heading}</h3>" in page
    assert "Business instructions:" not in page
    instructions = re.search(r'<pre id="preview-instructions">(.*?)</pre>', page, re.S)
    assert instructions is not None and "Rules that always hold" not in instructions.group(1)
