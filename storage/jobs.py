"""Enqueueing jobs by dotted path, with per-conversation coalescing tokens in Redis.

A token `<prefix>:<kind>:queued:<conversation_id>` exists while a job of that kind is queued
and has not yet read the database: a producer that finds it knows its (already committed) change
will be seen, so it enqueues nothing. The job deletes the token before reading; from then on a
new trigger enqueues exactly one follow-up, which waits for the running job's lock
(Sources: RQ §1). RQ's `unique=True` is not used: it blocks an id for a
year after a failure, and `enqueue_in` ignores it. Keys are named in storage/keys.py.

Jobs enqueued for later (`at`: the debounce, retries) wait in RQ's ScheduledJobRegistry; the
product moves them to the queue itself (`enqueue_due`, run by `workers.keeper` in every worker
and in cron), not RQ's scheduler. A running job holds its conversation's lock
(`storage.keys.lock_key`).
"""

import re
import uuid
from datetime import datetime
from typing import Any

from redis import Redis
from redis.exceptions import WatchError
from rq import Queue, Retry, get_current_job
from rq.job import Job, JobStatus
from rq.registry import ScheduledJobRegistry

from storage.keys import lock_key, parked_key, token_key

# Dotted paths, not the functions: storage is below workers, and the web (bot) enqueues through
# these but may not import workers (pyproject.toml, the `layers` and `edges` contracts). A job
# one worker module enqueues for another names the function itself (workers/keeper.py).
TURN_JOB = "workers.turns.run_turn"
FLUSH_JOB = "workers.outbox.run_flush"
COMPACTION_JOB = "workers.compaction.compact_conversation"
REDERIVE_JOB = "workers.compaction.rederive_summary"
FACTS_JOB = "workers.facts.extract_facts"
INBOX_JOB = "workers.inbox.drain_inbox"
WEBHOOK_JOB = "workers.webhooks.deliver"
PAYMENT_JOB = "workers.deposits.run_confirm"  # issue 48: a provider's notification
WEBHOOK_JOB_TIMEOUT = 30  # seconds: one HTTP call of at most 5 s (hooks/client.py) and its rows
INBOX_KEY = 0  # the inbox is one queue for the whole product: its token's "conversation" id
TOKEN_TTL_SECONDS = 6 * 3600
_TENANT_TAG = re.compile(r"-t(\d+)$")  # a turn job id's tenant (`job_id_for`)
_JOB_ID = re.compile(r"^([a-z]+)-(\d+)-[0-9a-f]{12}(?:-t(\d+))?$")  # `job_id_for`'s shape
# The job kinds that make Messages API calls for one tenant: tagged with it (`job_id_for`) so
# that the fair move of due jobs (storage/scheduled.py) sees every one of them (issue 43).
MODEL_KINDS = frozenset({"turn", "compact", "rederive", "facts"})
_CAD = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
        "else return 0 end")


def enqueue_coalesced(queue: Queue, prefix: str, kind: str, func: str, conversation_id: int, *,
                      job_timeout: int = 300, at: datetime | None = None,
                      attempt: int = 1, at_front: bool = False, outage: int = 0,
                      tenant_id: int | None = None) -> str | None:
    """Enqueue `func(conversation_id=..., attempt=...)` unless a job of `kind` is already queued
    for this conversation; returns the new job id, or None when coalesced. `tenant_id` tags
    the job id (`job_id_for`).

    `at` (aware) schedules it for later (retries on the product's clock); `at_front` puts a job
    run at once ahead of the queued ones; `outage` > 0 is passed on as `outage=` (the retries
    an outage cost so far). Raises redis.exceptions.ConnectionError when Redis is unreachable.
    """
    return enqueue_coalesced_many(queue, prefix, kind, func, [conversation_id],
                                  job_timeout=job_timeout, at=at, attempt=attempt,
                                  at_front=at_front, outage=outage,
                                  tenants=None if tenant_id is None else
                                  {conversation_id: tenant_id})[conversation_id]


MAX_WATCH_ATTEMPTS = 20  # one conversation's token changed under our WATCH: read it again


