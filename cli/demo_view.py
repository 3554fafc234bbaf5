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
_SWEPT = re.compile(r"^   \[sweeper closed (\d+) conversation\(s\)\]$")
_FACT = "   [fact "
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
                "the prompt cache, \"cache write\": tokens written to it); \"model US$\" is "
                "what those calls would cost at Anthropic's list prices (the cost ledger's "
                "own pricing, usage/ledger.py); \"send(s)\" are the "
                "WhatsApp messages the Graph API double accepted. The model's replies are "
                "scripted here: the demo shows the product around the model.")


def _when(weekday: str, month: str, day: str, time: str) -> str:
    return f"{WEEKDAYS.get(weekday, weekday)} {day}/{month} {time}"


def conversation(trace: Iterable[str]) -> list[str]:
    """The customer's and the agent's lines, with when they were written, in Portuguese. Time
    that passed shows as "· N depois", saying so when a session ended in it (and how many
    facts were kept); with no words after it, it shows only then."""
    lines: list[str] = []
    quiet: str | None = None  # the latest "· N depois" not yet followed by words
    closed = facts = 0
    for line in trace:
        if line.startswith((CUSTOMER, AGENT)):
            if quiet is not None:  # the time before these words, and a session ended in it
                lines += _quiet_note(quiet, closed, facts) or [quiet]
            quiet = None
            who = "cliente ▸" if line.startswith(CUSTOMER) else "agente  ◂"
            lines.append(f"   {who} {line[len(CUSTOMER):]}")
        elif start := _START.match(line):
            lines.append(f"   ({_when(*start.groups())})")
        elif later := _LATER.match(line):
            lines += _quiet_note(quiet, closed, facts)
            amount, unit, *when = later.groups()
            quiet, closed, facts = f"   · {amount} {UNITS[unit]} depois ({_when(*when)})", 0, 0
        elif swept := _SWEPT.match(line):
            closed += int(swept.group(1))
        elif line.startswith(_FACT):
            facts += 1
    return lines + _quiet_note(quiet, closed, facts)


def _quiet_note(later: str | None, closed: int, facts: int) -> list[str]:
    """Time that passed with no words: a line when a session ended in it, else none."""
    if later is None or not closed:
        return []
    kept = f"; {facts} preferência(s) do cliente guardada(s)" if facts else ""
    return [f"{later}: atendimento encerrado por inatividade{kept}"]


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
