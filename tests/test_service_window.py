"""The 24-hour customer service window's home (whatsapp/window.py): one predicate, one reason."""

from datetime import UTC, datetime, timedelta

from whatsapp.window import SERVICE_WINDOW_CLOSED, window_closed
from workers import outbox, turns

LAST = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def test_the_window_is_open_for_24_hours_after_the_last_customer_message() -> None:
    assert not window_closed(LAST, LAST + timedelta(hours=23, minutes=59))
    assert not window_closed(LAST, LAST + timedelta(hours=24))
    assert window_closed(LAST, LAST + timedelta(hours=24, seconds=1))


def test_a_customer_who_never_wrote_has_no_open_window() -> None:
    assert window_closed(None, LAST)


def test_the_turn_and_the_outbox_give_the_same_reason() -> None:
    assert turns.WINDOW_CLOSED_REASON.startswith(f"not answered: {SERVICE_WINDOW_CLOSED} ")
    assert outbox.WINDOW_CLOSED_REASON == f"not sent: {SERVICE_WINDOW_CLOSED}"
