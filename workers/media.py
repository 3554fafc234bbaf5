"""A turn's media step: the photos, PDFs and voice notes among the pending customer messages are
fetched (whatsapp/media.py) and made what the agent reads, before the window is built.

- A photo (JPEG, PNG, GIF, WebP) or a PDF within the bounds of agent/media.py: its bytes are
  stored (storage/media.py) and the message becomes its stamped text (with the caption) plus
  an image or document block (`agent.media.stored_block`).
- A voice note (any `audio`): transcribed (workers/transcription.py); the message becomes its
  stamped text marked as a voice note. Facts whose source is a voice note enter as
  `suggested`, never `confirmed` (agent/tools/facts.py, `from_voice_note`).
- Anything that fails (a 404 media id, a stalled or oversized download, a corrupt or
  unsupported file, no transcription endpoint, a 500 or garbage from it) becomes a note that
  tells the agent what happened and what to ask for; the turn goes on, the message stays
  stored and is answered once. Videos and stickers are never downloaded.
- A file the product took but the Messages API then refused (a 400 naming an image or a PDF,
  `drop_refused_media`): its message's media is marked `failed:model_refused`, its block
  becomes the same kind of note (what to ask the customer for), its bytes are deleted, and
  the turn is retried once without it (workers/turns.py), so no later turn carries it.
The message's `media.state` records the outcome (ok, or failed:<reason>, or skipped), so a
retried turn does not fetch again. Logs carry reasons and sizes, never the file, the
transcript, the caption or the token.
"""

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

import anthropic
import structlog
from sqlmodel import col, select

from agent import media as rules
from core import clock
from intake.stamp import STAMP
from intake.text import media as stored_media
from intake.text import normalise
from storage import media as media_repo
from storage.db import read_scope, session_scope
from storage.models import Message, Tenant
from whatsapp.media import MediaClient, MediaError
from workers.runtime import Runtime
from workers.transcription import Transcriber, TranscriptionFailed, language_of

log = structlog.get_logger(__name__)

FETCHED = ("image", "document", "audio")
VOICE_MARK = "[voice note, transcribed automatically (may contain errors)]:"
_CAPTION = re.compile(r'[\r\n]+')


def resolve_media(runtime: Runtime, conversation_id: int, *, language: str) -> int:
    """Resolve every pending media message of the conversation; returns how many changed.
    `language` is the tenant's (the transcription language unless the setting names one).
    The look for pending media opens no transaction (`read_scope`): a turn without media
    costs one statement here; each resolution writes in its own fenced transaction."""
    with read_scope(runtime.engine) as session:
        rows = session.exec(select(Message.id, Message.content, Message.media).where(
            Message.conversation_id == conversation_id, Message.direction == "inbound",
            col(Message.answered_at).is_(None), col(Message.media).is_not(None),
        ).order_by(col(Message.id))).all()
    pending = [(int(i), c, m) for i, c, m in rows
               if i is not None and isinstance(m, dict) and m.get("state") == "pending"]
    for message_id, content, described in pending:
        _resolve_one(runtime, message_id, content, described, language)
    return len(pending)


