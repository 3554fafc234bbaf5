"""The handoff_to_human tool (`HANDOFF_TO_HUMAN`, one `Tool` of the registry) and the text the
customer gets when the agent hands off.

The tool puts the conversation in the staff state (storage/staff.py); the tool loop ends after
it (`STOPS_THE_TURN`, agent/loop.py `stop_after`) and the turn sends `handoff_reply` instead of
another model answer, so the customer gets the handoff text and nothing else.
"""

from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlmodel import Session

from agent.errors import ToolError
from agent.tools.availability import business_exceptions, business_hours
from agent.tools.base import Tool, ToolContext
from agent.tools.slots import opening_intervals
from storage import staff
from storage.models import Conversation, Tenant

MAX_REASON = 200
MAX_SUMMARY = 300
MAX_MESSAGE = 1000  # the customer's line (a WhatsApp text takes 4096)
LOOK_AHEAD_DAYS = 14  # how far the next opening is looked for

# the customer-facing texts of a handoff (Brazilian Portuguese by default; the tenant's language)
TEXTS: dict[str, dict[str, str]] = {
    "pt-BR": {
        "handoff": "Vou passar sua conversa para alguém da nossa equipe, que responde por aqui.",
        "closed": "Estamos fora do horário de atendimento agora; alguém da equipe responde a "
                  "partir de {when}.",
        "waiting": "Ainda estamos chamando alguém da equipe para te responder. Obrigado pela "
                   "paciência!",
        "weekdays": "segunda,terça,quarta,quinta,sexta,sábado,domingo",
        "today": "hoje às {hhmm}",
        "day": "{weekday} às {hhmm}",
    },
    "en": {
        "handoff": "I'm passing your conversation to someone on our team, who will answer here.",
        "closed": "We're closed right now; someone from the team will answer from {when}.",
        "waiting": "We're still getting someone from the team to answer you. Thanks for your "
                   "patience!",
        "weekdays": "Monday,Tuesday,Wednesday,Thursday,Friday,Saturday,Sunday",
        "today": "today at {hhmm}",
        "day": "{weekday} at {hhmm}",
    },
}


def text(language: str, key: str) -> str:
    table = TEXTS.get(language, TEXTS.get(language.split("-")[0], TEXTS["pt-BR"]))
    return table.get(key, TEXTS["pt-BR"][key])


def next_opening(session: Session, tenant: Tenant, now: datetime) -> datetime | None:
    """None while the business is open at `now`; else the next local opening time (within
    LOOK_AHEAD_DAYS; None too when there is none, so nothing false is promised)."""
    tz = ZoneInfo(tenant.timezone)
    assert tenant.id is not None
    hours = business_hours(session, tenant.id)  # the job's rows (storage/job_catalogue.py)
    exceptions = business_exceptions(session, tenant.id)  # public holidays too
    local = now.astimezone(tz)
    for offset in range(LOOK_AHEAD_DAYS + 1):
        day: date = local.date() + timedelta(days=offset)
        for opens, closes in sorted(opening_intervals(day, hours, exceptions)):
            start = datetime.combine(day, datetime.strptime(opens, "%H:%M").time(), tzinfo=tz)
            end = datetime.combine(day, datetime.strptime(closes, "%H:%M").time(), tzinfo=tz)
            if start <= local < end:
                return None
            if start > local:
                return start
    return None


def handoff_reply(session: Session, tenant: Tenant, now: datetime,
                  stopped_by: dict[str, Any] | None = None) -> str:
    """What the customer gets when the agent hands off: the `message` the model wrote in the
    handoff_to_human call `stopped_by` (its tool_use block; issue 42: why, and when a person
    answers), as it is; when that is missing or empty, the tenant's `handoff_text` (or the
    product's), and outside opening hours when someone will answer."""
    message = _message((stopped_by or {}).get("input"))
    if message:
        return message
    reply = tenant.handoff_text.strip() or text(tenant.language, "handoff")
    opening = next_opening(session, tenant, now)
    if opening is None:
        return reply
    local_now = now.astimezone(opening.tzinfo)
    hhmm = opening.strftime("%H:%M")
    if opening.date() == local_now.date():
        when = text(tenant.language, "today").format(hhmm=hhmm)
    else:
        weekday = text(tenant.language, "weekdays").split(",")[opening.weekday()]
        when = text(tenant.language, "day").format(weekday=weekday, hhmm=hhmm)
    return f"{reply} {text(tenant.language, 'closed').format(when=when)}"


def _message(args: Any) -> str:
    """The customer's line of a handoff_to_human input, stripped and cut to MAX_MESSAGE."""
    value = args.get("message") if isinstance(args, dict) else None
    return value.strip()[:MAX_MESSAGE] if isinstance(value, str) else ""


def closed_note(session: Session, tenant: Tenant, now: datetime) -> str:
    """The product's note to the model while the business is closed at `now` (issue 42: a
    handoff's message can say when a person answers): "[closed now: staff answer from Mon
    2026-06-08 09:00]"; "" while open, or when no opening is known."""
    opening = next_opening(session, tenant, now)
    return "" if opening is None else f"[closed now: staff answer from {opening:%a %Y-%m-%d %H:%M}]"


def handoff_to_human(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    """The handoff_to_human tool: staff take the conversation (a no-op when they already do)."""
    reason, summary = str(args.get("reason", "")).strip(), str(args.get("summary", "")).strip()
    if not reason:
        raise ToolError("reason is required: why a person should answer")
    conversation = session.get(Conversation, ctx.conversation_id)
    tenant = session.get(Tenant, ctx.tenant_id)
    assert conversation is not None and tenant is not None
    started = staff.start_handoff(session, conversation, tenant, reason=reason[:MAX_REASON],
                                  summary=summary[:MAX_SUMMARY], now=ctx.now)
    if not started:
        return "Staff already handle this conversation; nothing changed."
    return "Handed off: staff will answer; the customer is told. Say nothing more."


HANDOFF_TO_HUMAN = Tool(
    name="handoff_to_human",
    description="Pass to staff (see rules); ends the turn.",
    input_schema={"type": "object", "properties": {
        "reason": {"type": "string", "description": "Why a person must act"},
        "summary": {"type": "string", "description": "For staff: the customer's need"},
        "message": {"type": "string",
                    "description": "Optional. To the customer: why, when a person answers"}},
        "required": ["reason", "summary"]},
    handler=handoff_to_human)

STOPS_THE_TURN = frozenset({HANDOFF_TO_HUMAN.name})
