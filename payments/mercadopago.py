"""Mercado Pago as the Pix provider (issue 48; docs/PAYMENTS.md says why): the Payments API.

Wire format (Mercado Pago developers, "Checkout Transparente · Pix" and "Notifications"):
- `POST /v1/payments` {transaction_amount (decimal BRL), description, payment_method_id "pix",
  payer {email}, external_reference, date_of_expiration (ISO 8601 with offset)} with
  `X-Idempotency-Key`; the answer's `point_of_interaction.transaction_data.qr_code` is the
  copy-and-paste code, `id` the payment id, `status` "pending".
- `GET /v1/payments/{id}`: `status` ("approved" = paid), `transaction_amount`,
  `external_reference`.
- Webhook: `POST <url>?data.id=<payment id>&type=payment`, headers `x-signature:
  ts=<unix>,v1=<hex>` and `x-request-id`; v1 = HMAC-SHA256(secret, "id:<data.id>;request-id:
  <x-request-id>;ts:<ts>;") in lower-case hex, data.id lower-cased when alphanumeric. The
  body's `id` is the notification's id (idempotence key).
"""

import hashlib
import hmac
import json
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx2

from payments.provider import Charge, Notification, PaymentError, PaymentStatus

API_URL = "https://api.mercadopago.com"
PAYER_EMAIL = "deposito@example.com"  # Pix needs a payer e-mail; the customer gives none
MAX_SIGNATURE_AGE = 300  # seconds: an older ts is a replay (the event id dedupes anyway)


def manifest(data_id: str, request_id: str, ts: str) -> str:
    """The string Mercado Pago signs (its Notifications page)."""
    data_id = data_id.lower() if data_id.isalnum() else data_id
    return f"id:{data_id};request-id:{request_id};ts:{ts};"


def signature(secret: str, data_id: str, request_id: str, ts: str) -> str:
    """The `x-signature` header Mercado Pago would send (the replay double and tests)."""
    digest = hmac.new(secret.encode(), manifest(data_id, request_id, ts).encode(),
                      hashlib.sha256).hexdigest()
    return f"ts={ts},v1={digest}"


def verify_signature(secret: str, header: str | None, request_id: str | None,
                     data_id: str | None, *, now: float | None = None) -> bool:
    """True when `header` ("ts=..,v1=..") is the HMAC of the manifest under `secret`, and its
    ts is at most MAX_SIGNATURE_AGE old when `now` (unix seconds) is given. Anything missing
    or malformed is False."""
    if not secret or not header or not request_id or not data_id:
        return False
    parts = dict(p.strip().split("=", 1) for p in header.split(",") if "=" in p)
    ts, given = parts.get("ts", ""), parts.get("v1", "")
    if not (ts.isascii() and ts.isdigit()) or not given:  # "²".isdigit() is True
        return False
    seconds = int(ts) / 1000 if len(ts) > 11 else int(ts)  # ms or s: both are seen
    if now is not None and abs(now - seconds) > MAX_SIGNATURE_AGE:
        return False
    expected = signature(secret, data_id, request_id, ts).split("v1=", 1)[1]
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogateescape"))


def cents(amount: Any) -> int:
    """A decimal amount as the API gives it (10.5) → integer cents (1050); exact."""
    return int((Decimal(str(amount)) * 100).to_integral_value())


