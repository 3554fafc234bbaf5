"""The Pix provider's webhook (issue 48, docs/PAYMENTS.md): `POST /payments/mercadopago`.

The signature (`x-signature` over data.id, `x-request-id` and ts, payments/mercadopago.py) is
checked before anything is stored: missing or wrong → 401, nothing recorded. A signed
notification is recorded once per signed event, its data.id and x-request-id (the body's `id` is
not signed; storage/deposits.record_event: a replayed or resent event is answered 200 and
changes nothing) and a job fetches the payment from the provider to learn
whether it is paid and for how much (workers/deposits.py): the body is never trusted for the
amount. The web process never calls the provider. Logs name no payer, code or key.
"""

import asyncio

import structlog
from aiohttp import web

from core import clock
from intake.keys import ENGINE, SETTINGS, TURN_QUEUE
from payments.mercadopago import MercadoPago
from storage import deposits
from storage.db import session_scope
from storage.jobs import enqueue_payment

log = structlog.get_logger(__name__)

MAX_PAYMENT_BODY = 64 * 1024  # a notification is a few hundred bytes


async def receive_payment(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    if not settings.mercadopago_webhook_secret:
        raise web.HTTPNotFound()
    body = await request.content.read(MAX_PAYMENT_BODY + 1)
    if len(body) > MAX_PAYMENT_BODY:
        return web.json_response({"error": "body too large"}, status=413)
    verifier = MercadoPago(access_token="", webhook_secret=settings.mercadopago_webhook_secret,
                           clock=lambda: clock.now().timestamp())
    headers = {k.lower(): v for k, v in request.headers.items()}
    notification = verifier.verify_webhook(body, headers, dict(request.query))
    if notification is None:
        log.warning("payment_webhook_refused")
        return web.json_response({"error": "bad signature"}, status=401)
    if not notification.charge_id:
        log.info("payment_webhook_ignored")  # signed, of another type: 200, or it is retried
        return web.json_response({"ignored": True})
    engine, now = request.app[ENGINE], clock.now()

    def record() -> int | None:
        with session_scope(engine) as session:
            event = deposits.record_event(session, provider=verifier.name,
                                          event_id=notification.event_id,
                                          charge_id=notification.charge_id, now=now)
            session.flush()
            return None if event is None else event.id

    event_id = await asyncio.to_thread(record)
    if event_id is None:
        log.info("payment_webhook_duplicate")
        return web.json_response({"duplicate": True})
    await asyncio.to_thread(enqueue_payment, request.app[TURN_QUEUE], event_id)
    log.info("payment_webhook_recorded", payment_event_id=event_id)
    return web.json_response({"received": True})
