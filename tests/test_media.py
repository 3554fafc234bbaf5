"""Issue 27: photos, PDFs and voice notes reach the agent; every bad input gets a sensible reply
and loses nothing. The real web app, RQ worker, Graph client (whatsapp/media.py) and the
Messages, Graph and transcription doubles, on loopback."""

import base64
import copy
import hashlib
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from sqlmodel import select

from agent import media as rules
from agent.tools.facts import from_voice_note
from core import faults
from core.settings import Settings
from replay.environment import ReplayEnvironment
from replay.media_steps import png_bytes
from replay.messages_api import count_tokens
from replay.runner import run_scenario, run_scenario_file
from replay.seen import block_types_problem
from storage import media as media_repo
from storage.db import session_scope
from storage.models import Contact, ContactFact, MediaFile, Message
from storage.rights import forget_contact
from tests.conftest import START
from tests.factories import TENANT, scenario, text_body
from whatsapp.inbound import media_descriptor
from whatsapp.media import MediaClient, MediaError, sha256_matches
from workers.media import VOICE_MARK

FIXTURES = Path(__file__).parent / "fixtures" / "whatsapp"
LOCAL = Path(__file__).parent / "scenarios" / "media"
IMAGE_ID, AUDIO_ID = "1029384756102938", "1122334455667788"
REPLY = "Que lindo corte! Posso marcar para amanhã às 14h?"


def _fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def image_body(sha: str, *, n: int = 8, kind: str = "image", mime: str = "image/jpeg",
               caption: str | None = "Foto do produto com defeito") -> dict[str, Any]:
    """message_image_caption.json with this file's sha256 (the fixture's is invented)."""
    body = copy.deepcopy(_fixture("message_image_caption.json"))
    item = body["entry"][0]["changes"][0]["value"]["messages"][0]
    item["id"] = f"wamid.MEDIA{n:06d}"
    described = item.pop("image")
    described.update(sha256=sha, mime_type=mime)
    if caption is None:
        described.pop("caption")
    else:
        described["caption"] = caption
    if kind == "document":
        described["filename"] = "orcamento.pdf"
    item["type"], item[kind] = kind, described
    return body


def audio_body(sha: str, *, n: int = 9) -> dict[str, Any]:
    body = copy.deepcopy(_fixture("message_audio_voice.json"))
    item = body["entry"][0]["changes"][0]["value"]["messages"][0]
    item["id"] = f"wamid.VOICE{n:06d}"
    item["audio"]["sha256"] = sha
    return body


@pytest.fixture
def media_env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url,
                                    redis_url=redis_url, media_timeout=0.5)
    environment.add_tenant(TENANT)
    yield environment
    environment.close()


def _post(env: ReplayEnvironment, body: dict[str, Any]) -> None:
    assert env.post_webhook(json.dumps(body).encode()) == 200
    env.drain()


def _user_blocks(env: ReplayEnvironment) -> list[dict[str, Any]]:
    call = [c for c in env.messages_api.calls if c.purpose == "turn"][-1]
    return [b for m in call.request["messages"] if m["role"] == "user" for b in m["content"]]


def _texts(env: ReplayEnvironment) -> str:
    return "\n".join(str(b.get("text", "")) for b in _user_blocks(env))


def flatten_blocks(call: Any) -> list[dict[str, Any]]:
    request = call.request
    return [*request.get("tools", []), *request["system"],
            *(b for m in request["messages"] for b in m["content"])]


def _stored(env: ReplayEnvironment) -> Message:
    with session_scope(env.engine) as session:
        row = session.exec(select(Message).where(Message.direction == "inbound")).one()
        session.expunge(row)
        return row


