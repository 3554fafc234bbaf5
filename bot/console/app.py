"""The business's web console under /console/: server-rendered pages (Jinja2), no build step.

Sign-in takes a tenant token (the admin API's); the session lives in Redis under the hash of a
random id held in an HttpOnly, SameSite=Strict cookie (Secure over HTTPS), 8 hours. Every
form carries the session's CSRF token, compared in constant time; the sign-in form uses a
double-submit cookie. Failed sign-ins are limited per client address and per tenant
(bot/guard.py: 429 with Retry-After). Pages act only on the session's tenant: an id of
another tenant's conversation, fact or appointment is "not found". Forms are read within
bounds (bot/bodies.py), after the session is checked. While Redis or the database is down a
page answers 503 with a readable page. The work is done by operations/service.py, as for the
API.
"""

import hmac
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jinja2
import structlog
from aiohttp import web
from redis.exceptions import RedisError
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, col, select

from agent import timeline
from agent.context import TenantPrompt, context_block, instructions_text
from agent.tools.facts_rules import render_awaiting_lines, render_fact_lines
from agent.window import tool_result_text
from bot import guard
from bot.admin.api import lock_tenant, run_admin
from bot.bodies import FORM_BODY_BYTES, SIGN_IN_BODY_BYTES, read_form
from bot.console import labels
from bot.console.agenda_texts import agenda_problem, agenda_texts
from bot.console.texts import LANGUAGES, texts_for, translate_notes, translate_problem
from bot.errors import http_status
from core import clock
from core.credentials import CSRF_TOKEN, SESSION_ID, mint
from intake.ingest import unstamp
from intake.keys import ENGINE, REDIS, SETTINGS, TURN_QUEUE
from operations import agenda as agenda_ops
from operations import service
from operations import staff as staff_ops
from operations import webhooks as hook_ops
from operations.errors import MAPPED, AdminError, Conflict, Invalid, NotFound, admin_error
from operations.service import clean_text
from storage import delivery, failures
from storage.db import session_scope
from storage.jobs import enqueue_flush, enqueue_turn, enqueue_webhooks
from storage.keys import console_session_key
from storage.marks import author_kind
from storage.models import AdminToken, Tenant
from storage.tenants import (
    WEEKDAYS,
    HoursExceptionSpec,
    ProfessionalSpec,
    ServiceSpec,
    TenantSettings,
    archive_professional,
    archive_service,
    change_professional,
    change_service,
    delete_hours_exception,
    list_services,
    parse_price,
    price_text,
    put_hours_exception,
    set_hours,
    update_settings,
)
from storage.webhooks import DEFAULT_GRACE, EVENT_TYPES
from usage.report import render_svg

log = structlog.get_logger(__name__)
COOKIE = "wagent_console"
LOGIN_COOKIE = "wagent_console_login"
SESSION_SECONDS = 8 * 3600
TRANSCRIPT_MESSAGES = 500  # a conversation page shows its latest messages
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
    after_commit: list[Callable[[], None]] = field(default_factory=list)

    @property
    def t(self) -> dict[str, str]:
        return texts_for(self.state.get("lang", "pt-BR"))


class Redirect(Exception):
    def __init__(self, location: str, flash: str = "", bad: bool = False) -> None:
        super().__init__(location)
        self.location, self.flash, self.bad = location, flash, bad


PageResult = tuple[str, dict[str, Any]] | Redirect


# -- sessions ---------------------------------------------------------------------------------

def _key(request: web.Request, sid: str) -> str:
    return console_session_key(request.app[SETTINGS].redis_prefix, sid)


def _load_session(request: web.Request) -> tuple[str, dict[str, Any]] | None:
    sid = request.cookies.get(COOKIE, "")
    if not sid or len(sid) > 100:
        return None
    raw = request.app[REDIS].get(_key(request, sid))
    return (sid, json.loads(raw)) if raw else None


def _save_session(request: web.Request, sid: str, state: dict[str, Any]) -> None:
    request.app[REDIS].set(_key(request, sid), json.dumps(state), ex=SESSION_SECONDS)


def _set_cookie(request: web.Request, response: web.StreamResponse, name: str, value: str,
                max_age: int) -> None:
    behind_tls = request.headers.get("X-Forwarded-Proto", "").lower() == "https"
    response.set_cookie(name, value, max_age=max_age, path="/console", httponly=True,
                        samesite="Strict", secure=request.secure or behind_tls)


def _csrf_ok(expected: str, form: dict[str, Any]) -> bool:
    given = str(form.get("csrf", ""))
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


# -- rendering --------------------------------------------------------------------------------

def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             autoescape=jinja2.select_autoescape(["html"]),
                             undefined=jinja2.StrictUndefined)
    env.filters["localtime"] = _localtime
    env.globals["price_text"] = price_text  # the one rendering of a price: storage/tenants.py
    env.globals["delivery_label"] = delivery.label  # the states' words: storage/delivery.py
    env.globals["NOT_DELIVERED"] = delivery.NOT_DELIVERED
    env.globals["label"] = labels.label  # fact keys, states, tools: bot/console/labels.py
    return env


