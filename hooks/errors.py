"""Why a webhook delivery did not succeed, in one word each (`cause`), for the delivery log."""


class DeliveryError(Exception):
    """A delivery that did not get a 2xx answer. `cause` is one word: a network cause
    (core/network.py CAUSES: dns, refused, tls, timeout, ...), `http_<status>` for an
    answer outside 2xx (a redirect too: redirects are not followed), or a refusal below.
    `status_code` is the endpoint's HTTP status when it answered. The message never holds
    the URL or the secret."""

    def __init__(self, cause: str, status_code: int | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.status_code = status_code


class DeliveryRefused(DeliveryError):
    """The product refused to connect: `scheme` (not https, and the address is not in
    WEBHOOK_ALLOWED_NETWORKS), `private_address` (the name resolved to a loopback, private,
    link-local or otherwise non-public address not in WEBHOOK_ALLOWED_NETWORKS) or `url`
    (unusable). Sources: OWASP SSRF Prevention Cheat Sheet (DNS pinning)."""
