"""The remember_fact tool (`REMEMBER_FACT`, one `Tool` of the registry): its handler, and the
validation every fact proposal goes through (the tool's and extraction's alike: `workers.facts`)."""

import dataclasses
import hashlib
from typing import Any

import structlog
from sqlmodel import Session, select

from agent.errors import ToolError
from agent.tools.base import Tool, ToolContext
from agent.tools.content_rules import fold
from agent.tools.facts_rules import (
    Catalogue,
    Proposal,
    SourceMessage,
    initial_state,
    validate,
    validity,
)
from core import clock
from storage import facts as fact_repo
from storage.catalogue import catalogue_names
from storage.fact_keys import resolve_keys
from storage.models import ContactFact, ErasureReceipt, Message, Tenant

log = structlog.get_logger(__name__)


def store_proposal(session: Session, proposal: Proposal, *, tenant: Tenant, contact_id: int,
                   conversation_id: int, origin: str) -> tuple[ContactFact | None, str]:
    """Validate and record one proposal; returns (fact, outcome) where outcome is recorded,
    superseded, duplicate or "rejected: <reason>". Logged either way (value only at DEBUG).
    """
    keys = resolve_keys(tenant.fact_keys)
    message = session.get(Message, proposal.source_message_id) \
        if proposal.source_message_id else None
    source = SourceMessage(message.id or 0, message.conversation_id, message.role,
                           message.direction) if message else None
    if from_voice_note(message):  # a transcript may mishear: never confirmed on its word alone
        proposal = dataclasses.replace(proposal, stated=False)
    verdict = validate(proposal, keys=keys, catalogue=catalogue_of(session, tenant),
                       conversation_id=conversation_id, source=source)
    reason = verdict.reason
    if reason is None and session.exec(select(ErasureReceipt).where(
            ErasureReceipt.subject == forgotten_marker(contact_id, proposal.key,
                                                       verdict.value))).first():
        reason = "this value was forgotten at the customer's request"
    if reason is not None:
        log.info("fact_proposal", key=proposal.key[:64], origin=origin, outcome="rejected",
                 reason=reason)
        return None, f"rejected: {reason}"
    key, now = keys[proposal.key], clock.now()
    valid_until, review_at = validity(key, now)
    fact, outcome = fact_repo.record(session, ContactFact(
        tenant_id=tenant.id or 0, contact_id=contact_id, conversation_id=conversation_id,
        key=key.name, value=verdict.value, state=initial_state(proposal, key),
        origin=origin, source_message_id=proposal.source_message_id, valid_from=now,
        valid_until=valid_until, review_at=review_at, created_at=now), now=now)
    log.info("fact_proposal", key=key.name, origin=origin, outcome=outcome, state=fact.state)
    return fact, outcome


def from_voice_note(message: Message | None) -> bool:
    """True when the fact's source message is a voice note (or any audio) the customer sent:
    its facts enter as `suggested`, never `confirmed` (workers/media.py transcribes it)."""
    media = message.media if message is not None else None
    return isinstance(media, dict) and media.get("kind") == "audio"


def catalogue_of(session: Session, tenant: Tenant) -> Catalogue:
    """What the tenant's service and professional facts may name, now."""
    return Catalogue(*catalogue_names(session, tenant.id or 0))


def remember_fact(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    """The remember_fact tool: record what the customer just confirmed, traced to the turn's
    latest customer message, through the same validation as extraction."""
    tenant = session.get(Tenant, ctx.tenant_id)
    assert tenant is not None
    proposal = Proposal(key=str(args.get("key", "")), value=str(args.get("value", "")),
                        source_message_id=ctx.source_message_id, stated=True)
    fact, outcome = store_proposal(session, proposal, tenant=tenant, contact_id=ctx.contact_id,
                                   conversation_id=ctx.conversation_id, origin="tool")
    if fact is None:
        raise ToolError(f"not recorded: {outcome.removeprefix('rejected: ')}")
    if fact.state in fact_repo.AWAITING or fact.state == "contested":
        return (f"Recorded {fact.key} = {fact.value}, awaiting staff review: not verified. "
                "Tell the customer it was noted for the team; neither deny it nor rely on it "
                "as confirmed.")
    return f"Recorded {fact.key} = {fact.value}."


def forgotten_marker(contact_id: int, key: str, value: str) -> str:
    """The receipt subject that blocks a forgotten value from being recorded again."""
    return hashlib.sha256(f"{contact_id}:{key}:{fold(value)}".encode()).hexdigest()


REMEMBER_FACT = Tool(
    name="remember_fact",
    description="Save a fact the customer stated; never ids or card numbers.",
    input_schema={"type": "object", "properties": {
        "key": {"type": "string"},  # its enum: the tenant's keys (stable per tenant)
        "value": {"type": "string"}}, "required": ["key", "value"]},
    handler=remember_fact, fact_key_property="key")
