"""A double of a business's own system that receives the product's outbound webhooks, on
loopback: it verifies every request's `X-Wagent-Signature` (hooks/signature.py's scheme, as the
README's snippet does, against the product's clock) and counts the events by id.

It can be down (`go_down` / `go_up`: connections refused), hang (`hang_seconds`: it answers
that much later) or answer another status (`status`). Tests and demos use it; nothing here
is product code.
"""

import hashlib
import hmac
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from core import clock

TOLERANCE_SECONDS = 300


@dataclass
class Received:
    event_id: str
    type: str
    body: dict[str, Any]
    signatures: int  # how many v1 entries the header had
    verified: bool  # one v1 matched one of the receiver's secrets, t within tolerance
    headers: dict[str, str] = field(default_factory=dict)


class WebhookReceiver:
    def __init__(self, secrets: list[str] | None = None) -> None:
        self.secrets = list(secrets or [])
        self.received: list[Received] = []
        self.status = 200
        self.hang_seconds = 0.0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks?source=wagent"

    def start(self) -> str:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                receiver._record(raw, dict(self.headers.items()))
                if receiver.hang_seconds:
                    time.sleep(receiver.hang_seconds)
                self.send_response(receiver.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="webhook-receiver")
        self._thread.start()
        return self.url

    def go_down(self) -> None:
        """Stop listening: connections are refused until `go_up` (same port)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def go_up(self) -> None:
        if self._server is None:
            self.start()

    stop = go_down

    def _record(self, raw: bytes, headers: dict[str, str]) -> None:
        value = headers.get("X-Wagent-Signature", "")
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        parts = [p.split("=", 1) for p in value.split(",") if "=" in p]
        stamps = [v for k, v in parts if k == "t"]
        given = [v for k, v in parts if k == "v1"]
        verified = False
        if len(stamps) == 1 and stamps[0].isdigit():
            stamp = int(stamps[0])
            fresh = abs(clock.now().timestamp() - stamp) <= TOLERANCE_SECONDS
            for secret in self.secrets:
                expected = hmac.new(secret.encode(), stamps[0].encode() + b"." + raw,
                                    hashlib.sha256).hexdigest()
                verified = verified or (fresh and any(hmac.compare_digest(expected, g)
                                                      for g in given))
        with self._lock:
            self.received.append(Received(event_id=str(body.get("id", "")),
                                          type=str(body.get("type", "")), body=body,
                                          signatures=len(given), verified=verified,
                                          headers=headers))

    def counts(self) -> Counter[str]:
        """How many times each event id arrived."""
        with self._lock:
            return Counter(r.event_id for r in self.received)
