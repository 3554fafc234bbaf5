"""Failpoints for crash tests: `crash_point(name)` kills the process with SIGKILL when the
environment variable WAGENT_CRASH_AT names that point. Unset in production: a no-op.

Named points: before_model_call, after_tool_before_store, after_send_before_mark,
after_reminder_queued (workers/reminders.py).
"""

import os
import signal


def crash_point(name: str) -> None:
    """Die here, as a `kill -9` would, if WAGENT_CRASH_AT == `name`."""
    if os.environ.get("WAGENT_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
