"""What happens after a conversation closes: its facts are extracted."""

from storage.jobs import enqueue_facts
from workers.runtime import Runtime


def after_close(runtime: Runtime, conversation_id: int) -> None:
    """Called after the sweeper closed `conversation_id`: enqueue fact extraction."""
    enqueue_facts(runtime.queue, runtime.settings.redis_prefix, conversation_id)
