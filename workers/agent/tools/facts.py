"""The contact-fact tool: remember_fact, what the customer just stated, kept for later sessions.

It goes through the same validation as extraction at session end (`workers.facts.
store_proposal`, rules in `workers/agent/facts_rules.py`; README, Contact facts).
"""

from typing import Any

from sqlmodel import Session

from storage.models import Tenant
from workers.agent.facts_rules import Proposal
from workers.agent.tools.base import Tool, ToolContext, ToolError
from workers.facts import store_proposal


def remember_fact(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    """Record what the customer just confirmed, traced to the turn's latest customer message;
    ToolError with the reason when validation rejects it."""
    tenant = session.get(Tenant, ctx.tenant_id)
    assert tenant is not None
    proposal = Proposal(key=str(args.get("key", "")), value=str(args.get("value", "")),
                        source_message_id=ctx.source_message_id, stated=True)
    fact, outcome = store_proposal(session, proposal, tenant=tenant, contact_id=ctx.contact_id,
                                   conversation_id=ctx.conversation_id, origin="tool")
    if fact is None:
        raise ToolError(f"not recorded: {outcome.removeprefix('rejected: ')}")
    note = " (a person will review it first)" if fact.state == "pending_review" else ""
    return f"Recorded {fact.key} = {fact.value}{note}."


REMEMBER_FACT = Tool(
    name="remember_fact",
    description="Record a fact about this customer that they just stated or confirmed, for "
                "future conversations. One of the allowed keys; a short value. Never ids, "
                "card numbers or anything they did not say.",
    input_schema={"type": "object", "properties": {
        "key": {"type": "string"},  # its enum: the tenant's keys (stable per tenant)
        "value": {"type": "string"}}, "required": ["key", "value"]},
    handler=remember_fact, fact_key_property="key")
