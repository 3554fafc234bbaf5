"""Tables of the product: tenants and their catalogue, contacts, conversations, messages,
usage, appointments, facts, the outbox and the dead letters.

Datetimes are aware UTC (SQLModel maps `datetime` to UTCDateTime). JSON columns are JSONB on
PostgreSQL. No `from __future__ import annotations` here (SQLModel relationships need real types).
"""

from datetime import date, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Index, LargeBinary, Text, UniqueConstraint, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

JSONType = JSON().with_variant(JSONB(), "postgresql")

DEFAULT_FACT_KEYS = ["preferred_name", "usual_service", "preferred_professional",
                     "preferred_period"]


class Tenant(SQLModel, table=True):
    """A business with one WhatsApp number. Timeouts in minutes, thresholds in tokens."""

    id: int | None = Field(default=None, primary_key=True)
    phone_number_id: str = Field(max_length=64, unique=True)
    name: str = Field(max_length=200)
    timezone: str = Field(default="America/Sao_Paulo", max_length=64)
    language: str = Field(default="pt-BR", max_length=16)
    instructions: str = Field(default="", sa_type=Text)
    inactivity_timeout_minutes: int = 1440
    compaction_threshold_tokens: int = 5000
    compaction_min_gain_tokens: int = 1000
    keep_messages: int = 8
    prune_after_user_turns: int = 1
    agent_model: str = Field(default="claude-sonnet-5-5", max_length=64)
    summary_model: str = Field(default="claude-haiku-4-5", max_length=64)
    slot_granularity_minutes: int = 30
    # booking limits (agent/tools/scheduling.py): how far ahead, how soon, how many
    booking_horizon_days: int = 90
    booking_notice_minutes: int = 60
    max_upcoming_bookings: int = 5  # per contact
    # service codes that may run at once with the service before them in a visit, by another
    # professional (a manicure beside a haircut; issue 38, agent/tools/availability.py)
    parallel_services: list[Any] = Field(default_factory=list, sa_type=JSONType)
    retention_days: int = 180
    followup_template: str = Field(default="", max_length=512)
    # set when the Graph API rejected the access token (190): nothing is sent until resumed
    sending_paused_reason: str = Field(default="", max_length=500)
    followup_template_language: str = Field(default="pt_BR", max_length=16)
    # names of default keys or objects {"name", "kind", "validity_days", "review_days", "risk",
    # "sensitive", "shape"}: storage/fact_keys.py, agent/tools/facts_rules.py
    fact_keys: list[Any] = Field(default_factory=lambda: list(DEFAULT_FACT_KEYS), sa_type=JSONType)
    created_at: datetime
    # a person takes over (storage/staff.py): the customer's text when the agent hands off
    # (empty: the product's, workers/texts.py), how long staff keep a conversation after
    # their last message, when an unanswered handoff alerts again, how long an echo from the
    # WhatsApp Business app pauses the agent (0: never), the templates staff may send
    # outside the 24-hour window [{"name", "language", "parameters", "buttons"}]
    handoff_text: str = Field(default="", sa_type=Text)
    staff_timeout_minutes: int = 720
    handoff_alert_minutes: int = 30
    echo_pause_minutes: int = 120
    templates: list[Any] = Field(default_factory=list, sa_type=JSONType)
    # ISO 4217 code of the services' prices (Service.price_cents); issue 21
    currency: str = Field(default="BRL", max_length=3)
    # appointment notes may hold health content (an allergy) only when True (agent/tools/notes.py)
    appointment_notes_sensitive: bool = False
    # reminders (issue 25; storage/reminders.py): lead times in minutes (at most 3), local
    # quiet hours "HH:MM-HH:MM" (empty: none), the declared template sent outside the 24-hour
    # window (empty: none), the in-window text (empty: the product's, workers/texts.py); a
    # tapped Cancelar cancels only this long before the start; a coexistence number is paced
    # at 20 sends/s (80 otherwise)
    reminder_lead_minutes: list[Any] = Field(default_factory=lambda: [1440], sa_type=JSONType)
    quiet_hours: str = Field(default="21:00-08:00", max_length=11)
    reminder_template: str = Field(default="", max_length=512)
    reminder_text: str = Field(default="", sa_type=Text)
    cancellation_window_minutes: int = 0
    coexistence: bool = False
    address: str = Field(default="", max_length=300)  # the business's, for reminders
    # the declared template that tells the customer of a business's cancel or move outside
    # the 24-hour window (empty: such a notice is recorded as not sent)
    notice_template: str = Field(default="", max_length=512)
    # issue 42: CPF numbers kept in stored customer text (else masked at intake,
    # intake/masking.py); the public-holiday calendar ("BR", "BR-SP"; "": the timezone's
    # country; "none") and the holidays the business opens on (ISO dates), core/holidays.py
    keep_cpf: bool = False
    holiday_calendar: str = Field(default="", max_length=64)
    open_holidays: list[Any] = Field(default_factory=list, sa_type=JSONType)
    # issue 47, the waitlist (storage/waitlist.py): how long an offered slot is held for the
    # customer; the declared template of an offer outside the 24-hour window (empty: none);
    # offers only inside the window (a template offer is a paid message)
    waitlist_hold_minutes: int = 15
    waitlist_template: str = Field(default="", max_length=512)
    waitlist_inside_window_only: bool = False
    # issue 45 (storage/threads.py): what a reminder or notice does while another sender
    # holds the thread ("skip_and_show" | "send_template"); the customers the agent answers
    # (empty: everyone); when the number's first standby copy arrived (the console's banner)
    busy_thread_rule: str = Field(default="skip_and_show", max_length=16)
    agent_allowlist: list[Any] = Field(default_factory=list, sa_type=JSONType)
    standby_seen_at: datetime | None = None
    # issue 46: the calendar feeds show appointment notes (default: the service and the
    # customer's first name only)
    feed_notes: bool = False
    # issue 46: a no-show uses a session of the customer's package (default: it does)
    no_show_uses_session: bool = True
    # issue 48, deposits by Pix (storage/deposits.py): the tenant's rule (a service's own
    # overrides it): an amount in cents or a percentage of the price (0: none), how long a
    # held visit waits for it; the Pix key its provider's codes pay into, shown in the
    # order_details message (never logged); what a cancellation does to a paid deposit
    deposit_cents: int = 0
    deposit_percent: int = 0
    deposit_hold_minutes: int = 30
    pix_key: str = Field(default="", max_length=77)
    pix_key_type: str = Field(default="", max_length=8)
    deposit_refund: str = Field(default="kept_inside_window", max_length=24)
    # the declared order-details template (an ORDER_DETAILS button) asking for the deposit
    # outside the 24-hour window (empty: such a request is recorded as not sent)
    deposit_template: str = Field(default="", max_length=512)
    # issue 49, budgets (workers/budgets.py): the monthly model budget in US cents (None or
    # 0: no budget), what a turn does once the month's model cost reached it ("fallback":
    # the `fallback_model`; "handoff": the handoff text, staff take over)
    model_budget_cents: int | None = None
    budget_action: str = Field(default="fallback", max_length=16)
    fallback_model: str = Field(default="claude-haiku-4-5", max_length=64)


