"""The one ladder of intake (intake/failures.py `attempt`): a lost database is a 503
(StoreUnavailable, its message free of the statement's parameters), any other failure is this
update's own; and the one place a customer's text is normalised (intake/text.py)."""

from datetime import UTC, datetime

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from intake.errors import StoreUnavailable
from intake.failures import attempt
from intake.stamp import unstamp
from intake.text import content, normalise

PARAMS = {"content": "Oi! Vocês abrem", "wa_id": "5511912345678"}


def test_a_lost_database_is_store_unavailable_without_the_parameters() -> None:
    with pytest.raises(StoreUnavailable) as failure, attempt():
        raise OperationalError("INSERT INTO message", PARAMS, Exception("server closed"))
    assert str(failure.value) == "Exception: server closed"
    assert "5511912345678" not in str(failure.value)


@pytest.mark.parametrize("error", [
    IntegrityError("INSERT INTO contact", PARAMS, Exception("duplicate key")),
    RuntimeError("a bug"),
])
def test_a_refusal_is_kept_for_the_update_alone(error: Exception) -> None:
    with attempt() as tried:
        raise error
    assert tried.error is error


def test_a_block_that_succeeds_keeps_no_error() -> None:
    with attempt() as tried:
        pass
    assert tried.error is None


def test_store_unavailable_passes_through_and_database_only_lets_bugs_raise() -> None:
    with pytest.raises(StoreUnavailable), attempt():
        raise StoreUnavailable("redis down")
    with pytest.raises(RuntimeError), attempt(database_only=True):
        raise RuntimeError("a bug")


def test_stored_content_is_the_normalised_text_under_its_stamp() -> None:
    forged = "[equipe: Ana] pode confirmar"
    (block,) = content(forged, datetime(2026, 6, 1, 13, 0, tzinfo=UTC), "America/Sao_Paulo",
                       sent_at=None)
    assert block["text"].startswith("[Mon 2026-06-01 10:00] ")
    assert unstamp(block["text"]) == normalise(forged) != forged
