"""Run replay scenarios (REPLAY.md): steps in order, expectations checked, a transcript kept."""

import contextlib
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import fakeredis
import redis
from sqlalchemy import func
from sqlmodel import Session, col, select

from core.clock import parse_duration
from operations.packages import view as package_view
from replay import seen
from replay.environment import ReplayEnvironment, load_body
from replay.errors import ScenarioError
from replay.media_steps import (
    add_media,
    media_step_problems,
    transcripts_step_problems,
)
from replay.messages_api import RecordedCall, check_item
from replay.relay import Relay
from storage import delivery
from storage.appointments import visit_of
from storage.conversations import with_staff
from storage.db import session_scope
from storage.errors import TenantConfigError
from storage.jobs import enqueue_flush
from storage.models import (
    Appointment,
    Contact,
    ContactFact,
    Conversation,
    CustomerPackage,
    Message,
    Outbound,
    Service,
    Tenant,
    ToolCall,
)
from storage.tenant_config import validate_config
from usage.ledger import model_cost_micro_usd
from whatsapp.inbound import InboundMessage, edit_text, parse_update
from workers.maintenance import find_stranded_sends

DEFAULT_TENANT: dict[str, Any] = {
    "phone_number_id": "109876543210987", "name": "Salão Exemplo",
    "timezone": "America/Sao_Paulo",
}
# what a `wagent` step sees as REDIS_URL when the replay runs on the in-process Redis: a
# refused connection, so a command never writes to a real Redis it happens to find
IN_PROCESS_REDIS = "redis://127.0.0.1:1/0"
USAGE_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
              "output_tokens")


Cli = Callable[[list[str]], int]  # the `wagent` command: argv -> exit status


@dataclass
class ScenarioResult:
    name: str
    passed: bool = True
    failures: list[str] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    api_errors: int = 0
    unscripted_calls: int = 0
    tool_errors: int = 0
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_KEYS, 0))
    leftover: dict[str, int] = field(default_factory=dict)
    transcript: list[str] = field(default_factory=list)
    customer_messages: int = 0  # inbound messages stored (a burst answered at once counts each)
    turn_calls: int = 0  # Messages API calls of purpose turn
    # the `model_fail` steps run ("turn 500"): not in api_errors, named in the verdict
    scripted_errors: list[str] = field(default_factory=list)
    model_micro_usd: int = 0  # the calls' cost at the ledger's prices (usage/ledger.py)

    def per_customer_message(self) -> dict[str, float | None]:
        """Issue 41: model calls (turn) and WhatsApp messages sent per customer message."""
        n = self.customer_messages
        return {"model_calls": round(self.turn_calls / n, 2) if n else None,
                "whatsapp_messages": round(len(self.sent) / n, 2) if n else None}

    def fail(self, message: str) -> None:
        self.passed = False
        self.failures.append(message)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "failures": self.failures,
                "sent": self.sent, "requests": self.requests, "api_errors": self.api_errors,
                "unscripted_calls": self.unscripted_calls, "tool_errors": self.tool_errors,
                "usage": self.usage, "leftover": self.leftover,
                "customer_messages": self.customer_messages, "turn_calls": self.turn_calls,
                "scripted_errors": self.scripted_errors, "model_micro_usd": self.model_micro_usd,
                "per_customer_message": self.per_customer_message()}


def run_scenario_file(path: str | Path, *, echo: Callable[[str], None] | None = None,
                      database_url: str | None = None, redis_url: str | None = None,
                      cli: Cli | None = None, live: Relay | None = None) -> ScenarioResult:
    """Load and run one scenario file. `echo` receives transcript lines as they happen; `cli`
    runs the scenario's `wagent` steps (`cli.main.main`; see `run_scenario`); `live` sends
    the model's calls to a real Messages API instead of the scripted responses."""
    path = Path(path)
    try:
        scenario = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        result = ScenarioResult(name=path.stem)
        result.fail(f"cannot read scenario: {exc}")
        return result
    return run_scenario(scenario, base=path.parent, echo=echo, database_url=database_url,
                        redis_url=redis_url, cli=cli, live=live)


SCENARIO_KEYS = {"name", "description", "notes", "clock", "tenant", "steps", "graph_templates"}
STEP_OPTIONS = {"model": {"for"}, "model_fail": {"for"}, "webhook": {"repeat", "status",
                                                                      "signature", "timestamp"},
                "drain": set(), "advance": set(), "sweep": set(), "graph_fail": set(),
                "expect": set(), "wagent": {"status", "output_contains"}, "tap": {"contact"},
                "media": set(), "transcripts": set(), "reset": set(), "cron": set(),
                "pix_paid": {"amount_cents", "replay", "signature", "status"}}
NETWORK_MODES = {"refused", "up", "drop"}
EXPECT_KEYS = {"sent_count", "sent", "tool_errors", "appointments", "conversation", "facts",
               "api_errors", "reads", "last_request_contains", "requests", "packages"}
NOTE_KEYS = {"label", "comment"}  # allowed on every step, expectation and matcher
MATCHER_KEYS = {"sent": {"to", "type", "text_contains", "text_equals", "options"},
                "appointments": {"service", "services", "start", "status", "confirmed",
                                 "for_name", "note", "series"},
                "facts": {"key", "value", "state", "contact"},
                "packages": {"package", "used", "left", "authorisation", "contact"},
                "conversation": {"status", "summary_contains", "count", "contact", "with_staff"}}
PURPOSES = {"turn", "summary", "facts", "probe"}
GRAPH_TEMPLATE_KEYS = {"name", "language", "body_parameters", "quick_replies"}
GRAPH_FAIL_KEYS = {"code", "network", "times"}


def validate_scenario(scenario: Any, base: Path) -> list[str]:
    """Every problem of a scenario found before it runs (unknown keys, bad durations, missing
    webhook files, malformed scripted responses, a bad tenant), so nothing half-runs.
    """
    if not isinstance(scenario, dict):
        return ["a scenario is a JSON object"]
    problems = [f"unknown top-level key {key!r} (known: {', '.join(sorted(SCENARIO_KEYS))})"
                for key in scenario if key not in SCENARIO_KEYS]
    try:
        datetime.fromisoformat(str(scenario.get("clock", "2026-06-01T13:00:00Z")))
    except ValueError:
        problems.append(f"clock {scenario.get('clock')!r} is not an ISO date-time")
    try:
        if not _creates_tenant(scenario):
            validate_config({**DEFAULT_TENANT, **(scenario.get("tenant") or {})})
    except TenantConfigError as exc:
        problems.append(f"tenant: {exc}")
    problems += graph_templates_problems(scenario.get("graph_templates"))
    steps = scenario.get("steps")
    if not isinstance(steps, list):
        return problems + ["steps must be a list"]
    for index, step in enumerate(steps):
        where = _named(step, f"step {index}") if isinstance(step, dict) else f"step {index}"
        problems += [f"{where}: {p}" for p in _step_problems(step, base)]
    return problems