def job_id_for(kind: str, conversation_id: int, tenant_id: int | None = None) -> str:
    """A new job id: `{kind}-{conversation_id}-{12 hex}`, and `-t{tenant_id}` when the enqueuer
    knows the tenant: the tag the fair move of due jobs reads (storage/scheduled.py), without
    a fetch of the job. Every enqueuer of a MODEL_KINDS job names it (the webhook, the
    reconciler, the console and admin API, the outage recovery, the sweeper's facts, `wagent
    facts extract`) or inherits it (`inherited_tenant`); only the keeper's revival of a killed
    job's turn (workers/heartbeats.reap) has no tenant to give."""
    job_id = f"{kind}-{conversation_id}-{uuid.uuid4().hex[:12]}"
    return job_id if tenant_id is None else f"{job_id}-t{tenant_id}"


def tenant_of(job_id: str) -> int | None:
    """The tenant tag of a job id (`job_id_for`), or None for an untagged one."""
    found = _TENANT_TAG.search(job_id)
    return int(found.group(1)) if found else None


def inherited_tenant(conversation_id: int) -> int | None:
    """The tenant tag of the RQ job running in this process when it is a job of
    `conversation_id` (`job_id_for`'s shape), else None: what a job enqueued again (a retry, a
    deferral, a locked or outage retry) or started by it (a turn's compaction) carries, when
    its enqueuer passes no tenant."""
    job = get_current_job()
    found = _JOB_ID.match(job.id) if job is not None else None
    if found is None or found.group(3) is None or int(found.group(2)) != conversation_id:
        return None
    return int(found.group(3))


def enqueue_coalesced_many(queue: Queue, prefix: str, kind: str, func: str,
                           conversation_ids: list[int], *, job_timeout: int = 300,
                           at: datetime | None = None, attempt: int = 1,
                           at_front: bool = False, outage: int = 0,
                           tenants: dict[int, int] | None = None) -> dict[int, str | None]:
    """`enqueue_coalesced` for many conversations (the webhook enqueues a group commit's turns
    this way). Returns conversation_id -> new job id, or None when coalesced.

    One MGET reads every token: a conversation whose token exists needs nothing (its job has
    not read the database yet, so it will see what the caller committed), whatever happens to
    the token afterwards. The others get their tokens and jobs in one transaction (WATCH the
    missing tokens, read them again, MULTI/EXEC): four round trips in all (three for one
    conversation, read only under its WATCH). When a watched
    token changes meanwhile (another web process, a worker starting a job), the EXEC is
    refused and those conversations are enqueued one at a time instead, each retried at most
    MAX_WATCH_ATTEMPTS times (then RuntimeError). Raises redis.exceptions.RedisError when
    Redis fails; every job already made then stays (each EXEC is atomic). `tenants`
    (conversation_id -> tenant_id, where known) tags the job ids (`job_id_for`); a job of
    MODEL_KINDS with no tenant given takes the running job's tag (`inherited_tenant`).
    """
    ids = list(dict.fromkeys(conversation_ids))
    result: dict[int, str | None] = {c: None for c in ids}
    if not ids:
        return result
    if kind in MODEL_KINDS:
        tenants = dict(tenants or {})
        for c in ids:
            if c not in tenants and (inherited := inherited_tenant(c)) is not None:
                tenants[c] = inherited
    missing = ids
    if len(ids) > 1:  # one conversation alone is read under its WATCH below
        found = queue.connection.mget([token_key(prefix, kind, c) for c in ids])
        missing = [c for c, token in zip(ids, found, strict=True) if token is None]

    def watched(some: list[int]) -> dict[int, str | None]:
        return _enqueue_watched(queue, prefix, kind, func, some, job_timeout=job_timeout,
                                at=at, attempt=attempt, at_front=at_front, outage=outage,
                                tenants=tenants or {})

    if len(missing) > 1:
        try:
            result.update(watched(missing))
            return result
        except WatchError:
            pass  # one at a time below: one busy conversation no longer holds up the rest
    for conversation_id in missing:
        for _ in range(MAX_WATCH_ATTEMPTS):
            try:
                result.update(watched([conversation_id]))
                break
            except WatchError:
                continue
        else:
            raise RuntimeError(f"the {kind} token of conversation {conversation_id} kept "
                               f"changing: not enqueued after {MAX_WATCH_ATTEMPTS} attempts")
    return result


