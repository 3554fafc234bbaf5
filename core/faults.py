"""Failpoints for crash tests: `crash_point(name)` kills the process with SIGKILL when the
environment variable WAGENT_CRASH_AT names that point. Unset in production: a no-op.

In one process, a test makes something happen at a point instead (a customer writes, the
worker dies with an exception, staff answer): `with meanwhile(name, action): ...` runs
`action()` each time the code passes `name`, before any crash.

Named points: before_model_call, before_tool_round (workers/turns.py),
after_send_before_mark (workers/outbox.py), after_reminder_queued (workers/reminders.py),
before_inbox_token_back (workers/inbox.py).
"""

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

POINTS = frozenset({"before_model_call", "before_tool_round", "after_send_before_mark",
                    "after_reminder_queued", "before_inbox_token_back"})  # the docstring's
_actions: dict[str, Callable[[], object]] = {}


def crash_point(name: str) -> None:
    """Run the action `meanwhile` set at `name`, if any; then die here, as a `kill -9` would,
    if WAGENT_CRASH_AT == `name`."""
    action = _actions.get(name)
    if action is not None:
        action()
    if os.environ.get("WAGENT_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def meanwhile(name: str, action: Callable[[], object]) -> Iterator[None]:
    """Within the block, `action()` runs each time the code passes the point `name` (its
    exceptions propagate from there, as a crash of that step would); one action per point.
    ValueError for a name that is not one of POINTS: an action there would never run."""
    if name not in POINTS:
        raise ValueError(f"no crash point {name!r}: one of {sorted(POINTS)}")
    if name in _actions:
        raise RuntimeError(f"point {name!r} already has an action")
    _actions[name] = action
    try:
        yield
    finally:
        del _actions[name]