def graph_templates_problems(value: Any) -> list[str]:
    """`graph_templates`: [{"name", "language", "body_parameters": N, "quick_replies": N}]."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(
            isinstance(t, dict) and set(t) <= GRAPH_TEMPLATE_KEYS | NOTE_KEYS
            and isinstance(t.get("name"), str)
            and isinstance(t.get("body_parameters", 0), int)
            and isinstance(t.get("quick_replies", 0), int) for t in value):
        return ['graph_templates takes [{"name", "language", "body_parameters": N, '
                '"quick_replies": N}]']
    return []


def _step_problems(step: Any, base: Path) -> list[str]:
    if not isinstance(step, dict):
        return ["not an object"]
    actions = [key for key in step if key in STEP_OPTIONS]
    if len(actions) != 1:
        return [f"needs exactly one of {', '.join(STEP_OPTIONS)}; got {sorted(step)}"]
    action = actions[0]
    problems = [f"unknown option {key!r} for {action}" for key in step
                if key != action and key not in STEP_OPTIONS[action] | NOTE_KEYS]
    problems += _note_problems(step, "")
    if step.get("for", "turn") not in PURPOSES:
        problems.append(f"for must be one of {sorted(PURPOSES)}")
    check = _ACTION_PROBLEMS.get(action)
    if check is not None:
        problems += check(step, base)
    wanted = step.get("output_contains", [])
    if not isinstance(wanted, list) or not all(isinstance(w, str) for w in wanted):
        problems.append("output_contains takes a list of strings")
    return problems


def _advance_problems(step: dict[str, Any], _base: Path) -> list[str]:
    try:
        parse_duration(str(step["advance"]))
    except ValueError as exc:
        return [str(exc)]
    return []


def _webhook_problems(step: dict[str, Any], base: Path) -> list[str]:
    value, problems = step["webhook"], []
    if isinstance(value, str) and not (base / value).is_file():
        problems.append(f"webhook file {value!r} not found next to the scenario ({base})")
    if step.get("timestamp", "clock") != "clock":
        problems.append('webhook timestamp takes "clock" (Meta\'s timestamps at the product '
                        "clock) or is left out (the body as it is)")
    return problems


def _model_problems(step: dict[str, Any], _base: Path) -> list[str]:
    value, problems = step["model"], []
    for item in value if isinstance(value, list) else [value]:
        try:
            check_item(item)
        except ValueError as exc:
            problems.append(f"model item {item!r}: {exc}")
    return problems


def _wagent_problems(step: dict[str, Any], _base: Path) -> list[str]:
    value = step["wagent"]
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        return []
    return ["wagent takes the command's arguments as a list of strings"]


def _reset_problems(step: dict[str, Any], _base: Path) -> list[str]:
    if step["reset"] is True:
        return []
    return ["reset takes true (an empty database from here on: `wagent chat`'s /reset)"]


def _tap_problems(step: dict[str, Any], _base: Path) -> list[str]:
    if isinstance(step["tap"], str) and step["tap"]:
        return []
    return ["tap takes the title of a list row or button as a string"]


# the checks of one step's action value, by action (`_step_problems`); the others take any
_ACTION_PROBLEMS: dict[str, Callable[[dict[str, Any], Path], list[str]]] = {
    "advance": _advance_problems,
    "webhook": _webhook_problems,
    "model": _model_problems,
    "expect": lambda step, _base: _expect_problems(step["expect"]),
    "wagent": _wagent_problems,
    "graph_fail": lambda step, _base: _graph_fail_problems(step["graph_fail"]),
    "reset": _reset_problems,
    "tap": _tap_problems,
    "media": lambda step, base: media_step_problems(step["media"], base),
    "transcripts": lambda step, _base: transcripts_step_problems(step["transcripts"]),
}


def _expect_problems(expect: Any) -> list[str]:
    """Unknown expectations, unknown matcher keys and malformed notes of an `expect`."""
    if not isinstance(expect, dict):
        return ["expect takes an object of expectations"]
    problems = [f"unknown expectation {key!r}" for key in expect
                if key not in EXPECT_KEYS | NOTE_KEYS]
    problems += _note_problems(expect, "expect ")
    if "requests" in expect:
        problems += seen.problems(expect["requests"], notes=NOTE_KEYS)
    for key, known in MATCHER_KEYS.items():
        value = expect.get(key)
        items = [value] if key == "conversation" else value
        if value is None or not isinstance(items, list):
            continue
        for n, item in enumerate(items):
            where = f"{key}" if key == "conversation" else f"{key}[{n}]"
            if not isinstance(item, dict):
                problems.append(f"{where} must be an object")
                continue
            problems += [f"{where}: unknown key {k!r} (known: {', '.join(sorted(known))})"
                         for k in item if k not in known | NOTE_KEYS]
            problems += _note_problems(item, f"{where} ")
    return problems


def _note_problems(item: dict[str, Any], where: str) -> list[str]:
    return [f"{where}{key} must be a string" for key in sorted(NOTE_KEYS)
            if key in item and not isinstance(item[key], str)]


def _named(item: dict[str, Any], base: str = "") -> str:
    """`base` with the item's `label` and `comment`, for a failure message: `step 3 "book
    tuesday" (the slot must be free)`."""
    label, comment = item.get("label"), item.get("comment")
    parts = [base] if base else []
    if label:
        parts.append(json.dumps(label, ensure_ascii=False))
    if comment:
        parts.append(f"({comment})")
    return " ".join(parts)


def _criteria(item: dict[str, Any]) -> dict[str, Any]:
    """A matcher without its notes: what is compared."""
    return {k: v for k, v in item.items() if k not in NOTE_KEYS}


def _graph_fail_problems(spec: Any) -> list[str]:
    if not isinstance(spec, dict) or ("code" in spec) == ("network" in spec):
        return ['graph_fail takes {"code": N, "times": n} or {"network": "refused" | "up" | '
                '"drop", "times": n}']
    if "network" in spec and spec["network"] not in NETWORK_MODES:
        return [f"graph_fail network must be one of {sorted(NETWORK_MODES)}"]
    unknown = sorted(set(spec) - GRAPH_FAIL_KEYS)
    return [f"unknown graph_fail key(s) {unknown}"] if unknown else []


