"""`wagent chat [TENANT_FILE] [--script FILE] [--record FILE]`: talk to a tenant's agent in the
terminal as a customer would, through the whole product on loopback (replay/chat.py); the
model is the real Messages API when ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL) is set, or the
Messages API double answering from `--script`. Exit status 2 on bad input or no model.

Start-up time: without a model (no key, a placeholder key) the command answers before it
imports the product (replay/, storage/, the SDK: seconds on a loaded machine); those imports
are inside the functions that need them (tests/test_chat.py times it in a fresh interpreter).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from core.credentials import SECRET_EXAMPLES, is_real_secret
from core.settings import ANTHROPIC_API_URL, DEFAULT_DATABASE_URL

if TYPE_CHECKING:
    from replay.chat import ChatSession
    from replay.relay import Relay

EXAMPLE_TENANT = Path(__file__).resolve().parent.parent / "examples" / "tenant.yaml"
NO_MODEL = ("wagent chat: no model to talk to. Set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL, "
            "for a compatible endpoint) to chat with the real model, or give --script FILE "
            "(a list of `model` steps: docs/REPLAY.md) to chat with scripted replies. "
            "To see the product work without a key, run `wagent demo`.")


class _Endpoint(Protocol):
    base_url: str
    api_key: str


def key_problem(relay: _Endpoint) -> str | None:
    """Why `relay` (a replay.relay.Relay, or anything with its `base_url` and `api_key`)
    cannot work before anything is sent: a key for api.anthropic.com that is
    empty or does not have the form of one (core/credentials.py), such as the placeholder
    the README's console set-up puts in `.env`. None for a compatible endpoint of your own
    (ANTHROPIC_BASE_URL elsewhere), which may take any key or none."""
    name = "ANTHROPIC_API_KEY"
    if relay.base_url.rstrip("/") != ANTHROPIC_API_URL or is_real_secret(name, relay.api_key):
        return None
    what = "is empty" if not relay.api_key.strip() else "is a placeholder"
    return (f"{name} (from the environment or .env) {what}, so nothing was sent to "
            f"{ANTHROPIC_API_URL}. Put your real key there: it looks like "
            f"{SECRET_EXAMPLES[name]}.")


class _Environment:
    """The Messages API the environment names, as strings (no import of replay.relay)."""

    def __init__(self) -> None:
        self.api_key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
        self.base_url = os.environ.get("ANTHROPIC_BASE_URL", "").strip() or ANTHROPIC_API_URL
        self.named = bool(self.api_key or os.environ.get("ANTHROPIC_BASE_URL", "").strip())


def relay_from_environment() -> Relay | None:
    """The real Messages API the environment names (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL),
    or None when it names none."""
    named = _Environment()
    if not named.named:
        return None
    from replay.relay import Relay  # lazy: aiohttp (start-up time: module docstring)
    return Relay(base_url=named.base_url, api_key=named.api_key)


def no_model(scripted: bool) -> str | None:
    """What `wagent chat` prints when it has no model to talk to (nothing named in the
    environment, or a key that cannot work: key_problem), from the environment alone: None
    when `scripted` (--script) or the environment names a usable endpoint."""
    if scripted:
        return None
    named = _Environment()
    if not named.named:
        return NO_MODEL
    problem = key_problem(named)
    return problem and (f"wagent chat: {problem} Or chat with scripted replies (--script "
                        "FILE: docs/REPLAY.md), or run `wagent demo`.")


def chat(args: argparse.Namespace) -> int:
    if message := no_model(scripted=args.script is not None):  # before the imports below
        print(message, file=sys.stderr)
        return 2
    from core.logs import configure_logging  # lazy from here on: start-up time (docstring)
    # the product's log lines never mix with the transcript (stdout): on stderr, and off
    # unless REPLAY_LOG_LEVEL asks (the transcript shows the model's failures itself)
    configure_logging(os.environ.get("REPLAY_LOG_LEVEL", "CRITICAL"), fmt="console",
                      stream=sys.stderr)
    path = args.tenant_file or EXAMPLE_TENANT
    database_url = _database_url(args)
    if database_url is not None and args.record:
        print("wagent chat: --record writes a scenario that replays on a database of its own; "
              "it cannot be kept in your database too (--database-url): use one or the other",
              file=sys.stderr)
        return 2
    opened = _session(args, path, database_url)
    if opened is None:
        return 2
    session, tenant = opened
    from replay.chat import CHAT_NAME
    interactive = sys.stdin.isatty()
    model = f"scripted ({args.script})" if args.script is not None else \
        f"the Messages API at {session.relay.base_url if session.relay else ''}"
    print(f"chat with {tenant.get('name', tenant['phone_number_id'])} ({path}); you are "
          f"{CHAT_NAME}; model: {model}. Type /help for commands, /quit to end.")
    if database_url is not None:
        print("kept in your database (--database-url): the console's Conversations page shows "
              "this chat")
    try:
        _loop(session, interactive)
    except KeyboardInterrupt:
        print()
    finally:
        try:
            if args.record:
                scenario = session.scenario(name=args.record.stem)
                args.record.write_text(json.dumps(scenario, ensure_ascii=False, indent=2) + "\n",
                                       encoding="utf-8")
                print(f"recorded {len(scenario['steps'])} step(s) to {args.record}; "
                      f"`wagent replay {args.record}` replays them")
                errors = [s for s in scenario["steps"] if "recorded" in s.get("model_fail", {})]
                if errors:  # replay/runner fails such a recording (model_steps keeps the error)
                    print(f"the recording holds {len(errors)} Messages API error(s) (e.g. a "
                          f"script that ran out) and will fail on replay; record the chat "
                          f"again without them")
        finally:
            session.close()
    return 0


def _session(args: argparse.Namespace, path: Path,
             database_url: str | None) -> tuple[ChatSession, dict[str, object]] | None:
    """The chat's session on the tenant file at `path` and the tenant as written, or None
    after printing why not (a bad file, script or --clock; a database without the schema)."""
    from cli.admin import read_document
    from replay.chat import ChatSession, load_script
    from storage.errors import TenantConfigError
    from storage.tenant_config import validate_config
    try:
        tenant = read_document(path)
        validate_config(tenant)
        script = load_script(read_document(args.script)) if args.script else None
        start = _start(args.clock)
    except (OSError, ValueError, TenantConfigError) as exc:  # ChatError is a ValueError
        print(f"wagent chat: {exc}", file=sys.stderr)
        return None
    relay = None if script is not None else relay_from_environment()
    try:
        return ChatSession(tenant, script=script, relay=relay, start=start,
                           database_url=database_url), tenant
    except ValueError as exc:  # the database has no schema
        print(f"wagent chat: {exc}", file=sys.stderr)
        return None


def _database_url(args: argparse.Namespace) -> str | None:
    """`--database-url URL`, or the configured DATABASE_URL for a bare `--database-url`; None
    without the flag (the chat's own database, gone at the end)."""
    given = getattr(args, "database_url", None)
    if given is None:
        return None
    return given or os.environ.get("DATABASE_URL", "").strip() or DEFAULT_DATABASE_URL


def _start(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        start = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--clock {text!r} is not an ISO date-time") from None
    if start.tzinfo is None:
        raise ValueError(f"--clock {text!r} needs a UTC offset (Z or +00:00)")
    return start


def _loop(session: ChatSession, interactive: bool) -> None:
    from replay.chat import ChatError
    while True:
        try:
            line = input("you ▸ " if interactive else "")
        except EOFError:
            return
        if line.strip() in ("/quit", "/exit"):
            return
        try:
            lines = session.handle(line)
        except ChatError as exc:
            print(f"   ({exc})")
            continue
        for shown in lines:
            if interactive and shown.startswith("customer ▸"):
                continue  # what was just typed
            print(shown)
