"""The ids of the options this product offers in lists and reply buttons (issue 26).

An id names what was offered, so the customer's pick (an inbound `interactive.list_reply` /
`button_reply`, Sources: WhatsApp §3.4) says it by itself: `slot:2026-06-02T14:00` (a local
start time), `slot:2026-06-02T14:00/julia` (with that professional), `service:corte`, `more`
(the "narrower range" row of a long list), `text:1` (a free-text option: its title says
it). Pure, no imports: intake renders picks with it.
"""

SLOT_PREFIX, SERVICE_PREFIX, MORE_ID = "slot:", "service:", "more"
TEXT_PREFIX = "text:"  # a free-text option (issue 38): the pick is its title, nothing more


def slot_id(start: str, professional: str | None = None) -> str:
    """The id of an offered slot: its local start `YYYY-MM-DDTHH:MM`, and the professional."""
    return f"{SLOT_PREFIX}{start}" + (f"/{professional}" if professional else "")


def service_id(code: str) -> str:
    return f"{SERVICE_PREFIX}{code}"


def text_id(n: int) -> str:
    """The id of the `n`th free-text option of an offer (its title is what the pick says)."""
    return f"{TEXT_PREFIX}{n}"


def is_text(choice_id: str | None) -> bool:
    return bool(choice_id) and str(choice_id).startswith(TEXT_PREFIX)


def describe_choice(choice_id: str | None) -> str | None:
    """What an id made by this module names, for the agent to read ("the slot
    2026-06-02T14:00 with julia"); None for any other id."""
    if not choice_id:
        return None
    if choice_id == MORE_ID:
        return "none of the options shown: wants other options, ask for a narrower range"
    if choice_id.startswith(SLOT_PREFIX):
        start, _, professional = choice_id.removeprefix(SLOT_PREFIX).partition("/")
        return f"the slot {start}" + (f" with {professional}" if professional else "")
    if choice_id.startswith(SERVICE_PREFIX):
        return f"the service {choice_id.removeprefix(SERVICE_PREFIX)}"
    return None
