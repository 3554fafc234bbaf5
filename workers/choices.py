"""A turn's reply as a WhatsApp list or reply buttons, when the turn called `offer_choices`
(issue 26; the rules in agent/choices.py, the tool in agent/tools/choices.py).

`reply_parts` turns the reply text into its outbox parts: one `interactive` part (its body the
JSON of the `interactive` object, sent by workers/outbox.py) when this turn offered choices,
else the text split as usual. Choices are this turn's when their `offer_choices` call comes
after the conversation's last reply in the history, so a retried turn finds them again.
"""

import json

from sqlmodel import Session, col, func, select

from agent.choices import Offer, Wording, interactive_reply, text_reply
from agent.errors import ToolError
from agent.tools.choices import OFFER_CHOICES, offer_from_input
from storage.models import Message, ToolCall
from whatsapp.graph import split_text
from whatsapp.interactive import InteractiveError
from workers import texts


def reply_parts(session: Session, conversation_id: int, reply: str,
                language: str) -> tuple[str, list[str]]:
    """(outbox kind, parts) of `reply`: ("interactive", [JSON]) when this turn offered
    choices that fit, else ("text", split_text(reply)) (also for a reply too long for a list:
    its text then lists the options)."""
    offer = turn_offer(session, conversation_id)
    if offer is None:
        return "text", split_text(reply)
    wording = Wording(list_button=texts.text(language, "choices_button"),
                      more_title=texts.text(language, "choices_more"),
                      more_description=texts.text(language, "choices_more_description"))
    try:
        interactive = interactive_reply(offer, reply, wording)
    except InteractiveError:  # the tool checked the options: only a bug gets here
        interactive = None
    if interactive is None:
        return "text", split_text(text_reply(offer, reply))
    return "interactive", [json.dumps(interactive, ensure_ascii=False)]


def turn_offer(session: Session, conversation_id: int) -> Offer | None:
    """The last successful `offer_choices` of the turn in progress: after the conversation's
    last reply (outbound message) in the history. None when it made none."""
    last_reply = select(func.coalesce(func.max(Message.position), 0)).where(
        Message.conversation_id == conversation_id, Message.direction == "outbound",
        col(Message.position).is_not(None)).scalar_subquery()  # one round trip with the rows
    rows = session.exec(select(Message).where(
        Message.conversation_id == conversation_id, Message.role == "assistant",
        Message.direction == "internal", col(Message.position) > last_reply,
    ).order_by(col(Message.position).desc())).all()
    for row in rows:
        for block in reversed(row.content):
            if block.get("type") != "tool_use" or block.get("name") != OFFER_CHOICES.name:
                continue
            call = session.exec(select(ToolCall).where(
                ToolCall.tool_use_id == str(block.get("id")))).first()
            if call is None or call.is_error:
                continue
            try:
                return offer_from_input(call.input)
            except ToolError:
                continue
    return None
