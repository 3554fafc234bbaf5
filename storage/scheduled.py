"""Jobs due later: RQ's ScheduledJobRegistry, served by the product's clock instead of RQ's
scheduler.

Every turn waits there first (the debounce), and so do retries. RQ's scheduler runs in one
worker that holds its lock; after a SIGKILL of that worker the lock outlives it by about 61 s
and the other workers try for it only every 600 s (rq/scheduler.py, rq/defaults.py in 2.12), so
due jobs waited ten minutes. `enqueue_due` is what that scheduler does, run by
`workers.keeper` in every worker and in cron, and by the replay's drain on its frozen clock.
"""

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from redis import Redis
from redis.exceptions import WatchError
from rq import Queue
from rq.job import Job
from rq.registry import ScheduledJobRegistry

from storage.jobs import tenant_of
from storage.keys import parked_key, parked_tenants_key, tenant_pause_key

BATCH = 500  # due jobs moved per transaction
MAX_BATCHES = 20  # per call: a backlog larger than this is moved over the next calls
# Jobs of one tenant (its tagged turns) waiting in the queue at once: what one business's flood
# puts ahead of another's turn (issue 43, fair shares). Each worker takes the next as it starts
# a turn, so a tenant alone still has every worker busy.
TENANT_WAITING_CAP = 2
WAITING_SCAN = 10_000  # queue ids read to count them


def enqueue_due(queue: Queue, *, now: datetime, batch: int = BATCH,
                cap: int = TENANT_WAITING_CAP, batches: int = MAX_BATCHES,
                prefix: str | None = None) -> int:
    """Move the jobs of `queue` due at `now` (aware, the product's clock) from the scheduled
    registry to the queue, oldest first, fairly between tenants; returns how many jobs were
    enqueued.

    Fair shares (issue 43): a job whose id carries a tenant tag (storage/jobs.job_id_for) is
    moved only while fewer than `cap` jobs of its tenant wait in the queue. So one business's
    flood puts at most `cap` of its jobs ahead of another's, and the rest follow as they are
    taken: every turn that starts calls this again for one `batches` (workers/jobs.
    run_coalesced), the keeper every tick. Untagged jobs move at once. Two callers at once may
    each move up to `cap` of a tenant: a soft bound.

    With the product's key `prefix`, a held job is *parked*: moved, in the same transaction,
    from the registry to its tenant's parked set (storage/keys.parked_key, same score), and a
    tenant paused after an Anthropic 429 (storage/keys.tenant_pause_key) has every due job
    parked until its pause ends. Each call first moves, round-robin over the tenants with
    parked jobs (not paused), each tenant's oldest parked jobs up to its room under `cap`; then
    reads the registry, whose head now holds only jobs that may move: a flood of any size
    never hides another tenant's due job behind the `batch` x `batches` window, and a tenant
    with parked jobs has its newer ones parked behind them (its order kept). Without `prefix`
    (the replay's drain) held jobs stay in the registry and are skipped (read past), as before.

    Each move is one transaction that WATCHes the jobs' hashes and checks they are still in
    their set: two callers at once never enqueue a job twice, the loser's EXEC is refused and it
    reads again. An id whose job hash is gone (expired) is dropped, as RQ's scheduler does.
    Raises redis.exceptions.RedisError when Redis fails (nothing of the failed batch moves).
    """
    registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
    redis = queue.connection
    waiting = waiting_per_tenant(queue)
    hold: set[int] = set()
    moved = held = 0
    if prefix is not None:
        parked = {int(t) for t in redis.smembers(parked_tenants_key(prefix))}
        moved += _from_parks(queue, prefix, sorted(parked - _paused(redis, prefix, parked)),
                             waiting, cap, now)
        hold = _still_parked(redis, prefix, parked)
    for _ in range(batches):
        raw = redis.zrangebyscore(registry.key, 0, int(now.timestamp()), start=held, num=batch,
                                  withscores=True)
        pairs: list[Any] = list(raw)
        due = {(i.decode() if isinstance(i, bytes) else str(i)): float(s) for i, s in pairs}
        if not due:
            break
        if prefix is not None:
            hold |= _paused(redis, prefix, {t for t in map(tenant_of, due) if t is not None})
        take, keep = split_fair(list(due), waiting, cap, hold)
        parks = {i: due[i] for i in keep} if prefix is not None else {}
        try:
            moved += _move(queue, registry.key, take, parks=parks, prefix=prefix)
        except WatchError:
            waiting = waiting_per_tenant(queue)
            continue  # another caller moved some of them meanwhile: read the registry again
        held += len(keep) - len(parks)
        if len(due) < batch:
            break
    return moved


