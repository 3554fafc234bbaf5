"""`wagent chat`: talk to a tenant's agent as a customer would, before WhatsApp is connected.

A chat is a replay scenario written while it runs: each line the customer types is a signed
webhook POSTed into the real web app (`{"webhook": {...}}`, Meta's envelope with a `timestamp`
at the product clock), then the workers run (`{"drain": true}`); the agent's replies are what
the Graph API double, the customer's phone, received. The model is the Messages API double:
scripted (`--script`, a list of `model` steps: REPLAY.md) or relaying to a real Messages API
(replay/relay.py). The product clock starts at the wall clock (whole seconds) and follows it
between messages (`advance` steps of whole seconds); `/wait 25h` moves it and runs the sweeper
(`advance` + `sweep`).

`ChatSession.scenario()` is the session as a scenario (`--record`): before each action the
model's responses it used, per purpose (`turn`, `summary`, `facts`), as `model` steps, then
the action's steps, and at the end expectations on the appointments and the customer's facts;
`wagent replay` replays it with the same result without a key (docs/REPLAY.md, "Recording a
chat").
"""

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo

from rq.job import Job
from rq.registry import ScheduledJobRegistry
from sqlmodel import col, select

from bot.console.texts import texts_for
from core.clock import parse_duration
from replay.environment import ReplayEnvironment
from replay.messages_api import RecordedCall, check_item
from replay.relay import Relay, unreachable
from replay.runner import (
    DEFAULT_TENANT,
    PURPOSES,
    ScenarioResult,
    _offered,
    _Runner,
    _tap_reply,
    appointment_entries,
    validate_scenario,
)
from storage.appointments import number_of
from storage.conversations import with_staff
from storage.db import session_scope
from storage.jobs import COMPACTION_JOB, FACTS_JOB, TURN_JOB
from storage.models import (
    Appointment,
    Contact,
    ContactFact,
    Conversation,
    Professional,
    Service,
    Tenant,
)

# the customer of a chat: an invented number and name (never a real person's)
CHAT_WA_ID = "5511999990099"
CHAT_NAME = "Cliente Teste"
HELD_NOTE = "   (held by staff: no reply)"  # a message while staff hold the conversation
WABA_ID = "102030405060708"
# a local date and time as the console shows it to the tenant (bot/console/app.py _localtime)
LOCAL_FORMAT = "%d/%m/%Y %H:%M"
RETRIED_JOBS = {TURN_JOB, COMPACTION_JOB, FACTS_JOB}  # the jobs that call the model
HELP = """commands (everything else is sent to the agent as the customer's message):
  /tap TITLE       tap a list row or reply button the agent offered (its title as shown)
  /wait DURATION   move the product clock (30m, 25h, 2d) and run the inactivity sweeper
  /appointments    the tenant's appointments now
  /facts           what is stored about you (the customer)
  /context         what the model saw on its last call (system, tools, messages)
  /reset           start over: empty database, a new conversation
  /help            this list
  /quit            end the chat (also end of input, Ctrl-D)"""


class ChatError(ValueError):
    """A bad script or command argument; the message says what to fix."""


def load_script(document: Any) -> list[dict[str, Any]]:
    """A `--script` file's steps: a list of `{"model": [...], "for": purpose}` (REPLAY.md's
    `model` step; `for` defaults to `turn`). ChatError naming every bad step."""
    if not isinstance(document, list):
        raise ChatError("a script is a list of model steps: "
                        '[{"model": [{"text": "Oi! Como posso ajudar?"}]}]')
    problems = []
    for index, step in enumerate(document):
        if not isinstance(step, dict) or "model" not in step or set(step) - {"model", "for",
                                                                               "label", "comment"}:
            problems.append(f"step {index}: a script holds only model steps "
                            '({"model": [...], "for": "turn"})')
            continue
        if step.get("for", "turn") not in PURPOSES:
            problems.append(f"step {index}: for must be one of {sorted(PURPOSES)}")
        items = step["model"] if isinstance(step["model"], list) else [step["model"]]
        for item in items:
            try:
                check_item(item)
            except ValueError as exc:
                problems.append(f"step {index}: model item {item!r}: {exc}")
    if problems:
        raise ChatError("; ".join(problems))
    return [{"model": list(s["model"]) if isinstance(s["model"], list) else [s["model"]],
             "for": s.get("for", "turn")} for s in document]


