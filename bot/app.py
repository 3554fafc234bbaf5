"""The web process: webhook, admin API, console, calendar feeds, health, metrics.

It never calls Claude or the Graph API.
"""

import asyncio

import redis
import structlog
from aiohttp import web
from rq import Queue
from sqlalchemy import Engine, text

from bot.admin.api import setup_admin
from bot.bodies import BODY_BUDGET, LINGER_SECONDS, BodyBudget
from bot.console.app import setup_console
from bot.feeds import setup_feeds
from bot.metrics import setup_metrics
from bot.payments import receive_payment
from bot.routes import route_template
from bot.webhook import receive_update, verify_challenge
from core.settings import Settings
from intake.keys import ENGINE, REDIS, SETTINGS, TURN_QUEUE
from storage import webhooks
from storage.db import connect_redis, make_engine
from storage.jobs import enqueue_webhooks
from whatsapp.rate_card import use_rate_card

log = structlog.get_logger(__name__)


@web.middleware
async def bind_request_context(request: web.Request, handler):  # type: ignore[no-untyped-def]
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(route=route_template(request))
    return await handler(request)


def create_app(settings: Settings, *, engine: Engine | None = None,
               redis_client: redis.Redis | None = None) -> web.Application:
    """Build the web application. `engine` and `redis_client` are made from the settings when
    not given (tests and replays pass their own).
    """
    # every body is read by bot/bodies.py (limits, rate, budget); aiohttp's own limit is a
    # backstop for a body read any other way
    app = web.Application(middlewares=[bind_request_context],
                          client_max_size=settings.max_body_bytes + 1,
                          handler_args={"lingering_time": LINGER_SECONDS})
    app[SETTINGS] = settings
    use_rate_card(settings.rate_card_path)  # a bad card stops the start (RateCardError)
    app[BODY_BUDGET] = BodyBudget(settings.body_budget_bytes)
    app[ENGINE] = engine or make_engine(settings.database_url)
    app[REDIS] = redis_client or connect_redis(settings.redis_url)
    app[TURN_QUEUE] = Queue(settings.queue_name, connection=app[REDIS])
    queue = app[TURN_QUEUE]  # events emitted here (statuses, admin) are enqueued on commit
    webhooks.install_enqueuer(app[ENGINE], lambda ids: enqueue_webhooks(queue, ids))
    app.router.add_get("/webhook", verify_challenge)
    app.router.add_post("/webhook", receive_update)
    app.router.add_post("/payments/mercadopago", receive_payment)  # issue 48
    app.router.add_get("/health", health)
    setup_admin(app)
    setup_console(app)
    setup_feeds(app)
    setup_metrics(app)
    return app


async def health(request: web.Request) -> web.Response:
    """200 when the database and Redis answer, 503 naming what does not."""
    problems = await asyncio.to_thread(_check, request.app)
    status = 503 if problems else 200
    return web.json_response({"ok": not problems, "problems": problems}, status=status)


def _check(app: web.Application) -> list[str]:
    problems = []
    try:
        with app[ENGINE].connect() as connection:
            connection.execute(text("select 1"))
    except Exception:
        problems.append("database")
    try:
        app[REDIS].ping()
    except Exception:
        problems.append("redis")
    return problems


