"""Downloading a file a customer sent: `GET /{version}/{media-id}` for its URL, then the file
itself, both with the bearer token (Sources: WhatsApp §3.3: "fetch the download URL with
`GET /{media-id}`, then download with the bearer token"; fixture
graph_api/media_url_response.json).

Rules:
- The token goes only to an allow-list of hosts: the configured Graph base's host and Meta's
  media host (MEDIA_HOSTS); a URL elsewhere, or not https (the Graph base's own scheme aside),
  is refused before any request. The webhook's `url` field is never followed, and redirects
  are not followed either (a redirect could carry the token elsewhere).
- Size is checked before (the Graph answer's `file_size`, the download's Content-Length) and
  during the download (counted bytes, the limit the caller gives); the type before (the Graph
  answer's `mime_type` against the caller's accepted prefixes).
- The file's sha256 is checked against the webhook's (base64, as webhooks send it, or hex, as
  the Graph answer does) and the Graph answer's.
- A read that stalls longer than `timeout` seconds, or a download longer than `deadline`
  seconds in all, fails: the deadline is checked after every read, whatever its size (a drip
  of one byte at a time cannot stretch it), so a download ends within `deadline` plus at most
  one read's `timeout`.
Synchronous (RQ jobs are sync); it never retries. Every failure is a `MediaError` with a
`reason` (not_found, refused, host_not_allowed, too_large, unsupported_type, checksum,
stalled, unreachable); the token and the URL's query string never appear in its message.
"""

import base64
import binascii
import hashlib
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx2

from core.errors import ReasonedError

MEDIA_HOSTS = ("lookaside.fbsbx.com",)  # Meta's media host (Sources: WhatsApp §3.3)


class MediaError(ReasonedError):
    """A file that could not be fetched; `reason` names why (see the module docstring)."""


@dataclass(frozen=True)
class Downloaded:
    data: bytes
    mime_type: str
    sha256: str  # hex


def sha256_matches(data: bytes, expected: str) -> bool:
    """True when `expected` (hex or base64, the two encodings Meta uses) is the sha256 of
    `data`."""
    digest = hashlib.sha256(data).digest()
    text = expected.strip()
    if len(text) == 64:
        try:
            return bytes.fromhex(text) == digest
        except ValueError:
            return False
    try:
        return base64.b64decode(text, validate=True) == digest
    except (ValueError, binascii.Error):
        return False


class MediaClient:
    """Fetches media through the Graph API at `base_url` (the configured Graph base).

    `timeout`: seconds for connect and for each read; `deadline`: seconds for a whole download.
    """

    def __init__(self, *, base_url: str, api_version: str, access_token: str,
                 timeout: float = 10.0, deadline: float = 60.0,
                 http_client: httpx2.Client | None = None) -> None:
        self._base_url = base_url.rstrip("/")
        self._base = urlsplit(self._base_url)
        self._api_version = api_version if api_version.startswith("v") else f"v{api_version}"
        self._headers = {"Authorization": f"Bearer {access_token}"}
        self._timeout = httpx2.Timeout(timeout)
        self._deadline = deadline
        self._owns_client = http_client is None
        self._http = http_client if http_client is not None else httpx2.Client()

    def close(self) -> None:
        """Close the connection pool (not one passed in)."""
        if self._owns_client:
            self._http.close()

    def allowed(self, url: str) -> bool:
        """True when the token may be sent to `url` (see the module docstring)."""
        try:
            parts = urlsplit(url)
        except ValueError:
            return False
        if (parts.scheme, parts.netloc) == (self._base.scheme, self._base.netloc):
            return True
        return parts.scheme == "https" and parts.port is None \
            and (parts.hostname or "") in MEDIA_HOSTS

    def fetch(self, media_id: str, *, max_bytes: int, accept: tuple[str, ...],
              expected_sha256: str | None) -> Downloaded:
        """The file of `media_id`, at most `max_bytes`, of a mime type starting with one of
        `accept`, whose sha256 is `expected_sha256` (when given). Raises MediaError."""
        if not media_id.isdigit():
            raise MediaError("not_found", "a media id is digits")
        info = self._get_json(f"{self._base_url}/{self._api_version}/{media_id}")
        url, mime = str(info.get("url") or ""), str(info.get("mime_type") or "")
        size = info.get("file_size")
        if not mime.lower().startswith(accept):
            raise MediaError("unsupported_type", mime or "no mime_type")
        if isinstance(size, int) and size > max_bytes:
            raise MediaError("too_large", f"{size} bytes; at most {max_bytes}")
        if not self.allowed(url):
            raise MediaError("host_not_allowed", urlsplit(url).hostname or "no url")
        data = self._download(url, max_bytes)
        for expected in (expected_sha256, info.get("sha256")):
            if isinstance(expected, str) and expected and not sha256_matches(data, expected):
                raise MediaError("checksum", "the file's sha256 does not match")
        return Downloaded(data, mime, hashlib.sha256(data).hexdigest())

    def _get_json(self, url: str) -> dict[str, object]:
        try:
            response = self._http.get(url, headers=self._headers, timeout=self._timeout,
                                      follow_redirects=False)
        except httpx2.TimeoutException as exc:
            raise MediaError("stalled", type(exc).__name__) from exc
        except httpx2.TransportError as exc:
            raise MediaError("unreachable", type(exc).__name__) from exc
        if response.status_code in (400, 404):
            raise MediaError("not_found", f"HTTP {response.status_code}")
        if response.status_code != 200:
            raise MediaError("refused", f"HTTP {response.status_code}")
        try:
            body = response.json()
        except ValueError as exc:
            raise MediaError("refused", "the media answer is not JSON") from exc
        if not isinstance(body, dict):
            raise MediaError("refused", "the media answer is not an object")
        return body

    def _download(self, url: str, max_bytes: int) -> bytes:
        started = time.monotonic()
        chunks: list[bytes] = []
        received = 0
        try:
            with self._http.stream("GET", url, headers=self._headers, timeout=self._timeout,
                                   follow_redirects=False) as response:
                if response.status_code == 404:
                    raise MediaError("not_found", "HTTP 404")
                if response.status_code != 200:
                    raise MediaError("refused", f"HTTP {response.status_code}")
                length = response.headers.get("content-length")
                if length and length.isdigit() and int(length) > max_bytes:
                    raise MediaError("too_large", f"{length} bytes; at most {max_bytes}")
                for chunk in response.iter_bytes():  # each read as it arrives: a drip of
                    received += len(chunk)           # 1 byte is checked byte by byte
                    if received > max_bytes:
                        raise MediaError("too_large", f"over {max_bytes} bytes")
                    if time.monotonic() - started > self._deadline:
                        raise MediaError("stalled", f"longer than {self._deadline} s")
                    chunks.append(chunk)
        except httpx2.TimeoutException as exc:
            raise MediaError("stalled", type(exc).__name__) from exc
        except httpx2.TransportError as exc:
            raise MediaError("unreachable", type(exc).__name__) from exc
        return b"".join(chunks)