def test_a_photo_that_opens_the_conversation_reaches_claude_as_an_image_block(
        media_env: ReplayEnvironment) -> None:
    env, photo = media_env, png_bytes(800, 600)
    sha = env.graph_api.add_media(IMAGE_ID, photo, "image/jpeg")
    env.messages_api.script("turn", [{"text": REPLY}])
    _post(env, image_body(sha))
    blocks = _user_blocks(env)
    assert [b["type"] for b in blocks] == ["text", "image"]
    assert "Foto do produto com defeito" in blocks[0]["text"]
    assert blocks[0]["text"].startswith("[Mon 2026-06-01 10:00")  # the stamp stays first
    assert blocks[1]["source"]["media_type"] == "image/png"  # by the bytes, not the claim
    assert base64.b64decode(blocks[1]["source"]["data"]) == photo
    assert [s.body["text"]["body"] for s in env.graph_api.accepted] == [REPLY]
    assert env.messages_api.api_errors == 0
    # the token was sent to the Graph base only, and the webhook's url was never followed
    assert env.graph_api.media_requests == [f"/v25.0/{IMAGE_ID}",
                                            f"/media-download/{IMAGE_ID}"]
    # counted by the stated rule: 800 × 600 / 750 = 640 tokens, not base64 bytes / 4
    assert count_tokens(blocks[1]) == 640 == rules.block_tokens(blocks[1])
    usage = env.messages_api.calls[-1].usage or {}
    total = sum(int(usage.get(k) or 0) for k in (
        "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    assert total == sum(count_tokens(b) for b in flatten_blocks(env.messages_api.calls[-1]))
    stored = _stored(env)
    assert stored.media and stored.media["state"] == "ok" and stored.answered_at is not None
    with session_scope(env.engine) as session:
        files = session.exec(select(MediaFile)).all()
        assert [f.size_bytes for f in files] == [len(photo)]
        assert files[0].sha256 == hashlib.sha256(photo).hexdigest()


def test_a_pdf_reaches_claude_as_a_document_block(media_env: ReplayEnvironment) -> None:
    env = media_env
    pdf = b"%PDF-1.4\n1 0 obj << /Type /Pages /Count 2 >> endobj\n" \
          b"2 0 obj << /Type /Page >> endobj\n3 0 obj << /Type /Page >> endobj\n%%EOF"
    sha = env.graph_api.add_media(IMAGE_ID, pdf, "application/pdf")
    env.messages_api.script("turn", [{"text": "Recebi o orçamento."}])
    _post(env, image_body(sha, kind="document", mime="application/pdf", caption=None))
    blocks = _user_blocks(env)
    assert [b["type"] for b in blocks] == ["text", "document"]
    assert "orcamento.pdf" in blocks[0]["text"]
    assert rules.block_tokens(blocks[1]) == 2 * rules.PDF_PAGE_TOKENS


def test_a_voice_note_is_transcribed_and_marked(media_env: ReplayEnvironment) -> None:
    env, audio = media_env, b"OggS" + b"\x01" * 2000
    sha = env.graph_api.add_media(AUDIO_ID, audio, "audio/ogg")
    env.transcription_api.script(["quero marcar um corte amanhã de manhã"])
    env.messages_api.script("turn", [{"text": "Claro! Tenho 9h ou 10h."}])
    _post(env, audio_body(sha))
    text = _texts(env)
    assert f"{VOICE_MARK} quero marcar um corte amanhã de manhã" in text
    [request] = env.transcription_api.requests
    assert (request.status, request.model, request.language, request.size) == (
        200, "whisper-1", "pt", len(audio))
    assert _stored(env).media["voice"] is True  # type: ignore[index]
    assert from_voice_note(_stored(env))
    assert len(env.graph_api.accepted) == 1


@pytest.mark.parametrize("answer", [{"status": 500}, {"garbage": True}, "   "])
def test_a_failing_transcription_tells_the_agent_and_the_turn_goes_on(
        media_env: ReplayEnvironment, answer: Any) -> None:
    env = media_env
    sha = env.graph_api.add_media(AUDIO_ID, b"OggS" + b"\x02" * 500, "audio/ogg")
    env.transcription_api.script([answer])
    env.messages_api.script("turn", [{"text": "Não consegui ouvir seu áudio, pode escrever?"}])
    _post(env, audio_body(sha))
    assert "voice note that could not be understood" in _texts(env)
    assert len(env.graph_api.accepted) == 1
    stored = _stored(env)
    assert stored.answered_at is not None and stored.media["state"].startswith(  # type: ignore[index]
        "failed:transcription_")


def test_without_a_transcription_endpoint_the_agent_is_told(
        database_url: str | None, redis_url: str | None) -> None:
    env = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url,
                            transcription_base_url="")
    try:
        env.add_tenant(TENANT)
        sha = env.graph_api.add_media(AUDIO_ID, b"OggS" + b"\x03" * 500, "audio/ogg")
        env.messages_api.script("turn", [{"text": "Pode escrever, por favor?"}])
        _post(env, audio_body(sha))
        assert "could not be understood" in _texts(env)
        assert env.transcription_api.requests == []
        assert len(env.graph_api.accepted) == 1
    finally:
        env.close()


def test_a_voice_note_over_25_mb_gets_the_audio_limit(media_env: ReplayEnvironment) -> None:
    """Issue 36: the note names the audio limit, not the image limits."""
    env = media_env
    data = b"OggS" + b"\x05" * 500
    sha = base64.b64encode(hashlib.sha256(data).digest()).decode()
    env.graph_api.add_media(AUDIO_ID, data, "audio/ogg", "oversize")
    env.messages_api.script("turn", [{"text": "Não consegui ouvir, pode escrever?"}])
    _post(env, audio_body(sha))
    text = _texts(env)
    assert "voice note too large for us to open (at most 25 MB)" in text
    assert "px" not in text and env.transcription_api.requests == []
    assert len(env.graph_api.accepted) == 1


def test_a_voice_note_in_another_language_reaches_the_agent_as_said(
        media_env: ReplayEnvironment) -> None:
    env = media_env
    sha = env.graph_api.add_media(AUDIO_ID, b"OggS" + b"\x04" * 500, "audio/ogg")
    env.transcription_api.script(["quiero un corte mañana por la tarde"])
    env.messages_api.script("turn", [{"text": "¡Claro! Tengo las 15h."}])
    _post(env, audio_body(sha))
    assert "quiero un corte mañana" in _texts(env)  # the agent answers in the customer's
    assert len(env.graph_api.accepted) == 1


@pytest.mark.parametrize(("fault", "data", "said"), [
    ("not_found", png_bytes(10, 10), "could not be downloaded"),
    ("stall", png_bytes(10, 10), "could not be downloaded"),
    ("oversize", png_bytes(10, 10), "too large"),
    ("oversize_stream", png_bytes(10, 10), "too large"),
    ("corrupt", png_bytes(10, 10), "could not be downloaded"),
    (None, b"\xff\xd8\xff\xe0garbage that is no jpeg", "cannot open"),
    (None, png_bytes(9000, 10), "too large"),
])
def test_a_bad_photo_gets_a_sensible_reply_and_loses_nothing(
        media_env: ReplayEnvironment, fault: str | None, data: bytes, said: str) -> None:
    env = media_env
    sha = base64.b64encode(hashlib.sha256(data).digest()).decode()
    env.graph_api.add_media(IMAGE_ID, data, "image/jpeg", fault)
    env.messages_api.script("turn", [{"text": "Não consegui abrir a foto, pode mandar de novo?"}])
    _post(env, image_body(sha))
    text = _texts(env)
    assert said in text and "Foto do produto com defeito" in text
    assert [b["type"] for b in _user_blocks(env)] == ["text"]
    assert len(env.graph_api.accepted) == 1 and env.messages_api.api_errors == 0
    stored = _stored(env)
    assert stored.answered_at is not None and stored.media["state"].startswith("failed:")  # type: ignore[index]
    _post(env, image_body(sha))  # Meta redelivers: nothing is answered twice
    assert len(env.graph_api.accepted) == 1
    with session_scope(env.engine) as session:
        assert session.exec(select(MediaFile)).all() == []


def test_a_100_mb_video_is_never_downloaded(media_env: ReplayEnvironment) -> None:
    env = media_env
    env.messages_api.script("turn", [{"text": "Não consigo ver vídeos, pode descrever?"}])
    _post(env, image_body("x", kind="video", mime="video/mp4"))
    assert "video we cannot open" in _texts(env)
    assert env.graph_api.media_requests == []
    assert len(env.graph_api.accepted) == 1


def test_the_token_goes_only_to_allowed_hosts() -> None:
    seen: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(str(request.url.host))
        return httpx2.Response(200, json={"url": "https://evil.example/x", "mime_type":
                                          "image/png", "file_size": 10})

    client = MediaClient(base_url="https://graph.facebook.com", api_version="v25.0",
                         access_token="secret-token",
                         http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    assert client.allowed("https://lookaside.fbsbx.com/whatsapp_business/attachments/?mid=1")
    assert not client.allowed("http://lookaside.fbsbx.com/x")
    assert not client.allowed("https://lookaside.fbsbx.com.evil.example/x")
    assert not client.allowed("https://lookaside.fbsbx.com:8443/x")
    with pytest.raises(MediaError) as caught:
        client.fetch("123", max_bytes=100, accept=("image/",), expected_sha256=None)
    assert caught.value.reason == "host_not_allowed" and seen == ["graph.facebook.com"]
    assert "secret-token" not in str(caught.value)


def test_the_webhook_url_is_not_kept_and_sha256_reads_both_encodings() -> None:
    item = _fixture("message_image_caption.json")["entry"][0]["changes"][0]["value"][
        "messages"][0]
    described = media_descriptor(item, "image")
    assert described is not None and "url" not in described
    assert described["id"] == IMAGE_ID and described["caption"] == "Foto do produto com defeito"
    data = b"abc"
    assert sha256_matches(data, hashlib.sha256(data).hexdigest())
    assert sha256_matches(data, base64.b64encode(hashlib.sha256(data).digest()).decode())
    assert not sha256_matches(data, described["sha256"])


def test_the_messages_double_refuses_media_out_of_bounds(media_env: ReplayEnvironment) -> None:
    client = anthropic.Anthropic(api_key="replay-api-key",
                                 base_url=media_env.messages_api.base_url, max_retries=0)
    media_env.messages_api.script("turn", [{"text": "ok"}])

    def call(block: dict[str, Any]) -> None:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=[
            {"role": "user", "content": [{"type": "text", "text": "oi"}, block]}])

    def image(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
        return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                            "data": base64.b64encode(data).decode()}}
    for bad in (image(png_bytes(8001, 2)), image(png_bytes(4, 4), "image/bmp"),
                image(png_bytes(4, 4), "image/jpeg"), image(b"\x89PNG broken")):
        with pytest.raises(anthropic.BadRequestError):
            call(bad)
    call(image(png_bytes(4, 4)))
    client.close()


