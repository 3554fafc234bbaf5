"""Names of the product's own Redis keys, every one built here: the jobs' coalescing tokens and
per-conversation locks, the periodic jobs' guards, the keeper's lock and markers, console
sessions and the counters of failed credential attempts. The one exception is the metrics
hash (`core.metrics.metrics_key`): core sits below storage and cannot import it. RQ names its
own keys (`rq:…`).

Every key starts with the settings' `redis_prefix`. A key never holds a secret: a console
session is keyed by the SHA-256 of its id, so Redis's keyspace, SLOWLOG and MONITOR show no
usable session.
"""

import hashlib


def token_key(prefix: str, kind: str, conversation_id: int) -> str:
    """The coalescing token of a queued `kind` job of one conversation (storage/jobs.py)."""
    return f"{prefix}:{kind}:queued:{conversation_id}"


def turn_token_key(prefix: str, conversation_id: int) -> str:
    return token_key(prefix, "turn", conversation_id)


def lock_key(prefix: str, kind: str, conversation_id: int) -> str:
    """The lock a running `kind` job holds on its conversation (`workers.jobs.held_lock`); while
    it exists that job is running (the sweeper and the reconciler leave the conversation be)."""
    return f"{prefix}:{kind}:lock:{conversation_id}"


def period_key(prefix: str, name: str, period: int) -> str:
    """The guard of periodic job `name` for one period
    (`workers.maintenance.run_once_per_period`)."""
    return f"{prefix}:{name}:period:{period}"


def keeper_lock_key(prefix: str) -> str:
    """The lock of the one keeper that moves due jobs (workers/keeper.py)."""
    return f"{prefix}:keeper:lock"


def alive_key(prefix: str) -> str:
    """Set once by a keeper; missing means Redis restarted empty (workers/keeper.py)."""
    return f"{prefix}:alive"


def beats_key(prefix: str) -> str:
    """Sorted set of running jobs' heartbeats, scored by wall time (workers/heartbeats.py)."""
    return f"{prefix}:beats"


def provider_down_key(prefix: str) -> str:
    """Set while a provider call failed and no call answered since (workers/outages.py): the
    next successful call, or the cron's probe, starts the late answers."""
    return f"{prefix}:provider:down"


def tenant_pause_key(prefix: str, tenant_id: int) -> str:
    """Set, with a TTL, while a tenant's turns wait for the Anthropic 429's `retry-after` it got
    (workers/jobs.pause_tenant): the move of due jobs holds that tenant's turns meanwhile
    (storage/scheduled.enqueue_due)."""
    return f"{prefix}:tenant:{tenant_id}:paused"


def tenant_calls_key(prefix: str, tenant_id: int) -> str:
    """Sorted set of a tenant's Messages API calls in flight, each a lease token scored by the
    Redis-clock millisecond its lease ends (workers/call_slots.py): at most
    `TENANT_MODEL_CALLS` members that have not expired."""
    return f"{prefix}:tenant:{tenant_id}:calls"


def parked_key(prefix: str, tenant_id: int) -> str:
    """Sorted set of a tenant's due jobs held back by the fair move (its cap of jobs waiting,
    or its 429 pause), scored by when each was due: moved from RQ's ScheduledJobRegistry so
    that the registry's head holds only jobs that may move (storage/scheduled.enqueue_due)."""
    return f"{prefix}:tenant:{tenant_id}:parked"


def parked_tenants_key(prefix: str) -> str:
    """Set of the tenants that may have parked jobs (`parked_key`)."""
    return f"{prefix}:parked:tenants"


def recovery_key(prefix: str) -> str:
    """The guard of one recovery reconcile per Redis loss (workers/keeper.py)."""
    return f"{prefix}:recovery"


def console_session_key(prefix: str, session_id: str) -> str:
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).hexdigest()
    return f"{prefix}:console:session:{digest}"


def auth_failures_key(prefix: str, scope: str, name: str) -> str:
    """The counter of failed attempts of one client address or tenant (`scope`: `address` or
    `tenant`) in the current window."""
    return f"{prefix}:auth:failures:{scope}:{name}"
