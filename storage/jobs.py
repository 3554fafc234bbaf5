"""Enqueueing jobs by dotted path, with per-conversation coalescing tokens in Redis.

A token `<prefix>:turn:queued:<conversation_id>` exists while a turn job is queued and has not
yet read the database: a producer that finds it knows its (already committed) message will be
seen, so it enqueues nothing. The job deletes the token before reading; from then on a new
message enqueues exactly one follow-up (reference/rq_sqlmodel_structlog.md §1). RQ's
`unique=True` is not used: it blocks an id for a year after a failure.
"""

import uuid
from datetime import datetime

from redis import Redis
from redis.exceptions import WatchError
from rq import Queue, Retry

TURN_JOB = "workers.turns.run_turn"
TOKEN_TTL_SECONDS = 6 * 3600
_CAD = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
        "else return 0 end")


def turn_token_key(prefix: str, conversation_id: int) -> str:
    return f"{prefix}:turn:queued:{conversation_id}"


def enqueue_turn(
    queue: Queue, prefix: str, conversation_id: int, *, job_timeout: int = 300,
    at: datetime | None = None, attempt: int = 1,
) -> str | None:
    """Enqueue `run_turn(conversation_id)` unless one is already queued; returns the job id.

    `at` (aware) schedules it for later (retries after a provider failure). Raises
    redis.exceptions.ConnectionError when Redis is unreachable.
    """
    redis: Redis = queue.connection
    token = turn_token_key(prefix, conversation_id)
    job_id = f"turn-{conversation_id}-{uuid.uuid4().hex[:12]}"
    with redis.pipeline() as pipe:
        while True:
            try:
                pipe.watch(token)
                if pipe.exists(token):
                    pipe.unwatch()
                    return None
                pipe.multi()
                pipe.set(token, job_id, ex=TOKEN_TTL_SECONDS)
                kwargs = dict(
                    kwargs={"conversation_id": conversation_id, "attempt": attempt},
                    job_id=job_id, job_timeout=job_timeout, result_ttl=600,
                    failure_ttl=7 * 86400, retry=Retry(max=2), pipeline=pipe,
                )
                if at is None:
                    queue.enqueue(TURN_JOB, **kwargs)
                else:
                    queue.enqueue_at(at, TURN_JOB, **kwargs)
                pipe.execute()
                return job_id
            except WatchError:
                continue


def consume_turn_token(redis: Redis, prefix: str, conversation_id: int, job_id: str) -> None:
    """Called by the job before it reads the database: later messages enqueue a follow-up."""
    redis.eval(_CAD, 1, turn_token_key(prefix, conversation_id), job_id)
