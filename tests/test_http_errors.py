"""bot/errors.py: every package error that reaches HTTP has one status, from one table."""

import pytest
from aiohttp import web
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.exc import IntegrityError, OperationalError

from bot.errors import STATUSES, http_refusal, http_status
from intake.errors import StoreUnavailable
from operations.errors import AdminError, Conflict, Invalid, NotFound, admin_error
from storage.errors import CatalogueConflict, TenantConfigError


@pytest.mark.parametrize(("exc", "expected"), [
    (NotFound("no tenant #9"), (404, "not_found")),
    (Invalid("bad", ["a: b"]), (422, "invalid")),
    (Conflict("clash"), (409, "conflict")),
    (AdminError("plain"), (400, "bad_request")),
    (StoreUnavailable("down"), (503, "unavailable")),
    (IntegrityError("INSERT", {}, Exception("dup")), (409, "conflict")),
    (OperationalError("SELECT 1", {}, Exception("gone")), (503, "unavailable")),
    (RedisConnectionError("refused"), (503, "unavailable")),
    (admin_error(TenantConfigError("hours: bad")), (422, "invalid")),
    (admin_error(CatalogueConflict("in use")), (409, "conflict")),
    (admin_error(LookupError("no such")), (404, "not_found")),
])
def test_each_error_has_its_status(exc: Exception, expected: tuple[int, str]) -> None:
    assert http_status(exc) == expected


def test_subclasses_come_before_their_base() -> None:
    kinds = [kind for kind, _, _ in STATUSES]
    for i, kind in enumerate(kinds):
        for later in kinds[i + 1:]:
            assert not issubclass(later, kind), f"{later.__name__} is shadowed by {kind.__name__}"


def test_an_unmapped_error_is_a_bug_not_a_guess() -> None:
    with pytest.raises(ValueError, match="KeyError"):
        http_status(KeyError("x"))


def test_refusal_is_aiohttps_exception_of_that_status() -> None:
    refusal = http_refusal(StoreUnavailable("down"), "temporarily unable")
    assert isinstance(refusal, web.HTTPServiceUnavailable) and refusal.text == "temporarily unable"
    assert http_refusal(NotFound("x"), "gone").status == 404


def test_no_edge_module_spells_a_mapped_status_of_its_own() -> None:
    """The web edge answers package errors through bot/errors.py only."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "bot"
    offenders = []
    for path in root.rglob("*.py"):
        if path.name == "errors.py" and path.parent == root:
            continue
        text = path.read_text()
        for needle in ("error(404", "error(409", "error(422", "error(503",
                       "HTTPServiceUnavailable(text=\"temporarily", "status, code ="):
            if needle in text:
                offenders.append(f"{path.name}: {needle!r}")
    assert not offenders