def test_token_rules() -> None:
    assert rules.image_tokens(800, 600) == 640
    assert rules.image_tokens(4000, 3000) == rules.IMAGE_TOKEN_CAP
    assert rules.pdf_tokens(3) == 6000
    stored = rules.stored_block(1, rules.check_file(png_bytes(300, 250), "image/png"))
    assert rules.block_tokens(stored) == 100


def test_block_types_expectation() -> None:
    bodies = [{"messages": [{"role": "user", "content": "oi"}]},
              {"messages": [{"role": "user", "content": [{"type": "image"},
                                                         {"type": "text"}]}]}]
    assert block_types_problem(bodies, ["image", "text"]) is None
    problem = block_types_problem(bodies[:1], ["image"])
    assert problem is not None and "text" in problem
    assert block_types_problem([], ["image"]) is not None


def test_a_fact_stated_only_in_a_voice_note_is_suggested(media_env: ReplayEnvironment) -> None:
    env = media_env
    sha = env.graph_api.add_media(AUDIO_ID, b"OggS" + b"\x05" * 500, "audio/ogg")
    env.transcription_api.script(["pode anotar que eu sempre quero com a Júlia"])
    env.messages_api.script("turn", [
        {"tool": "remember_fact", "input": {"key": "preferred_professional", "value": "Júlia"}},
        {"text": "Anotado!"}])
    _post(env, audio_body(sha))
    with session_scope(env.engine) as session:
        (fact,) = session.exec(select(ContactFact)).all()
        assert (fact.key, fact.state) == ("preferred_professional", "suggested")