class Service(SQLModel, table=True):
    __table_args__ = (UniqueConstraint("tenant_id", "code", name="uq_service_tenant_code"),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    code: str = Field(max_length=64)
    name: str = Field(max_length=200)
    duration_minutes: int
    # the price in cents of the tenant's currency (None: not stated); price_from: "a partir de"
    price_cents: int | None = None
    price_from: bool = False
    description: str = Field(default="", max_length=300)
    # minutes the professional stays busy after the visit (clean-up); issue 22
    buffer_minutes: int = Field(default=0, sa_column_kwargs={"server_default": text("0")})
    # False once removed from the catalogue: kept for the appointments that name it
    active: bool = Field(default=True, sa_column_kwargs={"server_default": text("true")})
    # issue 48: this service's deposit rule (None: the tenant's); cents or percent of the price
    deposit_cents: int | None = None
    deposit_percent: int | None = None


class Professional(SQLModel, table=True):
    __table_args__ = (UniqueConstraint("tenant_id", "code", name="uq_professional_tenant_code"),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    code: str = Field(max_length=64)
    name: str = Field(max_length=200)
    service_codes: list[str] = Field(default_factory=list, sa_type=JSONType)
    active: bool = Field(default=True, sa_column_kwargs={"server_default": text("true")})
    # their own week (issue 22; agent/tools/availability.py): None = the business's hours;
    # {"mon": ["09:00-18:00"]}; time_off [{"from", "to", "note"}] (both days included);
    # hours_exceptions [{"day", "hours", "note"}]; durations {service code: minutes}
    hours: dict[str, list[str]] | None = Field(default=None, sa_type=JSONType)
    time_off: list[dict[str, str]] = Field(default_factory=list, sa_type=JSONType)
    hours_exceptions: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSONType)
    durations: dict[str, int] = Field(default_factory=dict, sa_type=JSONType)


class OpeningHours(SQLModel, table=True):
    """One opening interval on one weekday (0 = Monday), local "HH:MM" in the tenant's zone."""

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    weekday: int
    opens: str = Field(max_length=5)
    closes: str = Field(max_length=5)


class HoursException(SQLModel, table=True):
    """The opening hours of one local date instead of its weekday's (a holiday, a short day).

    `hours`: local "HH:MM-HH:MM" intervals; empty means closed all day.
    """

    __table_args__ = (UniqueConstraint("tenant_id", "day", name="uq_hours_exception_day"),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    day: date
    hours: list[str] = Field(default_factory=list, sa_type=JSONType)
    note: str = Field(default="", max_length=200)


class AdminToken(SQLModel, table=True):
    """A bearer token of the admin API that sees only its tenant. Only its SHA-256 is kept."""

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    token_hash: str = Field(max_length=64, unique=True)
    label: str = Field(default="", max_length=100)
    created_at: datetime
    revoked_at: datetime | None = None


class Contact(SQLModel, table=True):
    """A customer of one tenant, keyed by business-scoped `user_id` when known, else `wa_id`."""

    __table_args__ = (
        UniqueConstraint("tenant_id", "user_id", name="uq_contact_tenant_user_id"),
        UniqueConstraint("tenant_id", "wa_id", name="uq_contact_tenant_wa_id"),
    )
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    user_id: str | None = Field(default=None, max_length=160)
    wa_id: str | None = Field(default=None, max_length=32)
    profile_name: str | None = Field(default=None, max_length=200)
    last_inbound_at: datetime | None = None
    created_at: datetime
    # who holds the WhatsApp thread (one per number and customer; storage/threads.py): ours,
    # meta_agent, other_app or idle (None: idle), and since when
    thread_owner: str | None = Field(default=None, max_length=16)
    thread_owner_at: datetime | None = None


class Conversation(SQLModel, table=True):
    """A session with a contact. At most one open per contact (partial unique index).

    Memory: messages up to `summarized_until_id` are covered by `summary` and no longer sent;
    tool results up to `pruned_until_id` are sent as short notes; `context_block` is the
    rendered system[1] (facts + summary), rebuilt only at session start and at compaction.
    The three change together, in one compare-and-set update (workers/compaction.py).
    """

    __table_args__ = (
        Index("uq_conversation_open_per_contact", "contact_id", unique=True,
              sqlite_where=text("status = 'open'"), postgresql_where=text("status = 'open'")),
        Index("ix_conversation_status_due", "status", "due_at"),
    )
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    contact_id: int = Field(foreign_key="contact.id", ondelete="CASCADE", index=True)
    status: str = Field(default="open", max_length=16)
    summary: str = Field(default="", sa_type=Text)
    summarized_until_id: int = 0
    pruned_until_id: int = 0
    context_block: str = Field(default="", sa_type=Text)
    context_built: bool = False  # set once the session's first turn rendered the block
    compactions: int = 0
    last_input_tokens: int = 0
    last_activity_at: datetime
    due_at: datetime  # last_activity_at + the tenant's inactivity timeout: the sweeper's mark
    last_inbound_at: datetime | None = None
    opened_at: datetime
    closed_at: datetime | None = None
    purged_at: datetime | None = None
    # staff handle it until `staff_until` (storage/conversations.with_staff; never a value of
    # `status`): who took it and why; `handoff_at` a handoff no staff message answered yet,
    # `handoff_alerted_at` when the business was alerted again about it
    staff_until: datetime | None = None
    staff_by: str = Field(default="", max_length=100)
    staff_reason: str = Field(default="", max_length=500)
    handoff_at: datetime | None = None
    handoff_alerted_at: datetime | None = None
    # a provider outage (storage/failures.py): "apologized" at `outage_at` (one apology, later
    # messages held), "answered_late" once a real turn answered them; "" otherwise
    outage_state: str = Field(default="", max_length=16)
    outage_at: datetime | None = None


class Message(SQLModel, table=True):
    """One stored message of the history, content blocks exactly as the Messages API takes them.

    `direction`: inbound (the customer), outbound (the agent's reply), internal (tool rounds).
    Inbound rows carry the wamid (unique) and Meta's timestamp; `answered_at` is set by the turn
    that answered them. Outbound rows carry the aggregate `delivery_status` of their sends
    (storage/delivery.py: queued, sending, sent, delivered, read, failed, unknown).
    `position` orders the history as the model saw it: an inbound message gets one when a turn
    takes it in (a message that arrives mid-turn is placed after that turn's answer), every
    other message when it is stored. NULL: not yet part of the history.

    An edit or a deletion (`wa_type` edit / revoke) names the message it changes in
    `refers_to_wamid`. A message the customer deleted (and each edit of it) has `deleted_at`
    set and its content replaced by a notice: its text is no longer stored.
    """

    __table_args__ = (Index("ix_message_conversation_id", "conversation_id", "id"),
                      Index("ix_message_conversation_position", "conversation_id", "position"),
                      Index("ix_message_refers_to_wamid", "refers_to_wamid",
                            sqlite_where=text("refers_to_wamid IS NOT NULL"),
                            postgresql_where=text("refers_to_wamid IS NOT NULL")),
                      # the reconciler's scan: only messages no turn has handled yet
                      Index("ix_message_unanswered", "received_at",
                            sqlite_where=text("answered_at IS NULL"),
                            postgresql_where=text("answered_at IS NULL")))
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    conversation_id: int = Field(foreign_key="conversation.id", ondelete="CASCADE")
    role: str = Field(max_length=16)
    direction: str = Field(max_length=16)
    position: int | None = None
    content: list[dict[str, Any]] = Field(sa_type=JSONType)
    wamid: str | None = Field(default=None, max_length=255, unique=True)
    wa_type: str | None = Field(default=None, max_length=32)
    meta_timestamp: datetime | None = None
    received_at: datetime
    starts_turn: bool = True
    answered_at: datetime | None = None
    delivery_status: str | None = Field(default=None, max_length=16)
    status_reason: str | None = Field(default=None, sa_type=Text)
    refers_to_wamid: str | None = Field(default=None, max_length=255)
    deleted_at: datetime | None = None
    # who wrote an outbound message other than the agent: "staff:NAME" (storage/staff.py)
    author: str | None = Field(default=None, max_length=120)
    # a photo, PDF, voice note... as the webhook described it ({kind, id, mime_type, sha256,
    # caption?, filename?, voice?}) and, once a turn fetched it, its `state` (workers/media.py)
    media: dict[str, Any] | None = Field(default=None, sa_type=JSONType)


class TurnFence(SQLModel, table=True):
    """The fencing token of a conversation's turns (storage/fences.py): `fence` goes up by one
    each time a turn takes the conversation's lock, and every transaction of that turn checks it
    is still the latest, so a turn that lost its lock can no longer write or send."""

    conversation_id: int = Field(primary_key=True, foreign_key="conversation.id",
                                 ondelete="CASCADE")
    fence: int = 0


class Outbound(SQLModel, table=True):
    """The outbox: one row per WhatsApp send (a reply split in parts gives several rows).

    `status`: pending → sending → sent → delivered → read, or failed / refused (terminal), or
    unknown (a crash or a lost answer after the request was written: it may or may not have
    gone out, and is never sent again). A pending row with `retry_at` waits for that time (a
    rate limit or an unreachable Graph API); `attempts` counts the Graph calls made for it on
    its schedule (a try brought forward by a newer reply that fails is not counted).
    `error_code` is Meta's; `error_cause` names a failure without one (core/network.py's
    words, or window_closed, previous_part, crashed, no_wamid: storage/delivery.py);
    `error_reason` is the English detail for engineers.
    Unique on (message_id, part) so a retried turn never creates a second copy.
    """

    __table_args__ = (UniqueConstraint("message_id", "part", name="uq_outbound_message_part"),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    conversation_id: int = Field(foreign_key="conversation.id", ondelete="CASCADE", index=True)
    message_id: int = Field(foreign_key="message.id", ondelete="CASCADE")
    part: int = 0
    kind: str = Field(default="text", max_length=16)  # text, or template (body: its name)
    to: str | None = Field(default=None, max_length=32)
    recipient: str | None = Field(default=None, max_length=160)
    body: str = Field(sa_type=Text)
    status: str = Field(default="pending", max_length=16)
    attempts: int = 0
    wamid: str | None = Field(default=None, max_length=255, unique=True)
    error_code: int | None = None
    error_cause: str | None = Field(default=None, max_length=32)
    error_reason: str | None = Field(default=None, sa_type=Text)
    retry_at: datetime | None = None
    created_at: datetime
    claimed_at: datetime | None = None  # the last pending → sending (None: never claimed)
    sent_at: datetime | None = None
    status_at: datetime | None = None


class ToolCall(SQLModel, table=True):
    """The effect record of one `tool_use`: a retried turn replays the stored result."""

    id: int | None = Field(default=None, primary_key=True)
    conversation_id: int = Field(foreign_key="conversation.id", ondelete="CASCADE", index=True)
    tool_use_id: str = Field(max_length=128, unique=True)
    name: str = Field(max_length=64)
    input: dict[str, Any] = Field(sa_type=JSONType)
    result: str = Field(sa_type=Text)
    is_error: bool = False
    created_at: datetime


class Usage(SQLModel, table=True):
    """Token usage of one Messages API call (`purpose` turn, summary, compaction or facts) and
    its cost `micro_usd` (integer µUSD at the prices of record time: usage/ledger.py)."""

    __table_args__ = (Index("ix_usage_tenant_created", "tenant_id", "created_at"),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    conversation_id: int | None = Field(default=None, foreign_key="conversation.id",
                                        ondelete="CASCADE", index=True)
    purpose: str = Field(max_length=16)
    model: str = Field(max_length=64)
    request_id: str | None = Field(default=None, max_length=128)
    input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_creation_1h_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    output_tokens: int = 0
    micro_usd: int = 0
    created_at: datetime


class WhatsAppCharge(SQLModel, table=True):
    """What Meta bills for one sent message (wamid), from the `pricing` of its status webhooks
    (Sources: WhatsApp §3.5): recorded once per (tenant, wamid) by intake/statuses.py.
    `category` marketing | utility | authentication | service | ...; `pricing_type` regular |
    free_customer_service | free_entry_point | ...; `market` the recipient's country (ISO
    3166 alpha-2, "" unknown); `rate_micro_usd` the rate card's rate applied and `micro_usd`
    the charge (0 when not billable), both fixed at record time (usage/rate_card.py)."""

    __tablename__ = "whatsapp_charge"
    __table_args__ = (UniqueConstraint("tenant_id", "wamid", name="uq_whatsapp_charge_wamid"),
                      Index("ix_whatsapp_charge_tenant_at", "tenant_id", "charged_at"))
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE")
    wamid: str = Field(max_length=128)
    billable: bool = True
    pricing_model: str = Field(default="", max_length=16)
    category: str = Field(default="", max_length=32)
    pricing_type: str = Field(default="", max_length=32)
    market: str = Field(default="", max_length=8)
    rate_micro_usd: int = 0
    micro_usd: int = 0
    charged_at: datetime


class ProviderFailure(SQLModel, table=True):
    """A failed call to a provider (storage/failures.py): the Messages API (`provider`
    anthropic) or the Graph API (graph). `kind`: rate_limit (429), overloaded (529),
    server_error (5xx), connection (no answer, a timeout) or rejected (another 4xx); `tries`
    the attempts made so far; `outcome` retrying, recovered (a later attempt answered),
    apology (the customer got the apology), held (already apologised: waits), gave_up or
    unknown (a send with no answer: it may have arrived)."""

    __tablename__ = "provider_failure"
    __table_args__ = (Index("ix_provider_failure_tenant_last", "tenant_id", "last_at"),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int | None = Field(default=None, foreign_key="tenant.id", ondelete="CASCADE")
    conversation_id: int | None = Field(default=None, foreign_key="conversation.id",
                                        ondelete="CASCADE", index=True)
    provider: str = Field(max_length=16)
    purpose: str = Field(max_length=16)
    kind: str = Field(max_length=16)
    status: int | None = None
    tries: int = 1
    outcome: str = Field(default="retrying", max_length=16)
    first_at: datetime
    last_at: datetime


class Appointment(SQLModel, table=True):
    """One service of a visit (issue 38): a booking of one or more services is one visit, a row
    per service with its professional and times, all sharing `visit_id` (the booking number:
    the id of the visit's first row; NULL on a row written before it, read as its own id:
    storage/appointments.VISIT). Every "holds a slot" query reads these rows as before; every
    "upcoming" count counts distinct visits. `status`: booked or cancelled. Times aware UTC;
    `end_at` excluded."""

    __table_args__ = (Index("ix_appointment_professional_start", "professional_id", "start_at"),
                      Index("ix_appointment_visit_id", "visit_id"),
                      Index("ix_appointment_tenant_number", "tenant_id", "booking_number"))
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    contact_id: int = Field(foreign_key="contact.id", ondelete="CASCADE", index=True)
    service_id: int = Field(foreign_key="service.id")
    professional_id: int = Field(foreign_key="professional.id")
    start_at: datetime
    end_at: datetime
    status: str = Field(default="booked", max_length=16)
    tool_use_id: str | None = Field(default=None, max_length=128, unique=True)
    created_at: datetime
    cancelled_at: datetime | None = None
    # the customer's request for this visit ("coloração sem amônia"): agent/tools/notes.py
    note: str = Field(default="", max_length=200)
    # the customer confirmed it (a reminder's Confirmar: workers/reminders.py); the status
    # stays booked, so every "holds the slot" / "upcoming" query is unchanged
    confirmed_at: datetime | None = None
    # cancelled by a move: the booking that replaced it (a tap on its reminder says so)
    moved_to_id: int | None = None
    # after the visit (issue 22), apart from `status`: "" (not marked), completed, no_show
    outcome: str = Field(default="", max_length=16)
    outcome_at: datetime | None = None
    outcome_note: str = Field(default="", max_length=200)  # the staff's, on what was done
    booked_by: str = Field(default="customer", max_length=16)  # customer or business
    visit_id: int | None = None
    # the number the customer is told ("#3"): consecutive per tenant, one per visit, on every
    # row of it (storage/appointments.lock_for_booking); NULL: its visit_id is told
    booking_number: int | None = None
    # who the visit is for when not the contact who booked it ("filha: Ana"); it still
    # counts in that contact's upcoming bookings
    for_name: str = Field(default="", max_length=100)
    # the series this visit is an occurrence of (issue 46: VisitSeries); NULL: a single visit
    series_id: int | None = Field(default=None, index=True)


class VisitSeries(SQLModel, table=True):
    """Recurring visits (issue 46): an RFC 5545 `rule` (core/recurrence.py) from the first
    visit's local start, with its services (codes, in order) and professional. Its visits
    are normal appointments carrying `series_id`, created ahead through `booked_through` (a
    local day inside the booking horizon, moved on by agent/tools/series.extend). `pending`:
    the occurrences that could not be placed (a block, a holiday, another booking), each
    {"n": position, "start": local YYYY-MM-DDTHH:MM, "reason": text}, until one is booked
    for them. `ended_at`: the rest was cancelled; no more visits are created."""

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    contact_id: int = Field(foreign_key="contact.id", ondelete="CASCADE", index=True)
    professional_id: int = Field(foreign_key="professional.id")
    services: list[str] = Field(default_factory=list, sa_type=JSONType)
    rule: str = Field(max_length=200)
    first_local: str = Field(max_length=16)  # the first visit, local YYYY-MM-DDTHH:MM (DTSTART)
    booked_through: date
    pending: list[Any] = Field(default_factory=list, sa_type=JSONType)
    note: str = Field(default="", max_length=200)
    for_name: str = Field(default="", max_length=100)
    booked_by: str = Field(default="customer", max_length=16)
    created_at: datetime
    ended_at: datetime | None = None


class Package(SQLModel, table=True):
    """A package the tenant sells (issue 46; operations/packages.py): `sessions` visits of
    service `service_code`, valid `validity_days` from the sale, at `price_cents`."""

    __table_args__ = (UniqueConstraint("tenant_id", "code"),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    code: str = Field(max_length=64)
    name: str = Field(max_length=200)
    service_code: str = Field(max_length=64)
    sessions: int
    validity_days: int
    price_cents: int | None = None


class CustomerPackage(SQLModel, table=True):
    """A customer's package (issue 46): `used` of `sessions`, counted when a visit of its
    service is completed (and on a no-show by the tenant's `no_show_uses_session`), until
    `expires_on` (local day, included); a health plan's `authorisation` number."""

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    contact_id: int = Field(foreign_key="contact.id", ondelete="CASCADE", index=True)
    package_id: int = Field(foreign_key="package.id", ondelete="CASCADE")
    sessions: int
    used: int = 0
    authorisation: str = Field(default="", max_length=64)
    expires_on: date
    created_at: datetime


class CalendarFeed(SQLModel, table=True):
    """An iCalendar feed URL (issue 46; operations/feeds.py): a professional's agenda, or the
    business's (`professional_id` NULL). `token` is the URL's secret (secrets.token_urlsafe,
    256 bits): shown in the console, so kept as such; a revoked feed (`revoked_at`) answers
    404 and a reissue is a new row with a new token."""

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    professional_id: int | None = Field(default=None, foreign_key="professional.id",
                                        ondelete="CASCADE")
    token: str = Field(max_length=64, unique=True)
    created_at: datetime
    revoked_at: datetime | None = None


class ScheduleBlock(SQLModel, table=True):
    """Time a professional is not bookable (a meeting, a walk-in's chair, a dentist's
    appointment): it hides slots and is not an appointment (issue 22). Aware UTC, end excluded."""

    __tablename__ = "schedule_block"
    __table_args__ = (Index("ix_schedule_block_professional_start", "professional_id",
                            "start_at"),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    professional_id: int = Field(foreign_key="professional.id")
    start_at: datetime
    end_at: datetime
    note: str = Field(default="", max_length=200)
    created_at: datetime


class ContactFact(SQLModel, table=True):
    """A closed-key fact about a contact, with provenance, validity and review state.

    `state`: suggested, confirmed, pending_review (high risk: a person approves), contested,
    superseded (a newer value replaced it; its history stays), archived or rejected.
    `origin`: extracted (session end), tool (remember_fact), admin.
    """

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    contact_id: int = Field(foreign_key="contact.id", ondelete="CASCADE", index=True)
    conversation_id: int | None = Field(default=None, foreign_key="conversation.id",
                                        ondelete="SET NULL")
    key: str = Field(max_length=64)
    value: str = Field(max_length=200)
    state: str = Field(default="suggested", max_length=16)
    origin: str = Field(default="extracted", max_length=16)
    source_message_id: int | None = Field(default=None, foreign_key="message.id",
                                          ondelete="SET NULL")
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    review_at: datetime | None = None
    superseded_by_id: int | None = None
    decided_by: str | None = Field(default=None, max_length=64)
    decision_reason: str | None = Field(default=None, max_length=500)
    created_at: datetime


class WamidTombstone(SQLModel, table=True):
    """The hash of an erased message's wamid: a redelivery is recognised, never answered."""

    wamid_hash: str = Field(primary_key=True, max_length=64)
    created_at: datetime


class ErasureReceipt(SQLModel, table=True):
    """Proof that a contact (or one fact) was erased: what, when, how much; no personal data."""

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    subject: str = Field(max_length=64)  # a hash of the contact's identifiers
    scope: str = Field(max_length=16)  # contact or fact
    counts: dict[str, int] = Field(default_factory=dict, sa_type=JSONType)
    created_at: datetime


class DeadLetter(SQLModel, table=True):
    """A webhook body (or one update of it) that could not be understood, kept whole.

    What it names is indexed when it is written (storage/dead_letters.py): its tenant when its
    phone_number_id is one (NULL for a number not onboarded yet), and every phone_number_id,
    wa_id and user_id in `DeadLetterRef` rows, so erasure finds it by index. Kept
    `DEAD_LETTER_RETENTION_DAYS` (by `received_at`).
    """

    id: int | None = Field(default=None, primary_key=True)
    received_at: datetime = Field(index=True)
    tenant_id: int | None = Field(default=None, foreign_key="tenant.id", ondelete="CASCADE",
                                  index=True)
    reason: str = Field(sa_type=Text)
    body: bytes = Field(sa_type=LargeBinary)


class DeadLetterRef(SQLModel, table=True):
    """One identifier a dead letter names: `name` is phone_number_id, wa_id (also `from`,
    `recipient_id`) or user_id (also `from_user_id`, `recipient_user_id`)."""

    __tablename__ = "deadletter_ref"
    __table_args__ = (Index("ix_deadletter_ref_value_name", "value", "name"),)
    id: int | None = Field(default=None, primary_key=True)
    dead_letter_id: int = Field(foreign_key="deadletter.id", ondelete="CASCADE", index=True)
    name: str = Field(max_length=16)
    value: str = Field(max_length=160)


class InboxEntry(SQLModel, table=True):
    """A signed webhook POST accepted under load and not yet processed (ARCHITECTURE.md Data flow 1:
    the web process stores the raw body in one INSERT and answers 200; `workers.inbox` parses
    and stores its updates, then deletes the row). Kept only until it is processed."""

    __tablename__ = "inbox"

    id: int | None = Field(default=None, primary_key=True)
    received_at: datetime
    body: bytes = Field(sa_type=LargeBinary)


class WebhookEndpoint(SQLModel, table=True):
    """A URL of the business's own systems that hears about its events (storage/webhooks.py).

    `secret` signs every delivery (hooks/signature.py); it is shown once, when made or
    rotated. After a rotation `previous_secret` signs too until `previous_until`. `events`:
    the event types wanted (storage/webhooks.EVENT_TYPES). `failing_since`: the first failed
    attempt since the last success; 24 h of failures set `disabled_at` (nothing is sent
    until it is enabled again).
    """

    __tablename__ = "webhook_endpoint"
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    url: str = Field(max_length=2000)
    secret: str = Field(max_length=128)
    previous_secret: str | None = Field(default=None, max_length=128)
    previous_until: datetime | None = None
    events: list[str] = Field(default_factory=list, sa_type=JSONType)
    description: str = Field(default="", max_length=200)
    failing_since: datetime | None = None
    disabled_at: datetime | None = None
    disabled_reason: str = Field(default="", max_length=200)
    created_at: datetime


class WebhookEvent(SQLModel, table=True):
    """One event of a tenant, written in the transaction of the change it reports
    (storage/webhooks.emit). `id` is the event id receivers deduplicate on ("evt_…")."""

    __tablename__ = "webhook_event"
    id: str = Field(primary_key=True, max_length=40)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    type: str = Field(max_length=40)
    data: dict[str, Any] = Field(default_factory=dict, sa_type=JSONType)
    created_at: datetime


class WebhookDelivery(SQLModel, table=True):
    """One event to one endpoint. `status`: pending (`next_attempt_at`: when it is due),
    sending (claimed by a job at `claimed_at`), delivered, or failed (gave up after the
    retry policy's attempts: workers/jobs.py RETRY_POLICIES["webhook"])."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (
        UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_delivery_endpoint_event"),
        Index("ix_webhook_delivery_status_due", "status", "next_attempt_at"),
        Index("ix_webhook_delivery_endpoint_id", "endpoint_id", "id"),
    )
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    endpoint_id: int = Field(foreign_key="webhook_endpoint.id", ondelete="CASCADE")
    event_id: str = Field(foreign_key="webhook_event.id", ondelete="CASCADE", max_length=40)
    status: str = Field(default="pending", max_length=16)
    attempts: int = 0
    next_attempt_at: datetime | None = None
    claimed_at: datetime | None = None
    last_attempt_at: datetime | None = None
    last_status_code: int | None = None  # the endpoint's HTTP status; its body is never kept
    last_error: str | None = Field(default=None, max_length=32)  # one word: hooks/errors.py
    delivered_at: datetime | None = None
    created_at: datetime
class MediaFile(SQLModel, table=True):
    """The bytes of a photo or PDF a customer sent, for the image/document block of `message_id`
    (agent/media.py). Kept until the prune boundary passes the message (then deleted, and the
    block becomes a note), never past the tenant's retention; erasure deletes it
    (storage/media.py). `sha256` is hex."""

    __tablename__ = "media_file"

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    conversation_id: int = Field(foreign_key="conversation.id", ondelete="CASCADE", index=True)
    message_id: int = Field(foreign_key="message.id", ondelete="CASCADE", index=True)
    media_type: str = Field(max_length=64)
    size_bytes: int
    sha256: str = Field(max_length=64)
    created_at: datetime
    data: bytes = Field(sa_type=LargeBinary)


class Reminder(SQLModel, table=True):
    """One reminder of one appointment at one lead time (storage/reminders.py).

    `status`: scheduled (waits for `due_at`), queued (its outbound message is in the outbox:
    `message_id`), skipped (`reason` says why: booked inside the lead time, quiet hours,
    window closed and no template) or cancelled (the appointment was cancelled or moved).
    The periodic pass reads the partial index of scheduled ones by `due_at`.
    """

    __table_args__ = (
        UniqueConstraint("appointment_id", "lead_minutes", name="uq_reminder_appointment_lead"),
        Index("ix_reminder_scheduled_due", "due_at",
              sqlite_where=text("status = 'scheduled'"),
              postgresql_where=text("status = 'scheduled'")),
    )
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    appointment_id: int = Field(foreign_key="appointment.id", ondelete="CASCADE", index=True)
    lead_minutes: int
    due_at: datetime | None = None
    status: str = Field(default="scheduled", max_length=16)
    reason: str = Field(default="", max_length=300)
    message_id: int | None = Field(default=None, foreign_key="message.id", ondelete="SET NULL")
    created_at: datetime
    queued_at: datetime | None = None
    # the visit's start it was scheduled for: a visit that starts at another time by the send
    # (moved) gets it cancelled, not sent for the old time (NULL: before issue 38)
    start_at: datetime | None = None


class Notice(SQLModel, table=True):
    """A change the business made to an appointment (cancelled, moved), told to the customer
    (storage/reminders.record_notice): `status` queued (its outbound message is `message_id`)
    or not_sent (`reason`: the window closed and no template declared); pending until the
    next reminders pass (workers/reminders.py) writes it."""

    __table_args__ = (Index("ix_notice_pending", "id", sqlite_where=text("status = 'pending'"),
                            postgresql_where=text("status = 'pending'")),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    appointment_id: int = Field(foreign_key="appointment.id", ondelete="CASCADE", index=True)
    kind: str = Field(max_length=16)  # cancelled or moved
    status: str = Field(default="pending", max_length=16)
    reason: str = Field(default="", max_length=300)
    message_id: int | None = Field(default=None, foreign_key="message.id", ondelete="SET NULL")
    created_at: datetime


class WaitlistEntry(SQLModel, table=True):
    """A customer waiting for a slot in a window (issue 47; storage/waitlist.py): a local
    `day`, optional local starts `after`/`before` ("HH:MM", "" none), a service and optionally
    a professional; `ends_at` (aware UTC) is the window's end, when it expires.

    `status`: waiting, offered (a freed slot is held for it: `offer_*`, until
    `offer_expires_at`), booked (`appointment_id`), left, expired. `passed` lists the slots
    ("professional id@start ISO") it said no to or let expire, never offered again. At most
    one live offer of one slot (the partial unique index)."""

    __tablename__ = "waitlist_entry"
    __table_args__ = (
        Index("ix_waitlist_entry_tenant_day", "tenant_id", "day"),
        Index("uq_waitlist_entry_offered_slot", "offer_professional_id", "offer_start_at",
              unique=True, sqlite_where=text("status = 'offered'"),
              postgresql_where=text("status = 'offered'")),
    )
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE")
    contact_id: int = Field(foreign_key="contact.id", ondelete="CASCADE", index=True)
    service_id: int = Field(foreign_key="service.id")
    professional_id: int | None = Field(default=None, foreign_key="professional.id")
    day: date
    after: str = Field(default="", max_length=5)
    before: str = Field(default="", max_length=5)
    ends_at: datetime
    status: str = Field(default="waiting", max_length=16)
    created_at: datetime
    offer_professional_id: int | None = None
    offer_start_at: datetime | None = None
    offer_end_at: datetime | None = None  # the held interval's end (the service's buffer in)
    offer_expires_at: datetime | None = None
    offer_message_id: int | None = Field(default=None, foreign_key="message.id",
                                         ondelete="SET NULL")
    passed: list[Any] = Field(default_factory=list, sa_type=JSONType)
    appointment_id: int | None = Field(default=None, foreign_key="appointment.id",
                                       ondelete="SET NULL")


class Deposit(SQLModel, table=True):
    """The deposit ("sinal") a visit waits for (issue 48, storage/deposits.py). `status`:
    held (the visit's rows stay `booked`, so every "holds the slot" and "upcoming" query is
    unchanged, but it gets no reminder until paid) → paid (booked for good), or → released
    (`hold_until` passed: the visit cancelled) → late_paid (money came after the release:
    staff rebook or refund); held → cancelled (the visit was cancelled before paying).
    `reference` is the order's `reference_id` in WhatsApp and the charge's external
    reference at the provider. Money in integer cents of `currency`. `code` is the Pix
    copy-and-paste code (never logged). `refund`: "" or kept / owed once a paid
    visit is cancelled (the tenant's `deposit_refund`)."""

    __table_args__ = (Index("ix_deposit_held_until", "hold_until",
                            sqlite_where=text("status = 'held'"),
                            postgresql_where=text("status = 'held'")),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE", index=True)
    visit_id: int = Field(index=True)
    contact_id: int = Field(foreign_key="contact.id", ondelete="CASCADE", index=True)
    reference: str = Field(max_length=64, unique=True)
    amount_cents: int
    currency: str = Field(default="BRL", max_length=3)
    status: str = Field(default="held", max_length=16)
    hold_until: datetime
    provider: str = Field(default="", max_length=32)
    charge_id: str = Field(default="", max_length=64)
    code: str = Field(default="", sa_type=Text)
    paid_cents: int = 0
    paid_at: datetime | None = None
    paid_by: str = Field(default="", max_length=16)  # provider or staff
    released_at: datetime | None = None
    refund: str = Field(default="", max_length=8)
    # what has been sent about it: requested (order_details), told (paid/released/late)
    requested_at: datetime | None = None
    told: str = Field(default="", max_length=16)
    # why the payment request did not go ("" : it went, or not yet): "no_charge" (no
    # provider or Pix key), "window_closed" (24-hour window closed, no deposit_template)
    not_sent: str = Field(default="", max_length=16)
    created_at: datetime


class PaymentEvent(SQLModel, table=True):
    """One payment confirmation received (a provider's webhook after fetching the payment, or
    staff marking a deposit paid), recorded whatever it says (issue 48). Unique on
    (`provider`, `event_id`): a replayed event is not recorded twice. `outcome`: booked,
    late (after release), already_paid, unknown_reference, wrong_amount, not_paid,
    pending (received, not yet checked), fetch_failed (the provider refused to say)."""

    __table_args__ = (UniqueConstraint("provider", "event_id", name="uq_payment_event"),
                      Index("ix_paymentevent_pending", "id",
                            sqlite_where=text("outcome = 'pending'"),
                            postgresql_where=text("outcome = 'pending'")))
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int | None = Field(default=None, foreign_key="tenant.id", ondelete="CASCADE",
                                  index=True)
    provider: str = Field(max_length=32)
    event_id: str = Field(max_length=128)
    reference: str = Field(default="", max_length=64, index=True)
    charge_id: str = Field(default="", max_length=64)  # the provider's payment id
    amount_cents: int | None = None
    outcome: str = Field(default="pending", max_length=24)
    received_at: datetime


class BudgetAlert(SQLModel, table=True):
    """A budget level a tenant's month reached (issue 49, storage/budgets.py): `level`
    "warning" (80 %) or "reached" (100 %), `month` the first day of the calendar month in the
    tenant's timezone. The unique key makes the owner's alert (the console banner, the
    `budget.warning`/`budget.reached` webhook event) once per month and level, whatever
    turns race for it."""

    __table_args__ = (UniqueConstraint("tenant_id", "month", "level",
                                       name="uq_budget_alert_month_level"),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenant.id", ondelete="CASCADE")
    month: date
    level: str = Field(max_length=16)
    # the month-to-date model cost that crossed the level
    spent_micro_usd: int = Field(sa_type=BigInteger)
    budget_cents: int  # the budget it was measured against
    created_at: datetime
