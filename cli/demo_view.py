"""What `wagent demo` prints for its two readers (issue 44 item 5): first the conversation as the
customer and the agent wrote it, in Portuguese (a business owner reads this); below it the
developer's trace in English, as a replay's transcript (replay/runner.py `say`), with a note
for each of its marks that needs one. Pure: lines in, lines out.
"""

import re
from collections.abc import Iterable

CUSTOMER = "customer ▸ "
AGENT = "agent    ◂ "
WEEKDAYS = {"Mon": "seg", "Tue": "ter", "Wed": "qua", "Thu": "qui", "Fri": "sex", "Sat": "sáb",
            "Sun": "dom"}
UNITS = {"s": "s", "m": "min", "h": "h", "d": "dia(s)"}
_WHEN = r"(\w{3}) \d{4}-(\d{2})-(\d{2}) (\d{2}:\d{2})"
_START = re.compile(rf"^   \(clock: {_WHEN} ")
_LATER = re.compile(rf"^   \.\.\. (\d+)([smhd]) later \({_WHEN} local\)$")
_DELIVERED = re.compile(r"^   \(delivered (\d+) times\)$")
# (a mark of the trace, what it means) for the notes under the trace
NOTES = (
    ("(delivered ", "\"delivered N times\": WhatsApp (Meta) sent the same webhook N times, as it "
                    "does when it retries; the product stored the message once (its wamid is "
                    "unique) and answered it once."),
    ("(error) →", "\"(error)\": a tool refused the call (e.g. a time outside the opening "
                  "hours); the refusal goes back to the model as a tool_result with "
                  "is_error, and the model corrects itself in the same turn."),
    ("[marked read", "\"marked read, typing… shown\": before calling the model the product "
                     "marks the customer's message read and shows \"typing…\" (best effort)."),
    ("[sweeper closed", "\"sweeper closed\": the session ended after the tenant's inactivity "
                        "timeout; fact extraction then read it (\"[fact ...]\" lines: what was "
                        "kept about the customer, confirmed or only suggested)."),
    ("$ wagent ", "\"$ wagent ...\": the scenario ran the CLI, as a business's set-up would."),
)
VERDICT_NOTE = ("The verdict line: \"Claude call(s)\" counts every Messages API call (turns, "
                "summaries, fact extraction); tokens are the usage the Messages API double "
                "reported, summed over the calls (\"cache read\": prefix tokens served from "
                "the prompt cache, \"cache write\": tokens written to it); \"send(s)\" are the "
                "WhatsApp messages the Graph API double accepted. The model's replies are "
                "scripted here: the demo shows the product around the model.")


def _when(weekday: str, month: str, day: str, time: str) -> str:
    return f"{WEEKDAYS.get(weekday, weekday)} {day}/{month} {time}"


def conversation(trace: Iterable[str]) -> list[str]:
    """The customer's and the agent's lines, with when they were written, in Portuguese."""
    lines = []
    for line in trace:
        if line.startswith(CUSTOMER):
            lines.append(f"   cliente ▸ {line.removeprefix(CUSTOMER)}")
        elif line.startswith(AGENT):
            lines.append(f"   agente  ◂ {line.removeprefix(AGENT)}")
        elif start := _START.match(line):
            lines.append(f"   ({_when(*start.groups())})")
        elif later := _LATER.match(line):
            amount, unit, *when = later.groups()
            lines.append(f"   · {amount} {UNITS[unit]} depois ({_when(*when)})")
    while lines and lines[-1].startswith("   · "):  # time that passed after the last words
        lines.pop()
    return lines


def notes(trace: list[str]) -> list[str]:
    """One note per mark the trace holds, in English."""
    found = [text for mark, text in NOTES if any(mark in line for line in trace)]
    return [f"   - {text}" for text in found]


def for_readers(name: str, trace: list[str]) -> list[str]:
    """A scenario's whole demo text, before its verdict line."""
    return [f"== {name}",
            "Conversa (português): o que o cliente e o agente escreveram no WhatsApp",
            *conversation(trace),
            "",
            "Developer's trace (English): what the product did for each message",
            *trace,
            "   notes:",
            *notes(trace)]
