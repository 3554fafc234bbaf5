"""The series pass (issue 46): `wagent cron` places the visits of recurring series that the
moving booking horizon now reaches (agent/tools/series.extend_all), once per period."""

from datetime import datetime

import structlog
from sqlalchemy import Engine

from agent.tools.series import extend_all
from core import clock
from storage.db import session_scope
from workers.maintenance import run_once_per_period
from workers.runtime import get_runtime

log = structlog.get_logger(__name__)

SERIES_PERIOD_SECONDS = 3600  # the horizon moves a day a day: hourly is ahead of it


def run_series() -> int:
    """RQ job (cron): the series pass at the product's clock, once per period."""
    runtime = get_runtime()
    return run_once_per_period(runtime, "series", period_seconds=SERIES_PERIOD_SECONDS,
                               work=lambda: series_pass(runtime.engine, now=clock.now())) or 0


def series_pass(engine: Engine, *, now: datetime) -> int:
    """Every running series' new visits, in one transaction; returns how many were placed
    (logged with how many; no customer data)."""
    with session_scope(engine) as session:
        placed = extend_all(session, now=now)
    if placed:
        log.info("series_visits_placed", visits=placed)
    return placed