def _photo_turn(env: ReplayEnvironment) -> None:
    sha = env.graph_api.add_media(IMAGE_ID, png_bytes(64, 48), "image/jpeg")
    env.messages_api.script("turn", [{"text": REPLY}])
    _post(env, image_body(sha))


def _files(env: ReplayEnvironment) -> int:
    with session_scope(env.engine) as session:
        return len(session.exec(select(MediaFile)).all())


def test_bytes_go_when_the_prune_boundary_passes_and_the_block_becomes_a_note(
        media_env: ReplayEnvironment) -> None:
    env = media_env
    _photo_turn(env)
    stored = _stored(env)
    with session_scope(env.engine) as session:
        assert media_repo.delete_pruned(session, stored.conversation_id,
                                        up_to_position=(stored.position or 0) - 1) == 0
        assert media_repo.delete_pruned(session, stored.conversation_id,
                                        up_to_position=stored.position or 0) == 1
    env.messages_api.script("turn", [{"text": "Combinado."}])
    _post(env, text_body("pode ser amanhã", 1))
    blocks = _user_blocks(env)
    assert rules.omitted_note({"type": "image", "source": stored.content[1]["source"]}) in blocks
    assert env.messages_api.api_errors == 0 and _files(env) == 0


def test_erasure_and_retention_delete_the_bytes(media_env: ReplayEnvironment) -> None:
    env = media_env
    _photo_turn(env)
    with session_scope(env.engine) as session:
        tenant_id = _stored(env).tenant_id
        assert media_repo.delete_older_than(session, tenant_id, START) == 0
    assert _files(env) == 1
    with session_scope(env.engine) as session:
        contact = session.exec(select(Contact)).one()
        counts = forget_contact(session, contact, now=env.clock.now())
    assert counts["media_files"] == 1 and _files(env) == 0
    _photo_turn_again = image_body(env.graph_api.add_media(IMAGE_ID, png_bytes(5, 5),
                                                           "image/png"), n=20)
    env.messages_api.script("turn", [{"text": REPLY}])
    _post(env, _photo_turn_again)
    assert _files(env) == 1
    with session_scope(env.engine) as session:
        assert media_repo.delete_older_than(session, tenant_id,
                                            env.clock.now() + timedelta(seconds=1)) == 1


def test_the_media_scenario_passes(database_url: str | None, redis_url: str | None) -> None:
    """tests/scenarios/media_photo_and_voice.json: the photo opens the conversation and reaches
    the request as an image block; the voice note's transcript reaches the agent."""
    result = run_scenario_file(LOCAL.parent / "media_photo_and_voice.json",
                               database_url=database_url, redis_url=redis_url)
    assert result.passed, result.failures
    assert result.api_errors == 0 and result.unscripted_calls == 0 and not result.leftover


