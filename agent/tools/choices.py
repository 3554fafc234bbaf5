"""The `offer_choices` tool: the turn's reply offers options as a WhatsApp list or reply
buttons (issue 26; the rules in agent/choices.py, Meta's limits in whatsapp/interactive.py).

It sends nothing itself: its `body` is the turn's reply (issue 41: the call ends the turn, no
further model call, `Tool.reply`), which goes out as the list or buttons through the outbox
like any reply (workers/choices.py), at most once, as one message. Only inside the 24-hour
customer service window (whatsapp/window.py). Each option names a slot or a service,
so the customer's pick comes back as that slot or service (whatsapp.interactive ids), or is a
free short text (issue 38), whose pick comes back as that text.
"""

import re
from datetime import datetime
from typing import Any

from sqlmodel import Session, select

from agent.choices import Offer, shown, style_used
from agent.errors import ToolError
from agent.tools.base import Tool, ToolContext, echo, some_codes
from storage.models import Contact, Professional, Service
from whatsapp.choice_ids import service_id, slot_id, text_id
from whatsapp.graph import utf16_len
from whatsapp.interactive import LIMITS, Choice
from whatsapp.window import SERVICE_WINDOW_CLOSED, window_closed

MAX_OPTIONS = 30  # options one call may give (the list shows at most 10 rows)
CODE_CHARS = 60  # a service or professional code in an id (row ids hold 200)


def offer_from_input(args: dict[str, Any]) -> Offer:
    """The checked offer of an `offer_choices` input; ToolError naming every problem."""
    style = args.get("style", "list")
    if style not in ("list", "buttons"):
        raise ToolError(f"style must be list or buttons, got {echo(style)}")
    options = args.get("options")
    if not isinstance(options, list) or not 1 <= len(options) <= MAX_OPTIONS:
        raise ToolError(f"options must be a list of 1 to {MAX_OPTIONS} objects")
    title_limit = LIMITS.button_title if style == "buttons" else LIMITS.row_title
    problems, choices = [], []
    for n, option in enumerate(options):
        try:
            choices.append(_choice(option, title_limit, n + 1))
        except ToolError as exc:
            problems.append(f"options[{n}]: {exc}")
    button = args.get("button")
    if button is not None and (not isinstance(button, str) or not button.strip()
                               or utf16_len(button) > LIMITS.list_button):
        problems.append(f"button must be a label of at most {LIMITS.list_button} characters")
    ids = [c.id for c in choices]
    if len(set(ids)) != len(ids):
        problems.append("two options name the same slot or service")
    titles = [c.title for c in choices]
    if len(set(titles)) != len(titles):
        problems.append("option titles must differ (the customer picks by title)")
    if problems:
        raise ToolError("; ".join(problems))
    return Offer(style=str(style), choices=tuple(choices),
                 button=button.strip() if isinstance(button, str) else None)


def _slot_choice(option: dict[str, Any], slot: Any) -> str:
    """The id of a slot option (its local start and optional professional code)."""
    try:
        if not _SLOT.fullmatch(str(slot)):  # strptime alone takes 2026-6-2T4:0
            raise ValueError(slot)
        datetime.strptime(str(slot), "%Y-%m-%dT%H:%M")
    except ValueError:
        raise ToolError(f"slot must be YYYY-MM-DDTHH:MM local time, got {echo(slot)}") \
            from None
    professional = option.get("professional")
    if professional is not None and (not isinstance(professional, str)
                                     or not 1 <= len(professional) <= CODE_CHARS):
        raise ToolError(f"professional must be a professional code, got {echo(professional)}")
    return slot_id(str(slot), professional)


