"""What the admin commands (`wagent tenant|catalog|facts|conversations|appointments ...`,
cli/tenants.py and the other groups' modules) share: the admin API's operations from a shell,
for scripts and first set-up (operations/service.py does the work for both).

Tenants are named by their phone_number_id. Results print as JSON on stdout; errors print on
stderr and exit with status 2. Files may be JSON or YAML.
"""

import argparse
import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from cli.environment import settings_or_exit
from core import clock
from operations.errors import AdminError, NotFound
from operations.service import clean_text
from operations.settings import find_tenant
from storage.db import make_engine, session_scope
from storage.errors import CatalogueConflict, TenantConfigError
from storage.models import ContactFact, Conversation, Tenant

TenantAction = Callable[[argparse.Namespace, Any, Any, datetime], Any]


def read_document(path: Path) -> Any:
    """A JSON or YAML file's content (YAML by extension .yaml/.yml); ValueError when malformed
    (nested too deep, NUL characters included)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            document = yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError) as exc:
            raise ValueError(f"{path}: not valid YAML: {str(exc)[:300]}") from None
    else:
        try:
            document = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"{path}: not valid JSON: {str(exc)[:300]}") from None
    problems = clean_text(document, "file")
    if problems:
        raise ValueError(f"{path}: {'; '.join(problems[:5])}")
    return document


def parse_assignments(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs; a value that reads as JSON (numbers, lists, true) is taken as such."""
    changes: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{pair!r}: use key=value")
        try:
            changes[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            changes[key.strip()] = raw
    return changes


def conversation_ref(args: argparse.Namespace, command: str, engine: Any) -> int:
    """The conversation `PHONE_NUMBER_ID CONVERSATION_ID` names (cli/arguments.py:
    add_conversation_ref), checked to be that tenant's; the old one-argument form
    (CONVERSATION_ID alone) is taken with a warning on stderr. ValueError saying what is wrong.
    """
    if args.conversation_id is None:
        print(f"warning: `wagent {command} CONVERSATION_ID` is deprecated; name the tenant too: "
              f"`wagent {command} PHONE_NUMBER_ID CONVERSATION_ID`", file=sys.stderr)
        return _conversation_id(args.phone_number_id)
    conversation_id = _conversation_id(args.conversation_id)
    with session_scope(engine) as session:
        tenant = find_tenant(session, args.phone_number_id)
        if tenant is None:
            raise ValueError(f"no tenant with phone_number_id {args.phone_number_id}")
        found = session.get(Conversation, conversation_id)
        if found is None or found.tenant_id != tenant.id:
            raise ValueError(f"no conversation {conversation_id} of tenant "
                             f"{args.phone_number_id}")
    return conversation_id


def _conversation_id(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 2**31:
        raise ValueError(f"{text!r} is not a conversation id")
    return int(text)


class Lines(tuple[str, ...]):
    """A command's result that prints as lines of text (`print_json` prints them as they are)
    rather than as JSON: `wagent tenant update`'s changes."""


def print_json(result: Any) -> None:
    """A command's result on stdout: indented JSON, non-ASCII kept; `Lines` one a line."""
    if isinstance(result, Lines):
        print("\n".join(result))
    elif result is not None:
        print(json.dumps(result, ensure_ascii=False, indent=2, default=str))


def run_for_tenant(action: TenantAction) -> Callable[[argparse.Namespace], int]:
    """Wrap `action(args, session, tenant, now)` in one transaction on the tenant named by
    `args.phone_number_id`; print its result; map errors to a message and exit status 2."""
    def run(args: argparse.Namespace) -> int:
        def act(session: Any, now: datetime) -> Any:
            tenant = find_tenant(session, args.phone_number_id)
            if tenant is None:
                raise NotFound(f"no tenant with phone_number_id {args.phone_number_id}")
            return action(args, session, tenant, now)
        return _in_transaction(act)
    return run


def run_for_fact(action: Callable[[Any, Any, datetime], Any], *,
                 after: Callable[[], object] | None = None
                 ) -> Callable[[argparse.Namespace], int]:
    """`run_for_tenant` for a command that names only a fact (`args.fact_id`): the operator's
    shell sees every tenant, so the tenant is the fact's. `action(session, tenant, now)` is a
    `operations.service` operation, the one the API and the console call; `after` runs once it
    is committed (a job to enqueue)."""
    def run(args: argparse.Namespace) -> int:
        def act(session: Any, now: datetime) -> Any:
            fact = session.get(ContactFact, args.fact_id)
            tenant = session.get(Tenant, fact.tenant_id) if fact is not None else None
            if tenant is None:
                raise NotFound(f"no fact #{args.fact_id}")
            return action(session, tenant, now)
        return _in_transaction(act, after=after)
    return run


def _in_transaction(act: Callable[[Any, datetime], Any], *,
                    after: Callable[[], object] | None = None) -> int:
    """Run `act(session, now)` in one transaction, print its result, then `after`; errors
    print on stderr with exit status 2."""
    try:
        with session_scope(make_engine(settings_or_exit(require=False).database_url)) as session:
            result = act(session, clock.now())
    except AdminError as exc:
        if len(exc.problems) > 1:
            print("error:", file=sys.stderr)
            for problem in exc.problems:
                print(f"  {problem}", file=sys.stderr)
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 2
    except (TenantConfigError, CatalogueConflict, LookupError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_json(result)
    if after is not None:
        try:
            after()
        except Exception as exc:  # committed: say what is left to do
            print(f"error: done, but its follow-up job was not enqueued: {exc}",
                  file=sys.stderr)
            return 2
    return 0
