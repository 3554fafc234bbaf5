"""A booking tool's `reply` (issue 41): the text the customer gets when the change succeeds,
checked against what the product knows of the visit, so one call books and answers.

`book_appointment`, `reschedule_appointment` and `cancel_appointment` take an optional
`reply`. On success the handler checks it (`reply_problem`, pure) and says in its result
whether it was sent (`reply_note`); the tool's `reply` hook (`sent_reply`) then ends the turn
with it, no further model call. A reply that names another time, leaves out the visit's date,
start time or (booking, move) professional is not sent: the result says why and the model
is called again to write one. A refused change sends nothing: the loop goes on with the error.
"""

import re
import unicodedata
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from agent.errors import ToolError
from whatsapp.graph import MAX_TEXT_CHARS, SPLIT_MARGIN, utf16_len

REPLY_CHARS = MAX_TEXT_CHARS - SPLIT_MARGIN  # what split_text sends as one message

REPLY_SENT = "Your reply was sent."
NOT_SENT = "Your reply was NOT sent"

REPLY_PROPERTY = {"type": "string",
                  "description": "Optional: sent on success, ends the turn"}

MONTHS = ("janeiro fevereiro marco abril maio junho julho agosto setembro outubro novembro "
          "dezembro").split(), ("january february march april may june july august september "
                                "october november december").split()
WEEKDAYS = ("segunda terca quarta quinta sexta sabado domingo".split(),
            "monday tuesday wednesday thursday friday saturday sunday".split())
NEAR = {0: ("hoje", "today"), 1: ("amanha", "tomorrow")}
_TIME = re.compile(r"(?<![\d/:.,])([01]?\d|2[0-3])(?:[:h]([0-5]\d)|h|\s?hs?\b)(?![\d/])")


@dataclass(frozen=True)
class VisitFacts:
    """What the product knows of the visit a reply speaks of, in local time: its `start`,
    the clock times a reply may name (`times`: its rows' starts and ends, a move's old
    start), its professionals' names (`names`; none: not checked) and `today`."""

    start: datetime
    times: frozenset[tuple[int, int]]
    names: tuple[str, ...]
    today: date


def fold(text: str) -> str:
    """Lower case without accents: "Júlia" and "julia", "Sábado" and "sabado" match."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def clock_times(text: str) -> set[tuple[int, int]]:
    """(hour, minute) of every clock time written in `text`: 14:00, 14h, 14h30, 9h, 14 hs."""
    return {(int(h), int(m or 0)) for h, m in _TIME.findall(fold(text))}


def _names_date(text: str, day: date, today: date) -> bool:
    d, m = day.day, day.month
    numeric = rf"(?<!\d)0?{d}/0?{m}(?!\d)|(?<!\d)0?{m}/0?{d}(?!\d)"  # 02/06, 2/6, 6/2 (en)
    words = rf"\bdia 0?{d}\b|(?<!\d)0?{d}(?:st|nd|rd|th)? (?:de )?(?:{MONTHS[0][m - 1]}|" \
            rf"{MONTHS[1][m - 1]}|{MONTHS[1][m - 1][:3]})\b|\b(?:{MONTHS[1][m - 1]}|" \
            rf"{MONTHS[1][m - 1][:3]}) 0?{d}(?!\d)"
    if re.search(f"{numeric}|{words}", text):
        return True
    ahead = (day - today).days
    if any(re.search(rf"\b{w}\b", text) for w in NEAR.get(ahead, ())):
        return True
    # a weekday name is the date only within the coming week
    return 0 <= ahead < 7 and any(re.search(rf"\b{names[day.weekday()]}", text)
                                  for names in WEEKDAYS)


def reply_problem(reply: str, facts: VisitFacts) -> str | None:
    """Why `reply` may not be sent for the visit of `facts`, or None: it must name the date
    (02/06, dia 2, 2 de junho, amanhã, or the weekday within a week), the start time (14h,
    14:00), every professional of `facts.names` (first name), and no clock time other than
    the visit's."""
    text = fold(reply)
    start = (facts.start.hour, facts.start.minute)
    times = clock_times(text)
    problems = []
    if not _names_date(text, facts.start.date(), facts.today):
        problems.append(f"it does not name the date ({facts.start:%d/%m})")
    if start not in times:
        problems.append(f"it does not name the start time ({facts.start:%H:%M})")
    if times - facts.times:
        problems.append("it names a time that is not the visit's ("
                        + ", ".join(f"{h:02d}:{m:02d}" for h, m in sorted(times - facts.times))
                        + ")")
    missing = [n for n in facts.names if n.split() and not re.search(
        rf"(?<!\w){re.escape(fold(first_name(n)))}(?!\w)", text)]  # "Ana" is not in "semana"
    if missing:
        problems.append(f"it does not name {', '.join(missing)}")
    return "; ".join(problems) or None


def first_name(name: str) -> str:
    """The word of a professional's `name` a reply must hold: its first word that is not an
    abbreviated title ("Dra. Lia" -> "Lia", "Júlia" -> "Júlia"); the first word when all are."""
    words = name.split()
    return next((w for w in words if not w.endswith(".")), words[0])


def checked_reply(value: Any) -> str | None:
    """The `reply` input as given (None when absent); ToolError before anything changes when
    it is not a text sent as one message (Meta: a text body is at most 4096; whatsapp.graph
    keeps SPLIT_MARGIN below it)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not value.strip() \
            or utf16_len(value.strip()) > REPLY_CHARS:
        raise ToolError(f"reply must be a text of at most {REPLY_CHARS} characters; "
                        "nothing was changed")
    return value.strip()


def reply_note(reply: str | None, facts: VisitFacts) -> str:
    """What the result adds about `reply`: "" (none given), REPLY_SENT, or NOT_SENT with why."""
    if reply is None:
        return ""
    problem = reply_problem(reply, facts)
    if problem is None:
        return " " + REPLY_SENT
    return f"\n{NOT_SENT}: {problem}. Write your reply."


def sent_reply(tool_input: dict[str, Any], result: str) -> str | None:
    """The `Tool.reply` of the booking tools: the `reply` the result says was sent."""
    reply = tool_input.get("reply")
    if isinstance(reply, str) and result.endswith(REPLY_SENT):
        return reply.strip()
    return None