def _creates_tenant(scenario: dict[str, Any]) -> bool:
    """The scenario sets its tenant up with `wagent tenant create` (no default tenant then)."""
    return "tenant" not in scenario and any(
        isinstance(step, dict) and step.get("wagent", [])[:2] == ["tenant", "create"]
        for step in scenario.get("steps") or [])


def run_scenario(scenario: dict[str, Any], *, base: Path = Path("."),
                 echo: Callable[[str], None] | None = None, database_url: str | None = None,
                 redis_url: str | None = None, cli: Cli | None = None,
                 live: Relay | None = None) -> ScenarioResult:
    """Run a scenario dict; the environment comes from DATABASE_URL / REDIS_URL when set.

    With `live` (`wagent replay --live`), `model` and `model_fail` steps are skipped and every
    call goes through the double to that Messages API (replay/relay.py); the rest runs and is
    checked as usual.

    A malformed scenario fails before anything runs, with every problem listed. `cli` is the
    `wagent` command's `main(argv) -> exit status`, which the scenario's `wagent` steps run; the
    CLI passes its own (the CLI stands above the replay: ARCHITECTURE.md, "Packages"), and
    a scenario with such a step fails without it.
    """
    result = ScenarioResult(name=str(scenario.get("name", "scenario"))
                            if isinstance(scenario, dict) else "scenario")
    database_url = database_url if database_url is not None else os.environ.get("DATABASE_URL")
    redis_url = redis_url if redis_url is not None else os.environ.get("REDIS_URL")
    for refusal in _refusals(scenario, base, redis_url):
        result.fail(refusal)
    if not result.passed:
        return result
    start = datetime.fromisoformat(str(scenario.get("clock", "2026-06-01T13:00:00Z")))

    def open_runner(at: datetime) -> _Runner:
        env = ReplayEnvironment(start=at, database_url=database_url or None,
                                redis_url=redis_url or None)
        runner = _Runner(env, result, base, echo or (lambda _line: None),
                         ZoneInfo(_tenant(scenario)["timezone"]), cli)
        if live is not None:
            env.messages_api.relay, runner.live = live, True
        return runner

    runner = open_runner(start)
    env: ReplayEnvironment | None = runner.env
    try:
        local = runner.env.clock.now().astimezone(ZoneInfo(_tenant(scenario)["timezone"]))
        source = f"live, from {live.base_url}" if live else "scripted"
        runner.say(f"   (clock: {local:%a %Y-%m-%d %H:%M} {local.tzname()}, "
                   f"{_tenant(scenario)['timezone']}; the model's replies are {source})")
        _set_up(runner.env, scenario)
        for index, step in enumerate(scenario.get("steps") or []):
            if isinstance(step, dict) and "reset" in step:  # an empty database, same clock
                runner.collect_totals()
                env = None  # closed in `_reopen`; the `finally` closes the new one
                runner = _reopen(runner, open_runner, scenario)
                env = runner.env
                continue
            runner.step(index, step)
    except ScenarioError as exc:
        result.fail(str(exc))
    except Exception as exc:  # a crash fails this scenario, never the whole batch
        result.fail(f"crashed: {type(exc).__name__}: {exc}")
    finally:
        if env is not None:
            runner.collect_totals()
            env.close()
    return result


def _refusals(scenario: Any, base: Path, redis_url: str | None) -> list[str]:
    """Why the scenario cannot run (it is malformed, or its Redis does not answer); []."""
    problems = [f"invalid scenario: {problem}" for problem in validate_scenario(scenario, base)]
    if not problems and redis_url and (unreachable := _unreachable(redis_url)):
        problems.append(f"REDIS_URL {redis_url} is not reachable ({unreachable}); unset "
                        "REDIS_URL to replay on the in-process stand-in")
    return problems


def _reopen(runner: "_Runner", open_runner: Callable[[datetime], "_Runner"],
            scenario: dict[str, Any]) -> "_Runner":
    """A `reset` step: the environment closed, a new one (an empty database) at the same
    clock, set up as the first was."""
    now = runner.env.clock.now()
    runner.env.close()
    runner = open_runner(now)
    runner.say("   [reset: an empty database, a new conversation]")
    _set_up(runner.env, scenario)
    return runner


def _set_up(env: ReplayEnvironment, scenario: dict[str, Any]) -> None:
    """What every environment of the scenario starts with: Meta's approved templates, and its
    tenant unless a `wagent tenant create` step makes it."""
    if scenario.get("graph_templates") is not None:
        env.graph_api.approve_templates(scenario["graph_templates"])
    if not _creates_tenant(scenario):
        env.add_tenant(_tenant(scenario))


