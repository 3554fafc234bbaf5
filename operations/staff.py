"""Staff operations shared by the admin API, the console and the CLI: a staff reply, handing
a conversation back to the agent, and what needs a person (the "Atendimento" page).

Same contract as `operations.service`: an open session and the caller's tenant in, JSON-ready
data out; `NotFound` (404) for a conversation of another tenant, `Invalid` (422) for a reply
that is not well formed, `Conflict` (409) for one the state refuses (the 24-hour window closed
and no template, a closed conversation). The caller enqueues the outbox flush
(`storage.jobs.enqueue_flush`) after the transaction commits.
"""

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlmodel import Session, col, func, select

from operations.errors import Conflict, Invalid, NotFound
from operations.service import clean_text, validated
from storage import contacts as contact_repo
from storage import delivery, deposits, failures, staff
from storage import facts as fact_repo
from storage import messages as message_repo
from storage.conversations import with_staff
from storage.models import Contact, ContactFact, Conversation, Message, Tenant
from whatsapp.graph import split_text
from whatsapp.window import SERVICE_WINDOW_CLOSED, window_closed

ATTENTION_LIMIT = 100
FAILED = ("failed", "refused", "unknown")  # outbox statuses of a reply that did not arrive
WINDOW_REFUSAL = (f"not sent: {SERVICE_WINDOW_CLOSED} (WhatsApp customer service window); "
                  "outside it only one of the tenant's templates may be sent")


class TemplateChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    name: str = Field(min_length=1, max_length=512)
    language: str | None = Field(None, max_length=16)
    parameters: list[str] = Field(default_factory=list, max_length=20)


