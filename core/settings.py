"""One frozen Settings object, built from the environment by entry points only."""

import os
from dataclasses import dataclass, field, fields

DEFAULT_DATABASE_URL = "sqlite:///var/wagent.db"
# `wagent worker`'s CPU priority on cores it shares with `wagent web`: "idle" (Linux
# SCHED_IDLE: a worker runs only on CPU time no other process wants), "low" (nice 19: a small
# share is still guaranteed), "normal"
WORKER_CPU_POLICIES = ("idle", "low", "normal")
MAX_GROUP_POSTS = 200  # POSTs one web group takes at most (bot.webhook.GroupCommit.MAX_POSTS)


class SettingsError(ValueError):
    """A required setting is missing or malformed; the message names every one at once."""


@dataclass(frozen=True)
class Settings:
    """Every setting of the product. `.env.example` names each one.

    Units: seconds unless the name says otherwise.
    """

    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "wagent"
    queue_name: str = "wagent"
    whatsapp_app_secret: str = ""
    whatsapp_verify_token: str = ""
    whatsapp_access_token: str = ""
    graph_api_base_url: str = "https://graph.facebook.com"
    graph_api_version: str = "v25.0"
    anthropic_api_key: str = ""
    anthropic_base_url: str = "https://api.anthropic.com"
    anthropic_timeout: float = 60.0
    admin_token: str = ""
    max_body_bytes: int = 3 * 1024 * 1024
    turn_job_timeout: int = 300
    turn_debounce_seconds: float = 2.0
    # POSTs waiting in one web process that switch it to the inbox (store the raw body, answer,
    # let a worker parse and store it: bot.webhook.GroupCommit); 0 never does
    webhook_spill_at: int = 16
    turn_max_rounds: int = 8
    turn_max_attempts: int = 4
    # the per-conversation lock's TTL, renewed every third of it while a job runs: a dead work
    # horse's lock is free after this (workers/jobs.held_lock)
    turn_lock_timeout: int = 20
    max_output_tokens: int = 1024
    context_hard_cap_tokens: int = 150_000
    max_window_messages: int = 2_000
    summary_max_tokens: int = 1024
    log_level: str = "INFO"
    log_format: str = "json"
    web_host: str = "0.0.0.0"
    web_port: int = 8080
    worker_cpu: str = "idle"  # idle | low | normal: the CPU priority of `wagent worker`
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
        if values.get("worker_cpu", "idle") not in WORKER_CPU_POLICIES:
            problems.append(f"WORKER_CPU={values['worker_cpu']!r} is not one of "
                            f"{', '.join(WORKER_CPU_POLICIES)}")
        if isinstance(spill_at := values.get("webhook_spill_at"), int) and not (
                0 <= spill_at <= MAX_GROUP_POSTS):
            problems.append(f"WEBHOOK_SPILL_AT must be 0 (never) to {MAX_GROUP_POSTS} (the "
                            f"most POSTs a group takes)")
        if require:
            problems += [
                f"{name.upper()} is required" for name in cls.REQUIRED_IN_PRODUCTION
                if not values.get(name)
            ]
        if problems:
            raise SettingsError("; ".join(problems))
        return cls(**values)  # type: ignore[arg-type]


def _coerce(kind: object, raw: str) -> object:
    if kind in (int, "int"):
        return int(raw)
    if kind in (float, "float"):
        return float(raw)
    return raw
