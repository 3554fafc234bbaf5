"""Heartbeats of running jobs (issue 36): a dead or stopped work horse is found from its
silence in seconds, not from a lock's TTL or the reconciler's threshold.

While a job holds a conversation's lock (workers/jobs.held_lock) its renewing thread beats
every BEAT_SECONDS: the member `{lock kind}:{conversation_id}:{lock token}` of the sorted set
`storage.keys.beats_key`, scored with the wall time. A clean end removes it. The keeper
holding its lock (workers/keeper.py) reaps, every tick, members silent for SILENCE_SECONDS:
it frees that lock when the silent job still holds it (compare-and-delete on the token) and,
for a turn, enqueues a new turn of the conversation. The silent horse, if only stopped (SIGSTOP,
starved of CPU), is fenced out when it wakes (storage/fences.py): nothing is answered twice.
"""

import time

import structlog
from redis import Redis
from rq import Queue

from storage.jobs import enqueue_turn
from storage.keys import beats_key, lock_key

log = structlog.get_logger(__name__)

BEAT_SECONDS = 1.0
SILENCE_SECONDS = 5.0  # five missed beats: dead or stopped (a busy horse still beats: a thread)
REAPED_KINDS = ("turn",)  # a send (flush) holds the turn's lock too; the new turn sends

# free the lock only while the silent job's token is still its value
_DELETE_IF_OWNED = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


def member(kind: str, conversation_id: int, token: str) -> str:
    return f"{kind}:{conversation_id}:{token}"


def beat(redis: Redis, prefix: str, kind: str, conversation_id: int, token: str) -> None:
    """One heartbeat of the job holding `kind`'s lock of the conversation. Raises RedisError."""
    redis.zadd(beats_key(prefix), {member(kind, conversation_id, token): time.time()})


def stop(redis: Redis, prefix: str, kind: str, conversation_id: int, token: str) -> None:
    """The job ended (its lock released): no more beats expected. Raises RedisError."""
    redis.zrem(beats_key(prefix), member(kind, conversation_id, token))


def reap(redis: Redis, queue: Queue, prefix: str, *, job_timeout: int,
         now: float | None = None) -> list[int]:
    """Free the locks of jobs silent for SILENCE_SECONDS and enqueue a turn for each such
    turn's conversation; returns those conversations. Safe from two keepers at once: a member
    is reaped by whoever removes it. Raises RedisError."""
    key = beats_key(prefix)
    silent = redis.zrangebyscore(key, "-inf", (now or time.time()) - SILENCE_SECONDS)
    revived: list[int] = []
    for raw in silent:
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        if not redis.zrem(key, text):
            continue  # another keeper took it
        kind, _, rest = text.partition(":")
        conversation, _, token = rest.partition(":")
        if not conversation.isdigit():
            continue
        conversation_id = int(conversation)
        freed = redis.eval(_DELETE_IF_OWNED, 1, lock_key(prefix, kind, conversation_id), token)
        log.warning("job_silent_lock_freed" if freed else "job_silent", kind=kind,
                    conversation_id=conversation_id)
        if kind in REAPED_KINDS:
            enqueue_turn(queue, prefix, conversation_id, job_timeout=job_timeout)
            revived.append(conversation_id)
    return revived
