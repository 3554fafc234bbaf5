"""Signing in to the console with a tenant token, and out. Failed sign-ins are limited per
client address and per tenant (bot/guard.py: 429 with Retry-After); the sign-in form uses a
double-submit cookie."""

import structlog
from aiohttp import web
from sqlmodel import col, select

from bot import guard
from bot.admin.dispatch import run_admin
from bot.bodies import FORM_BODY_BYTES, SIGN_IN_BODY_BYTES, read_form
from bot.console.frame import render, requested_language
from bot.console.session import (
    COOKIE,
    LOGIN_COOKIE,
    SESSION_SECONDS,
    csrf_ok,
    load_session,
    redis_key,
    save_session,
    set_cookie,
)
from bot.console.texts import texts_for
from core.credentials import CSRF_TOKEN, SESSION_ID, mint
from intake.keys import ENGINE, REDIS
from operations import service
from storage.db import session_scope
from storage.models import AdminToken, Tenant

log = structlog.get_logger(__name__)


async def login_form(request: web.Request) -> web.Response:
    lang = requested_language(request)
    return _login_page(request, lang, texts_for(lang)["bad_token"]
                       if request.query.get("failed") else "")


def _login_page(request: web.Request, lang: str, error: str, *,
                status: int = 200) -> web.Response:
    """The sign-in form with a fresh double-submit CSRF token (in the form and a cookie)."""
    nonce = mint(CSRF_TOKEN)
    response = render(request, "login.html", {
        "t": texts_for(lang), "lang": lang, "page": "sign_in", "tenant": None, "csrf": nonce,
        "path": request.path, "flash": "", "flash_bad": False, "error": error},
        status=status)
    set_cookie(request, response, LOGIN_COOKIE, nonce, 900)
    return response


async def login(request: web.Request) -> web.StreamResponse:
    """Sign in with a tenant token. Refused before it is looked at while the client or the
    tenant it names used up its failed attempts (429); a wrong token counts as one."""
    form = await read_form(request, SIGN_IN_BODY_BYTES)
    if not csrf_ok(request.cookies.get(LOGIN_COOKIE, ""), dict(form)):
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
    await run_admin(request.app, save_session, request, sid, state)
    log.info("console_signed_in", tenant_id=tenant_id)
    response = web.Response(status=303, headers={"Location": "/console/"})
    set_cookie(request, response, COOKIE, sid, SESSION_SECONDS)
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
    loaded = await run_admin(request.app, load_session, request)
    if loaded is not None:
        sid, state = loaded
        form = await read_form(request, FORM_BODY_BYTES)
        if not csrf_ok(state.get("csrf", ""), dict(form)):
            return web.Response(status=403, text=texts_for(state.get("lang", ""))["forbidden"])
        await run_admin(request.app, request.app[REDIS].delete, redis_key(request, sid))
    response = web.Response(status=303, headers={"Location": "/console/login"})
    response.del_cookie(COOKIE, path="/console")
    return response
