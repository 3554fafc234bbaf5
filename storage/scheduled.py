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
from storage.keys import tenant_pause_key

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

    Fair shares (issue 43): a job whose id carries a tenant tag (storage/jobs.job_id_for: the
    webhook's turns) is moved only while fewer than `cap` jobs of its tenant wait in the queue;
    the others stay due in the registry, in order, for a later call. So one business's flood
    puts at most `cap` of its turns ahead of another's, and the rest follow as they are taken:
    every turn that starts calls this again for one `batches` (workers/jobs.run_coalesced),
    the keeper every tick. Untagged jobs (retries, maintenance, a console's turn) move as
    before. Two callers at once may each move up to `cap` of a tenant: a soft bound. With the
    product's key `prefix`, a tenant paused after an Anthropic 429 (storage/keys.
    tenant_pause_key) moves none until its pause ends: only that tenant slows down.

    Each batch is one transaction that WATCHes the jobs' hashes and checks they are still in
    the registry: two callers at once (two keepers, a keeper that lost its lock while starved)
    never enqueue a job twice, the loser's EXEC is refused and it reads the registry again. An
    id whose job hash is gone (expired) is dropped from the registry, as RQ's scheduler does.
    Raises redis.exceptions.RedisError when Redis fails (nothing of the failed batch moves).
    """
    registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
    redis = queue.connection
    waiting = waiting_per_tenant(queue)
    moved = held = 0
    for _ in range(batches):
        raw = redis.zrangebyscore(registry.key, 0, int(now.timestamp()), start=held, num=batch)
        ids = [i.decode() if isinstance(i, bytes) else str(i) for i in raw]
        if not ids:
            break
        if prefix is not None:
            _hold_paused(redis, prefix, ids, waiting, cap)
        take = fair_share(ids, waiting, cap)
        try:
            moved += _move(queue, registry, take) if take else 0
        except WatchError:
            waiting = waiting_per_tenant(queue)
            continue  # another caller moved some of them meanwhile: read the registry again
        held += len(ids) - len(take)
        if len(ids) < batch:
            break
    return moved


def _hold_paused(redis: Redis, prefix: str, ids: list[str], waiting: Counter[int],
                 cap: int) -> None:
    """Count a paused tenant of `ids` as full (`cap` waiting), so none of its jobs moves."""
    tenants = sorted({t for t in map(tenant_of, ids) if t is not None})
    if not tenants:
        return
    paused = redis.mget([tenant_pause_key(prefix, t) for t in tenants])
    for tenant, mark in zip(tenants, paused, strict=True):
        if mark is not None:
            waiting[tenant] = max(waiting[tenant], cap)


def waiting_per_tenant(queue: Queue) -> Counter[int]:
    """How many tagged jobs of each tenant wait in the queue (the first WAITING_SCAN ids)."""
    ids = queue.connection.lrange(queue.key, 0, WAITING_SCAN - 1)
    tenants = (tenant_of(i.decode() if isinstance(i, bytes) else str(i)) for i in ids)
    return Counter(t for t in tenants if t is not None)


def fair_share(ids: list[str], waiting: Counter[int], cap: int) -> list[str]:
    """The ids (in order) that may move: untagged ones, and a tenant's while it has fewer than
    `cap` waiting (`waiting` is updated with those taken)."""
    take = []
    for job_id in ids:
        tenant = tenant_of(job_id)
        if tenant is not None:
            if waiting[tenant] >= cap:
                continue
            waiting[tenant] += 1
        take.append(job_id)
    return take


def _move(queue: Queue, registry: ScheduledJobRegistry, ids: list[str]) -> int:
    redis = queue.connection
    with redis.pipeline() as pipe:
        pipe.watch(*(Job.key_for(job_id) for job_id in ids))  # type: ignore[no-untyped-call]
        scores = pipe.zmscore(registry.key, ids)  # still scheduled, now that they are watched
        ids = [job_id for job_id, score in zip(ids, scores, strict=True) if score is not None]
        jobs = [job for job in Job.fetch_many(ids, connection=redis, serializer=queue.serializer)
                if job is not None]
        pipe.multi()
        for job in jobs:
            queue.enqueue_job(job, pipeline=pipe, at_front=job.should_enqueue_at_front())
        if ids:
            pipe.zrem(registry.key, *ids)
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
