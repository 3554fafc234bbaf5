"""The business's web console under /console/: server-rendered pages (Jinja2), no build step.

Sign-in takes a tenant token (the admin API's); the session lives in Redis under the hash of a
random id held in an HttpOnly, SameSite=Strict cookie (Secure over HTTPS), 8 hours. Every
form carries the session's CSRF token, compared in constant time; the sign-in form uses a
double-submit cookie. Failed sign-ins are limited per client address and per tenant
(bot/guard.py: 429 with Retry-After). Pages act only on the session's tenant: an id of
another tenant's conversation, fact or appointment is "not found". Forms are read within
bounds (bot/bodies.py), after the session is checked. While Redis or the database is down a
page answers 503 with a readable page. The work is done by operations/, as for the API.

This module is the route table (and the home page); the rest, one module each: session.py
(session and CSRF), signin.py, frame.py (the page wrapper and rendering), and one per area:
settings.py, catalogue.py, review.py, conversations.py, agenda.py, webhooks.py, results.py.
"""

from zoneinfo import ZoneInfo

from aiohttp import web

from bot.console.agenda import (
    agenda_block,
    agenda_book,
    agenda_cancel_series,
    agenda_deposit_paid,
    agenda_feed,
    agenda_move,
    agenda_outcome,
    agenda_page,
    agenda_unblock,
    agenda_waitlist_offer,
    appointments_page,
    cancel,
)
from bot.console.catalogue import (
    add_holiday,
    add_professional,
    add_service,
    catalog_page,
    remove_holiday,
    remove_professional,
    remove_service,
    save_hours,
    switch_public_holiday,
)
from bot.console.conversations import (
    attention_page,
    conversation_page,
    conversations_page,
    hand_back,
    staff_reply,
    thread_control,
)
from bot.console.frame import (
    CONSOLE_ENV,
    Handler,
    Page,
    PageResult,
    Redirect,
    _language,
    environment,
    guarded,
    page,
)
from bot.console.packages import adjust_package, sell_package
from bot.console.results import cost_view, results_page
from bot.console.results_texts import results_texts
from bot.console.review import approve, edit, reject, review_page
from bot.console.session import COOKIE, save_session
from bot.console.settings import settings_page
from bot.console.signin import login, login_form, logout
from bot.console.texts import LANGUAGES
from bot.console.webhooks import (
    add_webhook,
    enable_webhook,
    remove_webhook,
    rotate_webhook,
    webhook_log,
    webhooks_page,
)
from operations import service
from storage import failures

# -- pages ------------------------------------------------------------------------------------

def home(p: Page) -> PageResult:
    assert p.tenant.id is not None  # the banner: a provider failed in the last minutes
    recent = failures.recent(p.session, p.tenant.id, now=p.now)
    return "home.html", {"counts": service.counts(p.session, p.tenant),
                         "provider_failures": [service.failure_view(f) for f in recent],
                         "tz": ZoneInfo(p.tenant.timezone), "costs": cost_view(p),
                         "rt": results_texts(_language(p))}


def set_language(p: Page) -> PageResult:
    language = str(p.form.get("language", ""))
    if language in LANGUAGES:
        p.state["lang"] = language
        save_session(p.request, p.request.cookies[COOKIE], p.state)
    target = str(p.form.get("next") or "/console/")
    return Redirect(target if target.startswith("/console/") and "//" not in target
                    else "/console/")


PAGES: list[tuple[str, str, str, Handler]] = [  # (method, path, page name, handler)
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
    ("POST", "/console/catalog/public-holidays", "catalog", switch_public_holiday),
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
    ("POST", "/console/conversations/{conversation_id}/thread", "conversations",
     thread_control),
    ("POST", "/console/conversations/{conversation_id}/packages", "conversations",
     sell_package),  # issue 46: bot/console/packages.py
    ("POST", "/console/conversations/{conversation_id}/packages/{package_id}/adjust",
     "conversations", adjust_package),
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
    ("POST", "/console/agenda/waitlist/{entry_id}/offer", "appointments",
     agenda_waitlist_offer),
    ("POST", "/console/agenda/appointments/{appointment_id}/cancel-series", "appointments",
     agenda_cancel_series),
    ("POST", "/console/agenda/feeds", "appointments", agenda_feed),
    ("POST", "/console/agenda/appointments/{appointment_id}/deposit-paid", "appointments",
     agenda_deposit_paid),
    ("GET", "/console/results", "results", results_page),  # issue 49: bot/console/results.py
    ("GET", "/console/webhooks", "webhooks", webhooks_page),
    ("POST", "/console/webhooks", "webhooks", add_webhook),
    ("GET", "/console/webhooks/{endpoint_id}", "webhooks", webhook_log),
    ("POST", "/console/webhooks/{endpoint_id}/rotate", "webhooks", rotate_webhook),
    ("POST", "/console/webhooks/{endpoint_id}/remove", "webhooks", remove_webhook),
    ("POST", "/console/webhooks/{endpoint_id}/enable", "webhooks", enable_webhook),
]


def setup_console(app: web.Application) -> None:
    """Add the /console pages to `app`."""
    app[CONSOLE_ENV] = environment()
    app.router.add_get("/console", _redirect_home)
    app.router.add_get("/console/login", login_form)
    app.router.add_post("/console/login", guarded(login))
    app.router.add_post("/console/logout", guarded(logout))
    for method, path, name, handler in PAGES:
        app.router.add_route(method, path, page(name, handler))


async def _redirect_home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPMovedPermanently("/console/")
