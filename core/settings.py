"""One frozen Settings object, built from the environment by entry points only."""

import os
from dataclasses import dataclass, field, fields
from ipaddress import IPv4Network, IPv6Network, ip_network
from typing import Any
from urllib.parse import urlsplit

from core.credentials import SECRET_EXAMPLES, is_real_secret
from core.errors import SettingsError

DEFAULT_DATABASE_URL = "sqlite:///var/wagent.db"
ANTHROPIC_API_URL = "https://api.anthropic.com"  # where a placeholder key must not go
GRAPH_API_URL = "https://graph.facebook.com"
# `wagent worker`'s CPU priority on cores it shares with `wagent web`: "idle" (Linux
# SCHED_IDLE: a worker runs only on CPU time no other process wants), "low" (nice 19: a small
# share is still guaranteed), "normal"
WORKER_CPU_POLICIES = ("idle", "low", "normal")
MAX_GROUP_POSTS = 200  # POSTs one web group takes at most (bot.webhook.GroupCommit.MAX_POSTS)
MIN_ADMIN_TOKEN_LENGTH = 32  # the operator token sees every tenant: not guessable
# bodies over SMALL_BODY_BYTES may hold only this share of BODY_BUDGET_BYTES (bot/bodies.py)
SMALL_BODY_BYTES = 64 * 1024
LARGE_BODY_SHARE = 0.75


def _env(default: Any, doc: str, *, secret: bool = False) -> Any:
    """A field of Settings: its default, its one-line description (`doc`, for
    docs/SETTINGS.md) and whether it is a secret (then left out of the repr)."""
    return field(default=default, repr=not secret, metadata={"doc": doc})


