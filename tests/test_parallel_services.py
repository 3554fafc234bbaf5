"""The test services of a pytest-xdist worker (tests/conftest.py: worker_urls): each worker on a
Redis database and a PostgreSQL database of its own, so that one worker's `flushdb` or advisory
lock never meets another's (issue 44 item 4: the README's test command runs `pytest -n 4`)."""

import pytest

from tests.conftest import worker_urls

REDIS, POSTGRES = "redis://127.0.0.1:6379/15", "postgresql://postgres:pw@127.0.0.1:5432/test"


def test_without_xdist_the_urls_are_the_ones_given() -> None:
    assert worker_urls(REDIS, POSTGRES, None) == (REDIS, POSTGRES)


@pytest.mark.parametrize(("worker", "database"), [("gw0", 15), ("gw1", 14), ("gw15", 0)])
def test_worker_k_counts_down_from_the_redis_database_and_names_its_own_postgres_database(
        worker: str, database: int) -> None:
    redis_url, postgres_url = worker_urls(REDIS, POSTGRES, worker)
    assert redis_url == f"redis://127.0.0.1:6379/{database}"
    assert postgres_url == f"postgresql://postgres:pw@127.0.0.1:5432/test_{worker}"


def test_two_workers_never_share_a_service() -> None:
    first, second = (worker_urls(REDIS, POSTGRES, worker) for worker in ("gw0", "gw1"))
    assert first[0] != second[0] and first[1] != second[1]


def test_a_redis_url_without_room_for_the_workers_is_a_clear_error() -> None:
    assert worker_urls("redis://127.0.0.1:6379", POSTGRES, "gw0")[0] == "redis://127.0.0.1:6379/0"
    with pytest.raises(ValueError, match="TEST_REDIS_URL .* must name a database of at least 1"):
        worker_urls("redis://127.0.0.1:6379/0", POSTGRES, "gw1")
