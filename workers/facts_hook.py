"""What happens after a conversation closes: its facts are extracted."""

from storage.conversations import tenants_of
from storage.db import session_scope
from storage.jobs import enqueue_facts
from workers.runtime import Runtime


def after_close(runtime: Runtime, conversation_id: int) -> None:
    """Called after the sweeper closed `conversation_id`: enqueue fact extraction, tagged with
    its tenant (storage/jobs.job_id_for)."""
    with session_scope(runtime.engine) as session:
        tenant_id = tenants_of(session, [conversation_id]).get(conversation_id)
    enqueue_facts(runtime.queue, runtime.settings.redis_prefix, conversation_id,
                  tenant_id=tenant_id)
