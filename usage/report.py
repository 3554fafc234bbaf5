"""Per-conversation report: the context saw-tooth, cache-read share, compactions, cost, and
what reached the customer (replies by delivery state).

`billed_equivalent` and `cost_usd` are pure; `conversation_report` reads the usage rows;
`render_svg` draws context tokens per call as a standalone SVG (no plotting dependency;
usage/charts.py's escaping, as the results page's bars).
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from storage import delivery
from storage import messages as message_repo
from storage.db import session_scope
from storage.models import Conversation, Message, Usage
from usage.charts import escape
from usage.ledger import billed_input_tokens, model_cost_micro_usd
from whatsapp.rate_card import load_rate_card

# Meta's utility rate per message, USD, by market, from the bundled rate card
# (whatsapp/rate_card.json, its newest entries): since 2026-10-01 every free-form reply in the
# 24-hour window is billed at it (issue 41).
WHATSAPP_UTILITY_USD = {market: micro_usd / 1_000_000 for market, micro_usd
                        in load_rate_card(None).newest_rates("utility").items()}


@dataclass(frozen=True)
class Call:
    at: datetime
    purpose: str
    model: str
    input_tokens: int
    cache_creation_input_tokens: int
    cache_creation_1h_input_tokens: int
    cache_read_input_tokens: int
    output_tokens: int

    @property
    def context_tokens(self) -> int:
        """The real size of the prompt: the three input counters summed."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


def billed_equivalent(call: Call) -> float:
    """Input tokens as billed: reads 0.1, 5-minute writes 1.25, 1-hour writes 2, rest 1
    (the ledger's rule: usage/ledger.billed_input_tokens)."""
    return float(billed_input_tokens(call.input_tokens, call.cache_creation_input_tokens,
                                     call.cache_creation_1h_input_tokens,
                                     call.cache_read_input_tokens))


def cost_usd(call: Call) -> float:
    """The call's cost in USD as the ledger records it (usage/ledger.model_cost_micro_usd:
    rounded to the µUSD per call), so a report's total is the ledger's."""
    return model_cost_micro_usd(call.model, call.input_tokens, call.cache_creation_input_tokens,
                                call.cache_creation_1h_input_tokens,
                                call.cache_read_input_tokens, call.output_tokens) / 1_000_000


def summarize_calls(calls: list[Call]) -> dict[str, Any]:
    """Totals of a list of calls: tokens, cache-read share, billed-equivalent input, cost."""
    context = sum(c.context_tokens for c in calls)
    read = sum(c.cache_read_input_tokens for c in calls)
    return {
        "calls": len(calls),
        "input_tokens_total": context,
        "cache_read_share": round(read / context, 4) if context else 0.0,
        "billed_equivalent_input": round(sum(billed_equivalent(c) for c in calls)),
        "output_tokens": sum(c.output_tokens for c in calls),
        "peak_context": max((c.context_tokens for c in calls), default=0),
        "cost_usd": round(sum(cost_usd(c) for c in calls), 6),
    }


def call_of(row: Usage) -> Call:
    return Call(row.created_at, row.purpose, row.model, row.input_tokens,
                row.cache_creation_input_tokens, row.cache_creation_1h_input_tokens,
                row.cache_read_input_tokens, row.output_tokens)


def load_calls(engine: Engine, conversation_id: int) -> list[Call]:
    with session_scope(engine) as session:
        rows = session.exec(select(Usage).where(Usage.conversation_id == conversation_id)
                            .order_by(col(Usage.id))).all()
        return [call_of(r) for r in rows]


def conversation_report(engine: Engine, conversation_id: int) -> dict[str, Any]:
    """The report of one conversation (its `replies`: `reply_report`); raises LookupError
    when it does not exist."""
    with session_scope(engine) as session:
        conversation = session.get(Conversation, conversation_id)
        if conversation is None:
            raise LookupError(f"no conversation {conversation_id}")
        compactions = conversation.compactions
        replies = reply_report(session, conversation_id)
    calls = load_calls(engine, conversation_id)
    return {"conversation_id": conversation_id, "compactions": compactions,
            **summarize_calls(calls),
            "context_per_call": [c.context_tokens for c in calls if c.purpose == "turn"],
            "replies": replies, "calls_detail": calls}


def reply_report(session: Session, conversation_id: int) -> dict[str, Any]:
    """What reached the customer: replies counted by delivery state (storage/delivery.py)
    and, for each one that did not reach the customer (failed, unknown) or still waits
    (queued, sending), its `message_id`, `at`, `state`, `error_code` and `reason`."""
    replies = session.exec(select(Message).where(
        Message.conversation_id == conversation_id, Message.direction == "outbound")
        .order_by(col(Message.id))).all()
    parts = message_repo.parts_of(session, [int(m.id or 0) for m in replies])
    by_state = dict.fromkeys(delivery.STATES, 0)
    problems = []
    for message in replies:
        if not parts[int(message.id or 0)]:
            continue
        view = delivery.reply_delivery(parts[int(message.id or 0)])
        by_state[view["state"]] += 1
        if view["state"] in (*delivery.NOT_DELIVERED, "queued", "sending"):
            problems.append({"message_id": message.id, "at": message.received_at.isoformat(),
                             "state": view["state"], "error_code": view["error_code"],
                             "reason": view["reason"] or view["meaning"]})
    return {"total": sum(by_state.values()), "by_state": by_state, "not_delivered": problems}


def render_svg(values: list[int], *, title: str, width: int = 900, height: int = 320,
               axis_label: str = "call # ({n})") -> str:
    """A line chart of `values` (context tokens per call) as an SVG document; `axis_label` is
    the x axis's caption, `{n}` the number of calls (the console passes its language's)."""
    pad, top = 50, 30
    peak = max(values, default=1) or 1
    step = (width - 2 * pad) / max(len(values) - 1, 1)
    points = " ".join(f"{pad + i * step:.1f},{height - pad - v / peak * (height - pad - top):.1f}"
                      for i, v in enumerate(values))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">'
        f'<rect width="100%" height="100%" fill="white"/>'
        f'<text x="{pad}" y="18">{escape(title)}</text>'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        f'stroke="#999"/><line x1="{pad}" y1="{top}" x2="{pad}" y2="{height - pad}" stroke="#999"/>'
        f'<text x="4" y="{top + 4}">{peak}</text><text x="4" y="{height - pad}">0</text>'
        f'<text x="{width - pad - 80}" y="{height - 20}">'
        f'{escape(axis_label.format(n=len(values)))}</text>'
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{points}"/></svg>')