def test_block_types_fails_when_no_call_carries_them(database_url: str | None,
                                                    redis_url: str | None) -> None:
    result = run_scenario(scenario([
        {"model": [{"text": "Oi!"}]}, {"webhook": text_body("oi", 1)}, {"drain": True},
        {"expect": {"requests": {"block_types": ["image"]}}}]),
        database_url=database_url, redis_url=redis_url)
    assert not result.passed and "block types ['image']" in result.failures[0]
    bad = run_scenario(scenario([{"expect": {"requests": {"block_typez": []}}},
                                 {"transcripts": "not a list"},
                                 {"media": {"id": "x", "png": [1, 1], "fault": "meh"}}]))
    assert len([f for f in bad.failures if "invalid scenario" in f]) == 4


def test_the_graph_double_answers_a_media_id_as_meta_does(media_env: ReplayEnvironment) -> None:
    """Same keys as graph_api/media_url_response.json; the URL on the double's own host."""
    env = media_env
    env.graph_api.add_media(IMAGE_ID, b"abc", "image/png")
    with httpx2.Client() as client:
        answer = client.get(f"{env.graph_api.base_url}/v25.0/{IMAGE_ID}",
                            headers={"Authorization": "Bearer replay-access-token"}).json()
        refused = client.get(f"{env.graph_api.base_url}/v25.0/{IMAGE_ID}")
    assert set(answer) == set(_fixture("graph_api/media_url_response.json"))
    assert answer["url"].startswith(env.graph_api.base_url) and answer["file_size"] == 3
    assert answer["sha256"] == hashlib.sha256(b"abc").hexdigest()
    assert refused.status_code == 401


def test_a_photo_arriving_mid_turn_is_folded_in_as_an_image(
        media_env: ReplayEnvironment) -> None:
    env = media_env
    sha = env.graph_api.add_media(IMAGE_ID, png_bytes(20, 20), "image/png")
    env.messages_api.script("turn", [{"tool": "list_services", "input": {}},
                                     {"text": "Temos corte, e esse fica lindo."}])
    posted = iter([True])

    def customer_sends_a_photo() -> None:
        if next(posted, False):
            assert env.post_webhook(json.dumps(image_body(sha)).encode()) == 200

    with faults.meanwhile("before_tool_round", customer_sends_a_photo):
        _post(env, text_body("quais serviços vocês têm?", 1))
    second = env.messages_api.calls[1].request["messages"][-1]["content"]
    assert [b["type"] for b in second] == ["tool_result", "text", "image"]
    assert env.messages_api.api_errors == 0 and len(env.messages_api.calls) == 2


def test_language_auto_leaves_it_to_the_provider(
        database_url: str | None, redis_url: str | None) -> None:
    env = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url,
                            transcription_language="auto")
    try:
        env.add_tenant(TENANT)
        sha = env.graph_api.add_media(AUDIO_ID, b"OggS" + b"\x06" * 500, "audio/ogg")
        env.transcription_api.script(["quiero un corte"])
        env.messages_api.script("turn", [{"text": "¡Claro!"}])
        _post(env, audio_body(sha))
        assert [r.language for r in env.transcription_api.requests] == [None]
    finally:
        env.close()


def test_a_document_that_is_not_a_pdf_is_refused_before_its_download(
        media_env: ReplayEnvironment) -> None:
    env = media_env
    data = b"PK\x03\x04 a word file"
    sha = env.graph_api.add_media(IMAGE_ID, data, "application/vnd.openxmlformats-"
                                  "officedocument.wordprocessingml.document")
    env.messages_api.script("turn", [{"text": "Consegue mandar em PDF?"}])
    _post(env, image_body(sha, kind="document", mime="application/msword", caption=None))
    assert "we cannot open" in _texts(env)
    assert env.graph_api.media_requests == [f"/v25.0/{IMAGE_ID}"], "no download"
    assert _stored(env).media["state"] == "failed:unsupported_type"  # type: ignore[index]


def test_the_transcription_key_is_a_secret() -> None:
    settings = Settings.from_env({"TRANSCRIPTION_API_KEY": "sk-transcribe-123",
                                  "TRANSCRIPTION_BASE_URL": "https://api.groq.com/openai"},
                                 require=False)
    assert "sk-transcribe-123" in settings.secret_values()
    assert "sk-transcribe-123" not in repr(settings)
    assert settings.transcription_base_url == "https://api.groq.com/openai"


