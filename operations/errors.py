"""The errors of administration, and the translation of the layers' errors into them.

    AdminError (`problems`: each problem as "where: what")
    ├── NotFound: an unknown id, or one of another tenant: never its data
    ├── Invalid: input that passed the shape checks but not the rules
    └── Conflict: the change clashes with the state

`admin_error` maps what the layers below raise (storage/errors.py: TenantConfigError,
CatalogueConflict; LookupError) to this tree. The HTTP status of each is bot/errors.py's: the
admin API answers with it, the console shows its not-found page for a NotFound.
"""

from storage.errors import CatalogueConflict, TenantConfigError


class AdminError(Exception):
    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


class NotFound(AdminError):
    """See the tree above."""


class Invalid(AdminError):
    """See the tree above."""


class Conflict(AdminError):
    """See the tree above."""


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