@dataclass(frozen=True)
class Settings:
    """Every setting of the product. `.env.example` names each one.

    Units: seconds unless the name says otherwise.
    """

    # Each field's `doc` is its line in docs/SETTINGS.md (cli/settings_reference.py; a test
    # fails when one is missing). Secrets (and the URLs, which may hold passwords) are left out
    # of the repr.
    database_url: str = _env(DEFAULT_DATABASE_URL, "where the state lives: SQLite for a trial, "
                             "postgresql://user:pass@host:5432/wagent in production", secret=True)
    redis_url: str = _env("redis://127.0.0.1:6379/0", "queues, locks and short-lived markers "
                          "(never the source of truth)", secret=True)
    redis_prefix: str = _env("wagent", "prefix of the product's Redis keys (tokens, locks)")
    queue_name: str = _env("wagent", "the RQ queue the web process fills")
    whatsapp_app_secret: str = _env("", "the Meta app's secret: verifies X-Hub-Signature-256 "
                                    "(required)", secret=True)
    whatsapp_verify_token: str = _env("", "the token of Meta's GET handshake (required)",
                                      secret=True)
    whatsapp_access_token: str = _env("", "the system user's token for sends, EAA... (required)",
                                      secret=True)
    graph_api_base_url: str = _env(GRAPH_API_URL, "the Graph API (a replay points it at its "
                                   "double)")
    graph_api_version: str = _env("v25.0", "the Graph API version in every path")
    anthropic_api_key: str = _env("", "the Messages API key, sk-ant-... (required by `wagent "
                                  "worker` and `wagent cron`; `wagent web` starts without it)",
                                  secret=True)
    anthropic_base_url: str = _env(ANTHROPIC_API_URL, "the Messages API (or a compatible "
                                   "endpoint)")
    anthropic_timeout: float = _env(60.0, "seconds per Messages API call")
    admin_token: str = _env("", "the operator's token of the admin API (every tenant), at least "
                            f"{MIN_ADMIN_TOKEN_LENGTH} characters; empty: none", secret=True)
    mercadopago_access_token: str = _env("", "Mercado Pago's access token for Pix deposits "
                                         "(payments/mercadopago.py, docs/PAYMENTS.md); empty: "
                                         "no provider, staff mark deposits paid", secret=True)
    mercadopago_webhook_secret: str = _env("", "checks `x-signature` on POST "
                                           "/payments/mercadopago", secret=True)
    mercadopago_base_url: str = _env("https://api.mercadopago.com", "Mercado Pago's API (a "
                                     "replay points it at its double)")
    button_secret: str = _env("", "signs the payloads of reminder buttons "
                              "(storage/reminders.py); empty: WHATSAPP_APP_SECRET", secret=True)
    media_timeout: float = _env(10.0, "seconds a media download may stall (whatsapp/media.py)")
    media_deadline: float = _env(60.0, "seconds a whole media download may take")
    transcription_base_url: str = _env("", "an OpenAI-compatible speech-to-text service "
                                       "(POST {base}/v1/audio/transcriptions), e.g. "
                                       "https://api.openai.com; empty: voice notes are not "
                                       "transcribed")
    transcription_api_key: str = _env("", "its bearer key (never logged)", secret=True)
    transcription_model: str = _env("whisper-1", "the transcription model (Groq: "
                                    "whisper-large-v3)")
    transcription_language: str = _env("", "ISO-639-1 (pt); empty: the tenant's language "
                                       "(pt-BR -> pt); auto: left to the provider")
    transcription_timeout: float = _env(30.0, "seconds per transcription call")
    max_body_bytes: int = _env(3 * 1024 * 1024, "the largest webhook body (Meta's limit: 3 MB); "
                               "413 above")
    body_budget_bytes: int = _env(64 * 1024 * 1024, "bytes all bodies being read in one web "
                                  "process may hold (bot/bodies.py); 503 beyond")
    body_min_rate: int = _env(32 * 1024, "bytes/s: a slower body is cut with 408 (Meta's 3 MB "
                              "body has 10 + 96 s at this rate)")
    body_grace_seconds: float = _env(10.0, "seconds a body may lag behind BODY_MIN_RATE")
    auth_failures_per_address: int = _env(10, "wrong keys or tokens from one client address "
                                          "per window (storage/throttle.py)")
    auth_failures_per_tenant: int = _env(100, "wrong tokens naming one tenant per window, all "
                                         "addresses")
    auth_failure_window_seconds: int = _env(900, "the window; then 429 with Retry-After until "
                                            "it ends")
    trusted_proxies: str = _env("", "comma-separated addresses or networks of the reverse "
                                "proxies whose X-Forwarded-For names the client; empty: the "
                                "peer's address is the client's")
    webhook_allowed_networks: str = _env("", "comma-separated networks outbound webhooks may "
                                         "reach although not public (over http too); empty: "
                                         "only https to public addresses (hooks/client.py)")
    rate_card_path: str = _env("", "a JSON WhatsApp rate card (per market and category, from "
                               "a date) replacing the bundled whatsapp/rate_card.json "
                               "(docs/OPERATE.md, Costs); checked at start")
    turn_job_timeout: int = _env(300, "seconds a turn job may run")
    turn_debounce_seconds: float = _env(2.0, "a burst of short messages settles into one turn")
    webhook_spill_at: int = _env(2, "POSTs waiting in one web process that switch it to the "
                                 "inbox (store the raw body, answer, a worker stores it: "
                                 "bot.webhook.GroupCommit); 0: never")
    webhook_spill_updates: int = _env(25, "a POST of more updates than this goes to the inbox "
                                      "at once, whatever the load (bot.webhook.store_posts); "
                                      "0: never")
    turn_max_rounds: int = _env(8, "model calls per turn at most")
    tenant_model_calls: int = _env(4, "Messages API calls one tenant may have in flight at "
                                   "once, every worker together (workers/call_slots.py): one "
                                   "business cannot use the account's whole rate limit; 0: no "
                                   "cap")
    turn_max_attempts: int = _env(4, "tries on 429/529/5xx/timeouts before the apology")
    turn_lock_timeout: int = _env(20, "seconds: the conversation lock's TTL, renewed every "
                                  "third of it while a job runs (workers/jobs.held_lock)")
    max_output_tokens: int = _env(1024, "max_tokens of a turn's model call")
    context_hard_cap_tokens: int = _env(150_000, "the window never sends more than this")
    max_window_messages: int = _env(2_000, "...nor more messages than this")
    summary_max_tokens: int = _env(1024, "output budget of a compaction summary")
    dead_letter_retention_days: int = _env(30, "webhook bodies that could not be stored are "
                                           "kept this long (the hourly retention purge)")
    log_level: str = _env("INFO", "no customer data (phones, text) nor secrets at any level, "
                          "DEBUG included")
    log_format: str = _env("json", "json | console")
    web_host: str = _env("127.0.0.1", "the address `wagent web` listens on: this machine only "
                         "(a reverse proxy on it reaches it); 0.0.0.0 or a private address "
                         "when the proxy or Prometheus run elsewhere (docs/DEPLOY.md)")
    web_port: int = _env(8080, "its port")
    worker_cpu: str = _env("normal", "idle | low | normal: the CPU priority of `wagent worker` "
                           "(idle: Linux SCHED_IDLE; low: nice 19), to let the webhook go first "
                           "on shared cores")
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    REQUIRED_IN_PRODUCTION = (
        "whatsapp_app_secret",
        "whatsapp_verify_token",
        "whatsapp_access_token",
        "anthropic_api_key",
    )
    # `wagent web` verifies webhooks, answers Meta's handshake and sends the console's staff
    # replies (operations/threads.py) but never calls the model: no ANTHROPIC_API_KEY needed
    REQUIRED_BY_WEB = REQUIRED_IN_PRODUCTION[:3]

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, *,
                 require: bool | tuple[str, ...] = True) -> "Settings":
        """Build Settings from `WAGENT_`-less upper-case names (`DATABASE_URL`, `REDIS_URL`, ...).
        `require`: True for REQUIRED_IN_PRODUCTION, False for none, or the field names a
        process needs (REQUIRED_BY_WEB).

        Raises SettingsError naming every missing required key and every malformed number.
        """
        env = dict(os.environ if environ is None else environ)
        values: dict[str, object] = {}
        problems: list[str] = []
        for f in fields(cls):
            if f.name == "extra":
                continue
            raw = env.get(f.name.upper())
            if raw is None or raw == "":
                continue
            try:
                values[f.name] = _coerce(f.type, raw)
            except ValueError:
                problems.append(f"{f.name.upper()}={raw!r} is not a valid {f.type}")
        problems += _value_problems(values)
        required = cls.REQUIRED_IN_PRODUCTION if require is True else require or ()
        problems += [_required(name.upper()) for name in required if not values.get(name)]
        if problems:
            raise SettingsError("; ".join(problems))
        return cls(**values)  # type: ignore[arg-type]

    def button_key(self) -> str:
        """The key of the reminder buttons' HMAC: BUTTON_SECRET, else WHATSAPP_APP_SECRET
        (both secret); a fixed development key only when neither is set (a local demo)."""
        return self.button_secret or self.whatsapp_app_secret or "wagent-development-only"

    def placeholder_secrets(self) -> list[str]:
        """The variables whose secret would leave this machine but is a placeholder
        (core/credentials.is_real_secret): ANTHROPIC_API_KEY for api.anthropic.com,
        WHATSAPP_ACCESS_TOKEN for graph.facebook.com, TRANSCRIPTION_API_KEY when one is set.
        A base URL of your own (a proxy, the replay's doubles) may take any key."""
        checked = []
        if self.anthropic_base_url.rstrip("/") == ANTHROPIC_API_URL:
            checked.append(("ANTHROPIC_API_KEY", self.anthropic_api_key))
        if self.graph_api_base_url.rstrip("/") == GRAPH_API_URL:
            checked.append(("WHATSAPP_ACCESS_TOKEN", self.whatsapp_access_token))
        if self.transcription_base_url and self.transcription_api_key:
            checked.append(("TRANSCRIPTION_API_KEY", self.transcription_api_key))
        return [name for name, value in checked if not is_real_secret(name, value)]

    def secret_values(self) -> list[str]:
        """Every configured secret (and the passwords in the database and Redis URLs): the
        values the log renderer blanks (core/logs.py)."""
        values = [self.whatsapp_app_secret, self.whatsapp_verify_token,
                  self.whatsapp_access_token, self.anthropic_api_key, self.admin_token,
                  self.transcription_api_key, self.button_secret,
                  self.mercadopago_access_token, self.mercadopago_webhook_secret]
        for url in (self.database_url, self.redis_url):
            try:
                values.append(urlsplit(url).password or "")
            except ValueError:
                continue
        return [v for v in values if v]