def _paused(redis: Redis, prefix: str, tenants: set[int]) -> set[int]:
    """The `tenants` paused after an Anthropic 429 (storage/keys.tenant_pause_key)."""
    ordered = sorted(tenants)
    if not ordered:
        return set()
    marks = redis.mget([tenant_pause_key(prefix, t) for t in ordered])
    return {t for t, mark in zip(ordered, marks, strict=True) if mark is not None}


def _still_parked(redis: Redis, prefix: str, tenants: set[int]) -> set[int]:
    """The `tenants` with parked jobs left (their newer due jobs park behind them)."""
    ordered = sorted(tenants)
    with redis.pipeline(transaction=False) as pipe:
        for tenant in ordered:
            pipe.zcard(parked_key(prefix, tenant))
        counts = pipe.execute()
    return {t for t, n in zip(ordered, counts, strict=True) if n}


def _from_parks(queue: Queue, prefix: str, tenants: list[int], waiting: Counter[int],
                cap: int, now: datetime) -> int:
    """Move each of `tenants`' oldest parked jobs due at `now`, up to its room under `cap`
    (`waiting` is updated); drop a tenant whose parked set is empty from the parked tenants.
    A tenant whose move met another caller's (WatchError) waits for the next call. A round
    trip for the reads, one a tenant with room for its move (and its check for emptiness
    when it had fewer parked jobs than room)."""
    redis, moved = queue.connection, 0
    room = {t: cap - waiting[t] for t in tenants if waiting[t] < cap}
    with redis.pipeline(transaction=False) as pipe:
        for tenant, n in room.items():
            pipe.zrangebyscore(parked_key(prefix, tenant), "-inf", int(now.timestamp()),
                               start=0, num=n)
        found = pipe.execute()
    for tenant, raw in zip(room, found, strict=True):
        ids = [i.decode() if isinstance(i, bytes) else str(i) for i in raw]
        try:
            n = _move(queue, parked_key(prefix, tenant), ids, parks={}, prefix=prefix)
        except WatchError:
            continue
        moved += n
        waiting[tenant] += n
        if len(ids) < room[tenant]:  # drained, unless some were parked since
            _forget_empty_park(redis, prefix, tenant)
    return moved


def _forget_empty_park(redis: Redis, prefix: str, tenant: int) -> None:
    """Take `tenant` off the parked tenants when its parked set is empty, unless a job is
    parked meanwhile (WATCH)."""
    with redis.pipeline() as pipe:
        try:
            pipe.watch(parked_key(prefix, tenant))  # type: ignore[no-untyped-call]
            if pipe.zcard(parked_key(prefix, tenant)):
                return
            pipe.multi()
            pipe.srem(parked_tenants_key(prefix), tenant)
            pipe.execute()
        except WatchError:
            pass


def parked_count(redis: Redis, prefix: str) -> int:
    """How many due jobs are parked (every tenant's `parked_key`): held by the fair move, not
    in RQ's scheduled registry. Two round trips."""
    tenants = sorted(int(t) for t in redis.smembers(parked_tenants_key(prefix)))
    with redis.pipeline(transaction=False) as pipe:
        for tenant in tenants:
            pipe.zcard(parked_key(prefix, tenant))
        return sum(int(n) for n in pipe.execute())


def waiting_per_tenant(queue: Queue) -> Counter[int]:
    """How many tagged jobs of each tenant wait in the queue (the first WAITING_SCAN ids)."""
    ids = queue.connection.lrange(queue.key, 0, WAITING_SCAN - 1)
    tenants = (tenant_of(i.decode() if isinstance(i, bytes) else str(i)) for i in ids)
    return Counter(t for t in tenants if t is not None)


