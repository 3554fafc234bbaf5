"""A speech-to-text double: a loopback aiohttp server speaking the OpenAI-compatible
`POST /v1/audio/transcriptions` (multipart form: `file`, `model`, `language`?,
`response_format`?; answer `{"text": "..."}`), as OpenAI and Groq document it.

It checks the bearer key (401 otherwise) and the form (400 without `file` or `model`), records
every request in `requests` (model, language, file name, size: never the audio), and answers
from a FIFO that `script` fills (the scenario step `{"transcripts": [...]}`): a string is a
transcript; `{"status": 500}` answers that status; `{"garbage": true}` answers 200 with a body
that is not JSON. An empty queue answers 500 and counts in `unscripted_calls`.
"""

from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import BodyPartReader, web

PATH = "/v1/audio/transcriptions"


@dataclass(frozen=True)
class RecordedTranscription:
    status: int
    model: str | None
    language: str | None
    filename: str | None
    size: int


class TranscriptionDouble:
    def __init__(self, *, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.base_url = ""
        self.requests: list[RecordedTranscription] = []
        self.unscripted_calls = 0
        self._answers: deque[str | dict[str, Any]] = deque()
        self._runner: web.AppRunner | None = None

    def script(self, answers: list[str | dict[str, Any]]) -> None:
        """Queue the next answers (see the module docstring)."""
        for answer in answers:
            if not isinstance(answer, str | dict):
                raise ValueError(f"a transcript is a string or an object, not {answer!r}")
        self._answers.extend(answers)

    @property
    def leftover(self) -> int:
        return len(self._answers)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(PATH, self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound_host, bound_port = self._runner.addresses[0][:2]
        self.base_url = f"http://{bound_host}:{bound_port}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        if self.api_key is not None and \
                request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._record(401, {}, {"error": {"message": "Incorrect API key provided",
                                                    "type": "invalid_request_error"}})
        fields: dict[str, Any] = {}
        try:
            reader = await request.multipart()
            async for part in reader:
                if not isinstance(part, BodyPartReader):
                    continue  # a nested multipart: no field of ours
                if part.name == "file":
                    data = await part.read()
                    fields["file"] = (part.filename, len(data))
                elif part.name:
                    fields[part.name] = await part.text()
        except (ValueError, AssertionError):
            return self._record(400, fields, _error("a multipart/form-data body is required"))
        if "file" not in fields or not fields.get("model"):
            return self._record(400, fields, _error("file and model are required"))
        if not self._answers:
            self.unscripted_calls += 1
            return self._record(500, fields, _error("no scripted transcript", "server_error"))
        answer = self._answers.popleft()
        if isinstance(answer, str):
            return self._record(200, fields, {"text": answer})
        if answer.get("garbage"):
            self._note(200, fields)
            return web.Response(status=200, content_type="text/html",
                                text="<html>upstream says hello</html>")
        status = int(answer.get("status", 500))
        return self._record(status, fields, _error(f"scripted {status}", "server_error"))

    def _note(self, status: int, fields: dict[str, Any]) -> None:
        filename, size = fields.get("file", (None, 0))
        self.requests.append(RecordedTranscription(status, fields.get("model"),
                                                   fields.get("language"), filename, size))

    def _record(self, status: int, fields: dict[str, Any], body: dict[str, Any]) -> web.Response:
        self._note(status, fields)
        return web.json_response(body, status=status)


def _error(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}
