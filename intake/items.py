"""The shapes a group of customer messages is stored through: each POST's `Pending`, each
message's `Item`, and who sent it (`ContactRef`, `NewContact`)."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from intake.result import IngestResult
from intake.stamp import customer_sent_at
from intake.text import normalise
from whatsapp.inbound import InboundMessage

WA_TYPE_CHARS = 32  # Message.wa_type (storage/models.py)
PROFILE_NAME_CHARS = 200  # Contact.profile_name

IdKind = Literal["user_id", "wa_id"]
ID_KINDS: tuple[IdKind, IdKind] = ("user_id", "wa_id")


@dataclass
class Pending:
    """The customer messages of one signed POST (or of a run of it), to be stored in a group
    with others (`intake.group.store_group` fills `result`). `offset`: the first message's
    place among its POST's messages (`intake.stamp.arrival`)."""

    messages: list[InboundMessage]
    now: datetime
    result: IngestResult = field(default_factory=IngestResult)
    offset: int = 0


class TenantRow(Protocol):
    """A tenant as the group reads it (storage/lookups.py)."""

    @property
    def id(self) -> int: ...
    @property
    def timezone(self) -> str: ...
    @property
    def inactivity_timeout_minutes(self) -> int: ...
    @property
    def keep_cpf(self) -> bool | None: ...


@dataclass(frozen=True)
class Tenant:
    """A `TenantRow` read alone (`messages.inbound_lookup`)."""

    id: int
    timezone: str
    inactivity_timeout_minutes: int
    keep_cpf: bool | None = False


@dataclass(frozen=True)
class NewContact:
    """A contact the group creates: the ids its messages name, in one tenant."""

    tenant_id: int
    user_id: str | None
    wa_id: str | None

    @property
    def sort_key(self) -> str:
        """The order new contacts are inserted in (one order for every group: locks)."""
        return str((self.tenant_id, self.user_id, self.wa_id))


@dataclass(frozen=True)
class ContactRef:
    """A stored contact of a message: `known` before the group (its row is the item's
    `seen`), or made by it."""

    id: int
    known: bool


@dataclass
class Item:
    """One customer message on its way through `store_group`."""

    pending: Pending
    msg: InboundMessage
    index: int = 0  # its place among its POST's messages
    tenant: TenantRow | None = None
    contact: NewContact | ContactRef | None = None
    seen: Any = None  # the known contact's row, with its open conversation (storage/lookups)
    conversation_id: int | None = None
    conversation_seen: datetime | None = None  # its open conversation's last inbound time
    opened_here: bool = False  # its conversation was opened by this group
    first: "Item | None" = None  # the earlier delivery of the same wamid in this group
    alone: bool = False  # stored by itself, in order, after the set-based pass
    stored: bool = False  # inserted by this group (not a redelivery): intake.standby
    # "inbound_stored" at INFO: one POST's messages; a group of POSTs is summed up by the
    # web process's own line (bot.webhook: webhook_group_stored)
    logged: bool = False

    @property
    def now(self) -> datetime:
        """When its POST was received."""
        return self.pending.now

    @property
    def result(self) -> IngestResult:
        return self.pending.result

    @property
    def sent_at(self) -> datetime:
        """When the customer sent it (`customer_sent_at`)."""
        return customer_sent_at(self.msg.timestamp, self.pending.now)

    @property
    def profile_name(self) -> str | None:
        """The sender's WhatsApp profile name as it is stored (`Contact.profile_name`):
        normalised as the customer's text is (intake/text.py: masked by the tenant's
        `keep_cpf`, disarmed), then cut to its column."""
        name = self.msg.profile_name
        return fit(normalise(name, keep_cpf=bool(self.known_tenant.keep_cpf)),
                   PROFILE_NAME_CHARS) if name else name

    @property
    def known_tenant(self) -> TenantRow:
        assert self.tenant is not None
        return self.tenant

    @property
    def contact_id(self) -> int:
        """The stored contact's id (once `contact` is a ContactRef)."""
        assert isinstance(self.contact, ContactRef)
        return self.contact.id


def fit(text: str | None, size: int) -> str | None:
    """`text` cut to its column's size: PostgreSQL refuses a longer VARCHAR, and a customer's
    message must not be dead-lettered for a long profile name or a new message type."""
    return text[:size] if text else text


def latest_now(items: list[Item]) -> datetime:
    """When the latest of these items' POSTs was received."""
    return max(i.pending.now for i in items)


def latest_sent(items: list[Item]) -> datetime:
    """When the customer sent the latest of these items."""
    return max(i.sent_at for i in items)
