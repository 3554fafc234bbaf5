"""Choices offered as a WhatsApp list or reply buttons: which options are shown, and the
`interactive` object of a reply that offers them (issue 26).

The agent calls `offer_choices` (agent/tools/choices.py) during a turn; that turn's reply then
goes out as the list or buttons with the reply's text as the body (workers/choices.py). Meta's
limits are in `whatsapp.interactive.LIMITS` (Sources: WhatsApp §5.2). The rules here:

- More options than a list's 10 rows: the soonest 9 slots (by start time; other options in
  the order given) and a last row asking for a narrower range (`whatsapp.interactive.MORE_ID`).
- Buttons (at most 3, titles of 20, body of 1024): more than 3 options, or a body past 1024,
  become a list; a body past a list's 4096 becomes plain text listing the titles.
"""

from dataclasses import dataclass
from typing import Any

from whatsapp.choice_ids import MORE_ID, SLOT_PREFIX
from whatsapp.graph import utf16_len
from whatsapp.interactive import LIMITS, Choice, buttons_message, list_message


@dataclass(frozen=True)
class Offer:
    """The options of one `offer_choices` call, checked: `style` "list" or "buttons",
    `choices` every option (ids from whatsapp.interactive), `button` the list's label."""

    style: str
    choices: tuple[Choice, ...]
    button: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"style": self.style, "button": self.button, "choices": [
            {"id": c.id, "title": c.title, "description": c.description}
            for c in self.choices]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Offer":
        return cls(style=str(data["style"]), button=data.get("button"), choices=tuple(
            Choice(id=c["id"], title=c["title"], description=c.get("description"))
            for c in data["choices"]))


@dataclass(frozen=True)
class Wording:
    """Customer-facing words of a list, in the tenant's language (workers/texts.py)."""

    list_button: str  # the label that opens the list, when the agent gave none
    more_title: str  # the "narrower range" row
    more_description: str


def shown(offer: Offer) -> tuple[list[Choice], bool]:
    """The options that fit, and whether a "narrower range" row follows them."""
    limit = LIMITS.buttons if offer.style == "buttons" else LIMITS.list_rows
    choices = list(offer.choices)
    if len(choices) <= limit:
        return choices, False
    if offer.style == "buttons" and len(choices) <= LIMITS.list_rows:
        return choices, False  # shown as a list of all of them
    slots = sorted((c for c in choices if c.id.startswith(SLOT_PREFIX)), key=lambda c: c.id)
    others = [c for c in choices if not c.id.startswith(SLOT_PREFIX)]
    return (slots + others)[:LIMITS.list_rows - 1], True


def style_used(offer: Offer, body: str) -> str:
    """"buttons", "list" or "text": how a reply with `body` offers `offer` (module rules)."""
    choices, more = shown(offer)
    if (offer.style == "buttons" and not more and len(choices) <= LIMITS.buttons
            and utf16_len(body) <= LIMITS.button_body):
        return "buttons"
    return "list" if utf16_len(body) <= LIMITS.list_body else "text"


def interactive_reply(offer: Offer, body: str, wording: Wording) -> dict[str, Any] | None:
    """The `interactive` object of a reply with text `body` that offers `offer`; None when
    it must go as plain text (`text_reply`). Raises whatsapp.interactive.InteractiveError
    only on options `offer_choices` should have refused."""
    choices, more = shown(offer)
    style = style_used(offer, body)
    if style == "buttons":
        return buttons_message(body=body, buttons=choices)
    if style == "text":
        return None
    if more:
        choices = [*choices, Choice(MORE_ID, wording.more_title, wording.more_description)]
    return list_message(body=body, button=offer.button or wording.list_button, rows=choices)


def text_reply(offer: Offer, body: str) -> str:
    """A reply too long for a list: its text, then one line per option shown."""
    choices, _ = shown(offer)
    return body + "\n\n" + "\n".join(
        f"- {c.title}" + (f" ({c.description})" if c.description else "") for c in choices)