def _resolve_one(runtime: Runtime, message_id: int, content: Sequence[dict[str, Any]],
                 described: dict[str, Any], language: str) -> None:
    kind = str(described.get("kind"))
    prefix = _stamp_of(content)
    data: bytes | None = None
    fields: dict[str, Any] | None = None
    sha = ""
    client = _client(runtime)
    if kind not in FETCHED:
        client.close()
        state, text = "skipped", None  # the placeholder intake wrote stays
    else:
        try:
            downloaded = client.fetch(
                str(described.get("id")), max_bytes=_max_bytes(described),
                accept=_accepted(described), expected_sha256=described.get("sha256"))
            if kind == "audio":
                transcript = _transcriber(runtime).transcribe(
                    downloaded.data, mime_type=downloaded.mime_type,
                    language=language_of(runtime.settings.transcription_language, language))
                state, text = "ok", f"{VOICE_MARK} {transcript}"
            else:
                fields = rules.check_file(downloaded.data, downloaded.mime_type)
                data, sha = downloaded.data, downloaded.sha256
                state, text = "ok", _caption_text(described)
        except MediaError as exc:
            state, text = f"failed:{exc.reason}", _failure_text(described, exc.reason)
        except rules.MediaRejected as exc:
            state, text = f"failed:{exc.reason}", _failure_text(described, exc.reason)
        except TranscriptionFailed as exc:
            state, text = f"failed:transcription_{exc.reason}", _failure_text(
                described, "transcription")
        finally:
            client.close()
    log.info("media_resolved", kind=kind, state=state,
             bytes=len(data) if data is not None else None)
    with session_scope(runtime.engine) as session:
        message = session.get(Message, message_id)
        if message is None or not isinstance(message.media, dict) \
                or message.media.get("state") != "pending":
            return
        # the caption, the file name and the transcript are the customer's words: normalised
        # as intake's are (intake/text.py: masked and disarmed; intake did the descriptor's
        # already, this keeps it so whatever stored it)
        keep_cpf = bool(session.exec(select(Tenant.keep_cpf).where(
            Tenant.id == message.tenant_id)).first())
        new_content = [{"type": "text", "text": prefix + normalise(text, keep_cpf=keep_cpf)}] \
            if text is not None else list(message.content)
        if data is not None and fields is not None:
            file_id = media_repo.add_file(session, message=message, data=data,
                                          media_type=str(fields["media_type"]), sha256=sha,
                                          now=clock.now())
            new_content.append(rules.stored_block(file_id, fields))
        message.content = new_content
        message.media = {**(stored_media(message.media, keep_cpf=keep_cpf) or {}), "state": state}
        session.add(message)


REFUSED_STATE = "failed:model_refused"


def drop_refused_media(runtime: Runtime, conversation_id: int,
                       exc: anthropic.BadRequestError) -> int:
    """When `exc` (a turn's 400) names an image or a document (agent.media.refused_media),
    mark the media of the message(s) that carried it failed, make their content the failure
    note and delete their bytes; returns how many files were dropped (0: not a media 400, or
    nothing to drop: the caller re-raises). Which file: the one at the position the 400
    names, found by its sha256 in the request the SDK sent; without a position (the real
    API's "Could not process image"), the files of that kind of this turn's unanswered
    messages, else every file of that kind in the conversation."""
    refused = rules.refused_media(_api_message(exc))
    if refused is None:
        return 0
    kind, position = refused
    with session_scope(runtime.engine) as session:
        files = [f for f in media_repo.conversation_files(session, conversation_id)
                 if (f.media_type in rules.DOCUMENT_TYPES) == (kind == "document")]
        named = _sha256_at(exc, position) if position is not None else None
        chosen = [f for f in files if named is not None and f.sha256 == named]
        if not chosen:
            pending = {int(i) for i in session.exec(select(Message.id).where(
                Message.conversation_id == conversation_id, Message.direction == "inbound",
                col(Message.answered_at).is_(None))).all() if i is not None}
            chosen = [f for f in files if f.message_id in pending] or files
        for file in chosen:
            _mark_refused(session, file.message_id, int(file.id or 0))
        media_repo.delete_files(session, [int(f.id or 0) for f in chosen])
    log.warning("media_refused_by_model", kind=kind, files=len(chosen),
                positioned=position is not None)
    return len(chosen)


def _api_message(exc: anthropic.BadRequestError) -> str:
    body = exc.body
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if isinstance(message, str) else str(exc)


def _sha256_at(exc: anthropic.BadRequestError, position: tuple[int, int]) -> str | None:
    """The hex sha256 of the base64 block at `position` of the request that got `exc`."""
    try:
        body = json.loads(exc.request.content)
        block = body["messages"][position[0]]["content"][position[1]]
        data = base64.b64decode(block["source"]["data"], validate=True)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, binascii.Error):
        return None
    return hashlib.sha256(data).hexdigest()