def _localtime(value: str | None, tz: ZoneInfo) -> str:
    if not value:
        return ""
    return datetime.fromisoformat(value).astimezone(tz).strftime("%d/%m/%Y %H:%M")


def _render(request: web.Request, template: str, context: dict[str, Any], *,
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
        loaded = await run_admin(request.app, _load_session, request)
        if loaded is None:
            raise web.HTTPSeeOther("/console/login")
        sid, state = loaded
        form: dict[str, Any] = {}
        if request.method == "POST":
            posted = await read_form(request, FORM_BODY_BYTES)
            form = {k: (posted.getall(k) if k in ("services", "events") else posted.get(k))
                    for k in posted}
            if not _csrf_ok(state.get("csrf", ""), form):
                t = texts_for(state.get("lang", "pt-BR"))
                return web.Response(status=403, text=t["forbidden"])
        text_fields = {k: v for k, v in {**form, **request.query}.items()
                       if isinstance(v, str | list)}
        if clean_text(text_fields, "form") or clean_text(dict(request.match_info), "path"):
            return web.Response(status=400, text="invalid characters in the form")
        result, tenant_view = await run_admin(request.app, _run, request, state, form, handler,
                                              name)
        if result is None:  # the token was revoked or the tenant is gone
            await run_admin(request.app, request.app[REDIS].delete, _key(request, sid))
            raise web.HTTPSeeOther("/console/login")
        if isinstance(result, Redirect):
            if result.flash:
                state["flash"], state["flash_bad"] = result.flash, result.bad
                await run_admin(request.app, _save_session, request, sid, state)
            raise web.HTTPSeeOther(result.location)
        template, context = result
        flash, flash_bad = state.pop("flash", ""), state.pop("flash_bad", False)
        if flash:
            await run_admin(request.app, _save_session, request, sid, state)
        lang = state.get("lang", "pt-BR")
        return _render(request, template, {
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
    lang = _requested_language(request)
    t = texts_for(lang)
    response = _render(request, "message.html", {
        "t": t, "lang": lang, "page": "sign_in", "tenant": None, "csrf": "",
        "path": request.path, "flash": "", "flash_bad": False, "message": t[text]},
        status=status)
    response.headers.update(headers or {})
    return response


def _requested_language(request: web.Request) -> str:
    lang = request.query.get("lang", "pt-BR")
    return lang if lang in LANGUAGES else "pt-BR"


def _run(request: web.Request, state: dict[str, Any], form: dict[str, Any],
         handler: Handler, name: str) -> tuple[PageResult | None, Any]:
    after: list[Callable[[], None]] = []
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
                       "attention": staff_ops.counts(session, tenant, now=current.now)}
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
             "webhooks": "/console/webhooks"}


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


# -- sign in and out --------------------------------------------------------------------------

async def login_form(request: web.Request) -> web.Response:
    lang = _requested_language(request)
    return _login_page(request, lang, texts_for(lang)["bad_token"]
                       if request.query.get("failed") else "")


def _login_page(request: web.Request, lang: str, error: str, *,
                status: int = 200) -> web.Response:
    """The sign-in form with a fresh double-submit CSRF token (in the form and a cookie)."""
    nonce = mint(CSRF_TOKEN)
    response = _render(request, "login.html", {
        "t": texts_for(lang), "lang": lang, "page": "sign_in", "tenant": None, "csrf": nonce,
        "path": request.path, "flash": "", "flash_bad": False, "error": error},
        status=status)
    _set_cookie(request, response, LOGIN_COOKIE, nonce, 900)
    return response


async def login(request: web.Request) -> web.StreamResponse:
    """Sign in with a tenant token. Refused before it is looked at while the client or the
    tenant it names used up its failed attempts (429); a wrong token counts as one."""
    form = await read_form(request, SIGN_IN_BODY_BYTES)
    if not _csrf_ok(request.cookies.get(LOGIN_COOKIE, ""), dict(form)):
        return web.Response(status=403, text=texts_for("pt-BR")["forbidden"])
    token = str(form.get("token", "")).strip()
    address = guard.client_address(request)
    wait = await run_admin(request.app, guard.wait_seconds, request.app, address, token)
    if wait:
        log.warning("console_sign_in_throttled", retry_after=wait)
        t = texts_for("pt-BR")
        response = _login_page(request, "pt-BR", t["too_many_attempts"].format(
            minutes=-(-wait // 60)), status=429)
        response.headers["Retry-After"] = str(wait)
        return response
    found = (await run_admin(request.app, _token_row, request, token)
             if 0 < len(token) < 512 else None)
    if found is None:
        await run_admin(request.app, guard.count_failure, request.app, address, token)
        log.warning("console_sign_in_refused")
        raise web.HTTPSeeOther("/console/login?failed=1")
    token_id, tenant_id, language = found
    sid = mint(SESSION_ID)
    state = {"tenant_id": tenant_id, "token_id": token_id, "csrf": mint(CSRF_TOKEN),
             "lang": "en" if language == "en" else "pt-BR"}
    await run_admin(request.app, _save_session, request, sid, state)
    log.info("console_signed_in", tenant_id=tenant_id)
    response = web.Response(status=303, headers={"Location": "/console/"})
    _set_cookie(request, response, COOKIE, sid, SESSION_SECONDS)
    response.del_cookie(LOGIN_COOKIE, path="/console")
    return response


def _token_row(request: web.Request, token: str) -> tuple[int, int, str] | None:
    with session_scope(request.app[ENGINE]) as session:
        row = session.exec(select(AdminToken).where(
            AdminToken.token_hash == service.token_hash(token),
            col(AdminToken.revoked_at).is_(None))).first()
        tenant = session.get(Tenant, row.tenant_id) if row else None
        if row is None or tenant is None:
            return None
        return int(row.id or 0), int(tenant.id or 0), tenant.language


async def logout(request: web.Request) -> web.StreamResponse:
    loaded = await run_admin(request.app, _load_session, request)
    if loaded is not None:
        sid, state = loaded
        form = await read_form(request, FORM_BODY_BYTES)
        if not _csrf_ok(state.get("csrf", ""), dict(form)):
            return web.Response(status=403, text=texts_for(state.get("lang", ""))["forbidden"])
        await run_admin(request.app, request.app[REDIS].delete, _key(request, sid))
    response = web.Response(status=303, headers={"Location": "/console/login"})
    response.del_cookie(COOKIE, path="/console")
    return response


# -- pages ------------------------------------------------------------------------------------

def home(p: Page) -> PageResult:
    assert p.tenant.id is not None  # the banner: a provider failed in the last minutes
    recent = failures.recent(p.session, p.tenant.id, now=p.now)
    return "home.html", {"counts": service.counts(p.session, p.tenant),
                         "provider_failures": [service.failure_view(f) for f in recent],
                         "tz": ZoneInfo(p.tenant.timezone)}


def set_language(p: Page) -> PageResult:
    language = str(p.form.get("language", ""))
    if language in LANGUAGES:
        p.state["lang"] = language
        _save_session(p.request, p.request.cookies[COOKIE], p.state)
    target = str(p.form.get("next") or "/console/")
    return Redirect(target if target.startswith("/console/") and "//" not in target
                    else "/console/")


BOOKING_LIMITS = ("booking_notice_minutes", "booking_horizon_days", "max_upcoming_bookings")
# reminders (issue 25): the lead times as "1440, 120", the rest as the tenant holds them
REMINDER_FIELDS = ("reminder_lead_minutes", "quiet_hours", "reminder_template", "notice_template",
                   "cancellation_window_minutes", "reminder_text")
SETTINGS_FIELDS = ("instructions", "inactivity_timeout_minutes", "retention_days", "language",
                   "fact_keys", "followup_template", "followup_template_language",
                   *BOOKING_LIMITS, *REMINDER_FIELDS)


def settings_page(p: Page) -> PageResult:
    tenant = p.tenant
    form = {name: getattr(tenant, name) for name in SETTINGS_FIELDS}
    form["reminder_lead_minutes"] = ", ".join(str(m) for m in tenant.reminder_lead_minutes)
    form["fact_keys"] = "\n".join(k if isinstance(k, str) else json.dumps(k, ensure_ascii=False)
                                  for k in tenant.fact_keys)
    errors: dict[str, str] = {}
    if p.request.method == "POST":
        shown = form
        form = {name: str(p.form.get(name, "")) for name in SETTINGS_FIELDS}
        form.update({name: str(shown[name]) for name in REMINDER_FIELDS
                     if name not in p.form})  # a form without them (an older page) keeps them
        changes, errors = _settings_changes(form)
        try:
            spec: TenantSettings = service.validated(TenantSettings, changes)
        except service.Invalid as exc:
            errors = {**_field_errors([translate_problem(problem, p.state.get("lang", "pt-BR"))
                                       for problem in exc.problems]), **errors}
        else:
            if not errors:
                update_settings(p.session, tenant, spec.settings())
                log.info("console_settings_saved", tenant_id=tenant.id,
                         fields=sorted(spec.settings()))
                return Redirect("/console/settings", p.t["saved"])
    return "settings.html", {"form": form, "errors": errors, **_preview(tenant, form),
                             "status": 422 if errors else 200}


def _settings_changes(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    changes: dict[str, Any] = {k: form[k].strip() if k != "instructions" else form[k]
                               for k in ("instructions", "language", "followup_template",
                                         "followup_template_language")}
    if not changes["followup_template_language"]:
        changes.pop("followup_template_language")
    errors: dict[str, str] = {}
    for name in ("inactivity_timeout_minutes", "retention_days"):
        changes[name] = form[name].strip()  # pydantic reads "60" as 60 and names "abc"
    for name in BOOKING_LIMITS:  # left blank: unchanged
        if form[name].strip():
            changes[name] = form[name].strip()
    for name in ("quiet_hours", "reminder_template", "notice_template", "reminder_text"):
        changes[name] = form[name].strip()
    if form["cancellation_window_minutes"].strip():
        changes["cancellation_window_minutes"] = form["cancellation_window_minutes"].strip()
    leads = [m.strip() for m in form["reminder_lead_minutes"].split(",") if m.strip()]
    if all(m.isdigit() for m in leads):
        changes["reminder_lead_minutes"] = [int(m) for m in leads]
    else:
        errors["reminder_lead_minutes"] = "1440, 120"
    keys: list[Any] = []
    for line in form["fact_keys"].splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                parsed = json.loads(line)
            except (ValueError, RecursionError):
                errors["fact_keys"] = f"{line[:40]}: JSON inválido / invalid JSON"
                continue
            if clean_text(parsed):
                errors["fact_keys"] = f"{line[:40]}: JSON inválido / invalid JSON"
                continue
            keys.append(parsed)
        else:
            keys.append(line)
    changes["fact_keys"] = keys
    return changes, errors


def _field_errors(problems: list[str]) -> dict[str, str]:
    errors: dict[str, str] = {}
    for problem in problems:
        where, _, what = problem.partition(": ")
        errors.setdefault(where.split(".")[0], what or where)
    return errors


def _preview(tenant: Tenant, form: dict[str, Any]) -> dict[str, str]:
    prompt = TenantPrompt(name=tenant.name, timezone=tenant.timezone,
                          language=str(form.get("language") or tenant.language),
                          instructions=str(form.get("instructions") or ""),
                          model=tenant.agent_model)
    facts = [("preferred_name", "Ana", "confirmed", None)]  # invented example
    waiting = [("preferred_period", "tarde", f"{clock.now():%Y-%m-%d}")]  # suggested: apart
    example = context_block(render_fact_lines(facts, clock.now()), "",
                            awaiting=render_awaiting_lines(waiting))
    rules = instructions_text(TenantPrompt(name=prompt.name, timezone=prompt.timezone,
                                           language=prompt.language, instructions="",
                                           model=prompt.model))
    return {"preview_rules": rules, "preview_instructions": prompt.instructions.strip(),
            "preview_context": example}


def catalog_page(p: Page) -> PageResult:
    return "catalog.html", {"catalogue": service.catalogue_view(p.session, p.tenant),
                            "weekdays": WEEKDAYS, "error": "",
                            "currency": p.tenant.currency}


def _tenant_id(p: Page) -> int:
    return int(p.tenant.id or 0)


def add_service(p: Page) -> PageResult:
    code = str(p.form.get("code", "")).strip()
    name = str(p.form.get("name", "")).strip() or None
    raw = str(p.form.get("duration_minutes", "")).strip()
    if raw and not raw.isdigit():
        raise service.Invalid(f"{p.t['duration']}: {raw[:20]}")
    service.validated(ServiceSpec, {"code": code, "duration_minutes": 5})
    fields: dict[str, Any] = {}
    price = parse_price(str(p.form.get("price", "")))  # left empty: the price is kept
    if price is not None:
        fields["price_cents"], fields["price_from"] = price, bool(p.form.get("price_from"))
    if str(p.form.get("description", "")).strip():
        fields["description"] = str(p.form.get("description"))
    row, _ = change_service(p.session, _tenant_id(p), code, name=name,
                            duration_minutes=int(raw) if raw else None, **fields)
    return Redirect("/console/catalog", f"{row.name} ✓")


def remove_service(p: Page) -> PageResult:
    archive_service(p.session, _tenant_id(p), str(p.form.get("code", "")), now=p.now)
    return Redirect("/console/catalog", f"{p.form.get('code')} ✗")


def add_professional(p: Page) -> PageResult:
    code = str(p.form.get("code", "")).strip()
    service.validated(ProfessionalSpec, {"code": code})
    services = [str(s) for s in p.form.get("services") or []] or None  # none ticked: kept
    row, _ = change_professional(p.session, _tenant_id(p), code,
                                 name=str(p.form.get("name", "")).strip() or None,
                                 services=services, now=p.now)
    return Redirect("/console/catalog", f"{row.name} ✓")


def remove_professional(p: Page) -> PageResult:
    archive_professional(p.session, _tenant_id(p), str(p.form.get("code", "")), now=p.now)
    return Redirect("/console/catalog", f"{p.form.get('code')} ✗")


def save_hours(p: Page) -> PageResult:
    hours = {day: [i.strip() for i in str(p.form.get(day, "")).split(",") if i.strip()]
             for day in WEEKDAYS}
    set_hours(p.session, _tenant_id(p), {d: v for d, v in hours.items() if v})
    return Redirect("/console/catalog", p.t["saved"])


def add_holiday(p: Page) -> PageResult:
    hours = [i.strip() for i in str(p.form.get("hours", "")).split(",") if i.strip()]
    spec = service.validated(HoursExceptionSpec, {"day": p.form.get("day"), "hours": hours,
                                                  "note": str(p.form.get("note", ""))})
    put_hours_exception(p.session, _tenant_id(p), spec)
    return Redirect("/console/catalog", p.t["saved"])


def remove_holiday(p: Page) -> PageResult:
    try:
        day = date.fromisoformat(str(p.form.get("day", "")))
    except ValueError:
        raise service.Invalid("day: YYYY-MM-DD") from None
    delete_hours_exception(p.session, _tenant_id(p), day)
    return Redirect("/console/catalog", p.t["saved"])


def review_page(p: Page) -> PageResult:
    return "review.html", {"facts": service.review_queue(p.session, p.tenant), "error": ""}


def _by(p: Page) -> str:
    return f"console:{p.state.get('token_id')}"


def _fact_id(p: Page) -> int:
    raw = p.request.match_info["fact_id"]
    if not (raw.isascii() and raw.isdigit()) or int(raw) > 2**31 - 1:
        raise service.NotFound("no such fact")
    return int(raw)


def approve(p: Page) -> PageResult:
    service.approve_fact(p.session, p.tenant, _fact_id(p), by=_by(p),
                         reason=str(p.form.get("reason", ""))[:500], now=p.now)
    return Redirect("/console/review", p.t["approved"])


def reject(p: Page) -> PageResult:
    fact_id, reason = _fact_id(p), str(p.form.get("reason", ""))[:500]
    service.reject_fact(p.session, p.tenant, fact_id, by=_by(p), reason=reason, now=p.now)
    queue = p.request.app[TURN_QUEUE]
    p.after_commit.append(lambda: service.enqueue_rejection(queue, fact_id))
    return Redirect("/console/review", p.t["rejected"])


def edit(p: Page) -> PageResult:
    change = service.validated(service.FactEdit, {"value": p.form.get("value"),
                                                  "reason": p.form.get("reason")})
    service.edit_fact(p.session, p.tenant, _fact_id(p), change, by=_by(p), now=p.now)
    return Redirect("/console/review", p.t["edited"])


def conversations_page(p: Page) -> PageResult:
    raw = {k: v for k, v in p.request.query.items() if k in ("contact", "state") and v}
    query = service.validated(service.ConversationQuery, raw)
    try:
        rows = service.list_conversations(p.session, p.tenant, query, language=_language(p))
        error = ""
    except service.NotFound as exc:
        rows, error = [], str(exc)
    return "conversations.html", {"conversations": rows, "query": query, "error": error,
                                  "tz": ZoneInfo(p.tenant.timezone)}


def conversation_page(p: Page) -> PageResult:
    raw = p.request.match_info["conversation_id"]
    if not (raw.isascii() and raw.isdigit()) or int(raw) > 2**31 - 1:
        raise service.NotFound("no such conversation")
    view = service.conversation_view(p.session, p.tenant, int(raw), now=p.now, latest=True,
                                     limit=TRANSCRIPT_MESSAGES, language=_language(p))
    turn_calls = [c["context_tokens"] for c in view["usage"]["calls"] if c["purpose"] == "turn"]
    plot = render_svg(turn_calls, title=f"{p.t['usage']} · #{view['id']}",
                      axis_label=p.t["chart_calls"]) if turn_calls else ""  # no calls: no chart
    return "conversation.html", {"c": view, "plot": plot,
                                 "transcript": _transcript(view, _language(p)),
                                 "tz": ZoneInfo(p.tenant.timezone),
                                 "templates": p.tenant.templates or []}


def _transcript(view: dict[str, Any], language: str = "pt-BR") -> list[dict[str, Any]]:
    """Customer and agent bubbles (a message the customer deleted says so; the product's notes
    in the console's language: texts.translate_notes; a reply sent as a list or buttons with
    what it offered: service.offered_view); tool rounds folded between them."""
    items: list[dict[str, Any]] = []
    for m in view["messages"]:
        blocks = [b for b in m["content"] if isinstance(b, dict)]
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
        tools = [b for b in blocks if b.get("type") in ("tool_use", "tool_result")]
        if tools:
            lines = [f"→ {b['name']}({json.dumps(b.get('input', {}), ensure_ascii=False)})"
                     if b["type"] == "tool_use"
                     else f"← {tool_result_text(b.get('content'))[:2000]}" for b in tools]
            names = [str(b["name"]) for b in tools if b["type"] == "tool_use"]
            if items and items[-1]["kind"] == "tools":
                items[-1]["text"] += "\n" + "\n".join(lines)
                items[-1]["names"] += names
            else:
                items.append({"kind": "tools", "names": names, "text": "\n".join(lines)})
        text = "\n".join(t for t in texts if t.strip())
        if m.get("deleted_at") and m["direction"] == "inbound":  # the text is gone
            items.append({"kind": "customer", "deleted": True, "text": "",
                          "at": m["received_at"], "delivery": None})
            continue
        if text and m["direction"] in ("inbound", "outbound"):
            kind = "customer" if m["direction"] == "inbound" else "agent"
            author, _ = author_kind(m.get("author"))
            if author == "staff":  # without its "[equipe: NAME]" mark
                kind, text = "staff", text.split("] ", 1)[-1]
            elif author != "agent":  # a product message: as the model reads it
                text = timeline.render(author, texts)
            if kind == "customer":  # the received-time stamp is for the model (intake/ingest.py)
                text = unstamp(text)
            items.append({"kind": kind, "text": translate_notes(text, language),
                          "at": m["received_at"],
                          "delivery": m.get("delivery"), "offered": m.get("offered")})
    return items


def _conversation_id(p: Page) -> int:
    raw = p.request.match_info["conversation_id"]
    if not (raw.isascii() and raw.isdigit()) or int(raw) > 2**31 - 1:
        raise service.NotFound("no such conversation")
    return int(raw)


def staff_reply(p: Page) -> PageResult:
    """The reply box: free text, or one of the tenant's templates with its parameters (one
    per line); refused replies come back to the conversation with the reason."""
    cid = _conversation_id(p)
    back = f"/console/conversations/{cid}"
    template = str(p.form.get("template") or "").strip()
    author = str(p.form.get("author") or "").strip() or "console"
    body: dict[str, Any] = {"author": author[:100]}
    if template:
        params = [line.strip() for line in str(p.form.get("parameters") or "").splitlines()
                  if line.strip()]
        body["template"] = {"name": template, "parameters": params}
    else:
        body["text"] = str(p.form.get("text") or "").strip() or None
    try:
        staff_ops.reply(p.session, p.tenant, cid, body, author="console", now=p.now)
    except (Invalid, Conflict) as exc:
        message = "; ".join(translate_problem(part, _language(p))
                            for part in exc.problems or [str(exc)])
        return Redirect(back, message, bad=True)
    queue, prefix = p.request.app[TURN_QUEUE], p.request.app[SETTINGS].redis_prefix
    p.after_commit.append(lambda: enqueue_flush(queue, prefix, cid))
    return Redirect(back, p.t["reply_queued"])


def hand_back(p: Page) -> PageResult:
    cid = _conversation_id(p)
    if staff_ops.hand_back(p.session, p.tenant, cid, now=p.now)["changed"]:
        queue, prefix = p.request.app[TURN_QUEUE], p.request.app[SETTINGS].redis_prefix
        p.after_commit.append(lambda: enqueue_turn(queue, prefix, cid))  # what still waits
    return Redirect(f"/console/conversations/{cid}", p.t["handed_back"])


def attention_page(p: Page) -> PageResult:
    """What needs a person ("Atendimento"), newest first."""
    return "attention.html", {"a": staff_ops.attention(p.session, p.tenant, now=p.now),
                              "tz": ZoneInfo(p.tenant.timezone)}


def _language(p: Page) -> str:
    return "en" if p.state.get("lang") == "en" else "pt-BR"


def appointments_page(p: Page) -> PageResult:
    tz = ZoneInfo(p.tenant.timezone)
    today = p.now.astimezone(tz).date()
    try:
        anchor = date.fromisoformat(p.request.query.get("week", "")) \
            if p.request.query.get("week") else today
    except ValueError:
        anchor = today
    if not 2001 <= anchor.year <= 2099:
        anchor = today
    monday = anchor - timedelta(days=anchor.weekday())
    query = service.validated(service.AppointmentQuery, {
        "from": monday.isoformat(), "to": (monday + timedelta(days=6)).isoformat()})
    rows = service.list_appointments(p.session, p.tenant, query)
    days = []
    for offset in range(7):
        day = monday + timedelta(days=offset)
        label = f"{p.t['weekday_' + WEEKDAYS[offset]]} {day:%d/%m}"
        days.append((label, [a for a in rows if a["start"].startswith(day.isoformat())]))
    return "appointments.html", {"days": days, "week_start": f"{monday:%d/%m/%Y}",
                                 "iso_days": [(monday + timedelta(days=n)).isoformat()
                                              for n in range(7)],
                                 "day_link": agenda_texts(_language(p))["day_link"],
                                 "previous_week": (monday - timedelta(days=7)).isoformat(),
                                 "next_week": (monday + timedelta(days=7)).isoformat()}


def cancel(p: Page) -> PageResult:
    raw = p.request.match_info["appointment_id"]
    if not (raw.isascii() and raw.isdigit()) or int(raw) > 2**31 - 1:
        raise service.NotFound("no such appointment")
    appointment = service.cancel_appointment(p.session, p.tenant, int(raw), now=p.now)
    return Redirect(f"/console/appointments?week={appointment['start'][:10]}",
                    p.t["cancelled"])


# -- the day agenda (issue 22; operations/agenda.py) -------------------------------------------

def _agenda_day(p: Page, raw: str) -> date:
    today = p.now.astimezone(ZoneInfo(p.tenant.timezone)).date()
    try:
        day = date.fromisoformat(raw) if raw else today
    except ValueError:
        return today
    return day if 2001 <= day.year <= 2099 else today


def agenda_page(p: Page) -> PageResult:
    """Each professional's day (hours, bookings and blocks by start), with the forms to book,
    move, block and mark a visit; one column, usable on a phone."""
    day = _agenda_day(p, p.request.query.get("day", ""))
    view = agenda_ops.day_view(p.session, p.tenant, day)
    for pro in view["professionals"]:
        entries = [{**a, "kind": "appointment",
                    "started": a["start_at"] <= p.now.isoformat()} for a in pro["appointments"]]
        entries += [{**b, "kind": "block"} for b in pro["blocks"]]
        pro["entries"] = sorted(entries, key=lambda e: e["start"])
    label = f"{p.t['weekday_' + WEEKDAYS[day.weekday()]]} {day:%d/%m/%Y}"
    return "agenda.html", {"agenda": view, "day": day.isoformat(), "day_label": label,
                           "previous_day": (day - timedelta(days=1)).isoformat(),
                           "next_day": (day + timedelta(days=1)).isoformat(),
                           "services": list_services(p.session, _tenant_id(p)),
                           "at": agenda_texts(_language(p))}


def _agenda_action(p: Page, action: Callable[[str], str]) -> PageResult:
    """Run `action(day)` → a flash; a refusal comes back to the same day with its reasons."""
    day = _agenda_day(p, str(p.form.get("day", ""))).isoformat()
    try:
        flash = action(day)
    except MAPPED as exc:
        p.session.rollback()
        refused = admin_error(exc)
        said = str(refused)  # the reason, then the problems that add to it (the bookings)
        parts = [said] if not refused.problems or isinstance(refused, Conflict) else [
            part for part in refused.problems if said not in part] or refused.problems
        message = "; ".join(agenda_problem(part, _language(p))
                            or translate_problem(part, _language(p)) for part in parts)
        return Redirect(f"/console/agenda?day={day}", message, bad=True)
    return Redirect(f"/console/agenda?day={day}", flash)


def _form(p: Page, name: str) -> str:
    return str(p.form.get(name, "") or "").strip()


def agenda_book(p: Page) -> PageResult:
    def act(day: str) -> str:
        then = [str(c).strip() for c in p.form.get("services") or [] if str(c).strip()]
        body = service.validated(agenda_ops.StaffBooking, {
            "service": _form(p, "service"), "start": f"{day}T{_form(p, 'time')}",
            "then": then,  # the visit's next services, in order (issue 38)
            **{k: _form(p, k) for k in ("professional", "contact", "phone", "name", "note")
               if _form(p, k)}})
        booked = agenda_ops.book(p.session, p.tenant, body, now=p.now)
        said = f"{booked['start'][11:]} {booked['professional_name']}" if "visit" not in \
            booked else ", ".join(f"{row['start'][11:]} {row['service_name']} "
                                  f"({row['professional_name']})" for row in booked["visit"])
        return f"{agenda_texts(_language(p))['booked']}: {said}"
    return _agenda_action(p, act)


def agenda_block(p: Page) -> PageResult:
    def act(day: str) -> str:
        body = service.validated(agenda_ops.Block, {
            "professional": _form(p, "professional"), "start": f"{day}T{_form(p, 'time')}",
            "end": f"{day}T{_form(p, 'until')}", "note": _form(p, "note"),
            "force": bool(p.form.get("force"))})
        done = agenda_ops.block(p.session, p.tenant, body, now=p.now)
        at = agenda_texts(_language(p))
        kept = ", ".join(f"#{a['id']}" for a in done["kept"])
        return at["block_saved"] + (f" ({kept} {at['kept']})" if kept else "")
    return _agenda_action(p, act)


def _record(p: Page, key: str) -> int:
    raw = p.request.match_info[key]
    if not (raw.isascii() and raw.isdigit()) or int(raw) > 2**31 - 1:
        raise service.NotFound("no such record")
    return int(raw)


def agenda_unblock(p: Page) -> PageResult:
    def act(day: str) -> str:
        agenda_ops.unblock(p.session, p.tenant, _record(p, "block_id"))
        return agenda_texts(_language(p))["block_removed"]
    return _agenda_action(p, act)


def agenda_outcome(p: Page) -> PageResult:
    def act(day: str) -> str:
        agenda_ops.set_outcome(p.session, p.tenant, _record(p, "appointment_id"),
                               _form(p, "outcome"), now=p.now)
        return agenda_texts(_language(p))["marked"]
    return _agenda_action(p, act)


def agenda_move(p: Page) -> PageResult:
    def act(day: str) -> str:
        start = _form(p, "start") or f"{_form(p, 'move_date')}T{_form(p, 'move_time')}"
        body = service.validated(agenda_ops.Move, {"start": start})  # the date and time inputs
        moved = agenda_ops.move(p.session, p.tenant, _record(p, "appointment_id"), body,
                                now=p.now)
        return f"{agenda_texts(_language(p))['moved']}: {moved['start'].replace('T', ' ')}"
    return _agenda_action(p, act)


def webhooks_page(p: Page, *, new_secret: str = "") -> PageResult:
    """The tenant's webhook endpoints (a disabled one says so) and the form to add one; a
    secret just made is shown here once, never stored in the console session."""
    return "webhooks.html", {"endpoints": hook_ops.list_endpoints(p.session, p.tenant,
                                                                  now=p.now),
                             "event_types": EVENT_TYPES, "new_secret": new_secret,
                             "tz": ZoneInfo(p.tenant.timezone), "log": None}


def webhook_log(p: Page) -> PageResult:
    log_view = hook_ops.delivery_log(p.session, p.tenant, _endpoint_id(p), now=p.now)
    return "webhooks.html", {"endpoints": [], "event_types": EVENT_TYPES, "new_secret": "",
                             "tz": ZoneInfo(p.tenant.timezone), "log": log_view}


def _endpoint_id(p: Page) -> int:
    raw = p.request.match_info["endpoint_id"]
    if not (raw.isascii() and raw.isdigit()) or int(raw) > 2**31 - 1:
        raise service.NotFound("no such webhook endpoint")
    return int(raw)


def add_webhook(p: Page) -> PageResult:
    events = p.form.get("events") or []
    body = hook_ops.validated_create({"url": (p.form.get("url") or "").strip(),
                                      "events": list(events)})
    made = hook_ops.add_endpoint(p.session, p.tenant, body, now=p.now)
    return webhooks_page(p, new_secret=made["secret"])


def rotate_webhook(p: Page) -> PageResult:
    made = hook_ops.rotate_secret(p.session, p.tenant, _endpoint_id(p),
                                  grace=DEFAULT_GRACE, now=p.now)
    return webhooks_page(p, new_secret=made["secret"])


def remove_webhook(p: Page) -> PageResult:
    hook_ops.remove_endpoint(p.session, p.tenant, _endpoint_id(p))
    return Redirect("/console/webhooks", p.t["webhook_removed"])


def enable_webhook(p: Page) -> PageResult:
    _, due = hook_ops.enable_endpoint(p.session, p.tenant, _endpoint_id(p), now=p.now)
    queue = p.request.app[TURN_QUEUE]
    p.after_commit.append(lambda: enqueue_webhooks(queue, due))
    return Redirect("/console/webhooks", p.t["webhook_enabled_again"])


def setup_console(app: web.Application) -> None:
    """Add the /console pages to `app`."""
    app[CONSOLE_ENV] = _environment()
    app.router.add_get("/console", _redirect_home)
    app.router.add_get("/console/login", login_form)
    app.router.add_post("/console/login", guarded(login))
    app.router.add_post("/console/logout", guarded(logout))
    pages: list[tuple[str, str, str, Handler]] = [
        ("GET", "/console/", "home", home),
        ("POST", "/console/language", "home", set_language),
        ("GET", "/console/settings", "settings", settings_page),
        ("POST", "/console/settings", "settings", settings_page),
        ("GET", "/console/catalog", "catalog", catalog_page),
        ("POST", "/console/catalog/services", "catalog", add_service),
        ("POST", "/console/catalog/services/remove", "catalog", remove_service),
        ("POST", "/console/catalog/professionals", "catalog", add_professional),
        ("POST", "/console/catalog/professionals/remove", "catalog", remove_professional),
        ("POST", "/console/catalog/hours", "catalog", save_hours),
        ("POST", "/console/catalog/holidays", "catalog", add_holiday),
        ("POST", "/console/catalog/holidays/remove", "catalog", remove_holiday),
        ("GET", "/console/review", "review", review_page),
        ("POST", "/console/review/{fact_id}/approve", "review", approve),
        ("POST", "/console/review/{fact_id}/reject", "review", reject),
        ("POST", "/console/review/{fact_id}/edit", "review", edit),
        ("GET", "/console/conversations", "conversations", conversations_page),
        ("GET", "/console/conversations/{conversation_id}", "conversations", conversation_page),
        ("POST", "/console/conversations/{conversation_id}/reply", "conversations",
         staff_reply),
        ("POST", "/console/conversations/{conversation_id}/hand-back", "conversations",
         hand_back),
        ("GET", "/console/attention", "attention", attention_page),
        ("GET", "/console/appointments", "appointments", appointments_page),
        ("POST", "/console/appointments/{appointment_id}/cancel", "appointments", cancel),
        ("GET", "/console/agenda", "appointments", agenda_page),
        ("POST", "/console/agenda/book", "appointments", agenda_book),
        ("POST", "/console/agenda/block", "appointments", agenda_block),
        ("POST", "/console/agenda/blocks/{block_id}/remove", "appointments", agenda_unblock),
        ("POST", "/console/agenda/appointments/{appointment_id}/outcome", "appointments",
         agenda_outcome),
        ("POST", "/console/agenda/appointments/{appointment_id}/move", "appointments",
         agenda_move),
        ("GET", "/console/webhooks", "webhooks", webhooks_page),
        ("POST", "/console/webhooks", "webhooks", add_webhook),
        ("GET", "/console/webhooks/{endpoint_id}", "webhooks", webhook_log),
        ("POST", "/console/webhooks/{endpoint_id}/rotate", "webhooks", rotate_webhook),
        ("POST", "/console/webhooks/{endpoint_id}/remove", "webhooks", remove_webhook),
        ("POST", "/console/webhooks/{endpoint_id}/enable", "webhooks", enable_webhook),
    ]
    for method, path, name, handler in pages:
        app.router.add_route(method, path, page(name, handler))


async def _redirect_home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPMovedPermanently("/console/")