def _unreachable(redis_url: str) -> str | None:
    try:
        redis.Redis.from_url(redis_url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        return str(exc)[:120]
    return None


def _tenant(scenario: dict[str, Any]) -> dict[str, Any]:
    return {**DEFAULT_TENANT, **(scenario.get("tenant") or {})}


class _Runner:
    def __init__(self, env: ReplayEnvironment, result: ScenarioResult, base: Path,
                 echo: Callable[[str], None], timezone: ZoneInfo, cli: Cli | None) -> None:
        self.env, self.result, self.base, self.echo = env, result, base, echo
        self.cli = cli
        self.timezone = timezone
        self.sent_mark = 0  # sends seen by the previous expect
        self.reads_mark = 0  # mark-as-read requests seen by the previous expect
        self.shown_reads = 0
        self.tool_mark = 0  # ToolCall id seen by the previous expect
        self.call_mark = 0  # Messages API calls seen by the previous expect
        self.shown_sends = 0
        self.shown_tools = 0
        self.shown_summaries = 0
        self.shown_facts = 0
        self.last_sender: str | None = None
        self.outbox_seen: dict[int, tuple[str, int]] = {}
        self.tool_base = 0  # ToolCall ids up to this one were there before the replay
        self.own_wa_id: str | None = None  # show only this customer's rows (None: all)
        self.live = False  # `model` steps skipped: the relay answers (run_scenario's `live`)
        self.taps = 0  # customer taps posted (their wamids)

    def show_only_own_rows(self, wa_id: str) -> None:
        """A kept database (`wagent chat --database-url`) holds earlier chats and other
        customers' conversations: from now on the transcript shows only the rows this run
        makes for the customer `wa_id` (tool calls, facts, outbox parts)."""
        self.own_wa_id = wa_id
        with session_scope(self.env.engine) as session:
            self.tool_base = session.exec(select(func.max(ToolCall.id))).one() or 0
            self.tool_mark = self.shown_tools = self.tool_base
            self.shown_facts = session.exec(select(func.max(ContactFact.id))).one() or 0
            for row in session.exec(select(Outbound)).all():
                self.outbox_seen[row.id or 0] = (row.status, row.attempts)

    def _own_contacts(self) -> Any:
        """The ids of the contacts whose rows are shown (a subquery), or None for all."""
        if self.own_wa_id is None:
            return None
        return select(Contact.id).where(Contact.wa_id == self.own_wa_id)

    def _own_conversations(self) -> Any:
        contacts = self._own_contacts()
        return None if contacts is None else select(Conversation.id).where(
            col(Conversation.contact_id).in_(contacts))

    def say(self, line: str) -> None:
        self.result.transcript.append(line)
        self.echo(line)

    def step(self, index: int, step: Any) -> None:
        if not isinstance(step, dict):
            raise ScenarioError(f"step {index}: not an object")
        where = _named(step, f"step {index}")
        if self.live and ("model" in step or "model_fail" in step):
            return
        action = next((name for name in _STEPS if name in step), None)
        if action is None:
            raise ScenarioError(f"{where}: unknown step {sorted(step)}")
        _STEPS[action](self, where, step)

    def _model(self, _where: str, step: dict[str, Any]) -> None:
        self.env.messages_api.script(step.get("for", "turn"), list(step["model"]))

    def _model_fail(self, _where: str, step: dict[str, Any]) -> None:
        """Script the failure; one a chat recorded (`recorded`: the error's message, the
        API's or the double's when its script ran out) is answered again and fails the
        replay, naming the error: a recording that met an error does not pass silently."""
        spec, purpose = step["model_fail"], step.get("for", "turn")
        recorded = spec.get("recorded")
        self.env.messages_api.fail(purpose, int(spec["status"]), int(spec.get("times", 1)),
                                   str(recorded) if recorded else None)
        self.result.scripted_errors.append(f"{purpose} {spec['status']}")
        if recorded:
            self.result.fail(f"the recording holds a Messages API error: {purpose} answered "
                             f"{spec['status']} ({str(recorded)[:120]}); the replay answers it "
                             "again, so record the chat again without it")

    def _drain(self, _where: str, _step: dict[str, Any]) -> None:
        self.env.drain()
        self._show_activity()

    def _advance(self, _where: str, step: dict[str, Any]) -> None:
        self.env.clock.advance(parse_duration(str(step["advance"])))
        local = self.env.clock.now().astimezone(self.timezone)
        self.say(f"   ... {step['advance']} later ({local:%a %Y-%m-%d %H:%M} local)")

    def _cron(self, _where: str, _step: dict[str, Any]) -> None:
        done = self.env.cron()
        self.say(f"   [cron: {done['reminders']} reminder(s) and notice(s) queued, "
                 f"{done['waitlist']} waitlist offer(s), "
                 f"{done['closed']} conversation(s) closed, {done['reconciled']} turn(s) "
                 f"reconciled{', the provider probe answered' if done['probe'] == 1 else ''}"
                 f"{f', {n} series visit(s) placed' if (n := done['series']) else ''}]")
        self._show_activity()

    def _pix_paid(self, where: str, step: dict[str, Any]) -> None:
        """The customer pays a Pix deposit (issue 48): the Mercado Pago double settles the
        charge of `pix_paid` (a reference, or "latest") and posts its signed notification."""
        reference = str(step["pix_paid"])
        if reference != "latest" and not any(
                p.reference == reference for p in self.env.mercadopago_api.payments.values()):
            self.result.fail(f"{where}: no Pix charge has the reference {reference!r}")
            return
        amount = step.get("amount_cents")
        status = self.env.pix_paid(reference, amount_cents=None if amount is None
                                   else int(amount), replay=bool(step.get("replay")),
                                   signature=str(step.get("signature", "valid")))
        if status != int(step.get("status", 200)):
            self.result.fail(f"{where}: the payment webhook answered {status}, expected "
                             f"{step.get('status', 200)}")
        self.say(f"   [Pix paid ({reference}); the provider's webhook answered {status}]")

    def _sweep(self, _where: str, _step: dict[str, Any]) -> None:
        closed = self.env.sweep()
        self.say(f"   [sweeper closed {closed} conversation(s)]")
        self._show_activity()

    def _media(self, _where: str, step: dict[str, Any]) -> None:
        add_media(self.env.graph_api, step["media"], self.base)

    def _transcripts(self, _where: str, step: dict[str, Any]) -> None:
        self.env.transcription_api.script(list(step["transcripts"]))

    def _expect(self, where: str, step: dict[str, Any]) -> None:
        _Expectations(self, where).check(step["expect"])

    def _graph_fail(self, _where: str, step: dict[str, Any]) -> None:
        spec = step["graph_fail"]
        times = int(spec.get("times", 1))
        if "code" in spec:
            self.env.graph_api.fail(int(spec["code"]), times)
        elif spec["network"] == "drop":
            self.env.graph_api.drop(times)
            self.say(f"   [WhatsApp will take the next {times} send(s) and hang up unanswered]")
        else:
            self.env.graph_unreachable(spec["network"] == "refused")
            self.say("   [WhatsApp unreachable: connections refused]"
                     if spec["network"] == "refused" else "   [WhatsApp reachable again]")

    def _webhook(self, where: str, step: dict[str, Any]) -> None:
        body = load_body(step["webhook"], self.base)
        if step.get("timestamp") == "clock":
            body = stamp_at(body, self.env.clock.now())
        expected = int(step.get("status", 200))
        signature = str(step.get("signature", "valid"))
        for attempt in range(int(step.get("repeat", 1))):
            status = self.env.post_webhook(body, signature=signature)
            if status != expected:
                self.result.fail(f"{where}: webhook answered {status}, expected {expected}")
            if attempt == 0:
                self._show_customer(body)
        if int(step.get("repeat", 1)) > 1:
            self.say(f"   (delivered {step['repeat']} times)")

    def _tap(self, where: str, title: str, contact: Any = None) -> None:
        """The customer taps `title` on the latest message that offered it (sent to
        `contact`, a phone or user id, when given): a list row or a
        reply button (`interactive.list_reply` / `button_reply`) or a template's quick-reply
        button (`button`, matched on its payload), posted as Meta shapes it (WhatsApp §3.4),
        quoting that message, stamped with the product's clock."""
        with session_scope(self.env.engine) as session:
            declared = [t for tenant in session.exec(select(Tenant)).all()
                        for t in tenant.templates or []]
        for send in reversed(self.env.graph_api.accepted):
            if contact and contact not in (send.body.get("to"), send.body.get("recipient")):
                continue
            reply = _tap_reply(send.body, title, declared)
            if reply is not None:
                break
        else:
            raise ScenarioError(f"{where}: no message sent so far offers {title!r}")
        address = send.body.get("to") or send.body.get("recipient")
        with session_scope(self.env.engine) as session:
            contact = session.exec(select(Contact).where(
                (col(Contact.wa_id) == address) | (col(Contact.user_id) == address))).first()
            wa_id, user_id = (contact.wa_id, contact.user_id) if contact else (address, None)
            name = (contact.profile_name if contact else None) or "Cliente"
        self.taps += 1
        message = {"context": {"from": "5511999990000", "id": send.wamid},
                   "id": f"wamid.TAP{self.taps:06d}",
                   "timestamp": str(int(self.env.clock.now().timestamp())), **reply}
        if wa_id:
            message["from"] = wa_id
        if user_id:
            message["from_user_id"] = user_id
        contact_entry: dict[str, Any] = {"profile": {"name": name}}
        contact_entry.update({k: v for k, v in (("wa_id", wa_id), ("user_id", user_id)) if v})
        body = json.dumps({"object": "whatsapp_business_account", "entry": [{
            "id": "102030405060708", "changes": [{"field": "messages", "value": {
                "messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "5511999990000",
                             "phone_number_id": send.phone_number_id},
                "contacts": [contact_entry], "messages": [message]}}]}]},
            separators=(",", ":")).encode()
        status = self.env.post_webhook(body)
        if status != 200:
            self.result.fail(f"{where}: webhook answered {status}, expected 200")
        self._show_customer(body)

    def _wagent(self, where: str, step: dict[str, Any]) -> None:
        """Run the real CLI in this process against the scenario's database and Redis; file
        arguments are relative to the scenario. Fails the scenario on another exit status."""
        main = self.cli
        if main is None:
            raise ScenarioError(f"{where}: a wagent step needs the CLI (run_scenario(..., cli=))")
        args = [str(self.base / a) if _beside(self.base, a) else a for a in step["wagent"]]
        environ = {name.upper(): str(value) for name, value in self.env.settings.__dict__.items()
                   if name != "extra"}
        environ["DATABASE_URL"] = self.env.engine.url.render_as_string(hide_password=False)
        if isinstance(self.env.redis, fakeredis.FakeRedis):  # never a real Redis by default
            environ["REDIS_URL"] = IN_PROCESS_REDIS
        saved = {name: os.environ.get(name) for name in environ}
        out, err = io.StringIO(), io.StringIO()
        os.environ.update(environ)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = main(args)
        except SystemExit as exc:
            status = int(exc.code or 0)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        self._reflush_outbox()
        expected = int(step.get("status", 0))
        note = " (as expected)" if status and status == expected else ""
        self.say(f"   $ wagent {' '.join(step['wagent'])}  → exit {status}{note}")
        for line in (err.getvalue().strip().splitlines() if status else [])[:5]:
            self.say(f"     {line}")
        if status != int(step.get("status", 0)):
            self.result.fail(f"{where}: wagent {' '.join(step['wagent'])} exited {status}, "
                             f"expected {step.get('status', 0)}: {err.getvalue().strip()[:300]}")
        for wanted in step.get("output_contains", []):
            if wanted not in out.getvalue():
                self.result.fail(f"{where}: wagent {' '.join(step['wagent'])} printed no "
                                 f"{wanted!r}")
        with session_scope(self.env.engine) as session:  # the CLI may have set the zone
            tenant = session.exec(select(Tenant).order_by(col(Tenant.id))).first()
            if tenant is not None:
                self.timezone = ZoneInfo(tenant.timezone)

    def _reflush_outbox(self) -> None:
        """A command that queued a send (a staff reply) cannot reach the in-process Redis:
        enqueue the flush the reconciler would (workers/maintenance.py, stranded sends)."""
        for conversation_id in find_stranded_sends(self.env.engine, now=self.env.clock.now(),
                                                   older_than=timedelta(0)):
            enqueue_flush(self.env.queue, self.env.namespace, conversation_id)

    def _show_customer(self, body: bytes) -> None:
        try:
            updates = parse_update(json.loads(body))
        except ValueError:
            self.say("customer ▸ (unreadable body)")
            return
        for update in updates:
            if isinstance(update, InboundMessage):
                self.last_sender = update.wa_id or update.user_id
                edited = update.wa_type == "edit"
                self.say(f"customer ▸ {edit_text(update.text, None) if edited else update.text}")

    def _show_activity(self) -> None:
        with session_scope(self.env.engine) as session:
            query = select(ToolCall).where(col(ToolCall.id) > self.shown_tools)
            if (own := self._own_conversations()) is not None:
                query = query.where(col(ToolCall.conversation_id).in_(own))
            calls = session.exec(query.order_by(col(ToolCall.id))).all()
            for call in calls:
                flag = " (error)" if call.is_error else ""
                self.say(f"   tool {call.name}({json.dumps(call.input, ensure_ascii=False)})"
                         f"{flag} → {_one_line(call.result)}")
                self.shown_tools = call.id or self.shown_tools
        for read in self.env.graph_api.reads[self.shown_reads:]:
            self.say("   [marked read" + (", typing… shown]" if "typing_indicator" in read
                                          else "]"))
        self.shown_reads = len(self.env.graph_api.reads)
        for send in self.env.graph_api.sends[self.shown_sends:]:
            if send.wamid:
                self.say(f"agent    ◂ {_sent_text(send.body)}")
            else:
                self.say(f"   [send refused by WhatsApp: code {send.error_code}]")
        self.shown_sends = len(self.env.graph_api.sends)
        self._show_outbox()
        self._show_facts()
        summaries = [c for c in self.env.messages_api.calls if c.purpose == "summary"]
        for summary in summaries[self.shown_summaries:]:
            state = "summary updated" if summary.status == 200 else f"failed ({summary.status})"
            self.say(f"   [compaction: {state}]")
        self.shown_summaries = len(summaries)

    def _show_outbox(self) -> None:
        """A line for each outbox part whose fate changed to anything but sent (the send line
        above shows those): waiting for a retry, failed, refused, unknown."""
        with session_scope(self.env.engine) as session:
            query = select(Outbound)
            if (own := self._own_conversations()) is not None:
                query = query.where(col(Outbound.conversation_id).in_(own))
            rows = session.exec(query.order_by(col(Outbound.id))).all()
        for row in rows:
            seen = (row.status, row.attempts)
            if self.outbox_seen.get(row.id or 0) == seen:
                continue
            self.outbox_seen[row.id or 0] = seen
            state = delivery.state_of(row.status)
            if state in ("failed", "unknown") or (state == "queued" and row.attempts):
                self.say(f"   [reply part {row.part} of message #{row.message_id}: {state} · "
                         f"{delivery.reason_line(row)}]")

    def _show_facts(self) -> None:
        with session_scope(self.env.engine) as session:
            query = select(ContactFact).where(col(ContactFact.id) > self.shown_facts)
            if (contacts := self._own_contacts()) is not None:
                query = query.where(col(ContactFact.contact_id).in_(contacts))
            facts = session.exec(query.order_by(col(ContactFact.id))).all()
        for fact in facts:
            self.say(f"   [fact {fact.key} = {fact.value} ({fact.state}, {fact.origin})]")
            self.shown_facts = fact.id or self.shown_facts

    def collect_totals(self) -> None:
        """Add this environment's figures to the result (once per environment: a `reset`
        step collects the one it ends)."""
        api = self.env.messages_api
        self.result.requests += len(api.calls)
        self.result.turn_calls += sum(1 for c in api.calls if c.purpose == "turn")
        self.result.api_errors += api.api_errors
        unscripted = api.unscripted_calls
        self.result.unscripted_calls += unscripted
        self.result.leftover = api.leftover()
        totals = api.usage_totals()
        self.result.model_micro_usd += sum(_call_cost(c) for c in api.calls)
        self.result.usage = {k: self.result.usage.get(k, 0) + int(totals.get(k, 0))
                             for k in USAGE_KEYS}
        self.result.sent += [_send_view(s.body) for s in self.env.graph_api.sends if s.wamid]
        with session_scope(self.env.engine) as session:
            query = select(ToolCall).where(col(ToolCall.is_error).is_(True),
                                            col(ToolCall.id) > self.tool_base)
            if (own := self._own_conversations()) is not None:
                query = query.where(col(ToolCall.conversation_id).in_(own))
            self.result.tool_errors += len(session.exec(query).all())
            inbound = select(Message.id).where(Message.direction == "inbound")
            if own is not None:
                inbound = inbound.where(col(Message.conversation_id).in_(own))
            self.result.customer_messages += len(session.exec(inbound).all())
        if unscripted:
            purposes = sorted({c.purpose for c in api.calls if c.status == 500
                               and "unscripted" in json.dumps(c.response)})
            self.result.fail(f"{unscripted} unscripted Messages API call(s) "
                             f"for purpose {', '.join(purposes)}: add a `model` step with "
                             f"\"for\": \"{purposes[0] if purposes else 'turn'}\"")
        if self.result.leftover:
            self.say(f"   (scripted responses left unused: {self.result.leftover})")


