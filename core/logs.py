"""structlog set-up: one renderer for our lines and for foreign ones (rq, aiohttp).

What a line may hold (docs/OPERATE.md, Security):

* No customer data at any level (the developers' guide): phone numbers, user ids and message
  text are never logged; a field named in `SENSITIVE_KEYS` (a library's, or a slip) is blanked
  by `redact_sensitive` at every level, DEBUG included. Lines name ids and sizes instead.
* Never a secret, at any level: fields named in `SECRET_KEYS` are blanked always; tracebacks
  are rendered without frame locals (structlog's renderers show them by default, and a
  handler's locals hold tokens, session ids, form data); and the rendered line itself is
  scrubbed of the configured secret values (settings: app secret, tokens, API key,
  passwords) and of every secret the product mints (core/credentials.py), wherever they
  appear (an exception message, a malformed request line that aiohttp quotes).
"""

import logging
import re
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO

import structlog
from structlog.tracebacks import ExceptionDictTransformer

from core.credentials import MINTED

SENSITIVE_KEYS = frozenset({"phone", "wa_id", "user_id", "text", "body", "to", "recipient"})
SECRET_KEYS = frozenset({"token", "authorization", "cookie", "cookies", "set_cookie", "csrf",
                         "sid", "session_id", "password", "secret", "app_secret", "api_key",
                         "access_token", "verify_token", "admin_token"})
REDACTED = "[redacted]"
# libraries whose DEBUG lines quote whole requests (the Messages API's body holds the customer's
# words; the HTTP clients' the URLs and headers): kept at INFO even when the product logs DEBUG
QUIET_AT_DEBUG = ("anthropic", "httpx", "httpcore", "httpx2", "httpcore2", "urllib3")
# RQ's own lines about each job (dequeued, "Job OK", result kept, completed, registries
# cleaned, the cron's "Enqueued job"): 89% of an idle worker's INFO lines, so DEBUG here
# (issue 36); its lines about the worker itself (started, listening, shutdown) stay INFO
RQ_LOGGERS = ("rq.worker", "rq.job", "rq.cron")
RQ_PER_JOB = re.compile(r"Worker %s: %s: %s|Worker %s: job %s result|Successfully completed"
                        r"|Worker %s: cleaning registries|Enqueued job ")
MIN_SCRUBBED_LENGTH = 8  # a shorter configured "secret" would blank ordinary words


def redact_sensitive(
    _: Any, method: str, event: MutableMapping[str, Any],
) -> MutableMapping[str, Any]:
    """Blank secret fields and customer fields at every level."""
    for key in (SECRET_KEYS | SENSITIVE_KEYS) & event.keys():
        event[key] = REDACTED
    return event


class ScrubSecrets:
    """The last step of rendering: the line with every configured secret value and every
    minted secret replaced by `[redacted]`."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.values = sorted({s for s in secrets if len(s) >= MIN_SCRUBBED_LENGTH},
                             key=len, reverse=True)

    def __call__(self, _: Any, __: str, rendered: Any) -> str:
        line = str(rendered)  # the renderers before it made the event one string
        for value in self.values:
            if value in line:
                line = line.replace(value, REDACTED)
        return MINTED.sub(REDACTED, line)


class DemotePerJobLines(logging.Filter):
    """On RQ's loggers: an INFO line about one job (RQ_PER_JOB) becomes DEBUG, written only
    when the root logger takes DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and isinstance(record.msg, str) \
                and RQ_PER_JOB.match(record.msg):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


_DEMOTE = DemotePerJobLines()


def renderers(fmt: str) -> list[Any]:
    """JSON (production) or a terminal's lines; tracebacks without locals either way."""
    if fmt == "json":
        return [structlog.processors.ExceptionRenderer(
                    ExceptionDictTransformer(show_locals=False)),
                structlog.processors.JSONRenderer()]
    return [structlog.dev.ConsoleRenderer(
        colors=False, exception_formatter=structlog.dev.plain_traceback)]


def configure_logging(level: str = "INFO", fmt: str = "json", *, secrets: Iterable[str] = (),
                      stream: TextIO | None = None) -> None:
    """Route structlog and stdlib logging through one handler on `stream` (stdout), JSON or
    console; `secrets`: the values no line may carry (Settings.secret_values())."""
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
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    *renderers(fmt), ScrubSecrets(secrets)],
    )
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in QUIET_AT_DEBUG:  # their DEBUG lines dump request bodies: customer text
        logging.getLogger(name).setLevel(max(logging.INFO, root.level))
    for name in RQ_LOGGERS:
        logging.getLogger(name).addFilter(_DEMOTE)  # the same filter once, however often
