"""The console's Portuguese pages have no English left: the product's notes in a transcript,
the chart's labels, the prompt preview's headings; a conversation without calls shows no chart."""

import html
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from agent.tools.registry import REGISTRY
from bot.console.texts import TEXTS, translate_notes
from operations.staff import template_note
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.fact_keys import DEFAULT_KEYS
from storage.facts import CURRENT
from storage.models import Contact, Conversation, Tenant
from storage.rights import ANONYMOUS
from tests.conftest import START
from tests.console_helpers import Seeded, seed
from tests.factories import text_body
from tests.test_console import Browser
from tests.test_edits import follow_up
from whatsapp.inbound import DELETED, ECHO_KINDS, _parse_echo, edit_text, render_text
from workers.media import VOICE_MARK, _caption_text, _failure_text


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


PICKS = {"button", "interactive"}  # a pick reads "Escolheu: TITLE" / "Picked: TITLE"


@pytest.mark.parametrize(("item", "wa_type"), NOTES)
def test_every_note_the_product_writes_reads_in_portuguese(item: dict[str, Any],
                                                            wa_type: str) -> None:
    note, _ = render_text(item, wa_type)
    shown = translate_notes(note, "pt-BR")
    words = ENGLISH.findall(re.sub(r'"[^"]*"|\(id [^)]*\)|\(payload [^)]*\)', "", shown))
    assert not words, (note, shown)
    picked = re.match(r'\[(?:picked list option|tapped button|tapped quick reply) "(.*?)"', note)
    if picked:
        assert shown == f"Escolheu: {picked.group(1)}"
        assert translate_notes(note, "en") == f"Picked: {picked.group(1)}"
    else:
        assert translate_notes(note, "en") == note


def _media_notes() -> list[str]:
    """Every note workers/media.py writes (issue 27): a caption note per kind, each failure."""
    kinds = [{"kind": "image", "caption": "meu cabelo"}, {"kind": "image"},
             {"kind": "document", "filename": "guia.pdf", "caption": "o exame"},
             {"kind": "document"}, {"kind": "audio", "voice": True}, {"kind": "audio"}]
    notes = [VOICE_MARK + " quero marcar amanhã"]
    notes += [_caption_text(described) for described in kinds]
    notes += [_failure_text(described, reason) for described in kinds
              for reason in ("transcription", "too_large", "too_wide", "too_many_pages",
                             "unsupported_type", "corrupt", "download")]
    return notes


def _staff_notes() -> list[str]:
    """Every note of staff's messages (issue 23): echoes of the owner's app, template replies,
    an erased name."""
    notes = [f"[staff sent {kind}]" for kind in ECHO_KINDS.values()]
    notes.append(str(_parse_echo({"id": "wamid.E1", "to": "5511999990001", "type": "poll",
                                  "timestamp": "1780318831"}, "109876543210987", []).text))
    notes += [template_note("lembrete", ["amanhã", "15h"]), template_note("retorno", []),
              ANONYMOUS]
    return notes


MORE_ENGLISH = re.compile(r"\b(photo|document|voice|note|caption|could|downloaded|large|open|"
                          r"staff|wrote|erased|transcribed|ask|them|text|with|before|at most|"
                          r"pages|side|image|audio|damaged|file|type|contact|card|empty)\b",
                          re.IGNORECASE)


@pytest.mark.parametrize("note", _media_notes() + _staff_notes())
def test_media_and_staff_notes_read_in_portuguese(note: str) -> None:
    shown = translate_notes(note, "pt-BR")
    plain = re.sub(r'"[^"]*"|\([^)]*\.pdf\)', "", shown)
    assert not ENGLISH.findall(plain) and not MORE_ENGLISH.findall(plain), (note, shown)
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


def test_a_list_offered_and_the_customers_pick_read_plainly_in_both_languages(
        env: ReplayEnvironment) -> None:
    seeded: Seeded = seed(env)
    env.messages_api.script("turn", [
        {"tool": "offer_choices", "input": {
            "button": "Ver horários", "body": "Tenho estes horários. Qual prefere?",
            "options": [{"slot": f"2026-06-02T{hour}:00", "professional": "julia",
                         "title": f"Ter 02/06 {hour}:00", "description": "com a Júlia"}
                        for hour in ("14", "16")]}}])
    ask = text_body("tem outro horário amanhã?", 70, sent_at=env.clock.now())
    assert env.post_webhook(json.dumps(ask).encode()) == 200
    env.drain()
    sent = env.graph_api.accepted[-1].body
    assert sent["type"] == "interactive"
    row = sent["interactive"]["action"]["sections"][0]["rows"][1]
    env.messages_api.script("turn", [{"text": "Combinado."}])
    pick = text_body("", 71, sent_at=env.clock.now())
    message = pick["entry"][0]["changes"][0]["value"]["messages"][0]
    del message["text"]
    message.update(type="interactive", context={"from": "5511999990000",
                                                "id": env.graph_api.accepted[-1].wamid},
                   interactive={"type": "list_reply", "list_reply": row})
    assert env.post_webhook(json.dumps(pick).encode()) == 200
    env.drain()

    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    path = f"/console/conversations/{seeded.salon_conversation_id}"
    _, page, _ = browser.request(path)
    assert "Escolheu: Ter 02/06 16:00" in page and "picked list option" not in page
    offered = re.search(r'<div class="offered list">(.*?)</div>', page, re.S)
    assert offered is not None
    assert "Lista de opções «Ver horários»:" in offered.group(1)
    assert "<li>Ter 02/06 14:00</li><li>Ter 02/06 16:00</li>" in offered.group(1)
    browser.request("/console/language", {"csrf": browser.csrf, "language": "en",
                                          "next": path})
    _, page, _ = browser.request(path)
    assert "Picked: Ter 02/06 16:00" in page and "List of options «Ver horários»:" in page


def _visible(page: str) -> str:
    """The text a person reads: no tags, no attribute values, no form fields' contents, no
    folded technical detail (a tool round's input and result, as stored, in a <pre>)."""
    page = re.sub(r"<(script|style|textarea|select|pre)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_no_raw_names_in_the_portuguese_pages(env: ReplayEnvironment) -> None:
    """Issue 36: fact keys, fact states and origins, tool names and delivery states read as
    words in pt-BR (bot/console/labels.py), on every page that shows them."""
    seeded: Seeded = seed(env)
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    raw = [*(tool.name for tool in REGISTRY), *DEFAULT_KEYS, *CURRENT, "unknown", "extracted"]
    for path in ("/console/", "/console/attention", "/console/review",
                 f"/console/conversations/{seeded.salon_conversation_id}",
                 "/console/conversations", "/console/catalog", "/console/appointments",
                 "/console/agenda?day=2026-06-02", "/console/settings"):
        status, page, _ = browser.request(path)
        assert status == 200, path
        words = set(re.findall(r"[a-z_]+", _visible(page)))
        assert not words & set(raw), (path, sorted(words & set(raw)))
    page = _visible(browser.request(
        f"/console/conversations/{seeded.salon_conversation_id}")[1])
    assert "Ferramentas usadas: buscou horários" in page or "Ferramentas usadas: agendou" \
        in page
    assert "alergias" in _visible(browser.request("/console/review")[1])