def recorded_item(response: dict[str, Any]) -> dict[str, Any]:
    """A response the model gave, as a scripted item that makes the double answer the same:
    the shorthand (`text`, `tool`/`input`, `tools`) when it says everything, else the content
    blocks and stop_reason as they came (tool_use ids, thinking blocks kept)."""
    content = list(response.get("content") or [])
    texts = [b for b in content if b.get("type") == "text"]
    uses = [b for b in content if b.get("type") == "tool_use"]
    plain = (len(texts) + len(uses) == len(content) and len(texts) <= 1
             and (not texts or content[0] is texts[0]) and (texts or uses)
             and response.get("stop_reason") == ("tool_use" if uses else "end_turn"))
    if not plain:
        return {"content": content, "stop_reason": response.get("stop_reason") or "end_turn"}
    item: dict[str, Any] = {"text": texts[0]["text"]} if texts else {}
    if len(uses) == 1:
        item.update(tool=uses[0]["name"], input=uses[0].get("input") or {})
    elif uses:
        item["tools"] = [{"tool": u["name"], "input": u.get("input") or {}} for u in uses]
    return item


def model_steps(calls: list[RecordedCall]) -> list[dict[str, Any]]:
    """The `model` / `model_fail` steps that script `calls` again, in call order per purpose
    (consecutive answers of one purpose share a step)."""
    steps: list[dict[str, Any]] = []
    for call in calls:
        if call.status != 200:
            steps.append({"model_fail": {"status": call.status, "times": 1,
                                         "recorded": _error_text(call)},
                          "for": call.purpose})
            continue
        item = recorded_item(call.response)
        last = steps[-1] if steps else None
        if last is not None and "model" in last and last["for"] == call.purpose:
            last["model"].append(item)
        else:
            steps.append({"model": [item], "for": call.purpose})
    return steps


def message_body(phone_number_id: str, wamid: str, text: str, at: datetime) -> dict[str, Any]:
    """A customer's text message in Meta's webhook envelope (WhatsApp §3.1, §3.3), sent at
    `at` (Meta's `timestamp`: whole seconds since the epoch)."""
    return {"object": "whatsapp_business_account", "entry": [{"id": WABA_ID, "changes": [{
        "field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "5511999990000",
                         "phone_number_id": phone_number_id},
            "contacts": [{"profile": {"name": CHAT_NAME}, "wa_id": CHAT_WA_ID}],
            "messages": [{"from": CHAT_WA_ID, "id": wamid, "timestamp": str(int(at.timestamp())),
                          "type": "text", "text": {"body": text}}]}}]}]}


