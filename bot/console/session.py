"""The console's session and CSRF: the session in Redis under the hash of a random id held in
an HttpOnly, SameSite=Strict cookie (Secure over HTTPS), 8 hours; every form carries the
session's CSRF token, compared in constant time."""

import hmac
import json
from typing import Any

from aiohttp import web

from intake.keys import REDIS, SETTINGS
from storage.keys import console_session_key

COOKIE = "wagent_console"
LOGIN_COOKIE = "wagent_console_login"
SESSION_SECONDS = 8 * 3600

# -- sessions ---------------------------------------------------------------------------------

def redis_key(request: web.Request, sid: str) -> str:
    return console_session_key(request.app[SETTINGS].redis_prefix, sid)


def load_session(request: web.Request) -> tuple[str, dict[str, Any]] | None:
    sid = request.cookies.get(COOKIE, "")
    if not sid or len(sid) > 100:
        return None
    raw = request.app[REDIS].get(redis_key(request, sid))
    return (sid, json.loads(raw)) if raw else None


def save_session(request: web.Request, sid: str, state: dict[str, Any]) -> None:
    request.app[REDIS].set(redis_key(request, sid), json.dumps(state), ex=SESSION_SECONDS)


def set_cookie(request: web.Request, response: web.StreamResponse, name: str, value: str,
                max_age: int) -> None:
    behind_tls = request.headers.get("X-Forwarded-Proto", "").lower() == "https"
    response.set_cookie(name, value, max_age=max_age, path="/console", httponly=True,
                        samesite="Strict", secure=request.secure or behind_tls)


def csrf_ok(expected: str, form: dict[str, Any]) -> bool:
    given = str(form.get("csrf", ""))
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())