def stamp_at(body: bytes, now: datetime) -> bytes:
    """A webhook body whose messages and statuses carry Meta's `timestamp` at `now` (whole
    seconds): a bundled message is then sent "now" at any scenario clock, inside the 24-hour
    window (WhatsApp §6). A body that is not JSON is returned as it is."""
    try:
        document = json.loads(body)
    except ValueError:
        return body
    at = str(int(now.timestamp()))
    for entry in document.get("entry") or [] if isinstance(document, dict) else []:
        for change in (entry.get("changes") or []) if isinstance(entry, dict) else []:
            value = change.get("value") if isinstance(change, dict) else None
            if isinstance(value, dict) and "timestamp" in value:  # a handover
                value["timestamp"] = at
            nested = value.get("standby") if isinstance(value, dict) else None  # issue 45
            for part in (value, nested):
                for kind in ("messages", "statuses", "message_echoes"):
                    for item in part.get(kind) or [] if isinstance(part, dict) else []:
                        if isinstance(item, dict) and "timestamp" in item:
                            item["timestamp"] = at
    return json.dumps(document, separators=(",", ":")).encode()  # escaped, as Meta sends it


def _one_line(text: str, limit: int = 160) -> str:
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _call_cost(call: RecordedCall) -> int:
    """A successful call's cost in µUSD, priced as the product prices it
    (usage/ledger.model_cost_micro_usd); 0 for a failed one."""
    usage = call.usage or {}
    if call.status != 200 or not usage:
        return 0
    detail = usage.get("cache_creation") or {}
    return model_cost_micro_usd(
        str(call.request.get("model", "")), int(usage.get("input_tokens") or 0),
        int(usage.get("cache_creation_input_tokens") or 0),
        int(detail.get("ephemeral_1h_input_tokens") or 0),
        int(usage.get("cache_read_input_tokens") or 0), int(usage.get("output_tokens") or 0))


