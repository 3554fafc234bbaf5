"""What storing one webhook POST did (`IngestResult`): the jobs it asks for and its counts."""

from dataclasses import dataclass, field


@dataclass
class IngestResult:
    """What one webhook POST did: conversations needing a turn, and counts by outcome."""

    turn_conversation_ids: list[int] = field(default_factory=list)
    turn_tenants: dict[int, int] = field(default_factory=dict)  # where known: the fair move's tag
    closed_conversation_ids: list[int] = field(default_factory=list)  # stale sessions ended
    # open sessions whose summary covers a message the customer deleted: summary re-derived
    rederive_conversation_ids: list[int] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    # µUSD newly charged by WhatsApp category (intake/statuses.record_charges): the metrics
    whatsapp_micro_usd: dict[str, int] = field(default_factory=dict)
    grouped: bool = False  # stored in a group of POSTs (store_group), or spilled
    spilled: bool = False  # put in the inbox for a worker to store (counts then empty)

    def count(self, outcome: str, amount: int = 1) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + amount

    def add_turn(self, conversation_id: int | None, tenant_id: int | None = None) -> None:
        """Ask for a turn of this conversation (once); `tenant_id` when known (its job is then
        tagged: storage/jobs.job_id_for)."""
        if conversation_id is not None and conversation_id not in self.turn_conversation_ids:
            self.turn_conversation_ids.append(conversation_id)
        if conversation_id is not None and tenant_id is not None:
            self.turn_tenants[conversation_id] = tenant_id

    def merge(self, other: "IngestResult") -> None:
        """Add what `other` (a part of the same POST) did."""
        for outcome, amount in other.counts.items():
            self.count(outcome, amount)
        for mine, theirs in ((self.turn_conversation_ids, other.turn_conversation_ids),
                             (self.closed_conversation_ids, other.closed_conversation_ids),
                             (self.rederive_conversation_ids, other.rederive_conversation_ids)):
            mine.extend(c for c in theirs if c not in mine)
        self.turn_tenants.update(other.turn_tenants)
        for category, micro_usd in other.whatsapp_micro_usd.items():
            self.whatsapp_micro_usd[category] = self.whatsapp_micro_usd.get(category, 0) \
                + micro_usd
