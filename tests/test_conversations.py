"""The inactivity rule's home (storage/conversations.py): one due time, one staleness check."""

from datetime import UTC, datetime, timedelta

from storage.conversations import due_at, inactivity_timeout, is_stale, touch
from storage.models import Conversation

LAST = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def test_the_timeout_is_the_tenants_minutes() -> None:
    assert inactivity_timeout(30) == timedelta(minutes=30)
    assert inactivity_timeout(1440) == timedelta(hours=24)


def test_a_conversation_is_due_one_timeout_after_its_last_activity() -> None:
    assert due_at(LAST, timedelta(minutes=30)) == datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def test_a_session_is_stale_only_past_its_timeout() -> None:
    timeout = timedelta(minutes=30)
    assert not is_stale(LAST, now=LAST + timedelta(minutes=29), inactivity_timeout=timeout)
    assert not is_stale(LAST, now=LAST + timeout, inactivity_timeout=timeout)
    assert is_stale(LAST, now=LAST + timeout + timedelta(seconds=1), inactivity_timeout=timeout)


def test_activity_moves_the_due_time_with_it() -> None:
    conversation = Conversation(tenant_id=1, contact_id=1, last_activity_at=LAST,
                                due_at=LAST, opened_at=LAST)
    later = LAST + timedelta(hours=3)
    touch(conversation, now=later, inactivity_timeout=timedelta(minutes=45))
    assert conversation.last_activity_at == later
    assert conversation.due_at == later + timedelta(minutes=45)