def _enqueue_watched(queue: Queue, prefix: str, kind: str, func: str, ids: list[int], *,
                     job_timeout: int, at: datetime | None, attempt: int,
                     at_front: bool = False, outage: int = 0,
                     tenants: dict[int, int]) -> dict[int, str | None]:
    """One transaction: WATCH the tokens of `ids`, read them, then set the missing ones and
    create their jobs in MULTI/EXEC. Raises WatchError when a token changed meanwhile (nothing
    is then written)."""
    redis: Redis = queue.connection
    tokens = [token_key(prefix, kind, c) for c in ids]
    result: dict[int, str | None] = {}
    with redis.pipeline() as pipe:
        pipe.watch(*tokens)  # type: ignore[no-untyped-call]
        found = pipe.mget(tokens)
        todo = [(c, t) for c, t, v in zip(ids, tokens, found, strict=True) if v is None]
        if not todo:
            pipe.unwatch()
            return result
        pipe.multi()
        if at is not None:
            pipe.sadd(queue.redis_queues_keys, queue.key)
        scheduled: dict[str, int] = {}
        for conversation_id, token in todo:
            job_id = job_id_for(kind, conversation_id, tenants.get(conversation_id))
            pipe.set(token, job_id, ex=TOKEN_TTL_SECONDS)
            kwargs = {"conversation_id": conversation_id, "attempt": attempt}
            if outage:
                kwargs["outage"] = outage
            if at is None:
                queue.enqueue(func, kwargs=kwargs, job_id=job_id, job_timeout=job_timeout,
                              result_ttl=600, failure_ttl=7 * 86400, retry=Retry(max=2),
                              at_front=at_front, pipeline=pipe)
            else:
                _schedule(queue, pipe, func, kwargs, job_id, job_timeout)
                scheduled[job_id] = int(at.timestamp())
            result[conversation_id] = job_id
        if scheduled:
            registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
            pipe.zadd(registry.key, scheduled)
        pipe.execute()
    return result


def _schedule(queue: Queue, pipe: Any, func: str, kwargs: dict[str, Any], job_id: str,
              job_timeout: int) -> None:
    """What `Queue.schedule_job` writes for the job itself (its hash, status "scheduled"),
    inside our transaction; the caller adds the queue to RQ's set of queues and the job to the
    ScheduledJobRegistry. RQ 2.12's `ScheduledJobRegistry.schedule` ignores the pipeline it is
    given (it ZADDs on the connection at once), so a transaction retried after a WatchError
    would leave a scheduled id with no job: the ZADD goes in our pipeline instead.
    """
    job = queue.create_job(func, kwargs=kwargs, job_id=job_id, timeout=job_timeout,
                           result_ttl=600, failure_ttl=7 * 86400, retry=Retry(max=2),
                           status=JobStatus.SCHEDULED)
    job.save(pipeline=pipe)  # the hash carries status "scheduled" (create_job set it)


def enqueue_turn(queue: Queue, prefix: str, conversation_id: int, *, job_timeout: int = 300,
                 at: datetime | None = None, attempt: int = 1,
                 outage: int = 0, tenant_id: int | None = None) -> str | None:
    """Enqueue a turn for the conversation (coalesced: at most one queued). `outage` counts the
    retries of a turn a database or Redis error stopped (`workers.jobs.retry_after_outage`);
    `tenant_id` tags it for the fair move of due jobs (storage/scheduled.py)."""
    return enqueue_coalesced(queue, prefix, "turn", TURN_JOB, conversation_id,
                             job_timeout=job_timeout, at=at, attempt=attempt, outage=outage,
                             tenant_id=tenant_id)


def enqueue_turns(queue: Queue, prefix: str, conversation_ids: list[int], *,
                  job_timeout: int = 300, at: datetime | None = None,
                  tenants: dict[int, int] | None = None) -> dict[int, str | None]:
    """Enqueue a turn for each conversation, in one transaction (`enqueue_coalesced_many`);
    `tenants` (conversation_id -> tenant_id) tags them for the fair move of due jobs."""
    return enqueue_coalesced_many(queue, prefix, "turn", TURN_JOB, conversation_ids,
                                  job_timeout=job_timeout, at=at, tenants=tenants)


