"""structlog set-up: one renderer for our lines and for foreign ones (rq, aiohttp).

Phone numbers and message text are logged only at DEBUG: call sites pass them as fields named in
`SENSITIVE_KEYS`, and `redact_sensitive` drops those fields from lines at INFO and above.
"""

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

SENSITIVE_KEYS = frozenset({"phone", "wa_id", "user_id", "text", "body", "to", "recipient"})
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50,
           "exception": 40}


def redact_sensitive(
    _: Any, method: str, event: MutableMapping[str, Any],
) -> MutableMapping[str, Any]:
    level = _LEVELS.get(str(event.get("level", method)).lower(), 20)
    if level > logging.DEBUG:
        for key in SENSITIVE_KEYS & event.keys():
            event[key] = "[redacted]"
    return event


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    """Route structlog and stdlib logging through one handler on stdout (JSON or console)."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_sensitive,
    ]
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    renderer: list[Any] = (
        [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
        if fmt == "json" else [structlog.dev.ConsoleRenderer(colors=False)]
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