POSITIVE = ("max_body_bytes", "body_budget_bytes", "body_min_rate", "auth_failures_per_address",
            "auth_failures_per_tenant", "auth_failure_window_seconds")


def _value_problems(values: dict[str, object]) -> list[str]:
    """What is wrong with the parsed `values` (Settings.from_env): policies, bounds, the admin
    token's length, the network lists; [] when nothing is."""
    problems: list[str] = []
    if values.get("worker_cpu", "normal") not in WORKER_CPU_POLICIES:
        problems.append(f"WORKER_CPU={values['worker_cpu']!r} is not one of "
                        f"{', '.join(WORKER_CPU_POLICIES)}")
    if isinstance(spill_at := values.get("webhook_spill_at"), int) and not (
            0 <= spill_at <= MAX_GROUP_POSTS):
        problems.append(f"WEBHOOK_SPILL_AT must be 0 (never) to {MAX_GROUP_POSTS} (the "
                        f"most POSTs a group takes)")
    if isinstance(spill := values.get("webhook_spill_updates"), int) and spill < 0:
        problems.append("WEBHOOK_SPILL_UPDATES must be 0 (never) or more")
    if isinstance(calls := values.get("tenant_model_calls"), int) and calls < 0:
        problems.append("TENANT_MODEL_CALLS must be 0 (no cap) or more")
    problems += _edge_problems(values)
    if 0 < len(str(values.get("admin_token", ""))) < MIN_ADMIN_TOKEN_LENGTH:
        problems.append(f"ADMIN_TOKEN must be at least {MIN_ADMIN_TOKEN_LENGTH} characters "
                        "(make one: python3 -c 'import secrets; "
                        "print(secrets.token_urlsafe(32))')")
    try:
        trusted_networks(str(values.get("trusted_proxies", "")))
    except ValueError as exc:
        problems.append(f"TRUSTED_PROXIES: {exc}")
    try:
        trusted_networks(str(values.get("webhook_allowed_networks", "")))
    except ValueError as exc:
        problems.append(f"WEBHOOK_ALLOWED_NETWORKS: {exc}")
    return problems