def enqueue_flush(queue: Queue, prefix: str, conversation_id: int, *,
                  at: datetime | None = None, attempt: int = 1,
                  outage: int = 0) -> str | None:
    """Enqueue `workers.outbox.run_flush`: send the conversation's outbox parts that are due
    (a rate-limited or unreachable send's retry, on its own schedule: not a turn, so a new
    customer message never waits for it). `at` None: at once. Coalesced (at most one queued),
    the earliest time wins: a queued flush scheduled later than `at` is moved to `at`.
    Returns the new job id, or None when coalesced. Raises RedisError.
    """
    job_id = enqueue_coalesced(queue, prefix, "send", FLUSH_JOB, conversation_id,
                               job_timeout=300, at=at, attempt=attempt, outage=outage)
    if job_id is None and at is not None:  # coalesced: the earliest time wins
        queued = queue.connection.get(token_key(prefix, "send", conversation_id))
        if queued is not None:  # XX: only a job still scheduled; LT: only ever earlier
            registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
            queued_id = queued.decode() if isinstance(queued, bytes) else str(queued)
            queue.connection.zadd(registry.key, {queued_id: int(at.timestamp())}, xx=True,
                                  lt=True)
    return job_id


def enqueue_compaction(queue: Queue, prefix: str, conversation_id: int, *,
                       at: datetime | None = None, attempt: int = 1,
                       outage: int = 0, tenant_id: int | None = None) -> str | None:
    """Enqueue a compaction (coalesced: at most one queued, one running, one follow-up);
    `tenant_id` tags it (`job_id_for`)."""
    return enqueue_coalesced(queue, prefix, "compact", COMPACTION_JOB, conversation_id,
                             job_timeout=300, at=at, attempt=attempt, outage=outage,
                             tenant_id=tenant_id)


def bring_forward(queue: Queue, prefix: str, kind: str, conversation_id: int, *,
                  at: datetime) -> bool:
    """Move the job of `kind` that is scheduled for this conversation (its coalescing token
    names it) to run at `at` (aware) when it is scheduled later; True when it was moved. A job
    already queued or running, or none at all, is left as it is (False): it reads the
    database when it starts. One ZADD XX LT, atomic: a scheduled job is never created nor made
    later (Redis >= 6.2)."""
    job_id = queue.connection.get(token_key(prefix, kind, conversation_id))
    if job_id is None:
        return False
    registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
    member = job_id.decode() if isinstance(job_id, bytes) else str(job_id)
    return bool(queue.connection.zadd(registry.key, {member: int(at.timestamp())},
                                      xx=True, lt=True, ch=True))


def enqueue_rederive(queue: Queue, prefix: str, conversation_id: int, *,
                     at: datetime | None = None, attempt: int = 1,
                     outage: int = 0, tenant_id: int | None = None) -> str | None:
    """Enqueue the re-derivation of a summary from its messages (coalesced: at most one
    queued; it runs under the compaction's lock); `tenant_id` tags it (`job_id_for`)."""
    return enqueue_coalesced(queue, prefix, "rederive", REDERIVE_JOB, conversation_id,
                             job_timeout=300, at=at, attempt=attempt, outage=outage,
                             tenant_id=tenant_id)


def enqueue_facts(queue: Queue, prefix: str, conversation_id: int, *,
                  at: datetime | None = None, attempt: int = 1,
                  outage: int = 0, tenant_id: int | None = None) -> str | None:
    """Enqueue fact extraction (coalesced: at most one queued; it can run again later);
    `tenant_id` tags it (`job_id_for`)."""
    return enqueue_coalesced(queue, prefix, "facts", FACTS_JOB, conversation_id,
                             job_timeout=300, at=at, attempt=attempt, outage=outage,
                             tenant_id=tenant_id)


def enqueue_drain(queue: Queue, prefix: str, *, at_front: bool = True) -> str | None:
    """Enqueue `workers.inbox.drain_inbox` unless one is queued or still draining (its token
    is held until it finds the inbox empty, see `workers.inbox`), ahead of the queued jobs:
    storing takes milliseconds a POST, a turn seconds, and until they are stored the POSTs
    have no turn at all. Raises RedisError.

    The common case under load, a drain holding the token, costs one EXISTS: the caller's
    entries are committed, and the holder looks at the inbox again after giving the token
    back, so it sees them."""
    if queue.connection.exists(token_key(prefix, "inbox", INBOX_KEY)):
        return None
    return enqueue_coalesced(queue, prefix, "inbox", INBOX_JOB, INBOX_KEY, job_timeout=600,
                             at_front=at_front)


