"""Voice notes to text through an OpenAI-compatible `POST {base}/v1/audio/transcriptions`.

The interface OpenAI and Groq document (multipart form: `file`, `model`, `language`,
`response_format=json`; answer `{"text": "..."}`), which several self-hosted speech servers
also claim (not tested here). Settings: TRANSCRIPTION_BASE_URL (empty: off), _API_KEY,
_MODEL, _LANGUAGE, _TIMEOUT (core/settings.py). It never retries: a failure is told to the
agent, and the turn goes on (workers/media.py). The key is sent as a bearer token and never
logged; a transcript is customer data (logged only at DEBUG, by the caller, if at all).
"""

from dataclasses import dataclass, field

import httpx2

from core.errors import ReasonedError
from whatsapp.inbound import storable_text

PATH = "/v1/audio/transcriptions"
MAX_TRANSCRIPT_CHARS = 4000


class TranscriptionFailed(ReasonedError):
    """No usable transcript; `reason`: off, unreachable, refused, garbage, empty."""


@dataclass(frozen=True)
class Transcriber:
    base_url: str
    api_key: str = field(repr=False)
    model: str
    timeout: float = 30.0
    http: httpx2.Client | None = None

    def transcribe(self, audio: bytes, *, mime_type: str, language: str) -> str:
        """The text of `audio` (at most MAX_TRANSCRIPT_CHARS), cleaned as inbound text is
        (whatsapp.inbound.storable_text: no NUL, no lone surrogate), or TranscriptionFailed."""
        if not self.base_url:
            raise TranscriptionFailed("off", "no TRANSCRIPTION_BASE_URL")
        client = self.http or httpx2.Client()
        extension = "ogg" if "ogg" in mime_type else (mime_type.split("/")[-1].split(";")[0]
                                                      or "bin")
        data = {"model": self.model, "response_format": "json"}
        if language:
            data["language"] = language
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            response = client.post(
                self.base_url.rstrip("/") + PATH, headers=headers, data=data,
                files={"file": (f"voice.{extension}", audio, mime_type.split(";")[0])},
                timeout=httpx2.Timeout(self.timeout))
        except httpx2.TransportError as exc:
            raise TranscriptionFailed("unreachable", type(exc).__name__) from exc
        finally:
            if self.http is None:
                client.close()
        if response.status_code != 200:
            raise TranscriptionFailed("refused", f"HTTP {response.status_code}")
        try:
            body = response.json()
        except ValueError as exc:
            raise TranscriptionFailed("garbage", "the answer is not JSON") from exc
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str):
            raise TranscriptionFailed("garbage", "the answer has no text")
        text = storable_text(text).strip()  # stored like the customer's own text
        if not text:
            raise TranscriptionFailed("empty")
        return text[:MAX_TRANSCRIPT_CHARS]


def language_of(setting: str, tenant_language: str) -> str:
    """The `language` to send: the setting, else the tenant's primary subtag ("pt-BR" -> "pt");
    "" for the setting `auto` (the field is left out and the provider detects the language,
    better for customers who speak another one, less accurate on short notes)."""
    if setting.strip().lower() == "auto":
        return ""
    chosen = setting or tenant_language
    return chosen.split("-")[0].split("_")[0].lower()