def _choice(option: Any, title_limit: int, n: int) -> Choice:
    if not isinstance(option, dict):
        raise ToolError("must be an object")
    title, description = option.get("title"), option.get("description")
    if not isinstance(title, str) or not title.strip() or utf16_len(title) > title_limit:
        raise ToolError(f"title must be 1 to {title_limit} characters, got {echo(title)}")
    if description is not None and (not isinstance(description, str)
                                    or utf16_len(description) > LIMITS.row_description):
        raise ToolError(f"description must be at most {LIMITS.row_description} characters")
    slot, service = option.get("slot"), option.get("service")
    if slot is not None and service is not None:
        raise ToolError("give at most one of slot or service")
    if slot is None and service is None:  # a free-text option: the pick is its title
        if option.get("professional") is not None:
            raise ToolError("professional goes with a slot option only")
        choice_id = text_id(n)
    elif slot is not None:
        choice_id = _slot_choice(option, slot)
    else:
        if not isinstance(service, str) or not 1 <= len(service) <= CODE_CHARS:
            raise ToolError(f"service must be a service code, got {echo(service)}")
        if option.get("professional") is not None:
            raise ToolError("professional goes with a slot option only; a service option "
                            "names no professional")
        choice_id = service_id(service)
    return Choice(id=choice_id, title=title.strip(),
                  description=description.strip() if description else None)


_SLOT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


def offer_choices(session: Session, ctx: ToolContext, args: dict[str, Any]) -> str:
    contact = session.get(Contact, ctx.contact_id)
    if contact is None or window_closed(contact.last_inbound_at, ctx.now):
        raise ToolError(f"cannot offer choices: {SERVICE_WINDOW_CLOSED}")
    offer = offer_from_input(args)
    body = args.get("body")
    if not isinstance(body, str) or not body.strip() or utf16_len(body) > LIMITS.list_body:
        raise ToolError(f"body must be the message text, 1 to {LIMITS.list_body} characters")
    _check_codes(session, ctx.tenant_id, args["options"])
    choices, more = shown(offer)
    how = {"buttons": "reply buttons", "list": "a list"}.get(style_used(offer, body),
                                                              "text listing the options")
    # the options are in the call's input: the result says only what differs (issue 41: every
    # token of it is written to the cache and read on every later call)
    lines = [f"Sent with your body as {how}, {len(choices)} option(s) shown; a pick arrives as "
             "a message naming the option."]
    if more:
        lines.append(f"Shown: {', '.join(c.title for c in choices)}. "
                     f"({len(offer.choices) - len(choices)} more left out: the last row asks "
                     "the customer for a narrower range)")
    return "\n".join(lines)


def offer_body(tool_input: dict[str, Any], _result: str) -> str | None:
    """`OFFER_CHOICES.reply`: a successful offer's body is the turn's reply."""
    body = tool_input.get("body")
    return body.strip() if isinstance(body, str) else None


def _check_codes(session: Session, tenant_id: int, options: list[dict[str, Any]]) -> None:
    services = set(session.exec(select(Service.code).where(Service.tenant_id == tenant_id)))
    pros = set(session.exec(select(Professional.code).where(
        Professional.tenant_id == tenant_id)))
    unknown = sorted({o["service"] for o in options if "service" in o} - services)
    if unknown:
        raise ToolError(f"unknown service code(s) {', '.join(map(echo, unknown))}; known: "
                        f"{some_codes(sorted(services))}")
    unknown = sorted({o["professional"] for o in options if o.get("professional")} - pros)
    if unknown:
        raise ToolError(f"unknown professional code(s) {', '.join(map(echo, unknown))}; "
                        f"known: {some_codes(sorted(pros))}")


_OPTION = {"type": "object", "properties": {
    "slot": {"type": "string", "description": "Optional: a found start"},
    "professional": {"type": "string", "description": "Optional"},  # of that slot
    "service": {"type": "string", "description": "Or a service"},
    "title": {"type": "string", "description": f"≤{LIMITS.row_title} chars, button "
                                               f"≤{LIMITS.button_title}"},
    "description": {"type": "string", "description": "Optional"}},  # a row's second line
    "required": ["title"]}

OFFER_CHOICES = Tool(
    name="offer_choices",
    description="Send body with options to tap: a list (≤10) or buttons (≤3). Ends the turn.",
    input_schema={"type": "object", "properties": {
        "body": {"type": "string", "description": "Your message"},
        "style": {"type": "string", "enum": ["list", "buttons"], "description": "Default list"},
        "button": {"type": "string", "description": f"Optional list label, "
                                                    f"≤{LIMITS.list_button}"},
        "options": {"type": "array", "items": _OPTION}},
        "required": ["body", "options"]},
    handler=offer_choices, reply=offer_body)