def _mark_refused(session: Any, message_id: int, file_id: int) -> None:
    message = session.get(Message, message_id)
    if message is None:
        return
    described = message.media if isinstance(message.media, dict) else {}
    kept = [b for b in message.content if not (
        rules.is_media(b) and file_id in rules.stored_media_ids([b]))]
    text = _stamp_of(message.content) + _failure_text(described, "model_refused")
    message.content = [{"type": "text", "text": text},
                       *(b for b in kept if b.get("type") != "text")]
    message.media = {**described, "state": REFUSED_STATE}
    session.add(message)


def _client(runtime: Runtime) -> MediaClient:
    settings = runtime.settings
    return MediaClient(base_url=settings.graph_api_base_url,
                       api_version=settings.graph_api_version,
                       access_token=settings.whatsapp_access_token,
                       timeout=settings.media_timeout, deadline=settings.media_deadline)


def _transcriber(runtime: Runtime) -> Transcriber:
    settings = runtime.settings
    return Transcriber(base_url=settings.transcription_base_url,
                       api_key=settings.transcription_api_key,
                       model=settings.transcription_model,
                       timeout=settings.transcription_timeout)


def _max_bytes(described: dict[str, Any]) -> int:
    if described.get("kind") == "audio":
        return rules.MAX_AUDIO_BYTES
    if str(described.get("mime_type", "")).startswith(rules.DOCUMENT_TYPES):
        return rules.MAX_PDF_BYTES
    return rules.MAX_IMAGE_BYTES


def _accepted(described: dict[str, Any]) -> tuple[str, ...]:
    kind = described.get("kind")
    if kind == "audio":
        return ("audio/",)
    if kind == "document":
        return rules.DOCUMENT_TYPES
    return rules.IMAGE_TYPES


def _stamp_of(content: Sequence[dict[str, Any]]) -> str:
    text = next((str(b.get("text", "")) for b in content if b.get("type") == "text"), "")
    match = STAMP.match(text)
    return match.group(0) if match else ""


def _label(described: dict[str, Any]) -> str:
    kind = described.get("kind")
    if kind == "audio":
        return "voice note" if described.get("voice") else "audio message"
    return "photo" if kind == "image" else "document"


def _caption(described: dict[str, Any]) -> str:
    caption = _CAPTION.sub(" ", str(described.get("caption") or "")).strip()
    return f' with the caption: "{caption}"' if caption else ""


def _caption_text(described: dict[str, Any]) -> str:
    name = described.get("filename")
    named = f" ({name})" if name and described.get("kind") == "document" else ""
    return f"[sent a {_label(described)}{named}{_caption(described)}]"


def _failure_text(described: dict[str, Any], reason: str) -> str:
    """What the agent reads instead of a file it could not get or open: what happened and what
    to ask the customer for (the reply follows the customer's language: PRODUCT_RULES)."""
    label = _label(described)
    if reason == "transcription":
        return (f"[sent a {label} that could not be understood (not transcribed); tell them "
                "kindly and ask them to write the message as text]")
    if reason in ("too_large", "too_wide", "too_many_pages"):
        limits = (f"at most {rules.MAX_PDF_BYTES // 2**20} MB and {rules.MAX_PDF_PAGES} pages"
                  if label == "document" else
                  f"at most {rules.MAX_AUDIO_BYTES // 2**20} MB"
                  if described.get("kind") == "audio" else
                  f"at most {rules.MAX_IMAGE_BYTES // 2**20} MB and {rules.MAX_IMAGE_SIDE} px a "
                  "side")
        return (f"[sent a {label}{_caption(described)} too large for us to open ({limits}); "
                "ask them to send a smaller one or to describe it in text]")
    if reason == "model_refused":
        return (f"[sent a {label}{_caption(described)} that could not be opened (the file is "
                "damaged); ask them to send it again, or to describe it in text]")
    if reason in ("unsupported_type", "corrupt"):
        return (f"[sent a {label}{_caption(described)} we cannot open (a damaged or "
                "unsupported file); ask them to describe it in text or send it as a JPEG, "
                "PNG or PDF]")
    return (f"[sent a {label}{_caption(described)} that could not be downloaded; ask them to "
            "send it again or describe it in text]")
