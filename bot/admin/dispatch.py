"""The admin API's dispatch: the call context (`Call`) and route (`Route`) of a handler, bearer
authentication and its attempt limits, typed path parameters, reading the JSON body, one
transaction per call on the admin thread pool, and errors as JSON (bot/admin/api.py's docstring
lists them)."""
import asyncio
import hmac
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, TypeVar

import structlog
from aiohttp import web
from pydantic import BaseModel
from redis.exceptions import RedisError
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import Session, select

from bot import guard
from bot.admin.schemas import MAX_ID, Decision, TokenCreate
from bot.bodies import ADMIN_BODY_BYTES, read_body
from bot.errors import BODY_REFUSALS, http_status
from core import clock
from intake.keys import ENGINE, SETTINGS
from operations import service
from operations import webhooks as hook_ops
from operations.errors import MAPPED, AdminError, Invalid, NotFound, admin_error
from operations.service import clean_text, validated
from storage.db import is_postgres, session_scope
from storage.models import Tenant
from storage.tenant_config import TenantSettings

log = structlog.get_logger(__name__)
T = TypeVar("T")
# settings that change cost and behaviour beyond the business's own: the operator's to change
OPERATOR_FIELDS = frozenset({"agent_model", "summary_model", "compaction_threshold_tokens",
                             "compaction_min_gain_tokens", "keep_messages",
                             "prune_after_user_turns"})


# -- the call context --------------------------------------------------------------------------

@dataclass
class Call:
    """What a handler gets: an open transaction, the tenant it acts on, parsed input."""

    request: web.Request
    session: Session
    tenant: Tenant | None
    operator: bool
    path: dict[str, Any]
    query: Any
    body: Any
    now: datetime
    after_commit: list[Callable[[], object]] = field(default_factory=list)

    @property
    def by(self) -> str:
        return "operator" if self.operator else f"tenant:{self.tenant.id if self.tenant else 0}"

    def the_tenant(self) -> Tenant:
        assert self.tenant is not None
        return self.tenant


Handler = Callable[[Call], tuple[int, Any]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # OpenAPI form: /admin/tenants/{tenant_id}
    handler: Handler
    summary: str
    tag: str
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    operator_only: bool = False
    ok: int = 200
    path_types: tuple[tuple[str, str], ...] = ()  # (name, "integer" | "string" | "date")
    returns: str | None = None  # the answer's schema in bot/admin/openapi.py, when described


# -- dispatch ----------------------------------------------------------------------------------

def error(status: int, code: str, message: str, problems: list[str] | None = None,
          headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message,
                                        "problems": problems or []}},
                             status=status, headers=headers)


def _authenticate(request: web.Request) -> tuple[bool, str] | None:
    """(is_operator, token) from the Authorization header, or None."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 512:
        return None
    operator_token = request.app[SETTINGS].admin_token
    is_operator = bool(operator_token) and hmac.compare_digest(
        token.encode("utf-8", "surrogatepass"), operator_token.encode())
    return is_operator, token


def _path_params(request: web.Request, route: Route) -> dict[str, Any]:
    """Typed path parameters; an impossible id is simply not found."""
    values: dict[str, Any] = {}
    for name, kind in route.path_types:
        raw = request.match_info[name]
        if clean_text(raw):
            raise NotFound(f"no {name} {raw!r}")
        if kind == "integer":
            if not raw.isascii() or not raw.isdigit() or not 0 < int(raw) <= MAX_ID:
                raise NotFound(f"no {name.removesuffix('_id')} {raw!r}")
            values[name] = int(raw)
        elif kind == "date":
            try:
                values[name] = date.fromisoformat(raw)
            except ValueError:
                raise Invalid(f"{name}: {raw!r} is not a YYYY-MM-DD date",
                              [f"{name}: not a YYYY-MM-DD date"]) from None
        else:
            if len(raw) > 160:
                raise NotFound(f"no {name} {raw[:40]!r}…")
            values[name] = raw
    return values


def make_handler(route: Route) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.StreamResponse:
        auth = _authenticate(request)
        if auth is None:
            return error(401, "unauthorized", "send Authorization: Bearer <token>",
                         headers={"WWW-Authenticate": 'Bearer realm="wagent-admin"'})
        refused = await _checked_token(request, *auth)
        if isinstance(refused, web.Response):
            return refused
        known = refused
        try:
            path = _path_params(request, route)
            query = _query(request, route)
            body = await _body(request, route)
            if isinstance(body, web.Response):
                return body
            return await run_admin(request.app, _run, request, route, auth[0], known, path,
                                   query, body)
        except AdminError as exc:
            return error(*http_status(exc), str(exc), exc.problems)

    handle.__name__ = route.handler.__name__
    return handle


def _query(request: web.Request, route: Route) -> Any:
    """The route's query, validated; Invalid for parameters of a route that takes none."""
    if route.query is not None:
        problems = clean_text(dict(request.query), "query")
        if problems:
            raise Invalid(problems[0], problems)
        return validated(route.query, dict(request.query))
    if request.query:
        raise Invalid(f"unknown query parameter(s): {', '.join(request.query)}")
    return None


