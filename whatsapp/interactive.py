"""Interactive messages: reply buttons and lists, Meta's limits on them, and the ids of the
choices this product offers.

The limits are Meta's (Sources: WhatsApp §5.2, reply buttons [S19], lists [S20]) and live here
only: the product builds and checks its messages with them, and the Graph API double
(replay/graph_api.py) refuses a send that breaks them, as Meta does. Lengths are counted in
UTF-16 code units (`whatsapp.graph.utf16_len`: an emoji counts 2), at least as strict as
Meta's count, which Meta does not define.

Row and button ids name what was offered: whatsapp/choice_ids.py.
"""

from dataclasses import dataclass
from typing import Any

from whatsapp.graph import utf16_len


@dataclass(frozen=True)
class InteractiveLimits:
    """Meta's limits on interactive messages (Sources: WhatsApp §5.2 [S19][S20])."""

    list_rows: int = 10  # rows in total, over every section
    list_sections: int = 10
    list_button: int = 20  # the label of the button that opens the list
    row_title: int = 24
    row_description: int = 72
    row_id: int = 200
    section_title: int = 24
    list_body: int = 4096
    buttons: int = 3
    button_title: int = 20  # unique within the message
    button_id: int = 256
    button_body: int = 1024
    header: int = 60
    footer: int = 60


LIMITS = InteractiveLimits()


class InteractiveError(ValueError):
    """An interactive message Meta would refuse; `problems` lists every broken limit."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Choice:
    """One option: a list row or a reply button. `description` is shown on list rows only."""

    id: str
    title: str
    description: str | None = None


def list_message(*, body: str, button: str, rows: list[Choice],
                 section_title: str | None = None) -> dict[str, Any]:
    """The `interactive` object of a list with one section; raises InteractiveError."""
    section: dict[str, Any] = {"rows": [_row(c) for c in rows]}
    if section_title:
        section["title"] = section_title
    interactive = {"type": "list", "body": {"text": body},
                   "action": {"button": button, "sections": [section]}}
    _raise(interactive_problems(interactive))
    return interactive


def buttons_message(*, body: str, buttons: list[Choice]) -> dict[str, Any]:
    """The `interactive` object of up to 3 reply buttons; raises InteractiveError."""
    interactive = {"type": "button", "body": {"text": body}, "action": {"buttons": [
        {"type": "reply", "reply": {"id": c.id, "title": c.title}} for c in buttons]}}
    _raise(interactive_problems(interactive))
    return interactive


def interactive_problems(interactive: Any) -> list[str]:
    """Every limit of §5.2 a list or buttons `interactive` object breaks ([] when none)."""
    if not isinstance(interactive, dict) or interactive.get("type") not in ("list", "button"):
        return ["interactive.type must be list or button"]
    action = _dict(interactive.get("action"))
    body = _dict(interactive.get("body")).get("text")
    if interactive["type"] == "button":
        problems = _text("body", body, LIMITS.button_body)
        buttons = _list(action.get("buttons"))
        if not 1 <= len(buttons) <= LIMITS.buttons:
            problems.append(f"{len(buttons)} buttons: 1 to {LIMITS.buttons}")
        replies = [_dict(_dict(b).get("reply")) for b in buttons]
        for n, reply in enumerate(replies):
            problems += _text(f"button {n} title", reply.get("title"), LIMITS.button_title)
            problems += _text(f"button {n} id", reply.get("id"), LIMITS.button_id)
        titles = [str(reply.get("title")) for reply in replies]
        if len(set(titles)) != len(titles):
            problems.append("button titles must be unique")
        return problems
    problems = _text("body", body, LIMITS.list_body)
    problems += _text("button", action.get("button"), LIMITS.list_button)
    sections = [_dict(section) for section in _list(action.get("sections"))]
    if not 1 <= len(sections) <= LIMITS.list_sections:
        problems.append(f"{len(sections)} sections: 1 to {LIMITS.list_sections}")
    rows = 0
    for s, section in enumerate(sections):
        if "title" in section:
            problems += _text(f"section {s} title", section.get("title"), LIMITS.section_title)
        for n, row in enumerate(_dict(r) for r in _list(section.get("rows"))):
            rows += 1
            problems += _text(f"row {n} title", row.get("title"), LIMITS.row_title)
            problems += _text(f"row {n} id", row.get("id"), LIMITS.row_id)
            if "description" in row:
                problems += _text(f"row {n} description", row.get("description"),
                                  LIMITS.row_description)
    if not 1 <= rows <= LIMITS.list_rows:
        problems.append(f"{rows} rows: 1 to {LIMITS.list_rows} in all")
    return problems


def _row(choice: Choice) -> dict[str, Any]:
    row = {"id": choice.id, "title": choice.title}
    if choice.description:
        row["description"] = choice.description
    return row


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(what: str, value: Any, limit: int) -> list[str]:
    if not isinstance(value, str) or not value.strip():
        return [f"{what} is missing"]
    if utf16_len(value) > limit:
        return [f"{what} is {utf16_len(value)} characters: at most {limit}"]
    return []


def _raise(problems: list[str]) -> None:
    if problems:
        raise InteractiveError(problems)
