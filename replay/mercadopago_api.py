"""Mercado Pago double: a loopback aiohttp server speaking the Payments API for Pix (issue 48,
payments/mercadopago.py has the wire format and its sources).

`POST /v1/payments` creates a pending Pix payment after checking the body as Mercado Pago
does (bearer token; `X-Idempotency-Key`: the same key answers the same payment;
`payment_method_id` pix; `transaction_amount` > 0 with at most two decimals; `payer.email`;
`external_reference`; `date_of_expiration` an ISO 8601 time with its offset, 30 minutes to 30
days ahead of the product's clock) and answers its `point_of_interaction.transaction_data`
with a made-up copy-and-paste code. `GET /v1/payments/{id}` answers it. `pay(reference)`
settles the payment of that external reference (`approved`, or a different amount) and
returns the signed notification Mercado Pago would POST (`notification`), which the replay
sends to the product's `/payments/mercadopago`. Product code: the replay and tests use it.
"""

import itertools
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from aiohttp import web

from core import clock
from payments.mercadopago import signature

MIN_EXPIRY = timedelta(minutes=30)  # Mercado Pago: a Pix expiry from 30 minutes to 30 days
MAX_EXPIRY = timedelta(days=30)


@dataclass
class Payment:
    id: int
    reference: str
    amount: Decimal
    expires_at: datetime
    status: str = "pending"
    code: str = ""
    notifications: list[str] = field(default_factory=list)  # ids sent, for a replayed one

    def answer(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "payment_method_id": "pix",
                "transaction_amount": float(self.amount), "currency_id": "BRL",
                "external_reference": self.reference,
                "date_of_expiration": self.expires_at.isoformat(timespec="milliseconds"),
                "point_of_interaction": {"type": "PIX", "transaction_data": {
                    "qr_code": self.code, "qr_code_base64": "", "ticket_url": ""}}}


@dataclass(frozen=True)
class Notification:
    """A webhook as Mercado Pago sends it: the query, the headers and the raw body."""

    query: str
    headers: dict[str, str]
    body: bytes


class MercadoPagoDouble:
    def __init__(self, *, access_token: str, webhook_secret: str) -> None:
        self.access_token, self.webhook_secret = access_token, webhook_secret
        self.payments: dict[int, Payment] = {}
        self.refusals: list[str] = []  # what a refused request broke
        self._by_key: dict[str, int] = {}
        self._ids = itertools.count(1_300_000_001)
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/payments", self._create)
        app.router.add_get(r"/v1/payments/{payment_id:\d+}", self._get)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self.make_app(), shutdown_timeout=2.0)
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

    def _refuse(self, status: int, message: str) -> web.Response:
        self.refusals.append(message)
        return web.json_response({"message": message, "error": "bad_request", "status": status,
                                  "cause": []}, status=status)

    async def _create(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.access_token}":
            return self._refuse(401, "invalid access token")
        key = request.headers.get("X-Idempotency-Key", "")
        if not key:
            return self._refuse(400, "X-Idempotency-Key header is required")
        if key in self._by_key:
            return web.json_response(self.payments[self._by_key[key]].answer(), status=201)
        try:
            body = json.loads(await request.read())
        except ValueError:
            return self._refuse(400, "body is not JSON")
        problem = create_problem(body)
        if problem:
            return self._refuse(400, problem)
        payment = Payment(id=next(self._ids), reference=body["external_reference"],
                          amount=Decimal(str(body["transaction_amount"])),
                          expires_at=datetime.fromisoformat(body["date_of_expiration"]))
        payment.code = ("00020101021226830014br.gov.bcb.pix2561qrcodes.example/v2/"
                        f"{uuid.uuid4().hex}5204000053039865802BR6304ABCD")
        self.payments[payment.id] = payment
        self._by_key[key] = payment.id
        return web.json_response(payment.answer(), status=201)

    async def _get(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.access_token}":
            return self._refuse(401, "invalid access token")
        payment = self.payments.get(int(request.match_info["payment_id"]))
        if payment is None:
            return self._refuse(404, "Payment not found")
        return web.json_response(payment.answer())

    def latest(self) -> Payment | None:
        return self.payments[max(self.payments)] if self.payments else None

    def pay(self, reference: str, *, amount_cents: int | None = None,
            replay: bool = False) -> Notification:
        """Settle the payment of `reference` ("latest": the newest) — approved, for
        `amount_cents` when given (a payer who typed another amount) — and the signed
        notification to POST; `replay`: the previous notification again, byte for byte.
        KeyError when no payment has that reference."""
        payment = self.latest() if reference == "latest" else next(
            p for p in self.payments.values() if p.reference == reference)
        assert payment is not None
        if amount_cents is not None:
            payment.amount = Decimal(amount_cents) / 100
        payment.status = "approved"
        if not replay or not payment.notifications:
            payment.notifications.append(f"{next(self._ids)}")
        return self.notification(payment, payment.notifications[-1])

    def notification(self, payment: Payment, notification_id: str) -> Notification:
        ts = str(int(clock.now().timestamp()))
        request_id = str(uuid.uuid5(uuid.NAMESPACE_URL, notification_id))
        body = json.dumps({"id": int(notification_id), "live_mode": False, "type": "payment",
                           "date_created": clock.now().isoformat(), "api_version": "v1",
                           "action": "payment.updated", "data": {"id": str(payment.id)}},
                          separators=(",", ":")).encode()
        return Notification(
            query=f"data.id={payment.id}&type=payment",
            headers={"Content-Type": "application/json", "x-request-id": request_id,
                     "x-signature": signature(self.webhook_secret, str(payment.id),
                                              request_id, ts)},
            body=body)


def create_problem(body: Any) -> str:
    """What Mercado Pago would refuse in a Pix payment's body ("" when nothing)."""
    if not isinstance(body, dict):
        return "body must be an object"
    if body.get("payment_method_id") != "pix":
        return "payment_method_id must be pix"
    try:
        amount = Decimal(str(body.get("transaction_amount")))
    except InvalidOperation:
        return "transaction_amount must be a number"
    if not amount.is_finite() or amount <= 0 or amount != amount.quantize(Decimal("0.01")):
        return "transaction_amount must be positive with at most two decimals"
    if not isinstance(body.get("payer"), dict) or not body["payer"].get("email"):
        return "payer.email is required"
    if not isinstance(body.get("external_reference"), str) or not body["external_reference"]:
        return "external_reference is required"
    try:
        expires = datetime.fromisoformat(str(body.get("date_of_expiration")))
    except ValueError:
        return "date_of_expiration must be ISO 8601"
    if expires.tzinfo is None:
        return "date_of_expiration needs its offset"
    ahead = expires - clock.now()
    if not MIN_EXPIRY - timedelta(seconds=1) <= ahead <= MAX_EXPIRY:
        return "date_of_expiration must be 30 minutes to 30 days ahead"
    return ""
