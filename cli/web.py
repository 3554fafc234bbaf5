"""`wagent web [--processes N]`: the webhook web process (bot/), in one process or N that
share the port."""

import argparse
import ctypes
import os
import signal
import sys
from collections.abc import Callable

from aiohttp import web as aiohttp_web

from bot.app import create_app
from bot.bodies import return_large_buffers_to_os
from cli.environment import settings_or_exit
from core.logs import configure_logging
from core.settings import Settings


def web(args: argparse.Namespace) -> int:
    settings = settings_or_exit(require=Settings.REQUIRED_BY_WEB)  # never calls the model
    placeholders = settings.placeholder_secrets()
    if placeholders:  # fine for the console and the admin API; `wagent worker` refuses them
        print(f"wagent web: {', '.join(placeholders)}: missing or a placeholder; the console "
              "and the admin API work, `wagent worker` will not start until the real values "
              "are in .env",
              file=sys.stderr)
    configure_logging(settings.log_level, settings.log_format,
                      secrets=settings.secret_values())
    return_large_buffers_to_os()
    processes = getattr(args, "processes", 1)
    if processes < 1:
        print("--processes must be at least 1", file=sys.stderr)
        return 2

    def serve() -> None:  # each process makes its own engine and Redis client
        aiohttp_web.run_app(create_app(settings), host=settings.web_host, port=settings.web_port,
                    access_log=None, reuse_port=processes > 1 or None)

    if processes == 1:
        serve()
        return 0
    return _fork_servers(processes, serve)


def _fork_servers(processes: int, serve: Callable[[], None]) -> int:
    """Run `serve` in `processes` forked children that share the port (SO_REUSEPORT: the
    kernel spreads connections) and wait. SIGTERM and SIGINT are passed on; when one child
    exits the others are stopped and its exit status is returned. The parent opens no
    connection before the fork; each child dies with the parent (Linux)."""
    children: list[int] = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
                serve()
                code = 0
            finally:
                os._exit(code)
        children.append(pid)

    def forward(signum: int, _: object) -> None:
        for child in children:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    while children:
        pid, wait_status = os.wait()
        if pid in children:
            children.remove(pid)
            status = status or os.waitstatus_to_exitcode(wait_status)
            forward(signal.SIGTERM, None)
    return 0 if status < 0 else status
