"""The conversation a per-conversation job works on, with its tenant and contact, read in the
caller's transaction: the one loader of the turn (workers/turns.py), compaction
(workers/compaction.py) and fact extraction (workers/facts.py)."""

from dataclasses import dataclass, field

from sqlmodel import Session, col, select

from storage.models import Contact, Conversation, Tenant


@dataclass(frozen=True)
class ConversationState:
    """The three rows (detached once their transaction ends: `session_scope` does not expire
    them) and their ids as ints, set from the rows."""

    tenant: Tenant
    contact: Contact
    conversation: Conversation
    # the turn's model when it is not the tenant's `agent_model` (workers/budgets.py: a turn
    # over the monthly budget uses the tenant's `fallback_model`)
    model: str | None = None
    tenant_id: int = field(init=False)
    contact_id: int = field(init=False)
    conversation_id: int = field(init=False)

    def __post_init__(self) -> None:
        for name, row in (("tenant_id", self.tenant), ("contact_id", self.contact),
                          ("conversation_id", self.conversation)):
            if row.id is None:
                raise ValueError(f"{name}: the row is not stored yet")
            object.__setattr__(self, name, int(row.id))


def load_state(session: Session, conversation_id: int) -> ConversationState | None:
    """The conversation `conversation_id` with its tenant and contact, in one query; None when
    it (or either of them) is gone."""
    found = session.exec(select(Conversation, Tenant, Contact).join(
        Tenant, col(Tenant.id) == Conversation.tenant_id).join(
        Contact, col(Contact.id) == Conversation.contact_id).where(
        Conversation.id == conversation_id).limit(1)).first()
    if found is None:
        return None
    conversation, tenant, contact = found
    return ConversationState(tenant=tenant, contact=contact, conversation=conversation)
