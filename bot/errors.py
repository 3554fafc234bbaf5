"""The one place an error becomes an HTTP status: `STATUSES`, read top to bottom.

Each package defines its own errors (operations/errors.py, intake/errors.py, storage/errors.py,
agent/errors.py, whatsapp/errors.py, core/errors.py, replay/errors.py; docs/ARCHITECTURE.md,
Errors); the web edge (bot/webhook.py, bot/admin/, bot/console/) answers with what
this table says and nothing of its own. The layers below do not know HTTP.

    operations.NotFound        404 not_found    an unknown id, or one of another tenant
    operations.Invalid         422 invalid      input that passed the shape checks, not the rules
    operations.Conflict        409 conflict     the change clashes with the state
    operations.AdminError      400 bad_request  any other refused administration request
    intake.StoreUnavailable    503 unavailable  the update could not be stored: Meta redelivers
    IntegrityError (SQLAlchemy) 409 conflict    a concurrent change won the row
    OperationalError            503 unavailable the database is unreachable
    RedisError                  503 unavailable Redis is unreachable

Refusals of the edge's own (401 no or unknown token, 403 a tenant token on an operator route or
a bad CSRF token, 429 too many failed attempts, 400 a body that is not JSON) are answered where
the check is made: they are not errors of any package. Storage errors reach here as operations
errors (operations.errors.admin_error).
`BODY_REFUSALS` names the codes of bot/bodies.py's refusals of a body (408, 413, 503).
"""

from aiohttp import web
from redis.exceptions import RedisError
from sqlalchemy.exc import IntegrityError, OperationalError

from intake.errors import StoreUnavailable
from operations.errors import AdminError, Conflict, Invalid, NotFound

STATUSES: tuple[tuple[type[BaseException], int, str], ...] = (
    (NotFound, 404, "not_found"),
    (Invalid, 422, "invalid"),
    (Conflict, 409, "conflict"),
    (AdminError, 400, "bad_request"),
    (StoreUnavailable, 503, "unavailable"),
    (IntegrityError, 409, "conflict"),
    (OperationalError, 503, "unavailable"),
    (RedisError, 503, "unavailable"),
)

BODY_REFUSALS = {408: "too_slow", 413: "too_large", 503: "busy"}


def http_status(exc: BaseException) -> tuple[int, str]:
    """(status, code) of `exc` by the first row of STATUSES it is an instance of.

    Raises ValueError for an error the table does not name: a bug, answered 500 by aiohttp.
    """
    for kind, status, code in STATUSES:
        if isinstance(exc, kind):
            return status, code
    raise ValueError(f"no HTTP status for {type(exc).__name__}")


def http_refusal(exc: BaseException, text: str) -> web.HTTPException:
    """`exc` as aiohttp's exception of its status (to raise from a handler), saying `text`."""
    status, _ = http_status(exc)
    kind = next(k for k in _AIOHTTP if k.status_code == status)
    return kind(text=text)


_AIOHTTP: tuple[type[web.HTTPException], ...] = (
    web.HTTPBadRequest, web.HTTPNotFound, web.HTTPConflict, web.HTTPUnprocessableEntity,
    web.HTTPServiceUnavailable)