OPTIONAL_BODIES: tuple[type[BaseModel], ...] = (Decision, TokenCreate, hook_ops.SecretRotation)


async def _body(request: web.Request, route: Route) -> Any:
    """The JSON body of a POST, PUT or PATCH (None when empty or another method), or the
    refusal to answer with: 408, 413 or 503 while reading it, 400 when it is not JSON. Invalid
    when it holds what cannot be stored, or is not an object where the route takes one (an
    OPTIONAL_BODIES route may be sent none)."""
    if route.method not in ("POST", "PUT", "PATCH"):
        return None
    try:
        raw = await read_body(request, ADMIN_BODY_BYTES)
    except web.HTTPException as exc:  # 408, 413, 503: said in JSON
        return _as_json(exc)
    body = None
    if raw.strip():
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            return error(400, "bad_json", "the body is not valid JSON")
        problems = clean_text(body)
        if problems:
            raise Invalid(problems[0], problems)
    if route.body is not None and not isinstance(body, dict) and not (
            body is None and route.body in OPTIONAL_BODIES):
        raise Invalid("the body must be a JSON object", ["body: must be a JSON object"])
    return body


def _as_json(refusal: web.HTTPException) -> web.Response:
    """bot/bodies.py's refusal of a body as the API's JSON error (the connection still
    closes after it)."""
    headers = {k: v for k, v in refusal.headers.items() if k == "Retry-After"}
    response = error(refusal.status, BODY_REFUSALS.get(refusal.status, "refused"),
                     refusal.text or refusal.reason, headers=headers)
    response.force_close()
    return response