def fair_share(ids: list[str], waiting: Counter[int], cap: int) -> list[str]:
    """The ids (in order) that may move: untagged ones, and a tenant's while it has fewer than
    `cap` waiting (`waiting` is updated with those taken)."""
    return split_fair(ids, waiting, cap, set())[0]


def split_fair(ids: list[str], waiting: Counter[int], cap: int,
               hold: set[int]) -> tuple[list[str], list[str]]:
    """`ids` (in order) split into those that may move (untagged ones, and a tenant's while it
    has fewer than `cap` waiting; `waiting` is updated with those taken) and those held: every
    id of a tenant in `hold` (paused, or with parked jobs) or past its cap. A tenant once held
    holds its later ids too (`hold` is updated), so its order is kept."""
    take, keep = [], []
    for job_id in ids:
        tenant = tenant_of(job_id)
        if tenant is not None:
            if tenant in hold or waiting[tenant] >= cap:
                hold.add(tenant)
                keep.append(job_id)
                continue
            waiting[tenant] += 1
        take.append(job_id)
    return take, keep


def _move(queue: Queue, source: str, ids: list[str], *, parks: dict[str, float],
          prefix: str | None) -> int:
    """In one transaction: enqueue the jobs `ids` still in the sorted set `source` and remove
    them from it; move the `parks` (id -> due score) still there to their tenants' parked sets
    (needs `prefix`). Returns how many were enqueued; WatchError when a job changed meanwhile."""
    if not ids and not parks:
        return 0
    redis = queue.connection
    every = ids + list(parks)
    with redis.pipeline() as pipe:
        pipe.watch(*(Job.key_for(job_id) for job_id in every))  # type: ignore[no-untyped-call]
        scores = pipe.zmscore(source, every)  # still in `source`, now that they are watched
        there = {job_id for job_id, score in zip(every, scores, strict=True) if score is not None}
        ids = [job_id for job_id in ids if job_id in there]
        jobs = [job for job in Job.fetch_many(ids, connection=redis, serializer=queue.serializer)
                if job is not None]
        pipe.multi()
        for job in jobs:
            queue.enqueue_job(job, pipeline=pipe, at_front=job.should_enqueue_at_front())
        gone = ids + [job_id for job_id in parks if job_id in there]
        if gone:
            pipe.zrem(source, *gone)
        for job_id, score in parks.items():
            tenant = tenant_of(job_id)
            if job_id in there and tenant is not None and prefix is not None:
                pipe.zadd(parked_key(prefix, tenant), {job_id: score})
                pipe.sadd(parked_tenants_key(prefix), tenant)
        pipe.execute()
    return len(jobs)


def oldest_due_at(queue: Queue, *, cap: int = TENANT_WAITING_CAP) -> datetime | None:
    """When the earliest job in the scheduled registry that the move would take is due (RQ
    keeps whole seconds), or None when there is none: a tenant's job held back by its cap
    (`enqueue_due`, fair shares) is not late, it waits its turn. Looks at the first BATCH."""
    registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
    first: list[Any] = list(queue.connection.zrange(registry.key, 0, BATCH - 1,
                                                    withscores=True))
    ids = [m.decode() if isinstance(m, bytes) else str(m) for m, _ in first]
    movable = set(fair_share(ids, waiting_per_tenant(queue), cap)) if first else set()
    for job_id, pair in zip(ids, first, strict=True):
        if job_id in movable:
            return datetime.fromtimestamp(float(pair[1]), tz=UTC)
    return None


def overdue_seconds(queue: Queue, *, now: datetime) -> float:
    """How long the oldest due job the move would take has waited to be moved (0 when none is
    due): the gauge `wagent_scheduled_overdue_seconds`. A second or two is normal (keepers tick
    every second, RQ's scores are whole seconds); minutes mean no keeper is moving jobs. A
    tenant's flood held back by its cap does not count (`oldest_due_at`)."""
    due = oldest_due_at(queue)
    if due is None or due >= now:
        return 0.0
    return (now - due).total_seconds()
