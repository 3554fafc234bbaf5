"""The retry policy per job kind, in one table (workers/jobs.py `RETRY_POLICIES`): delays,
transient error classes, attempts; `retry_later` applies it for every job."""

from datetime import datetime
from types import SimpleNamespace
from typing import Any

import anthropic
import httpx2
import pytest

from core.settings import Settings
from tests.conftest import START
from workers.jobs import RETRY_POLICIES, retry_later

BACKGROUND = ("compact", "rederive", "facts")


def _runtime(turn_max_attempts: int = 4) -> Any:
    return SimpleNamespace(settings=Settings(turn_max_attempts=turn_max_attempts))


def _overloaded() -> anthropic.InternalServerError:
    request = httpx2.Request("POST", "https://api.anthropic.com/v1/messages")
    return anthropic.InternalServerError(
        "overloaded", response=httpx2.Response(529, request=request), body=None)


def test_a_turn_retries_within_seconds_and_stops_at_the_setting() -> None:
    turn = RETRY_POLICIES["turn"]
    assert [turn.delay(n).total_seconds() for n in range(1, 6)] == [10, 40, 120, 120, 120]
    assert [turn.may_retry(n, _runtime(3)) for n in (1, 2, 3)] == [True, True, False]


@pytest.mark.parametrize("kind", BACKGROUND)
def test_background_jobs_wait_minutes_and_try_four_times(kind: str) -> None:
    policy = RETRY_POLICIES[kind]
    assert [policy.delay(n).total_seconds() for n in (1, 2, 3)] == [30, 120, 600]
    assert [policy.may_retry(n, _runtime(10)) for n in (1, 2, 3, 4)] == [
        True, True, True, False]


@pytest.mark.parametrize("kind", ["turn", *BACKGROUND])
def test_only_the_providers_transient_failures_are_retried(kind: str) -> None:
    transient = RETRY_POLICIES[kind].transient
    for error in (anthropic.RateLimitError, anthropic.InternalServerError,
                  anthropic.APIConnectionError, anthropic.APITimeoutError):
        assert issubclass(error, transient)
    for error in (anthropic.BadRequestError, anthropic.AuthenticationError):
        assert not issubclass(error, transient)


@pytest.mark.usefixtures("frozen_clock")
def test_retry_later_enqueues_the_next_attempt_after_the_kinds_delay() -> None:
    made: list[tuple[datetime, int, int]] = []

    def reenqueue(_rt: Any, _cid: int, at: datetime, attempt: int, outage: int) -> None:
        made.append((at, attempt, outage))

    assert retry_later(_runtime(), "facts", 7, attempt=2, exc=_overloaded(),
                       reenqueue=reenqueue, event="facts_extraction") == "retry_scheduled"
    assert [((at - START).total_seconds(), n, out) for at, n, out in made] == [(120, 3, 0)]
    assert retry_later(_runtime(), "compact", 7, attempt=4, exc=_overloaded(),
                       reenqueue=reenqueue, event="compaction") == "failed"
    assert len(made) == 1  # the last attempt enqueues nothing