@pytest.mark.parametrize(("transcript", "stored"), [
    ("quero marcar\x00 amanhã", "quero marcar amanhã"),
    ("quero \ud800 marcar", "quero \ufffd marcar"),
])
def test_a_transcript_is_cleaned_as_inbound_text_is(
        media_env: ReplayEnvironment, transcript: str, stored: str) -> None:
    """A NUL made every attempt a DataError on PostgreSQL (paid transcriptions, never
    answered); a lone surrogate crashed the SDK's JSON on SQLite. Cleaned by the inbound
    path's own rule (whatsapp.inbound.storable_text), both databases."""
    env = media_env
    sha = env.graph_api.add_media(AUDIO_ID, b"OggS" + b"\x05" * 500, "audio/ogg")
    env.transcription_api.script([transcript] * 3)
    env.messages_api.script("turn", [{"text": "Claro!"}])
    _post(env, audio_body(sha))
    assert [s.body["text"]["body"] for s in env.graph_api.accepted] == ["Claro!"]
    assert f"{VOICE_MARK} {stored}" in _texts(env)
    assert len(env.transcription_api.requests) == 1, "transcribed once"
    row = _stored(env)
    assert row.answered_at is not None and row.media["state"] == "ok"  # type: ignore[index]


def test_the_download_deadline_bounds_a_drip() -> None:
    """One byte every 50 ms never trips the read timeout (1 s); the deadline (0.5 s) is a
    bound on the whole download, checked after every read (whatsapp/media.py): the client
    gives up long before the 40 bytes (2 s) are through, not after a 64 KB chunk or the end."""
    written: list[int] = []
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Drip(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.startswith("/v25.0/"):
                body = json.dumps({"url": f"http://127.0.0.1:{port}/dl",
                                   "mime_type": "image/png"}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Content-Length", "40")
            self.end_headers()
            try:
                for _ in range(40):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    written.append(1)
                    time.sleep(0.05)
            except OSError:
                pass  # the client gave up: what the test wants

    server = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    port = server.server_port
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = MediaClient(base_url=f"http://127.0.0.1:{port}", api_version="v25.0",
                         access_token="t", timeout=1.0, deadline=0.5)
    try:
        with pytest.raises(MediaError) as caught:
            client.fetch("123", max_bytes=10**6, accept=("image/",), expected_sha256=None)
        assert caught.value.reason == "stalled"
    finally:
        client.close()
        time.sleep(0.2)  # the server's next write meets the closed socket
        server.shutdown()
        server.server_close()
    assert len(written) < 30, f"the drip ran to {len(written)} of 40 bytes"


def _png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    out, index = [], 8
    while index < len(data):
        length = int.from_bytes(data[index:index + 4], "big")
        out.append((data[index + 4:index + 8], data[index + 8:index + 8 + length]))
        index += 12 + length
    return out


def _png_of(chunks: list[tuple[bytes, bytes]]) -> bytes:
    import zlib
    return b"\x89PNG\r\n\x1a\n" + b"".join(
        len(body).to_bytes(4, "big") + kind + body
        + (zlib.crc32(kind + body) & 0xFFFFFFFF).to_bytes(4, "big") for kind, body in chunks)


JPEG_OK = (b"\xff\xd8" + b"\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
           + b"\xff\xc0\x00\x0b\x08\x00\x10\x00\x18\x01\x01\x11\x00"
           + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + b"\x12\x34\x56" + b"\xff\xd9")
GIF_OK = (b"GIF89a\x02\x00\x02\x00\x80\x00\x00" + b"\x00\x00\x00\xff\xff\xff"
          + b"\x2c\x00\x00\x00\x00\x02\x00\x02\x00\x00" + b"\x02\x02\x44\x01\x00" + b"\x3b")


def _webp(kind: bytes, payload: bytes) -> bytes:
    chunk = kind + len(payload).to_bytes(4, "little") + payload + b"\x00" * (len(payload) & 1)
    return b"RIFF" + (4 + len(chunk)).to_bytes(4, "little") + b"WEBP" + chunk


WEBP_OK = _webp(b"VP8L", b"\x2f" + (3 | (2 << 14)).to_bytes(4, "little") + b"\x00" * 8)


def test_an_image_is_checked_beyond_its_header() -> None:
    """The header alone let a PNG of garbage through, and the real API then refused every turn
    that carried it ("Could not process image"). Chunks, CRCs, markers and blocks are walked."""
    good = png_bytes(8, 6)
    chunks = _png_chunks(good)
    bad_crc = bytearray(good)
    bad_crc[-20] ^= 0xFF  # inside IDAT
    garbage = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + (800).to_bytes(4, "big")
               + (600).to_bytes(4, "big") + b"\x08\x00\x00\x00\x00" + b"garbage-not-zlib" * 20)
    for data, kind in ((good, "image/png"), (JPEG_OK, "image/jpeg"), (GIF_OK, "image/gif"),
                       (WEBP_OK, "image/webp")):
        assert rules.check_file(data, kind)["media_type"] == kind
    refused = {
        "garbage after IHDR": (garbage, "image/png"),
        "a bad CRC": (bytes(bad_crc), "image/png"),
        "no IEND": (_png_of(chunks[:-1]), "image/png"),
        "no IDAT": (_png_of([chunks[0], chunks[-1]]), "image/png"),
        "a JPEG frame header only": (b"\xff\xd8\xff\xc0\x00\x11\x08\x00\x10\x00\x10"
                                     + b"\x00" * 20, "image/jpeg"),
        "a JPEG without EOI": (JPEG_OK[:-2], "image/jpeg"),
        "a GIF without trailer": (GIF_OK[:-1], "image/gif"),
        "a GIF without image": (GIF_OK[:19] + b"\x3b", "image/gif"),
        "a WebP cut short": (WEBP_OK[:-4], "image/webp"),
        "a VP8 without start code": (_webp(b"VP8 ", b"\x00" * 6 + (4).to_bytes(2, "little")
                                           + (4).to_bytes(2, "little")), "image/webp"),
    }
    for name, (data, kind) in refused.items():
        with pytest.raises(rules.MediaRejected) as caught:
            rules.check_file(data, kind)
        assert caught.value.reason == "corrupt", name


def _pdf_with_object_stream(objects: bytes, head: bytes = b"") -> bytes:
    import zlib
    packed = zlib.compress(objects)
    return (b"%PDF-1.5\n" + head + b"9 0 obj << /Type /ObjStm /N 2 /First 8 /Filter "
            b"/FlateDecode /Length " + str(len(packed)).encode() + b" >>\nstream\n" + packed
            + b"\nendstream endobj\n%%EOF")


def test_pdf_pages_are_counted_in_object_streams_too() -> None:
    """PDF 1.5 object streams (pdfTeX's default) hold the page objects and often the page
    tree's root: they are inflated (bounded) and the most of the counts is taken."""
    modern = _pdf_with_object_stream(
        b"<< /Type /Page /Parent 2 0 R >> << /Type /Page /Parent 2 0 R >>",
        b"1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
        b"2 0 obj << /Type /Pages /Count 2 /Kids [3 0 R 4 0 R] >> endobj\n")
    assert rules.check_file(modern, "application/pdf")["pages"] == 2
    root_inside = _pdf_with_object_stream(b"<< /Type /Pages /Kids [3 0 R] /Count 3 >> "
                                          b"<< /Type /Page /Parent 2 0 R >>")
    assert rules.pdf_pages(root_inside) == 3
    hidden = _pdf_with_object_stream(b"<< /Type /Page >>" * 5000,
                                     b"2 0 obj << /Type /Page >> endobj\n")
    assert rules.pdf_pages(hidden) == 5001
    with pytest.raises(rules.MediaRejected) as caught:
        rules.check_file(hidden, "application/pdf")
    assert caught.value.reason == "too_many_pages"
    lying = b"%PDF-1.4\n1 0 obj << /Type /Pages /Count 5000 >> endobj\n" \
            b"2 0 obj << /Type /Page >> endobj\n%%EOF"
    assert rules.pdf_pages(lying) == 5000  # the tree's count wins over one literal page
    bomb = _pdf_with_object_stream(b" " * (rules.MAX_PDF_INFLATED + 1))
    for unsupported in (bomb, b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n%%EOF"):
        with pytest.raises(rules.MediaRejected) as caught:
            rules.check_file(unsupported, "application/pdf")
        assert caught.value.reason == "unsupported_type"
    with pytest.raises(rules.MediaRejected) as caught:
        rules.check_file(b"%PDX-1.7 ...", "application/pdf")
    assert caught.value.reason == "corrupt"


def test_a_photo_of_garbage_after_its_header_gets_the_cannot_open_note(
        media_env: ReplayEnvironment) -> None:
    """The breaker's repro: the photo is refused by the product's own check, the customer gets
    the agent's reply (not the apology) and the next turn carries no image."""
    env = media_env
    garbage = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + (800).to_bytes(4, "big")
               + (600).to_bytes(4, "big") + b"\x08\x00\x00\x00\x00" + b"garbage-not-zlib" * 20)
    sha = env.graph_api.add_media(IMAGE_ID, garbage, "image/png")
    env.messages_api.script("turn", [{"text": "Não consegui abrir a imagem, pode mandar de novo?"}])
    _post(env, image_body(sha))
    assert "cannot open" in _texts(env)
    assert _stored(env).media["state"] == "failed:corrupt"  # type: ignore[index]
    env.clock.advance(timedelta(minutes=2))
    env.messages_api.script("turn", [{"text": "Claro!"}])
    _post(env, text_body("quero marcar um corte amanhã", 2, sent_at=env.clock.now()))
    assert "image" not in [b["type"] for b in _user_blocks(env)]
    assert [s.body["text"]["body"] for s in env.graph_api.accepted] == [
        "Não consegui abrir a imagem, pode mandar de novo?", "Claro!"]


def _undecodable_png(width: int = 40, height: int = 30) -> bytes:
    """Whole chunks with good CRCs (the product's check passes) whose image data inflates to
    far fewer bytes than IHDR's size asks for: the double (like the real API) cannot decode it."""
    import zlib
    chunks = _png_chunks(png_bytes(width, height))
    return _png_of([chunks[0], (b"IDAT", zlib.compress(b"\x00\x80" * 3)), chunks[-1]])


def test_the_messages_double_refuses_an_image_that_does_not_decode(
        media_env: ReplayEnvironment) -> None:
    data = _undecodable_png()
    assert rules.check_file(data, "image/png")["width"] == 40  # the product's check passes
    client = anthropic.Anthropic(api_key="replay-api-key",
                                 base_url=media_env.messages_api.base_url, max_retries=0)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(data).decode()}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=[
            {"role": "user", "content": [{"type": "text", "text": "oi"}, image]}])
    client.close()
    assert caught.value.body["error"]["message"] == "Could not process image"  # type: ignore[index]
    assert media_env.messages_api.media_refused == 1 and media_env.messages_api.api_errors == 0