async def _checked_token(request: web.Request, operator: bool,
                         token: str) -> int | None | web.Response:
    """Before anything is read or validated: 429 while the client or the tenant the token
    names used up its failed attempts (bot/guard.py), 401 for an unknown token (a failure
    counted), 503 when Redis or the database cannot say. Else the tenant id of a tenant
    token, None for the operator's."""
    address = guard.client_address(request)
    try:
        wait = await run_admin(request.app, guard.wait_seconds, request.app, address, token)
    except RedisError as exc:
        return error(*http_status(exc), "the attempt limits cannot be checked; try again")
    if wait:
        log.warning("admin_attempts_refused", retry_after=wait)
        return error(429, "too_many_attempts", f"too many failed attempts; try again in "
                     f"{wait} s", headers={"Retry-After": str(wait)})
    if operator:
        return None
    try:
        known = await run_admin(request.app, _tenant_of_token, request.app, token)
    except OperationalError as exc:
        return error(*http_status(exc), "the database is unavailable; try again")
    if known is not None:
        return known
    try:
        await run_admin(request.app, guard.count_failure, request.app, address, token)
    except RedisError:
        log.warning("admin_failure_not_counted")
    log.info("admin_token_refused")
    return error(401, "unauthorized", "unknown or revoked token",
                 headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


ADMIN_EXECUTOR = web.AppKey("admin_executor", ThreadPoolExecutor)


async def run_admin(app: web.Application, func: Callable[..., T], *args: Any) -> T:
    """Run blocking admin or console work on their own small thread pool, so a heavy admin
    request never takes the threads the webhook stores Meta's updates with."""
    return await asyncio.get_running_loop().run_in_executor(app[ADMIN_EXECUTOR], func, *args)


def _tenant_of_token(app: web.Application, token: str) -> int | None:
    with session_scope(app[ENGINE]) as session:
        return service.tenant_for_token(session, token)


def lock_tenant(session: Session, tenant_id: int) -> None:
    """Serialise the changes of one tenant (PostgreSQL row lock; SQLite writes are already
    serial): two concurrent PUTs of the hours end as one of them, never both merged."""
    if is_postgres(session.get_bind()):  # type: ignore[arg-type]
        session.exec(select(Tenant).where(Tenant.id == tenant_id).with_for_update()).first()


def _run(request: web.Request, route: Route, operator: bool, tenant_token_id: int | None,
         path: dict[str, Any], query: Any, body: Any) -> web.StreamResponse:
    """The route's handler in one transaction; `tenant_token_id`: the tenant of the (already
    checked) tenant token, None for the operator."""
    engine = request.app[ENGINE]
    try:
        with session_scope(engine) as session:
            if not operator and route.operator_only:
                return error(403, "forbidden", "this operation needs the operator token")
            tenant = _tenant_of_call(session, route, operator, tenant_token_id, path)
            held = _operator_fields(route, operator, body)
            if held:
                return error(403, "forbidden", f"{', '.join(held)}: only the operator "
                             "changes these (models and memory tuning)")
            call = Call(request=request, session=session, tenant=tenant, operator=operator,
                        path=path, query=query, body=body, now=clock.now())
            status, payload = route.handler(call)
    except MAPPED as exc:
        refused = admin_error(exc)
        return error(*http_status(refused), str(refused), refused.problems)
    except IntegrityError as exc:
        log.warning("admin_integrity_conflict", route=route.path)
        return error(*http_status(exc), "the change clashes with a concurrent one; try again")
    except OperationalError as exc:
        log.error("admin_database_unavailable", error=str(exc).splitlines()[0][:200])
        return error(*http_status(exc), "the database is unavailable; try again")
    for action in call.after_commit:
        try:
            action()
        except Exception as exc:  # the change is committed; the job is retried by the reconciler
            log.error("admin_after_commit_failed", route=route.path, error=str(exc)[:200])
    log.info("admin_call", method=route.method, route=route.path, status=status,
             operator=operator)
    if status == 204:
        return web.Response(status=204)
    return web.json_response(payload, status=status)


def _tenant_of_call(session: Session, route: Route, operator: bool,
                    tenant_token_id: int | None, path: dict[str, Any]) -> Tenant | None:
    """The tenant a call acts on: the path's (NotFound when it is not the token's; locked
    for a change), else the tenant token's, else None (the operator's, on no tenant)."""
    if "tenant_id" in path:
        tenant = session.get(Tenant, path["tenant_id"])
        if tenant is None or (not operator and tenant.id != tenant_token_id):
            raise NotFound(f"no tenant #{path['tenant_id']}")
        if route.method != "GET":
            lock_tenant(session, path["tenant_id"])
            session.refresh(tenant)
        return tenant
    return None if operator else session.get(Tenant, tenant_token_id)


def _operator_fields(route: Route, operator: bool, body: Any) -> list[str]:
    """The OPERATOR_FIELDS a tenant token tries to change (none for the operator)."""
    if operator or route.body is not TenantSettings or not isinstance(body, dict):
        return []
    return sorted(OPERATOR_FIELDS & body.keys())
