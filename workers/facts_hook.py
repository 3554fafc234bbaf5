"""What happens after a conversation closes: fact extraction, once that feature exists."""

from workers.runtime import Runtime


def after_close(runtime: Runtime, conversation_id: int) -> None:
    """Called after the sweeper (or a new session) closed `conversation_id`."""
    return None