def test_a_photo_the_api_cannot_open_is_dropped_and_the_turn_retried_once(
        media_env: ReplayEnvironment) -> None:
    """The API's 400 ("Could not process image", no position): the turn's photo is marked
    failed, its block becomes the note, its bytes go, and the turn is retried without it; the
    customer gets the agent's reply, not the apology, and later turns carry no image."""
    env = media_env
    sha = env.graph_api.add_media(IMAGE_ID, _undecodable_png(), "image/png")
    asked = "Não consegui abrir a imagem, pode mandar de novo?"
    env.messages_api.script("turn", [{"text": asked}])
    _post(env, image_body(sha))
    assert env.messages_api.media_refused == 1 and env.messages_api.api_errors == 0
    assert [s.body["text"]["body"] for s in env.graph_api.accepted] == [asked]
    assert [b["type"] for b in _user_blocks(env)] == ["text"]
    assert "could not be opened" in _texts(env) and "Foto do produto com defeito" in _texts(env)
    stored = _stored(env)
    assert stored.media["state"] == "failed:model_refused"  # type: ignore[index]
    assert stored.answered_at is not None and _files(env) == 0
    env.clock.advance(timedelta(minutes=2))
    env.messages_api.script("turn", [{"text": "Claro!"}])
    _post(env, text_body("quero marcar um corte amanhã", 2, sent_at=env.clock.now()))
    assert "image" not in [b["type"] for b in _user_blocks(env)]
    assert [s.body["text"]["body"] for s in env.graph_api.accepted][-1] == "Claro!"
    assert env.messages_api.media_refused == 1, "the broken block is never sent again"


