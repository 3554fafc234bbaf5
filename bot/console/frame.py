"""The console's page frame: what a page handler gets (`Page`) and returns (a template and its
context, or a `Redirect` with a flash), the page wrapper (session check, CSRF on POST, one
transaction in a worker thread, the template), the 503 page while a store is down, and the
refusal of a change shown on its page."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jinja2
import structlog
from aiohttp import web
from redis.exceptions import RedisError
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from bot.admin.dispatch import lock_tenant, run_admin
from bot.admin.schemas import MAX_ID
from bot.bodies import FORM_BODY_BYTES, read_form
from bot.console import labels
from bot.console.session import csrf_ok, load_session, redis_key, save_session
from bot.console.texts import LANGUAGES, texts_for, translate_problem
from bot.errors import http_status
from core import clock
from intake.keys import ENGINE, REDIS
from operations import staff as staff_ops
from operations.errors import MAPPED, AdminError, NotFound, admin_error
from operations.service import clean_text
from storage import budgets, delivery
from storage.db import session_scope
from storage.models import AdminToken, Tenant
from storage.tenant_config import price_text

log = structlog.get_logger(__name__)



TEMPLATES = Path(__file__).parent / "templates"
CONSOLE_ENV = web.AppKey("console_templates", jinja2.Environment)


@dataclass
class Page:
    """What a page handler gets (in a worker thread, inside one transaction)."""

    request: web.Request
    session: Session
    tenant: Tenant
    state: dict[str, Any]  # the console session: tenant_id, token_id, csrf, lang
    form: dict[str, Any]
    now: datetime
    after_commit: list[Callable[[], object]] = field(default_factory=list)

    @property
    def t(self) -> dict[str, str]:
        return texts_for(self.state.get("lang", "pt-BR"))


class Redirect(Exception):
    def __init__(self, location: str, flash: str = "", bad: bool = False) -> None:
        super().__init__(location)
        self.location, self.flash, self.bad = location, flash, bad


PageResult = tuple[str, dict[str, Any]] | Redirect


# -- rendering --------------------------------------------------------------------------------

def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             autoescape=jinja2.select_autoescape(["html"]),
                             undefined=jinja2.StrictUndefined)
    env.filters["localtime"] = _localtime
    env.globals["price_text"] = price_text  # the one rendering of a price: storage/tenant_config.py
    env.globals["delivery_label"] = delivery.label  # the states' words: storage/delivery.py
    env.globals["NOT_DELIVERED"] = delivery.NOT_DELIVERED
    env.globals["label"] = labels.label  # fact keys, states, tools: bot/console/labels.py
    return env


def _localtime(value: str | None, tz: ZoneInfo) -> str:
    if not value:
        return ""
    return datetime.fromisoformat(value).astimezone(tz).strftime("%d/%m/%Y %H:%M")


def render(request: web.Request, template: str, context: dict[str, Any], *,
            status: int = 200) -> web.Response:
    html = request.app[CONSOLE_ENV].get_template(template).render(**context)
    response = web.Response(text=html, content_type="text/html", status=status)
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


# -- the page wrapper -------------------------------------------------------------------------

Handler = Callable[[Page], PageResult]


def page(name: str, handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An aiohttp handler: session check, CSRF on POST, the handler in a thread with one
    transaction, then the template (or a redirect with a flash message)."""
    async def handle(request: web.Request) -> web.StreamResponse:
        loaded = await run_admin(request.app, load_session, request)
        if loaded is None:
            raise web.HTTPSeeOther("/console/login")
        sid, state = loaded
        form: dict[str, Any] = {}
        if request.method == "POST":
            posted = await read_form(request, FORM_BODY_BYTES)
            form = {k: (posted.getall(k) if k in ("services", "events") else posted.get(k))
                    for k in posted}
            if not csrf_ok(state.get("csrf", ""), form):
                t = texts_for(state.get("lang", "pt-BR"))
                return web.Response(status=403, text=t["forbidden"])
        text_fields = {k: v for k, v in {**form, **request.query}.items()
                       if isinstance(v, str | list)}
        if clean_text(text_fields, "form") or clean_text(dict(request.match_info), "path"):
            return web.Response(status=400, text="invalid characters in the form")
        result, tenant_view = await run_admin(request.app, _run, request, state, form, handler,
                                              name)
        if result is None:  # the token was revoked or the tenant is gone
            await run_admin(request.app, request.app[REDIS].delete, redis_key(request, sid))
            raise web.HTTPSeeOther("/console/login")
        if isinstance(result, Redirect):
            if result.flash:
                state["flash"], state["flash_bad"] = result.flash, result.bad
                await run_admin(request.app, save_session, request, sid, state)
            raise web.HTTPSeeOther(result.location)
        template, context = result
        flash, flash_bad = state.pop("flash", ""), state.pop("flash_bad", False)
        if flash:
            await run_admin(request.app, save_session, request, sid, state)
        lang = state.get("lang", "pt-BR")
        return render(request, template, {
            "t": texts_for(lang), "lang": lang, "page": name, "tenant": tenant_view,
            "csrf": state["csrf"], "path": request.path_qs, "flash": flash,
            "flash_bad": flash_bad, **context}, status=int(context.pop("status", 200)))
    return guarded(handle)


Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]
UNAVAILABLE_RETRY_SECONDS = 30


