"""A relay from the Messages API double to a real Messages API (`wagent chat` and `wagent
replay --live` with a key).

The product keeps talking to the double (which validates every request as the real API does
and records it); the double hands each request whose purpose has no scripted response to
`Relay.send`, which posts it to `base_url` (default https://api.anthropic.com, or any
compatible `ANTHROPIC_BASE_URL`) with the real key, and returns the answer as it came: the
double records it in `calls` with the real `usage`, so a session can be written down as a
scenario (replay/chat.py). Sources: Anthropic §1.3 (the response `Message`).
"""

from dataclasses import dataclass, field
from typing import Any

import aiohttp

from core.network import network_cause
from core.settings import ANTHROPIC_API_URL

# what the product sends, as it sends it in production (workers/jobs.py: the purpose header)
FORWARDED_HEADERS = ("anthropic-version", "anthropic-beta", "x-wagent-purpose")
DEFAULT_BASE_URL = ANTHROPIC_API_URL
RELAY_TIMEOUT_SECONDS = 120.0
UNREACHABLE = "could not reach the Messages API"  # how the relay's own 529 starts
CAUSE_WORDS = {  # core/network.py's causes, as a developer at a terminal reads them
    "dns": "the host name did not resolve (DNS: offline, or no name server?)",
    "refused": "the connection was refused (nothing listens there)",
    "tls": "the secure connection failed (TLS)", "timeout": "no answer in time",
    "unreachable": "no route to the network", "reset": "the connection was cut",
    "closed": "the server closed the connection without answering",
    "protocol": "the answer was malformed", "other": "a network error"}


@dataclass
class Relay:
    """Where relayed calls go. `api_key` may be empty for a compatible endpoint that needs
    none; it is never logged or recorded (`repr` leaves it out)."""

    base_url: str = DEFAULT_BASE_URL
    api_key: str = field(default="", repr=False)
    timeout: float = RELAY_TIMEOUT_SECONDS

    async def send(self, body: dict[str, Any],
                   headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """POST `body` to `{base_url}/v1/messages`; returns (HTTP status, JSON body). A network
        failure or a non-JSON answer comes back as a 529 / 502 in the API's error shape, so the
        product takes it as an outage (its retry policy applies); a network failure's message
        starts with UNREACHABLE and names its cause (`unreachable`)."""
        given = {name.lower(): value for name, value in headers.items()}
        sent = {name: given[name] for name in FORWARDED_HEADERS if name in given}
        sent["content-type"] = "application/json"
        if self.api_key:
            sent["x-api-key"] = self.api_key
        url = f"{self.base_url.rstrip('/')}/v1/messages"
        try:
            async with aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=self.timeout)) as client, \
                    client.post(url, json=body, headers=sent) as response:
                try:
                    answer = await response.json(content_type=None)
                except ValueError:
                    return 502, _error(502, f"the Messages API at {self.base_url} answered "
                                            f"{response.status} without JSON")
                if not isinstance(answer, dict):
                    return 502, _error(502, "the Messages API answered something else than "
                                            "a JSON object")
                return response.status, answer
        except (aiohttp.ClientError, TimeoutError) as exc:
            return 529, _error(529, unreachable_message(self.base_url, exc))


def unreachable_message(base_url: str, exc: BaseException) -> str:
    """What a relayed call that never reached `base_url` says: `UNREACHABLE`, the address, why
    in plain words (core/network.py's cause) and the exception's class."""
    cause = network_cause(exc)
    return (f"{UNREACHABLE} at {base_url}: {CAUSE_WORDS.get(cause, CAUSE_WORDS['other'])} "
            f"({type(exc).__name__})")


def unreachable(answer: Any) -> bool:
    """Whether a recorded answer is the relay's "never reached the API" (not the API's 529)."""
    error = answer.get("error") if isinstance(answer, dict) else None
    return isinstance(error, dict) and str(error.get("message", "")).startswith(UNREACHABLE)


def _error(status: int, message: str) -> dict[str, Any]:
    kind = "overloaded_error" if status == 529 else "api_error"
    return {"type": "error", "error": {"type": kind, "message": message}}
