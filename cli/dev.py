"""`wagent dev`: web, worker and cron side by side in one terminal, for local use (the three
lines of the Procfile; production runs each as a systemd unit: docs/DEPLOY.md).

Each process's output lines are prefixed with its name. Ctrl-C (SIGINT) or a SIGTERM stops all
three (SIGTERM to each: RQ's warm shutdown for the worker; SIGKILL after `GRACE_SECONDS`), and
so does any one of them exiting: the command's exit status is then that process's (a worker
that refuses a placeholder key exits 2, and web and cron are stopped with it).
"""

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from cli.environment import settings_or_exit

# the Procfile's processes, in its order (tests/test_dev.py keeps the two equal)
PROCESSES = ("web", "worker", "cron")
GRACE_SECONDS = 10.0  # a running turn may finish before SIGKILL
RELAY_SECONDS = 2.0  # then the output a stopped child left in its pipe is shown, or given up on


def dev(args: argparse.Namespace) -> int:
    settings_or_exit()  # one message naming every missing variable, before three processes
    commands = {name: [sys.executable, "-m", "cli.main", name] for name in PROCESSES}
    return run_side_by_side(commands)


def run_side_by_side(commands: Mapping[str, Sequence[str]], *,
                     out: IO[str] | None = None) -> int:
    """Start every command, relay their output prefixed with their names to `out` (default
    stdout), and stop them all when one exits, on Ctrl-C or on SIGTERM. Returns the exit
    status of the process that ended first, 0 when stopped by a signal."""
    stream = out or sys.stdout
    width = max(len(name) for name in commands)
    lock = threading.Lock()
    stopping = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    children: dict[str, subprocess.Popen[str]] = {}
    relays: list[threading.Thread] = []
    try:
        for name, argv in commands.items():
            children[name] = subprocess.Popen(
                list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                bufsize=1, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})  # a terminal's Ctrl-C reaches only us:
            # each child then gets one SIGTERM (a second signal would be RQ's cold shutdown)
            relays.append(threading.Thread(target=_relay, args=(
                children[name], name.ljust(width), stream, lock), daemon=True))
            relays[-1].start()
        status = _wait_for_first(children, stopping)
    except KeyboardInterrupt:
        status = 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop_all(children)
        deadline = time.monotonic() + RELAY_SECONDS  # the children's last lines (their
        for relay in relays:  # goodbyes) are shown before we return
            relay.join(max(0.0, deadline - time.monotonic()))
    return status


def _relay(child: subprocess.Popen[str], name: str, stream: IO[str], lock: threading.Lock) -> None:
    assert child.stdout is not None
    for line in child.stdout:
        with lock:
            stream.write(f"{name} | {line}")
            stream.flush()


def _wait_for_first(children: Mapping[str, subprocess.Popen[str]],
                    stopping: threading.Event) -> int:
    while not stopping.is_set():
        for name, child in children.items():
            code = child.poll()
            if code is not None:
                print(f"wagent dev: {name} exited with status {code}; stopping the others",
                      file=sys.stderr)
                return code
        time.sleep(0.2)
    return 0


def _stop_all(children: Mapping[str, Any]) -> None:
    """SIGTERM to every live child, then SIGKILL to those still alive after GRACE_SECONDS."""
    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    for child in children.values():
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
