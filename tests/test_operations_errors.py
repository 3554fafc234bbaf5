"""Administration errors have one tree (`operations/errors.py`), whose HTTP statuses are
bot/errors.py's: the admin API and the console both answer through `admin_error`."""

import pytest

from bot.errors import http_status
from operations.errors import Conflict, Invalid, NotFound, admin_error
from storage.errors import CatalogueConflict, TenantConfigError


@pytest.mark.parametrize(("exc", "status", "code", "problems"), [
    (NotFound("no contact 'x'"), 404, "not_found", []),
    (Invalid("a: b; c: d", ["a: b", "c: d"]), 422, "invalid", ["a: b", "c: d"]),
    (TenantConfigError("timezone: bad", "keep_messages: bad"), 422, "invalid",
     ["timezone: bad", "keep_messages: bad"]),
    (CatalogueConflict("corte has 2 upcoming appointment(s)"), 409, "conflict", []),
    (KeyError("svc"), 404, "not_found", []),
])
def test_each_error_has_one_status_and_keeps_its_text(
        exc: Exception, status: int, code: str, problems: list[str]) -> None:
    refused = admin_error(exc)
    assert (*http_status(refused), refused.problems) == (status, code, problems)
    assert str(refused) == str(exc)


def test_an_admin_error_is_its_own_answer_and_anything_else_is_refused() -> None:
    conflict = Conflict("exists; update it instead")
    assert admin_error(conflict) is conflict
    with pytest.raises(ValueError):
        admin_error(RuntimeError("boom"))