class MercadoPago:
    """A Mercado Pago client: create_charge, verify_webhook, fetch (payments.provider)."""

    name = "mercadopago"

    def __init__(self, *, access_token: str, webhook_secret: str, base_url: str = API_URL,
                 timeout: float = 15.0, http_client: httpx2.Client | None = None,
                 clock: Any = None) -> None:
        self._base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {access_token}"}
        self._secret = webhook_secret
        self._timeout = httpx2.Timeout(timeout)
        self._http = http_client if http_client is not None else httpx2.Client()
        self._clock = clock

    def create_charge(self, amount_cents: int, expires_at: datetime, reference: str,
                      description: str) -> Charge:
        """A pending Pix payment of `amount_cents`, expiring at `expires_at`, with
        `reference` as its external reference (also the idempotency key: a retried call
        gets the same payment). Raises PaymentError."""
        body = {"transaction_amount": float(Decimal(amount_cents) / 100),
                "description": description[:200], "payment_method_id": "pix",
                "payer": {"email": PAYER_EMAIL}, "external_reference": reference,
                "date_of_expiration": expires_at.isoformat(timespec="milliseconds")}
        answer = self._call("POST", "/v1/payments", body, {"X-Idempotency-Key": reference})
        data = answer.get("point_of_interaction", {}).get("transaction_data", {})
        code = data.get("qr_code") if isinstance(data, dict) else None
        if not isinstance(code, str) or not code or "id" not in answer:
            raise PaymentError("charge answer without a Pix code", retryable=False)
        return Charge(charge_id=str(answer["id"]), code=code, expires_at=expires_at)

    def fetch(self, charge_id: str) -> PaymentStatus:
        """The payment `charge_id` as Mercado Pago has it now. Raises PaymentError."""
        if not charge_id.isdigit():
            raise PaymentError("a payment id is digits", retryable=False)
        answer = self._call("GET", f"/v1/payments/{charge_id}", None, {})
        try:
            amount = cents(answer["transaction_amount"])
        except (KeyError, ArithmeticError, ValueError) as exc:
            raise PaymentError("payment answer without an amount", retryable=False) from exc
        return PaymentStatus(charge_id=str(answer.get("id", charge_id)),
                             reference=str(answer.get("external_reference") or ""),
                             amount_cents=amount, paid=answer.get("status") == "approved")

    def verify_webhook(self, body: bytes, headers: dict[str, str],
                       query: dict[str, str]) -> Notification | None:
        """The notification of a signed webhook (`headers` with lower-case names, `query` the
        URL's parameters); None when the signature is missing or wrong, or when the body names
        another payment (`data.id`) than the signed one. A signed one that is not a payment's
        (another `type` the account's app subscribes to) has charge_id "": acknowledged and
        ignored (refused, Mercado Pago would retry it for days). The event id is what the
        signature covers, "<data.id>:<x-request-id>" (the manifest above): the unsigned body's
        `id` is not trusted, or a captured request resent with another body `id` within
        MAX_SIGNATURE_AGE would be a new event and another provider call."""
        data_id = query.get("data.id") or ""
        request_id = headers.get("x-request-id")
        now = self._clock() if self._clock is not None else None
        if not verify_signature(self._secret, headers.get("x-signature"), request_id, data_id,
                                now=now):
            return None
        if _body_data_id(body) not in (None, data_id.lower()):
            return None
        if query.get("type", "payment") != "payment" or not data_id.isdigit():
            return Notification(event_id="", charge_id="")
        return Notification(event_id=f"{data_id}:{request_id}", charge_id=data_id)

    def _call(self, method: str, path: str, body: dict[str, Any] | None,
              headers: dict[str, str]) -> dict[str, Any]:
        try:
            response = self._http.request(method, self._base_url + path, json=body,
                                          headers={**self._headers, **headers},
                                          timeout=self._timeout)
        except httpx2.TransportError as exc:
            raise PaymentError(f"mercadopago unreachable: {type(exc).__name__}",
                               retryable=True) from exc
        if not response.is_success:
            retryable = response.status_code >= 500 or response.status_code == 429
            raise PaymentError(f"mercadopago answered {response.status_code}",
                               retryable=retryable)
        try:
            answer = response.json()
        except ValueError as exc:
            raise PaymentError("mercadopago answer is not JSON", retryable=True) from exc
        if not isinstance(answer, dict):
            raise PaymentError("mercadopago answer is not an object", retryable=False)
        return answer


def _body_data_id(body: bytes) -> str | None:
    """The body's `data.id` as a string; None when the body has none (it is not signed: only
    compared with the signed one)."""
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    data = payload.get("data") if isinstance(payload, dict) else None
    value = data.get("id") if isinstance(data, dict) else None
    return None if value is None else str(value).lower()