def test_a_refusal_that_names_a_position_drops_that_file_only(
        media_env: ReplayEnvironment) -> None:
    """A 400 that names messages.N.content.M drops the file sent there (found by its sha256),
    here an earlier photo, not the new one of this turn; a 400 naming no media is not retried."""
    env = media_env
    _photo_turn(env)  # an answered photo: messages.0.content.1 of the next request
    newer = png_bytes(12, 12)
    env.graph_api.add_media("5566778899001122", newer, "image/png")
    env.messages_api.fail("turn", 400, message=(
        "messages.0.content.1.image.source.base64.data: Could not process image"))
    env.messages_api.script("turn", [{"text": "Recebi a nova foto."}])
    env.clock.advance(timedelta(minutes=2))
    body = image_body(hashlib.sha256(newer).hexdigest(), n=30)
    body["entry"][0]["changes"][0]["value"]["messages"][0]["image"]["id"] = "5566778899001122"
    _post(env, body)
    blocks = _user_blocks(env)
    assert [b["type"] for b in blocks].count("image") == 1
    assert base64.b64decode([b for b in blocks if b["type"] == "image"][0]["source"]["data"]) \
        == newer
    with session_scope(env.engine) as session:
        states = [m.media["state"] for m in session.exec(select(Message).where(
            Message.direction == "inbound").order_by(Message.id)).all()]  # type: ignore[index]
    assert states == ["failed:model_refused", "ok"] and _files(env) == 1
    env.messages_api.fail("turn", 400)  # "Injected failure": names no image, no retry
    _post(env, text_body("oi", 3, sent_at=env.clock.now()))
    assert len([c for c in env.messages_api.calls if c.purpose == "turn"]) == 4
    assert _files(env) == 1