class ChatSession:
    """One chat: a replay environment with the tenant, the script or the relay, and the
    scenario being recorded. `wall` is the wall clock in seconds (time.monotonic), which the
    product clock follows between messages. With `database_url` the chat writes into that
    (migrated) database and leaves it there: the tenant upserted from its file, the customer's
    conversation, bookings and facts (ValueError when it has no schema). `close()` stops
    everything."""

    def __init__(self, tenant: dict[str, Any], *, script: list[dict[str, Any]] | None = None,
                 relay: Relay | None = None, start: datetime | None = None,
                 wall: Callable[[], float] = time.monotonic,
                 database_url: str | None = None) -> None:
        if (script is None) == (relay is None):
            raise ChatError("a chat needs either a script or a relay to a Messages API")
        self.database_url = database_url  # kept: the chat stays there (the local console)
        # a kept database has the wamids of earlier chats: each chat's own (else a redelivery)
        self._run_id = uuid.uuid4().hex[:8].upper() if database_url is not None else ""
        self.tenant = {**DEFAULT_TENANT, **tenant}
        self.zone = ZoneInfo(str(self.tenant["timezone"]))
        self.script, self.relay, self.wall = script, relay, wall
        self.start = (start or datetime.now(UTC)).replace(microsecond=0)  # the recording's
        self.steps: list[dict[str, Any]] = []
        self._section = 0  # where the steps since the last /reset start
        self.messages_sent = 0
        self._open(self.start)

    def _open(self, start: datetime) -> None:
        self.env = ReplayEnvironment(start=start, database_url=self.database_url,
                                     keep_database=self.database_url is not None)
        self.result = ScenarioResult(name="chat")
        self.lines: list[str] = []
        self.runner = _Runner(self.env, self.result, Path("."), self.lines.append, self.zone,
                              None)
        self.env.add_tenant(self.tenant)
        if self.database_url is not None:  # earlier chats and other customers stay out
            self.runner.show_only_own_rows(CHAT_WA_ID)
        if self.relay is not None:
            self.env.messages_api.relay = self.relay
        for step in self.script or []:
            self.env.messages_api.script(step["for"], step["model"])
        self.calls_seen = 0
        self.unscripted_seen = 0
        self.last_wall = self.wall()

    # -- what the customer and the developer do ----------------------------------------------

    def handle(self, line: str) -> list[str]:
        """One line typed: a slash command or the customer's message; the lines to print.
        ChatError for a bad command (nothing ran)."""
        text = line.strip()
        if not text:
            return []
        if not text.startswith("/"):
            return self.say(text)
        command, _, argument = text.partition(" ")
        if command == "/wait":
            return self.wait(argument.strip())
        if command in ("/appointments", "/facts", "/context", "/help"):
            shown: dict[str, Callable[[], list[str]]] = {
                "/appointments": self.show_appointments, "/facts": self.show_facts,
                "/context": self.show_context, "/help": lambda: HELP.splitlines()}
            return shown[command]()
        if command == "/reset":
            return self.reset()
        if command == "/tap":
            return self.tap(argument.strip())
        raise ChatError(f"unknown command {command}; /help lists them")

    def say(self, text: str) -> list[str]:
        """Send `text` as the customer's WhatsApp message and run the workers."""
        moved = self._follow_wall_clock()
        self.messages_sent += 1
        wamid = f"wamid.CHAT{int(self.start.timestamp())}{self._run_id}{self.messages_sent:06d}"
        body = message_body(str(self.tenant["phone_number_id"]), wamid, text, self.env.clock.now())
        out = self._run([{"webhook": body}, {"drain": True}], moved=moved)
        replied = any("◂" in line for line in out)  # a line of what the customer got
        return out + ([HELD_NOTE] if not replied and self._held_by_staff() else [])

    def _held_by_staff(self) -> bool:
        """True while staff hold the chat customer's conversation (storage/conversations
        .with_staff): the product stores the message and answers nothing."""
        with session_scope(self.env.engine) as session:
            contact = session.exec(select(Contact).where(Contact.wa_id == CHAT_WA_ID)).first()
            if contact is None:
                return False
            return any(with_staff(c, self.env.clock.now()) for c in session.exec(
                select(Conversation).where(Conversation.contact_id == contact.id)))

    def tap(self, title: str) -> list[str]:
        """Tap `title` on the latest message that offered it (a list row or a reply button:
        the replay runner's `tap` step), then run the workers. ChatError when none did."""
        if not title:
            raise ChatError("/tap takes the title of a list row or button, as shown")
        if not any(_tap_reply(send.body, title) for send in self.env.graph_api.accepted):
            offered = [t for send in self.env.graph_api.accepted
                       for t, _ in _offered(send.body)]
            shown = f"; offered so far: {', '.join(offered)}" if offered else ""
            raise ChatError(f"no message the agent sent offers {title!r}{shown}")
        moved = self._follow_wall_clock()
        return self._run([{"tap": title}, {"drain": True}], moved=moved)

    def wait(self, duration: str) -> list[str]:
        """Move the product clock by `duration` (`25h`) and run the sweeper (then the workers)."""
        try:
            if parse_duration(duration) <= timedelta(0):
                raise ValueError("the clock moves forward only")
        except ValueError as exc:
            raise ChatError(f"/wait takes a duration such as 30m, 25h or 2d: {exc}") from None
        moved = self._follow_wall_clock()
        return self._run([{"advance": duration}, {"sweep": True}], moved=moved)

    def reset(self) -> list[str]:
        """Start over: a new environment at the current product clock, the script's unused
        responses kept. The recording spans it: an expectation on the appointments and facts
        as they were, then a `reset` step (docs/REPLAY.md), so nothing recorded is lost."""
        if self.database_url is not None:
            raise ChatError("/reset would empty your database: not with --database-url")
        now = self.env.clock.now()
        if len(self.steps) > self._section:  # nothing since the last reset: nothing to keep
            self.steps.append({"expect": self._expectation("as at the /reset")})
            self.steps.append({"reset": True})
        self._section = len(self.steps)
        if self.script is not None:
            used = {p: sum(1 for c in self.env.messages_api.calls if c.purpose == p
                           and c.status == 200) for p in PURPOSES}
            remaining = []
            for step in self.script:
                skip = min(used[step["for"]], len(step["model"]))
                used[step["for"]] -= skip
                items = step["model"][skip:]
                if items:
                    remaining.append({"model": items, "for": step["for"]})
            self.script = remaining
        self.env.close()
        self._open(now)
        return ["(reset: an empty database, a new conversation; a recording keeps what came "
                "before)"]

    def _follow_wall_clock(self) -> list[dict[str, Any]]:
        """Move the product clock by the whole seconds the wall clock moved since the last
        action; the `advance` step that does the same in a replay."""
        elapsed = int(self.wall() - self.last_wall)
        if elapsed < 1:
            return []
        self.last_wall += elapsed
        self.env.clock.advance(timedelta(seconds=elapsed))
        return [{"advance": f"{elapsed}s"}]

    def _run(self, actions: list[dict[str, Any]], *, moved: list[dict[str, Any]]) -> list[str]:
        """Run steps through the replay runner, then record them (after `moved`, the clock's
        steps already taken) after the model's responses they used. The runner's transcript
        lines are returned."""
        del self.lines[:]
        for action in actions:
            self.runner.step(len(self.steps), action)
        calls = self.env.messages_api.calls[self.calls_seen:]
        self.calls_seen = len(self.env.messages_api.calls)
        self.steps += moved + model_steps(calls) + actions
        out = list(self.lines)
        for call in calls:
            if call.status == 200:
                continue
            if unreachable(call.response):  # the relay's own 529: no answer came
                out.append(f"   [{call.purpose} call: {_error_text(call)}]")
            else:
                out.append(f"   [the Messages API answered {call.status} ({call.purpose}): "
                           f"{_error_text(call)}]")
        if self.env.messages_api.unscripted_calls > self.unscripted_seen:
            self.unscripted_seen = self.env.messages_api.unscripted_calls
            return out + self._script_ran_out(calls)
        retry = self._retry_at() if any(c.status != 200 for c in calls) else None
        if retry is not None:
            wait = max(0, int((retry - self.env.clock.now()).total_seconds()))
            out.append(f"   [a retry is due at {retry.astimezone(self.zone):%H:%M:%S} local "
                       f"(in {wait} s) on the product clock: /wait {_minutes(wait)}m lets it "
                       "run]")
        return out

    def _script_ran_out(self, calls: list[RecordedCall]) -> list[str]:
        """The lines saying the script has no reply left for a model call, after dropping the
        retries of the model-calling jobs waiting in the scheduled registry: a retry would meet
        the same empty script (the double answers 500 to an unscripted call), so `/wait` would
        only repeat the failure."""
        registry = ScheduledJobRegistry(queue=self.env.queue)  # type: ignore[no-untyped-call]
        for job_id in cast(list[bytes], self.env.redis.zrange(registry.key, 0, -1)):
            job = Job.fetch(job_id.decode(), connection=self.env.redis)
            if job.func_name in RETRIED_JOBS:
                registry.remove(job, delete_job=True)
        purposes = sorted({c.purpose for c in calls if c.status != 200}) or ["turn"]
        return [f"   [the script has no {' or '.join(purposes)} reply left: the product's "
                "retries are dropped (they would fail the same way). Add `model` steps to the "
                "--script file (docs/REPLAY.md) and start again, or /quit]"]

    def _retry_at(self) -> datetime | None:
        """When the earliest retry of a model-calling job (turn, compaction, facts) waiting in
        the scheduled registry is due; None when no retry follows."""
        registry = ScheduledJobRegistry(queue=self.env.queue)  # type: ignore[no-untyped-call]
        entries = cast(list[tuple[bytes, float]],
                       self.env.redis.zrange(registry.key, 0, -1, withscores=True))
        due = []
        for job_id, score in entries:
            job = Job.fetch(job_id.decode(), connection=self.env.redis)
            if job.func_name in RETRIED_JOBS:
                due.append(datetime.fromtimestamp(score, UTC))
        return min(due, default=None)

    # -- what the developer looks at ---------------------------------------------------------

    def appointments(self) -> list[dict[str, Any]]:
        """The tenant's appointments now, as REPLAY.md's `appointments` expectation takes
        them (replay/runner.appointment_entries: one per visit and status):
        `{"service", "start" (local, minutes), "status"}` and, for a visit of several
        services, `"services"`; by start time."""
        with session_scope(self.env.engine) as session:
            tenant = session.exec(select(Tenant).where(
                Tenant.phone_number_id == str(self.tenant["phone_number_id"]))).first()
            if tenant is None:
                return []
            return [{key: entry[key] for key in ("service", "status", "start")}
                    | ({"services": entry["services"]} if len(entry["services"]) > 1 else {})
                    for entry in appointment_entries(session, tenant)]

    def facts(self) -> list[dict[str, Any]]:
        """The chat customer's facts: `{"key", "value", "state"}`, oldest first."""
        with session_scope(self.env.engine) as session:
            contact = session.exec(select(Contact).where(Contact.wa_id == CHAT_WA_ID)).first()
            if contact is None:
                return []
            rows = session.exec(select(ContactFact).where(
                ContactFact.contact_id == contact.id).order_by(col(ContactFact.id))).all()
            return [{"key": f.key, "value": f.value, "state": f.state} for f in rows]

    def show_appointments(self) -> list[str]:
        """One line per visit (and status: a service cancelled apart is its own line), by
        start, in the tenant's language: its booking number, local day and time as the
        console shows them, each service with its professional (and its own start when the
        visit has several), and the status: "#1 02/06/2026 09:00  Corte (Rafa)  marcado",
        "#2 02/06/2026 09:00  Troca de óleo (Pedro) 09:00, Alinhamento (Pedro) 09:30
        marcado"; none: "(Nenhum agendamento)"."""
        with session_scope(self.env.engine) as session:
            rows = session.exec(select(Appointment, Service, Professional, Tenant).join(
                Service, col(Service.id) == col(Appointment.service_id)).join(
                Professional, col(Professional.id) == col(Appointment.professional_id)).join(
                Tenant, col(Tenant.id) == col(Appointment.tenant_id)).where(
                Tenant.phone_number_id == str(self.tenant["phone_number_id"])).order_by(
                col(Appointment.start_at), col(Appointment.id))).all()
            visits: dict[tuple[int, str], list[tuple[Appointment, Service, Professional]]] = {}
            for a, s, p, _ in rows:
                visits.setdefault((number_of(a), a.status), []).append((a, s, p))
            said = texts_for(rows[0][3].language if rows else
                             str(self.tenant.get("language") or "pt-BR"))
            lines = [f"   #{number} {group[0][0].start_at.astimezone(self.zone):{LOCAL_FORMAT}}  "
                     + ", ".join(f"{s.name} ({p.name})" + (
                         f" {a.start_at.astimezone(self.zone):%H:%M}" if len(group) > 1 else "")
                                 for a, s, p in group)
                     + f"  {said.get('status_' + status, status)}"
                     for (number, status), group in visits.items()]
        return lines or [f"   ({said['no_appointments'].rstrip('.')})"]

    def show_facts(self) -> list[str]:
        rows = self.facts()
        return [f"   {f['key']} = {f['value']} ({f['state']})" for f in rows] or \
            ["   (no facts about you yet: they are extracted when the session ends, /wait 25h)"]

    def show_context(self) -> list[str]:
        """The request of the model's last call: model, tools, system blocks, messages."""
        calls = self.env.messages_api.calls
        if not calls:
            return ["   (the model has not been called yet)"]
        call = calls[-1]
        request = call.request
        tools = ", ".join(t.get("name", "?") for t in request.get("tools") or []) or "(none)"
        lines = [f"   last call: purpose {call.purpose}, model {request.get('model')}, "
                 f"answered {call.status}", f"   tools: {tools}"]
        system = request.get("system") or []
        for n, block in enumerate([{"text": system}] if isinstance(system, str) else system):
            lines.append(f"   ── system[{n}]")
            lines += [f"   {line}" for line in str(block.get("text", "")).splitlines()]
        for message in request.get("messages") or []:
            lines.append(f"   ── {message.get('role')}")
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            lines += [f"   {line}" for block in blocks or [] for line in _block_lines(block)]
        return lines

    # -- the recording -----------------------------------------------------------------------

    def scenario(self, name: str = "chat") -> dict[str, Any]:
        """The session as a replay scenario (docs/REPLAY.md): the steps run so far, each after
        the model's responses it used, then an expectation on the appointments and facts now."""
        expect = self._expectation("as at the end of the chat")
        scenario = {"name": name,
                    "description": "Recorded with `wagent chat --record`; `wagent replay` "
                                   "replays it with the model's recorded responses, `wagent "
                                   "replay --live` sends the customer's messages to the model "
                                   "again.",
                    "clock": self.start.isoformat().replace("+00:00", "Z"),
                    "tenant": json.loads(json.dumps(self.tenant, default=str)),
                    "steps": [*self.steps, {"expect": expect}]}
        problems = validate_scenario(scenario, Path("."))
        if problems:  # a recording the runner would refuse is a bug here, not the user's
            raise RuntimeError(f"the recorded scenario is invalid: {problems[:3]}")
        return scenario

    def _expectation(self, label: str) -> dict[str, Any]:
        """The `expect` of the appointments and the customer's facts now."""
        return {"label": label, "appointments": self.appointments(),
                "facts": [{**f, "contact": CHAT_WA_ID} for f in self.facts()],
                "api_errors": 0}

    def close(self) -> None:
        self.env.close()


def _block_lines(block: dict[str, Any]) -> list[str]:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", "")).splitlines() or [""]
    if kind == "tool_use":
        return [f"[tool_use {block.get('name')} "
                f"{json.dumps(block.get('input'), ensure_ascii=False)}]"]
    if kind == "tool_result":
        content = block.get("content")
        text = content if isinstance(content, str) else " ".join(
            str(b.get("text", "")) for b in content or [] if isinstance(b, dict))
        flag = " (error)" if block.get("is_error") else ""
        return [f"[tool_result{flag}]", *text.splitlines()]
    return [f"[{kind}]"]


def _minutes(seconds: int) -> int:
    return max(1, -(-seconds // 60))


def _error_text(call: RecordedCall) -> str:
    error = call.response.get("error") if isinstance(call.response, dict) else None
    return str((error or {}).get("message") or call.response)[:200]