class StaffReply(BaseModel):
    """A staff reply: free `text` (inside the 24-hour window) or one of the tenant's
    `template`s with its parameters (any time); `author` the name shown with it."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    text: str | None = Field(None, min_length=1, max_length=staff.MAX_STAFF_TEXT)
    template: TemplateChoice | None = None
    author: str | None = Field(None, max_length=staff.MAX_AUTHOR)

    @model_validator(mode="after")
    def _one(self) -> "StaffReply":
        if (self.text is None) == (self.template is None):
            raise ValueError("give either text or template")
        return self


def _conversation(session: Session, tenant: Tenant, conversation_id: int) -> Conversation:
    conversation = session.get(Conversation, conversation_id)
    if conversation is None or conversation.tenant_id != tenant.id:
        raise NotFound(f"no conversation #{conversation_id}")
    return conversation


conversation_of = _conversation  # the tenant's conversation, or NotFound (operations.threads)


def _declared(tenant: Tenant, choice: TemplateChoice) -> dict[str, Any]:
    for spec in tenant.templates or []:
        if spec.get("name") == choice.name and choice.language in (None, spec.get("language")):
            wanted = len(spec.get("parameters") or [])
            if len(choice.parameters) != wanted:
                raise Invalid(f"template {choice.name} takes {wanted} parameter(s), "
                              f"{len(choice.parameters)} given",
                              [f"template.parameters: {wanted} expected"])
            return dict(spec)
    raise Invalid(f"template {choice.name!r} is not one of the tenant's templates",
                  ["template.name: not declared in the tenant's templates"])


def reply(session: Session, tenant: Tenant, conversation_id: int, body: Any, *,
          author: str, now: datetime) -> dict[str, Any]:
    """Store a staff reply and queue it in the outbox (at most once, with delivery states);
    staff keep the conversation for `staff_timeout_minutes` from now. `author` is the name
    used when the body gives none (the token's label, "console", "cli")."""
    problems = clean_text(body)
    if problems:
        raise Invalid("; ".join(problems), problems)
    choice: StaffReply = validated(StaffReply, body)
    conversation = _conversation(session, tenant, conversation_id)
    if conversation.status != "open":
        raise Conflict(f"conversation #{conversation_id} is {conversation.status}")
    contact = session.get(Contact, conversation.contact_id)
    assert contact is not None
    name = (choice.author or author).strip() or "staff"
    if choice.template is None:
        assert choice.text is not None
        if window_closed(contact.last_inbound_at, now):
            raise Conflict(WINDOW_REFUSAL)
        shown, parts, kind = choice.text, split_text(choice.text), "text"
    else:
        spec = _declared(tenant, choice.template)
        params = choice.template.parameters
        shown = template_note(str(spec["name"]), params)
        parts = [json.dumps({"name": spec["name"], "language": spec.get("language", "pt_BR"),
                             "parameters": params}, ensure_ascii=False)]
        kind = "template"
    message = staff.record_staff_message(session, conversation, tenant, author=name,
                                         text=shown, now=now, pause=None)
    to, recipient = contact_repo.address(contact)
    message_repo.add_outbound(session, message=message, parts=parts, to=to,
                              recipient=recipient, now=now, kind=kind)
    return {"message_id": message.id, "conversation_id": conversation_id,
            "author": message.author, "kind": kind, "content": message.content,
            "delivery_status": delivery.state_of(message.delivery_status),
            "staff_until": _iso(conversation.staff_until)}


def hand_back(session: Session, tenant: Tenant, conversation_id: int, *,
              now: datetime) -> dict[str, Any]:
    """Back to the agent now (a no-op when staff did not handle it: `changed` false). The
    agent's next turn sees the staff exchange in the history."""
    conversation = _conversation(session, tenant, conversation_id)
    changed = staff.hand_back(session, conversation, now=now)
    return {"conversation_id": conversation_id, "changed": changed, "with_staff": False}


def staff_state(conversation: Conversation, now: datetime) -> dict[str, Any]:
    """The staff fields of a conversation view."""
    return {"with_staff": with_staff(conversation, now),
            "staff_until": _iso(conversation.staff_until) if with_staff(conversation, now)
            else None,
            "staff_by": conversation.staff_by, "staff_reason": conversation.staff_reason,
            "handoff_waiting": conversation.handoff_at is not None
            and with_staff(conversation, now)}


def attention(session: Session, tenant: Tenant, *, now: datetime) -> dict[str, Any]:
    """What needs a person, newest first: conversations whose customer got the apology and
    no answer (`not_answered`, oldest first; `waiting`: still to be answered when the provider
    is back, storage/failures.py), conversations staff handle (`handoff_waiting` when no staff
    message answered the handoff yet), facts awaiting review, replies whose delivery failed or
    is unknown; `counts` of each for the navigation."""
    assert tenant.id is not None
    conversations = staff.with_staff_conversations(session, tenant.id, now=now,
                                                   limit=ATTENTION_LIMIT)
    contacts: dict[int | None, Contact | None] = {c.id: c for c in session.exec(select(
        Contact).where(col(Contact.id).in_([c.contact_id for c in conversations])))} \
        if conversations else {}
    handled = [{"conversation_id": c.id, "contact": _who(contacts.get(c.contact_id)),
                "last_activity_at": _iso(c.last_activity_at), **staff_state(c, now)}
               for c in conversations]
    review = session.exec(select(ContactFact).where(
        ContactFact.tenant_id == tenant.id, col(ContactFact.state).in_(fact_repo.IN_REVIEW))
        .order_by(col(ContactFact.id).desc()).limit(ATTENTION_LIMIT)).all()
    failed = session.exec(select(Message).where(
        Message.tenant_id == tenant.id, Message.direction == "outbound",
        col(Message.delivery_status).in_(FAILED))
        .order_by(col(Message.id).desc()).limit(ATTENTION_LIMIT)).all()
    apologized = failures.apologized(session, tenant.id, limit=ATTENTION_LIMIT)
    for c in apologized:
        contacts.setdefault(c.contact_id, session.get(Contact, c.contact_id))
    return {
        "not_answered": [{"conversation_id": c.id, "contact": _who(contacts.get(c.contact_id)),
                          "apologized_at": _iso(c.outage_at),
                          "waiting": failures.may_recover(c, now)} for c in apologized],
        "with_staff": handled,
        "facts_to_review": [{"fact_id": f.id, "contact_id": f.contact_id, "key": f.key,
                             "value": f.value, "state": f.state} for f in review],
        "failed_replies": [{"message_id": m.id, "conversation_id": m.conversation_id,
                            "delivery_status": m.delivery_status,
                            "at": _iso(m.received_at)} for m in failed],
        "payments_to_check": deposits.to_check(session, tenant.id, now=now,
                                               limit=ATTENTION_LIMIT),  # issue 48
        "counts": counts(session, tenant, now=now),
    }


def counts(session: Session, tenant: Tenant, *, now: datetime) -> dict[str, int]:
    """The navigation's counts: conversations with staff, handoffs waiting, facts to review,
    failed or unknown replies, conversations the assistant could not answer."""
    def count(model: Any, *conditions: Any) -> int:
        return int(session.exec(select(func.count()).select_from(model).where(
            *conditions)).one())
    with_staff_now = (Conversation.tenant_id == tenant.id, Conversation.status == "open",
                      col(Conversation.staff_until) > now)
    return {
        "with_staff": count(Conversation, *with_staff_now),
        "handoffs_waiting": count(Conversation, *with_staff_now,
                                  col(Conversation.handoff_at).is_not(None)),
        "facts_to_review": count(ContactFact, ContactFact.tenant_id == tenant.id,
                                 col(ContactFact.state).in_(fact_repo.IN_REVIEW)),
        "failed_replies": count(Message, Message.tenant_id == tenant.id,
                                Message.direction == "outbound",
                                col(Message.delivery_status).in_(FAILED)),
        "not_answered": count(Conversation, Conversation.tenant_id == tenant.id,
                              Conversation.status == "open",
                              Conversation.outage_state == failures.APOLOGIZED),
    }


def _who(contact: Contact | None) -> str:
    if contact is None:
        return ""
    return contact.profile_name or contact.wa_id or contact.user_id or f"#{contact.id}"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def template_note(name: str, parameters: list[str]) -> str:
    """How a staff template reply reads in the transcript: `[template NAME: p1, p2]`."""
    return f"[template {name}" + (f": {', '.join(parameters)}]" if parameters else "]")
