"""Logs an operator can read (issue 36): an idle worker's RQ bookkeeping per job is DEBUG, its
lines about itself stay INFO; the SDK warm-up writes no line that looks like a real call."""

import io
import logging
from collections.abc import Iterator

import fakeredis
import pytest
from rq import Queue, SimpleWorker

from core.logs import configure_logging
from workers import runtime


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """RQ's loggers as a fresh worker process has them (a replay's worker quiets them), and
    everything as it was afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    rq = [logging.getLogger(name) for name in ("rq.worker", "rq.job", "rq.cron")]
    before = [(r.level, r.disabled, r.propagate) for r in rq]
    for r in rq:
        r.setLevel(logging.NOTSET)
        r.disabled, r.propagate = False, True
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for r, (r_level, disabled, propagate) in zip(rq, before, strict=True):
        r.setLevel(r_level)
        r.disabled, r.propagate = disabled, propagate


def _run_jobs(level: str, jobs: int = 3) -> str:
    stream = io.StringIO()
    configure_logging(level, "console", stream=stream)
    connection = fakeredis.FakeRedis()
    queue = Queue("logs-test", connection=connection)
    for _ in range(jobs):
        queue.enqueue("os.getpid")
    SimpleWorker([queue], connection=connection).work(burst=True, logging_level=level)
    return stream.getvalue()


def test_rqs_lines_about_each_job_are_debug(restored_logging: None) -> None:
    at_info = _run_jobs("INFO")
    assert "Listening on" in at_info  # the worker's own start-up line stays
    for per_job in ("Job OK", "result is kept", "Successfully completed", "os.getpid"):
        assert per_job not in at_info, per_job
    assert len(at_info.splitlines()) < 8  # three jobs, and only the worker's own lines
    at_debug = _run_jobs("DEBUG")
    assert at_debug.count("Job OK") == 3 and "[debug" in at_debug


def test_the_sdk_warm_up_logs_no_http_request(restored_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("DEBUG", "console", stream=stream)
    before = logging.getLogger("httpx2").level
    runtime._warm_sdk_parsers()
    assert "warm.invalid" not in stream.getvalue() and "HTTP Request" not in stream.getvalue()
    assert logging.getLogger("httpx2").level == before
