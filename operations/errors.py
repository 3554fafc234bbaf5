"""The errors of administration and the one place any of them becomes an HTTP status.

    AdminError (400 bad_request; `problems`: each problem as "where: what")
    ├── NotFound (404 not_found): an unknown id, or one of another tenant: never its data
    ├── Invalid (422 invalid): input that passed the shape checks but not the rules
    └── Conflict (409 conflict): the change clashes with the state

`admin_error` maps what the layers below raise (`storage.tenants`: TenantConfigError,
CatalogueConflict; LookupError) to this tree; the admin API answers with its status and code,
the console shows its not-found page for a 404.
"""

from storage.tenants import CatalogueConflict, TenantConfigError


class AdminError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


class NotFound(AdminError):
    status, code = 404, "not_found"


class Invalid(AdminError):
    status, code = 422, "invalid"


class Conflict(AdminError):
    status, code = 409, "conflict"


MAPPED = (AdminError, TenantConfigError, CatalogueConflict, LookupError)  # what admin_error takes


def admin_error(exc: Exception) -> AdminError:
    """`exc` as an AdminError (itself when it is one): TenantConfigError → Invalid with its
    problems, CatalogueConflict → Conflict, LookupError → NotFound; anything else is a bug of
    the caller's (ValueError)."""
    if isinstance(exc, AdminError):
        return exc
    if isinstance(exc, TenantConfigError):
        return Invalid(str(exc), exc.problems)
    if isinstance(exc, CatalogueConflict):
        return Conflict(str(exc))
    if isinstance(exc, LookupError):
        return NotFound(str(exc))
    raise ValueError(f"not an administration error: {type(exc).__name__}")