def guarded(handler: Answer) -> Answer:
    """`handler` with Redis or the database down answered 503 with a readable page (in the
    language asked for with `?lang=`, else pt-BR: the session, in Redis, may be out of
    reach)."""
    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except (RedisError, OperationalError) as exc:
            store = "redis" if isinstance(exc, RedisError) else "database"
            log.error("console_store_unavailable", store=store, error=type(exc).__name__)
            return _message(request, "unavailable", status=http_status(exc)[0],
                            headers={"Retry-After": str(UNAVAILABLE_RETRY_SECONDS)})
    return answer


def _message(request: web.Request, text: str, *, status: int,
             headers: dict[str, str] | None = None) -> web.Response:
    """A page with one sentence of texts.py, signed out (no navigation)."""
    lang = requested_language(request)
    t = texts_for(lang)
    response = render(request, "message.html", {
        "t": t, "lang": lang, "page": "sign_in", "tenant": None, "csrf": "",
        "path": request.path, "flash": "", "flash_bad": False, "message": t[text]},
        status=status)
    response.headers.update(headers or {})
    return response


def requested_language(request: web.Request) -> str:
    lang = request.query.get("lang", "pt-BR")
    return lang if lang in LANGUAGES else "pt-BR"


def _run(request: web.Request, state: dict[str, Any], form: dict[str, Any],
         handler: Handler, name: str) -> tuple[PageResult | None, Any]:
    after: list[Callable[[], object]] = []
    with session_scope(request.app[ENGINE]) as session:
        token = session.get(AdminToken, state.get("token_id", 0))
        tenant = session.get(Tenant, state.get("tenant_id", 0))
        if (token is None or token.revoked_at is not None or tenant is None
                or token.tenant_id != tenant.id):
            return None, None
        if request.method == "POST":
            lock_tenant(session, int(tenant.id or 0))
        current = Page(request=request, session=session, tenant=tenant, state=state,
                       form=form, now=clock.now(), after_commit=after)
        try:
            result = handler(current)
        except MAPPED as exc:
            session.rollback()
            result = _error_result(exc, current.t, name)
        tenant_view = {"name": tenant.name, "id": tenant.id,
                       "phone_number_id": tenant.phone_number_id,  # the CLI hints
                       "attention": staff_ops.counts(session, tenant, now=current.now),
                       "standby_seen": tenant.standby_seen_at is not None,  # issue 45
                       "budget": budgets.banner_level(session, tenant, current.now),  # 49
                       "budget_action": tenant.budget_action}
    for action in after:
        try:
            action()
        except Exception as exc:  # committed; the reconciler or a person retries
            log.error("console_after_commit_failed", error=str(exc)[:200])
    return result, tenant_view


PAGE_URLS = {"home": "/console/", "settings": "/console/settings",
             "catalog": "/console/catalog", "review": "/console/review",
             "conversations": "/console/conversations",
             "appointments": "/console/appointments", "attention": "/console/attention",
             "webhooks": "/console/webhooks", "results": "/console/results"}


def _error_result(exc: Exception, t: dict[str, str], name: str) -> PageResult:
    """Not found: a 404 page. A refused change: back to its page with the reason."""
    refused = admin_error(exc)
    if isinstance(refused, NotFound) and (isinstance(exc, AdminError)
                                          or name not in ("catalog",)):
        return "message.html", {"message": t["not_found"], "status": 404}
    language = "en" if t is texts_for("en") else "pt-BR"
    message = "; ".join(translate_problem(part, language)
                        for part in refused.problems or [str(refused)])
    return Redirect(PAGE_URLS.get(name, "/console/"), message, bad=True)


def _language(p: Page) -> str:
    return "en" if p.state.get("lang") == "en" else "pt-BR"


def path_id(p: "Page", key: str, what: str) -> int:
    """The id in the path's `key` (a positive int that fits a database id, `MAX_ID` as the
    admin API's); anything else is NotFound("no such `what`"), as another tenant's id is."""
    raw = p.request.match_info[key]
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_ID:
        raise NotFound(f"no such {what}")
    return int(raw)
