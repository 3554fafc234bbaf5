"""The signature of a delivery: `X-Wagent-Signature: t=<unix>,v1=<hex>[,v1=<hex>]`, where each
v1 is HMAC-SHA256 of f"{t}.{body}" under one of the endpoint's current secrets (two during a
rotation's grace period). The scheme Stripe uses (Sources: Stripe "Check the webhook
signatures"); docs/CONFIGURE.md has a receiver's verification snippet."""

import hashlib
import hmac

HEADER = "X-Wagent-Signature"
TOLERANCE_SECONDS = 300  # a receiver should refuse a timestamp older than this (replays)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of b"<timestamp>.<body>" under `secret`."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def header(secrets: list[str], timestamp: int, body: bytes) -> str:
    """The header's value for `body` signed at `timestamp` (unix seconds) by every secret."""
    return ",".join([f"t={timestamp}", *(f"v1={signature(s, timestamp, body)}" for s in secrets)])


def verify(value: str, secret: str, body: bytes, *, now: int,
           tolerance: int = TOLERANCE_SECONDS) -> bool:
    """What a receiver does: True when one v1 of `value` matches `secret` and t is within
    `tolerance` seconds of `now`. Never raises on a malformed header (False)."""
    parts = [p.split("=", 1) for p in value.split(",") if "=" in p]
    stamps = [v for k, v in parts if k == "t"]
    if len(stamps) != 1 or not stamps[0].isdigit():
        return False
    timestamp = int(stamps[0])
    if abs(now - timestamp) > tolerance:
        return False
    expected = signature(secret, timestamp, body)
    return any(hmac.compare_digest(expected, v) for k, v in parts if k == "v1")
