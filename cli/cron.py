"""`wagent cron`: enqueue the periodic jobs (sweeper, reconciler, retention, the webhooks'
sweep, the reminders pass, the waitlist pass, the series pass), each guarded per period, so
one cron is enough and a second is harmless; a keeper too."""

import argparse
from collections.abc import Callable

from cli.environment import settings_or_exit
from core.logs import configure_logging
from storage.webhooks import SWEEP_PERIOD_SECONDS
from workers import webhooks
from workers.maintenance import RECONCILE_PERIOD_SECONDS, purge_retention, reconcile
from workers.outages import PROBE_PERIOD_SECONDS, run_probe
from workers.processes import run_cron
from workers.reminders import REMINDERS_PERIOD_SECONDS, run_reminders
from workers.series import SERIES_PERIOD_SECONDS, run_series
from workers.sweeper import sweep_inactive
from workers.waitlist import WAITLIST_PERIOD_SECONDS, run_waitlist

# what `wagent cron` runs: (name, job, period in seconds); deploy/systemd/wagent-cron.service
# names each (tests/test_deploy.py)
JOBS: tuple[tuple[str, Callable[[], object], int], ...] = (
    ("inactivity sweeper", sweep_inactive, 300),
    ("reconciler", reconcile, RECONCILE_PERIOD_SECONDS),
    ("retention purge", purge_retention, 3600),
    ("webhooks sweep", webhooks.sweep, SWEEP_PERIOD_SECONDS),
    ("reminders pass", run_reminders, REMINDERS_PERIOD_SECONDS),
    ("provider probe", run_probe, PROBE_PERIOD_SECONDS),
    ("waitlist pass", run_waitlist, WAITLIST_PERIOD_SECONDS),
    ("series pass", run_series, SERIES_PERIOD_SECONDS),
)


def cron(args: argparse.Namespace) -> int:
    settings = settings_or_exit()
    configure_logging(settings.log_level, settings.log_format,
                      secrets=settings.secret_values())
    # Each job is guarded per period inside (workers/maintenance.py): a second cron is harmless.
    return run_cron(settings, [(job, period) for _, job, period in JOBS])