def enqueue_webhooks(queue: Queue, delivery_ids: list[int], *,
                     at: datetime | None = None) -> list[str]:
    """Enqueue `workers.webhooks.deliver(delivery_id=...)` for each webhook delivery, at once
    or (`at`, aware: a retry on the product's clock) in the scheduled registry. Not coalesced:
    a second job for one delivery finds it claimed or not due and does nothing
    (storage/webhooks.claim). Returns the job ids. Raises RedisError."""
    ids = []
    for delivery_id in delivery_ids:
        job_id = f"webhook-{delivery_id}-{uuid.uuid4().hex[:12]}"
        options: dict[str, Any] = {"kwargs": {"delivery_id": delivery_id}, "job_id": job_id,
                                   "job_timeout": WEBHOOK_JOB_TIMEOUT, "result_ttl": 600,
                                   "failure_ttl": 7 * 86400}
        if at is None:
            queue.enqueue(WEBHOOK_JOB, **options)
        else:
            queue.enqueue_at(at, WEBHOOK_JOB, **options)
        ids.append(job_id)
    return ids


def consume_token(redis: Redis, prefix: str, kind: str, conversation_id: int,
                  job_id: str) -> None:
    """Called by a job before it reads the database: later triggers enqueue a follow-up."""
    redis.eval(_CAD, 1, token_key(prefix, kind, conversation_id), job_id)


def consume_turn_token(redis: Redis, prefix: str, conversation_id: int, job_id: str) -> None:
    consume_token(redis, prefix, "turn", conversation_id, job_id)


LIVE_STATUSES = (b"queued", b"deferred")  # a job in these states will run and read the database
OVERDUE_AFTER = 30  # seconds past its due time after which a scheduled job is not being moved


def stale_tokens(queue: Queue, prefix: str, kind: str, conversation_ids: list[int], *,
                 now: datetime, overdue_after: float = OVERDUE_AFTER) -> dict[int, str]:
    """The conversations whose `kind` token blocks an enqueue while no job will run for it:
    the token's job is gone (expired, or Redis lost it), ended (finished, failed, stopped,
    canceled: it died before consuming its token, or every retry failed), started without
    consuming it, or scheduled but due more than `overdue_after` seconds ago at `now` (no
    keeper moves it) or no longer in the registry (a job the fair move parked, storage/keys.
    parked_key, is live: it waits its tenant's turn). Returns conversation_id -> the token's job
    id, for `consume_token` to drop it. Two round trips. Raises RedisError.
    """
    values = queue.connection.mget([token_key(prefix, kind, c) for c in conversation_ids])
    held = {c: v.decode() if isinstance(v, bytes) else str(v)
            for c, v in zip(conversation_ids, values, strict=True) if v}
    if not held:
        return {}
    registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
    with queue.connection.pipeline(transaction=False) as pipe:
        for job_id in held.values():
            tenant = tenant_of(job_id)
            pipe.hget(Job.key_for(job_id), "status")
            pipe.zscore(registry.key, job_id)
            pipe.zscore(registry.key if tenant is None else parked_key(prefix, tenant), job_id)
        answers = pipe.execute()
    stale: dict[int, str] = {}
    for (conversation_id, job_id), status, due, parked in zip(
            held.items(), answers[::3], answers[1::3], answers[2::3], strict=True):
        if status in LIVE_STATUSES or (status == b"scheduled" and (
                (due is not None and now.timestamp() - due <= overdue_after)
                or (parked is not None and due is None))):
            continue
        stale[conversation_id] = job_id
    return stale


def held_locks(redis: Redis, prefix: str, kind: str, conversation_ids: list[int]) -> set[int]:
    """The conversations whose `kind` job is running (its lock exists). One round trip."""
    with redis.pipeline(transaction=False) as pipe:
        for conversation_id in conversation_ids:
            pipe.exists(lock_key(prefix, kind, conversation_id))
        found = pipe.execute()
    return {c for c, held in zip(conversation_ids, found, strict=True) if held}


def enqueue_payment(queue: Queue, payment_event_id: int) -> str:
    """Enqueue `workers.deposits.run_confirm(payment_event_id=...)`: fetch the payment a
    recorded notification names and apply it. A lost job is harmless: the deposits pass
    confirms every event still pending (workers/deposits.py). Raises RedisError."""
    job_id = f"payment-{payment_event_id}"
    queue.enqueue(PAYMENT_JOB, kwargs={"payment_event_id": payment_event_id}, job_id=job_id,
                  job_timeout=60, result_ttl=600, failure_ttl=7 * 86400)
    return job_id
