"""`wagent worker [--burst]`: an RQ worker (workers/) and a keeper, the product's scheduler.

The job code is imported by `worker` after the settings are checked, so that a refusal (a
placeholder key) comes at once, not after seconds of imports (issue 44, as `wagent chat`), and
before the supervisor forks its work process (workers/processes.py): a work process that dies is
replaced by a fork that has it already. `worker` then builds the clients and warms what they
build lazily, once, for every work process to inherit (I/O-free in this process:
workers/runtime.py); the work process then keeps them, and its database pool, from job to job.
"""

import argparse
import os
import sys

from cli.environment import settings_or_exit
from core.credentials import SECRET_EXAMPLES


def _import_job_code() -> None:
    """Every module a job runs, in this process, before the work horses fork (docstring)."""
    import psycopg  # noqa: F401  (SQLAlchemy imports the driver only when an engine is made)

    import workers.compaction  # noqa: F401
    import workers.facts  # noqa: F401
    import workers.inbox  # noqa: F401
    import workers.maintenance  # noqa: F401
    import workers.sweeper  # noqa: F401
    import workers.turns  # noqa: F401


def worker(args: argparse.Namespace) -> int:
    settings = settings_or_exit()
    placeholders = settings.placeholder_secrets()
    if placeholders:  # docs/OPERATE.md: a placeholder sends nothing, and a worker sends with them
        what = "; ".join(
            f"{name} looks like {SECRET_EXAMPLES.get(name, 'the key your provider gave you')}"
            for name in placeholders)
        several = len(placeholders) > 1
        print(f"wagent worker: not started: {', '.join(placeholders)} in the environment or "
              f".env {'are empty or placeholders' if several else 'is empty or a placeholder'}"
              f", and the worker would send with {'them' if several else 'it'}. {what}.",
              file=sys.stderr)
        return 2
    _import_job_code()
    from core.logs import configure_logging
    from workers.processes import run_worker
    from workers.runtime import prepare_worker_parent
    configure_logging(settings.log_level, settings.log_format,
                      secrets=settings.secret_values())
    _lower_cpu_priority(settings.worker_cpu)
    prepare_worker_parent(settings)
    return run_worker(settings, burst=args.burst)


def _lower_cpu_priority(policy: str) -> None:
    """`WORKER_CPU` (core/settings.py): on cores shared with `wagent web`, a worker takes only
    the CPU time the webhook leaves (bench/load.py measures the difference). Inherited by the
    work processes the supervisor forks. "low" is nice 19, the lowest priority that still
    guarantees a share; where SCHED_IDLE is missing (not Linux), "idle" falls back to it."""
    if policy == "low":
        os.nice(19)
    elif policy == "idle":
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError):
            os.nice(19)
