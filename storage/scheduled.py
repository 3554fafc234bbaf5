"""Jobs due later: RQ's ScheduledJobRegistry, served by the product's clock instead of RQ's
scheduler.

Every turn waits there first (the debounce), and so do retries. RQ's scheduler runs in one
worker that holds its lock; after a SIGKILL of that worker the lock outlives it by about 61 s
and the other workers try for it only every 600 s (rq/scheduler.py, rq/defaults.py in 2.12), so
due jobs waited ten minutes. `enqueue_due` is what that scheduler does, run by
`workers.keeper` in every worker and in cron, and by the replay's drain on its frozen clock.
"""

from datetime import UTC, datetime

from redis.exceptions import WatchError
from rq import Queue
from rq.job import Job
from rq.registry import ScheduledJobRegistry

BATCH = 500  # due jobs moved per transaction
MAX_BATCHES = 20  # per call: a backlog larger than this is moved over the next calls


def enqueue_due(queue: Queue, *, now: datetime, batch: int = BATCH) -> int:
    """Move the jobs of `queue` due at `now` (aware, the product's clock) from the scheduled
    registry to the queue, oldest first; returns how many jobs were enqueued.

    Each batch is one transaction that WATCHes the jobs' hashes and checks they are still in
    the registry: two callers at once (two keepers, a keeper that lost its lock while starved)
    never enqueue a job twice, the loser's EXEC is refused and it reads the registry again. An
    id whose job hash is gone (expired) is dropped from the registry, as RQ's scheduler does.
    Raises redis.exceptions.RedisError when Redis fails (nothing of the failed batch moves).
    """
    registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
    moved = 0
    for _ in range(MAX_BATCHES):
        ids = registry.get_jobs_to_schedule(int(now.timestamp()), chunk_size=batch)
        if not ids:
            break
        try:
            moved += _move(queue, registry, ids)
        except WatchError:
            continue  # another caller moved some of them meanwhile: read the registry again
        if len(ids) < batch:
            break
    return moved


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


def oldest_due_at(queue: Queue) -> datetime | None:
    """When the earliest job in the scheduled registry is due (RQ keeps whole seconds), or
    None when it is empty."""
    registry = ScheduledJobRegistry(queue=queue)  # type: ignore[no-untyped-call]
    first = queue.connection.zrange(registry.key, 0, 0, withscores=True)
    if not first:
        return None
    return datetime.fromtimestamp(float(first[0][1]), tz=UTC)


def overdue_seconds(queue: Queue, *, now: datetime) -> float:
    """How long the oldest due job has waited to be moved (0 when none is due): the gauge
    `wagent_scheduled_overdue_seconds`. A second or two is normal (keepers tick every second,
    RQ's scores are whole seconds); minutes mean no keeper is moving jobs."""
    due = oldest_due_at(queue)
    if due is None or due >= now:
        return 0.0
    return (now - due).total_seconds()

