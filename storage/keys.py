"""Names of the product's own Redis keys for the web edge: console sessions and the counters
of failed credential attempts. (Job tokens are named in storage/jobs.py, metrics in
core/metrics.py.)

A key never holds a secret: a console session is keyed by the SHA-256 of its id, so
Redis's keyspace, SLOWLOG and MONITOR show no usable session.
"""

import hashlib


def console_session_key(prefix: str, session_id: str) -> str:
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).hexdigest()
    return f"{prefix}:console:session:{digest}"


def auth_failures_key(prefix: str, scope: str, name: str) -> str:
    """The counter of failed attempts of one client address or tenant (`scope`: `address` or
    `tenant`) in the current window."""
    return f"{prefix}:auth:failures:{scope}:{name}"