def _send_view(body: dict[str, Any]) -> dict[str, Any]:
    view = {"to": body.get("to") or body.get("recipient"), "type": body.get("type")}
    if body.get("type") == "text":
        view["text"] = (body.get("text") or {}).get("body")
    if body.get("type") == "interactive":  # a list or reply buttons: the body and the titles
        view["text"] = ((body.get("interactive") or {}).get("body") or {}).get("text")
        view["options"] = [title for title, _ in _offered(body)]
    return view


def _offered(body: dict[str, Any], declared: list[dict[str, Any]] | None = None
             ) -> list[tuple[str, dict[str, Any]]]:
    """(title, the customer's reply to it) of every option a sent message offers. A
    template's quick reply is titled as the tenant declared its button (`declared`: the
    tenants' `templates`; the send carries only the payload), else by its payload."""
    if body.get("type") == "template":
        template = body.get("template") or {}
        titles = next(([str(b.get("title")) if isinstance(b, dict) else str(b)
                        for b in t.get("buttons") or []] for t in declared or []
                       if t.get("name") == template.get("name")), [])
        offered = []
        for c in template.get("components") or []:
            if c.get("type") != "button" or c.get("sub_type") != "quick_reply":
                continue
            index = int(c.get("index", 0))
            for p in c.get("parameters") or []:
                if p.get("type") == "payload":
                    title = titles[index] if index < len(titles) else str(p.get("payload"))
                    offered.append((title, {"type": "button", "button": {
                        "payload": p.get("payload"), "text": title}}))
        return offered
    interactive = body.get("interactive") or {}
    action = interactive.get("action") or {}
    if interactive.get("type") == "button":
        return [(str(b["reply"]["title"]), {"type": "interactive", "interactive": {
                    "type": "button_reply", "button_reply": dict(b["reply"])}})
                for b in action.get("buttons") or []]
    if interactive.get("type") == "list":
        return [(str(r["title"]), {"type": "interactive", "interactive": {
                    "type": "list_reply", "list_reply": dict(r)}})
                for s in action.get("sections") or [] for r in s.get("rows") or []]
    return []