def _edge_problems(values: dict[str, object]) -> list[str]:
    """The limits of the web edge: positive, and room in the budget for one whole body."""
    limits = {name: values.get(name, getattr(Settings, name)) for name in POSITIVE}
    problems = [f"{name.upper()} must be positive" for name, value in limits.items()
                if isinstance(value, int) and value <= 0]
    budget, body = limits["body_budget_bytes"], limits["max_body_bytes"]
    if isinstance(budget, int) and isinstance(body, int) and budget * LARGE_BODY_SHARE < body:
        problems.append(f"BODY_BUDGET_BYTES must leave room for one whole body in the share "
                        f"large bodies may take ({LARGE_BODY_SHARE:.0%}): at least "
                        f"{int(body / LARGE_BODY_SHARE) + 1}")
    return problems


def trusted_networks(raw: str) -> list[IPv4Network | IPv6Network]:
    """`TRUSTED_PROXIES` parsed: comma-separated addresses or networks (`10.0.0.5`,
    `10.0.0.0/8`, `fd00::/8`). Raises ValueError naming the first that is neither."""
    networks = []
    for part in filter(None, (p.strip() for p in raw.split(","))):
        try:
            networks.append(ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"{part!r} is not an address or a network") from None
    return networks


def _coerce(kind: object, raw: str) -> object:
    if kind in (int, "int"):
        return int(raw)
    if kind in (float, "float"):
        return float(raw)
    return raw


def _required(name: str) -> str:
    """ "X is required", and for a secret with a known form what a real value looks like
    (core/credentials.SECRET_EXAMPLES: the worker's and `wagent chat`'s words for a
    placeholder), so an empty key reads as a placeholder does."""
    example = SECRET_EXAMPLES.get(name)
    return f"{name} is required" + (f": a real one looks like {example}" if example else "")
