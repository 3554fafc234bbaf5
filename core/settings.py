"""One frozen Settings object, built from the environment by entry points only."""

import os
from dataclasses import dataclass, field, fields
from ipaddress import IPv4Network, IPv6Network, ip_network
from urllib.parse import urlsplit

from core.credentials import is_real_secret
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


@dataclass(frozen=True)
class Settings:
    """Every setting of the product. `.env.example` names each one.

    Units: seconds unless the name says otherwise.
    """

    # secrets (and the URLs, which may hold passwords) are left out of the repr
    database_url: str = field(default=DEFAULT_DATABASE_URL, repr=False)
    redis_url: str = field(default="redis://127.0.0.1:6379/0", repr=False)
    redis_prefix: str = "wagent"
    queue_name: str = "wagent"
    whatsapp_app_secret: str = field(default="", repr=False)
    whatsapp_verify_token: str = field(default="", repr=False)
    whatsapp_access_token: str = field(default="", repr=False)
    graph_api_base_url: str = GRAPH_API_URL
    graph_api_version: str = "v25.0"
    anthropic_api_key: str = field(default="", repr=False)
    anthropic_base_url: str = ANTHROPIC_API_URL
    anthropic_timeout: float = 60.0
    admin_token: str = field(default="", repr=False)
    # deposits by Pix (issue 48, payments/mercadopago.py): empty token: no provider (staff
    # mark deposits paid by hand); the webhook secret checks `x-signature`
    mercadopago_access_token: str = field(default="", repr=False)
    mercadopago_webhook_secret: str = field(default="", repr=False)
    mercadopago_base_url: str = "https://api.mercadopago.com"
    # signs the payloads of reminder buttons (storage/reminders.py); empty: the app secret
    button_secret: str = field(default="", repr=False)
    # media a customer sends (whatsapp/media.py): seconds a read may stall, seconds a whole
    # download may take
    media_timeout: float = 10.0
    media_deadline: float = 60.0
    # voice notes: an OpenAI-compatible `POST {base}/v1/audio/transcriptions` (README "Voice
    # notes"); an empty base URL turns transcription off. Language: ISO-639-1, empty = the
    # tenant's language ("pt-BR" -> "pt"), "auto" = left to the provider
    transcription_base_url: str = ""
    transcription_api_key: str = field(default="", repr=False)
    transcription_model: str = "whisper-1"
    transcription_language: str = ""
    transcription_timeout: float = 30.0
    max_body_bytes: int = 3 * 1024 * 1024
    # request bodies of one web process (bot/bodies.py): what bodies being read may hold in
    # all, the slowest rate a body may arrive at, and the seconds it may lag before that
    body_budget_bytes: int = 64 * 1024 * 1024
    body_min_rate: int = 32 * 1024  # bytes/s: Meta's 3 MB body has 10 + 96 s at this rate
    body_grace_seconds: float = 10.0
    # failed credential attempts (storage/throttle.py): per client address and per tenant
    # within one window, then 429 until the window ends
    auth_failures_per_address: int = 10
    auth_failures_per_tenant: int = 100
    auth_failure_window_seconds: int = 900
    # comma-separated addresses or networks of the reverse proxies whose X-Forwarded-For
    # names the client; empty: the peer's address is the client's
    trusted_proxies: str = ""
    # comma-separated networks outbound webhooks may reach although they are not public
    # (loopback, private), over http too; empty: only https to public addresses (hooks/client.py)
    webhook_allowed_networks: str = ""
    turn_job_timeout: int = 300
    turn_debounce_seconds: float = 2.0
    # POSTs waiting in one web process that switch it to the inbox (store the raw body, answer,
    # let a worker parse and store it: bot.webhook.GroupCommit); 0 never does
    webhook_spill_at: int = 16
    # a POST of more updates than this (messages, statuses, errors) goes to the inbox at once,
    # whatever the load, for a worker to store (bot.webhook.store_posts); 0 never does
    webhook_spill_updates: int = 25
    turn_max_rounds: int = 8
    turn_max_attempts: int = 4
    # the per-conversation lock's TTL, renewed every third of it while a job runs: a dead work
    # horse's lock is free after this (workers/jobs.held_lock)
    turn_lock_timeout: int = 20
    max_output_tokens: int = 1024
    context_hard_cap_tokens: int = 150_000
    max_window_messages: int = 2_000
    summary_max_tokens: int = 1024
    dead_letter_retention_days: int = 30  # the hourly retention purge deletes older ones
    log_level: str = "INFO"
    log_format: str = "json"
    web_host: str = "0.0.0.0"
    web_port: int = 8080
    worker_cpu: str = "normal"  # idle | low | normal: the CPU priority of `wagent worker`
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    REQUIRED_IN_PRODUCTION = (
        "whatsapp_app_secret",
        "whatsapp_verify_token",
        "whatsapp_access_token",
        "anthropic_api_key",
    )

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, *, require: bool = True) -> "Settings":
        """Build Settings from `WAGENT_`-less upper-case names (`DATABASE_URL`, `REDIS_URL`, ...).

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
        if require:
            problems += [
                f"{name.upper()} is required" for name in cls.REQUIRED_IN_PRODUCTION
                if not values.get(name)
            ]
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
