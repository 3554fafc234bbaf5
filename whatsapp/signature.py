"""Webhook signature check: HMAC-SHA256 of the raw body against `X-Hub-Signature-256`."""

import hashlib
import hmac
import re

_FORM = re.compile(r"sha256=[0-9a-fA-F]{64}")


def verify_signature(body: bytes, header: str | None, app_secret: str) -> bool:
    """True when `header` is `sha256=<hex>` of HMAC-SHA256(app_secret, body).

    Meta signs the exact bytes it sends (escaped unicode, `\\/`): hash the raw body, never a
    re-serialisation (Sources: WhatsApp §2). A missing prefix or a wrong digest is False,
    so is a header with non-ASCII characters (compared as bytes: `compare_digest` raises on
    non-ASCII str).
    """
    if not header or not header.startswith("sha256=") or not app_secret:
        return False
    expected = hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    given = header.removeprefix("sha256=").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(expected.encode(), given)


def is_well_formed(header: str) -> bool:
    """`sha256=` and 64 hex digits: what Meta sends. Anything else is refused before the body
    is read (bot/webhook.py), so a client must at least look like Meta to be read."""
    return _FORM.fullmatch(header) is not None


def sign(body: bytes, app_secret: str) -> str:
    """The header value Meta would send for `body` (used by the replay runner and tests)."""
    return "sha256=" + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