def _tap_reply(body: dict[str, Any], title: str,
               declared: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    return next((reply for offered, reply in _offered(body, declared) if offered == title),
                None)


def _beside(base: Path, argument: str) -> bool:
    """Whether a `wagent` step's argument names a file next to the scenario; an argument no
    file can be named by (too long, a NUL) is plain text, not an OSError."""
    try:
        return (base / argument).is_file()
    except (OSError, ValueError):
        return False


def appointment_entries(session: Session, tenant: Tenant) -> list[dict[str, Any]]:
    """The tenant's appointments as the `appointments` expectation reads them (docs/REPLAY.md):
    one entry per visit and status (a visit of one service: one per booking), by start;
    `wagent chat --record` writes the same entries."""
    tz = ZoneInfo(tenant.timezone)
    rows = session.exec(select(Appointment, Service).join(
        Service, col(Service.id) == col(Appointment.service_id)).where(
        Appointment.tenant_id == tenant.id).order_by(col(Appointment.start_at),
                                                     col(Appointment.id))).all()
    groups: dict[tuple[int, str], list[tuple[Appointment, Service]]] = {}
    for appointment, service in rows:
        groups.setdefault((visit_of(appointment), appointment.status), []).append(
            (appointment, service))
    return [{"service": group[0][1].code, "services": [s.code for _, s in group],
             "status": group[0][0].status, "for_name": group[0][0].for_name,
             "note": group[0][0].note, "series": group[0][0].series_id,
             "confirmed": all(a.confirmed_at is not None for a, _ in group),
             "start": group[0][0].start_at.astimezone(tz).replace(tzinfo=None)
             .isoformat(timespec="minutes")} for group in groups.values()]


# what `_Runner.step` does for each action (a step has exactly one: `_step_problems`); `reset`
# is `run_scenario`'s, which opens a new environment
_STEPS: dict[str, Callable[[_Runner, str, dict[str, Any]], None]] = {
    "model": _Runner._model,
    "model_fail": _Runner._model_fail,
    "webhook": _Runner._webhook,
    "drain": _Runner._drain,
    "advance": _Runner._advance,
    "cron": _Runner._cron,
    "sweep": _Runner._sweep,
    "graph_fail": _Runner._graph_fail,
    "media": _Runner._media,
    "transcripts": _Runner._transcripts,
    "expect": _Runner._expect,
    "wagent": _Runner._wagent,
    "tap": lambda runner, where, step: runner._tap(where, str(step["tap"]),
                                                   step.get("contact")),
    "pix_paid": _Runner._pix_paid,
}


class _Expectations:
    def __init__(self, runner: _Runner, where: str) -> None:
        self.runner, self.where, self.env = runner, where, runner.env

    def fail(self, message: str) -> None:
        self.runner.result.fail(f"{self.where}: {message}")

    def check(self, expect: dict[str, Any]) -> None:
        sends = [_send_view(s.body) for s in self.env.graph_api.sends if s.wamid]
        new_sends = sends[self.runner.sent_mark:]
        self.where = _named(expect, self.where)
        for key, value in _criteria(expect).items():
            checker = getattr(self, f"_check_{key}", None)
            if checker is None:
                raise ScenarioError(f"{self.where}: unknown expectation {key!r}")
            checker(value, new_sends)
        self.runner.sent_mark = len(sends)
        self.runner.reads_mark = len(self.env.graph_api.reads)
        self.runner.call_mark = len(self.env.messages_api.calls)
        with session_scope(self.env.engine) as session:
            last = session.exec(select(ToolCall).order_by(col(ToolCall.id).desc())).first()
            self.runner.tool_mark = last.id if last and last.id else self.runner.tool_mark

    def _check_sent_count(self, value: int, new_sends: list[dict[str, Any]]) -> None:
        if len(new_sends) != int(value):
            self.fail(f"sent_count {len(new_sends)}, expected {value}")

    def _check_sent(self, matchers: list[dict[str, Any]], new_sends: list[dict[str, Any]]) -> None:
        position = 0
        for matcher in matchers:
            while position < len(new_sends) and not _matches(new_sends[position], matcher):
                position += 1
            if position == len(new_sends):
                self.fail(f"no send matching {_named(matcher, 'sent')} {_criteria(matcher)} "
                          f"(in order) among {new_sends}")
                return
            position += 1

    def _check_reads(self, value: int, _: list[dict[str, Any]]) -> None:
        """Mark-as-read requests since the previous `expect`, each with the typing indicator."""
        reads = self.env.graph_api.reads[self.runner.reads_mark:]
        if len(reads) != int(value):
            self.fail(f"reads {len(reads)}, expected {value}")
        plain = [r for r in reads if r.get("typing_indicator") != {"type": "text"}]
        if plain:
            self.fail(f"{len(plain)} mark-as-read request(s) without the typing indicator")
    def _check_last_request_contains(self, wanted: list[str], _: list[dict[str, Any]]) -> None:
        """Each string appears in the messages of the last turn request the double took."""
        request = self.env.messages_api.last_requests.get("turn") or {}
        text = json.dumps(request.get("messages", []), ensure_ascii=False)
        for item in wanted:
            if str(item) not in text:
                self.fail(f"the last turn request does not contain {item!r}")

    def _check_tool_errors(self, value: int, _: list[dict[str, Any]]) -> None:
        with session_scope(self.env.engine) as session:
            count = len(session.exec(select(ToolCall).where(
                col(ToolCall.id) > self.runner.tool_mark, col(ToolCall.is_error).is_(True))).all())
        if count != int(value):
            self.fail(f"tool_errors {count}, expected {value}")

    def _check_api_errors(self, value: int, _: list[dict[str, Any]]) -> None:
        if self.env.messages_api.api_errors != int(value):
            self.fail(f"api_errors {self.env.messages_api.api_errors}, expected {value}")

    def _check_appointments(self, expected: list[dict[str, Any]], _: list[dict[str, Any]]) -> None:
        with session_scope(self.env.engine) as session:
            tenant = session.exec(select(Tenant)).first()
            assert tenant is not None
            actual = appointment_entries(session, tenant)
        wanted = [_criteria(e) for e in expected]
        if len(actual) != len(wanted) or not all(
                _subset(e, a) for e, a in zip(_sorted(wanted), _sorted(actual), strict=True)):
            notes = "; ".join(_named(e, f"appointments[{n}]") for n, e in enumerate(expected)
                              if NOTE_KEYS & e.keys())
            self.fail(f"appointments {actual}, expected {wanted}"
                      + (f" [{notes}]" if notes else ""))

    def _check_conversation(self, expected: dict[str, Any], _: list[dict[str, Any]]) -> None:
        what = _named(expected, "conversation")
        with session_scope(self.env.engine) as session:
            contact = self._contact(session, expected.get("contact"))
            if contact is None:
                self.fail(f"{what}: no contact "
                          f"{expected.get('contact') or self.runner.last_sender}")
                return
            conversations = session.exec(select(Conversation).where(
                Conversation.contact_id == contact.id).order_by(col(Conversation.id))).all()
        latest = conversations[-1] if conversations else None
        if latest is None:
            self.fail(f"{what}: the contact has no conversation")
            return
        if "status" in expected and latest.status != expected["status"]:
            self.fail(f"{what} status {latest.status}, expected {expected['status']}")
        if "count" in expected and len(conversations) != int(expected["count"]):
            self.fail(f"{what} count {len(conversations)}, expected {expected['count']}")
        wanted = expected.get("summary_contains")
        if wanted is not None and str(wanted) not in latest.summary:
            self.fail(f"{what}: summary does not contain {wanted!r}")
        staffed = with_staff(latest, self.env.clock.now())
        if "with_staff" in expected and staffed != bool(expected["with_staff"]):
            self.fail(f"{what} with_staff {staffed}, expected {expected['with_staff']}")

    def _check_facts(self, expected: list[dict[str, Any]], _: list[dict[str, Any]]) -> None:
        contact_ref = expected[0].get("contact") if expected else None
        with session_scope(self.env.engine) as session:
            contact = self._contact(session, contact_ref)
            facts = [] if contact is None else session.exec(select(ContactFact).where(
                ContactFact.contact_id == contact.id).order_by(col(ContactFact.id))).all()
            actual = [{"key": f.key, "value": f.value, "state": f.state} for f in facts]
        for n, fact in enumerate(expected):
            wanted = {k: v for k, v in _criteria(fact).items() if k != "contact"}
            if not any(_subset(wanted, a) for a in actual):
                self.fail(f"no fact matching {_named(fact, f'facts[{n}]')} {wanted} "
                          f"among {actual}")

    def _check_packages(self, expected: list[dict[str, Any]], _: list[dict[str, Any]]) -> None:
        """A contact's packages (issue 46): each entry matches one of them, by code, sessions
        used and left, authorisation; `contact` as for facts."""
        contact_ref = expected[0].get("contact") if expected else None
        with session_scope(self.env.engine) as session:
            contact = self._contact(session, contact_ref)
            rows = [] if contact is None else session.exec(select(CustomerPackage).where(
                CustomerPackage.contact_id == contact.id).order_by(
                col(CustomerPackage.id))).all()
            actual = [{k: v for k, v in package_view(session, row).items()
                       if k in ("package", "used", "left", "authorisation")} for row in rows]
        for n, entry in enumerate(expected):
            wanted = {k: v for k, v in _criteria(entry).items() if k != "contact"}
            if not any(_subset(wanted, a) for a in actual):
                self.fail(f"no package matching {_named(entry, f'packages[{n}]')} {wanted} "
                          f"among {actual}")

    def _check_requests(self, spec: dict[str, Any], _: list[dict[str, Any]]) -> None:
        """What the model saw since the previous expect (replay/seen.py, REPLAY.md)."""
        purpose = spec.get("purpose", "turn")
        bodies = [call.request for call in self.env.messages_api.calls[self.runner.call_mark:]
                  if call.purpose == purpose]
        for failure in seen.failures(_criteria(spec), bodies):
            self.fail(f"{_named(spec, '')} {failure}".strip())

    def _contact(self, session: Any, ref: str | None) -> Contact | None:
        ref = ref or self.runner.last_sender
        if not ref:
            return None
        contact: Contact | None = session.exec(select(Contact).where(
            (col(Contact.wa_id) == ref) | (col(Contact.user_id) == ref))).first()
        return contact


def _matches(send: dict[str, Any], matcher: dict[str, Any]) -> bool:
    text = send.get("text") or ""
    return ((matcher.get("to") is None or send.get("to") == matcher["to"])
            and (matcher.get("type") is None or send.get("type") == matcher["type"])
            and (matcher.get("text_contains") is None or matcher["text_contains"] in text)
            and (matcher.get("text_equals") is None or matcher["text_equals"] == text)
            and (matcher.get("options") is None or matcher["options"] == send.get("options")))


def _subset(expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    return all(actual.get(k) == v for k, v in expected.items())


def _sorted(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(items, key=lambda item: (str(item.get("start", "")), str(item.get("status", ""))))


def _sent_text(body: dict[str, Any]) -> str:
    """What a send put on the customer's phone, as a transcript line: the text, or for a
    template its name, language and body parameters (the Graph API's `template` object:
    docs/ARCHITECTURE.md, Sessions, the 24-hour window), for a list or buttons the body, the list's
    button label and the titles offered with their descriptions (`Qual prefere? [list "Ver
    horários": Qua 02/12 14:00 (Júlia) | ...]`), or the message type."""
    if body.get("type") == "template":
        template = body.get("template") or {}
        language = (template.get("language") or {}).get("code", "")
        parameters = [str(p.get("text", "")) for c in template.get("components") or []
                      if c.get("type") == "body" for p in c.get("parameters") or []]
        shown = f" ({', '.join(parameters)})" if parameters else ""
        return f"[template {template.get('name')} {language}]{shown}"
    interactive = body.get("interactive") or {}
    kind = interactive.get("type")
    if body.get("type") == "interactive" and kind in ("list", "button"):
        options = " | ".join(
            title + (f" ({reply['interactive']['list_reply']['description']})"
                     if reply["interactive"].get("list_reply", {}).get("description") else "")
            for title, reply in _offered(body))
        label = (interactive.get("action") or {}).get("button")
        named = f' "{label}"' if kind == "list" and label else ""
        return f"{_send_view(body).get('text')} [{kind}{named}: {options}]"
    return str(((body.get("text") or {}).get("body")) or body.get("type"))

