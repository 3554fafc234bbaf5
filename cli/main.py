"""The `wagent` command: run the processes, set up the database and tenants, replay scenarios.

The parser is built from light modules only (argparse; cli/arguments.py); each command names
its handler, "module:function" in one of the command groups' modules (cli/tenants.py,
cli/catalog.py, cli/facts.py, ...), which `main` imports when the command runs: `wagent --help`
imports no database, HTTP or SDK code. Entry points are the only place that reads `.env`
(python-dotenv).
"""

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dotenv import find_dotenv, load_dotenv

from cli.arguments import (
    add_catalog_commands,
    add_conversation_commands,
    add_conversation_ref,
    add_facts_commands,
    add_tenant_commands,
)


def main(argv: Sequence[str] | None = None) -> int:
    load_dotenv(find_dotenv(usecwd=True))  # the .env of the directory you run wagent in
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        return int(handler(args.run)(args) or 0)
    except Exception as exc:
        # a command that touched a database has loaded sqlalchemy.exc; no other can raise it
        errors = sys.modules.get("sqlalchemy.exc")
        if errors is None or not isinstance(exc, errors.OperationalError):
            raise
        hint = " (run `wagent db upgrade` first)" if "no such table" in str(exc) \
            or "does not exist" in str(exc) else ""
        print(f"database error{hint}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2


def handler(name: str) -> Callable[[argparse.Namespace], int | None]:
    """The function a command names, "module:function" (`set_defaults(run=...)` below and in
    cli/arguments.py); ImportError or AttributeError when it does not exist. A name, not the
    function: the function would import its module, and every module for `--help`
    (tests/test_cli_admin.py); the arrows that cross layers are the modules' own imports,
    which lint-imports checks."""
    module, _, function = name.partition(":")
    run: Callable[[argparse.Namespace], int | None] = getattr(
        importlib.import_module(module), function)  # lazy: start-up time
    return run


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wagent", description="The WhatsApp booking agent: run the processes, set up "
        "the database and tenants, review facts, exercise data rights, replay scenarios.")
    sub = parser.add_subparsers(title="commands")
    _add_scenario_commands(sub)
    _add_set_up_commands(sub)
    add_catalog_commands(sub)
    add_conversation_commands(sub)
    _add_contact_and_facts_commands(sub)
    add_webhook_commands(sub)
    _add_process_commands(sub)
    _add_dev_command(sub)
    return parser


def _add_scenario_commands(sub: Any) -> None:
    """`wagent replay|chat|demo`."""
    replay = sub.add_parser("replay", help="run replay scenario files (REPLAY.md)")
    replay.add_argument("files", nargs="+", type=Path)
    replay.add_argument("--json", action="store_true", help="one JSON object per scenario")
    replay.add_argument("--quiet", action="store_true", help="no transcript, only the verdicts")
    replay.add_argument("--live", action="store_true",
                        help="send the customers' messages to the real model again "
                             "(ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL) instead of the "
                             "scripted responses; the expectations still apply")
    replay.set_defaults(run="cli.scenarios:replay")

    chat = sub.add_parser(
        "chat", help="talk to a tenant's agent in the terminal, as a customer, before "
        "connecting WhatsApp (the whole product on loopback; the real model when "
        "ANTHROPIC_API_KEY is set, or --script)")
    chat.add_argument("tenant_file", nargs="?", type=Path, default=None,
                      help="the tenant, JSON or YAML (default: examples/tenant.yaml)")
    chat.add_argument("--script", type=Path, default=None, metavar="FILE",
                      help="answer from a list of `model` steps (docs/REPLAY.md), no key needed")
    chat.add_argument("--record", type=Path, default=None, metavar="FILE",
                      help="write the session as a replay scenario, for `wagent replay`")
    chat.add_argument("--clock", default=None, metavar="ISO",
                      help="start the product clock here (default: now), for scripts that "
                           "name dates: 2026-12-01T13:00:00Z")
    chat.add_argument("--database-url", nargs="?", const="", default=None, metavar="URL",
                      help="keep the chat in this database (default: the configured "
                           "DATABASE_URL, e.g. from .env), migrated with `wagent db upgrade`, "
                           "so the local console shows it; not with --record or /reset")
    chat.set_defaults(run="cli.chat:chat")

    demo = sub.add_parser("demo", help="run the bundled example scenario(s) with a transcript")
    demo.add_argument("--json", action="store_true")
    demo.set_defaults(run="cli.scenarios:demo")


def _add_set_up_commands(sub: Any) -> None:
    """`wagent db upgrade|report|tenant ...`."""
    db = sub.add_parser("db", help="database schema")
    db_sub = db.add_subparsers(title="db commands")
    upgrade = db_sub.add_parser("upgrade", help="create or migrate the schema (Alembic head)")
    upgrade.set_defaults(run="cli.database:upgrade")

    report = sub.add_parser("report", help="usage of one conversation: context per call "
                            "(the saw-tooth), cache-read share, compactions, cost, and its "
                            "replies by delivery state; writes a plot")
    add_conversation_ref(report)
    report.add_argument("--plot", type=Path, default=None,
                        help="SVG file to write (default: conversation-<id>.svg)")
    report.add_argument("--json", action="store_true")
    report.set_defaults(run="cli.report:report")

    costs = sub.add_parser("costs", help="model and WhatsApp costs per local day, µUSD "
                           "(docs/OPERATE.md, Costs); every tenant's totals without --tenant")
    costs.add_argument("--tenant", metavar="PHONE_NUMBER_ID", default=None,
                       help="one tenant, day by day")
    costs.add_argument("--from", dest="date_from", metavar="YYYY-MM-DD", default=None,
                       help="first local day (default: the 1st of this month)")
    costs.add_argument("--to", dest="date_to", metavar="YYYY-MM-DD", default=None,
                       help="last local day (default: today)")
    costs.add_argument("--json", action="store_true")
    costs.set_defaults(run="cli.costs:costs")

    docs = sub.add_parser("docs", help="generated documentation")
    docs_sub = docs.add_subparsers(title="docs commands")
    reference = docs_sub.add_parser("settings", help="write docs/SETTINGS.md from the code's "
                                    "definitions (tenant settings, environment variables)")
    reference.add_argument("--check", action="store_true",
                           help="write nothing; exit 1 when the page is stale")
    reference.set_defaults(run="cli.settings_reference:write")

    tenant = sub.add_parser("tenant", help="tenant set-up")
    tenant_sub = tenant.add_subparsers(title="tenant commands")
    create = tenant_sub.add_parser(
        "create", help="create or update a tenant, with its catalogue, from a JSON or YAML "
        "file (the `tenant` object of REPLAY.md; see examples/tenant.yaml)")
    create.add_argument("file", type=Path)
    create.set_defaults(run="cli.tenants:create")
    resume = tenant_sub.add_parser("resume", help="resume sending after the access token was "
                                   "fixed (a 190 from the Graph API paused the tenant)")
    resume.add_argument("phone_number_id")
    resume.set_defaults(run="cli.tenants:resume")
    add_tenant_commands(tenant_sub)


def _add_contact_and_facts_commands(sub: Any) -> None:
    """`wagent contact export|forget` (LGPD) and `wagent facts ...`."""
    contact = sub.add_parser("contact", help="data-subject rights (LGPD) for one contact")
    contact_sub = contact.add_subparsers(title="contact commands")
    for name, run, text in (
            ("export", "cli.contacts:export", "print everything stored about a contact as JSON"),
            ("forget", "cli.contacts:forget", "erase a contact from every layer; prints the "
                                              "receipt")):
        command = contact_sub.add_parser(name, help=text)
        command.add_argument("phone_number_id", help="the business number's phone_number_id")
        command.add_argument("contact",
                             help="the contact's phone number (wa_id), user id or contact id")
        command.set_defaults(run=run)

    facts = sub.add_parser("facts", help="contact facts: review, decide, forget, extract")
    facts_sub = facts.add_subparsers(title="facts commands")
    listing = facts_sub.add_parser("review", help="facts waiting for a person (suggested, "
                                   "pending_review) of a tenant")
    listing.add_argument("phone_number_id")
    listing.set_defaults(run="cli.facts:review")
    for name, run, text in (
            ("approve", "cli.facts:approve", "confirm a fact in review"),
            ("reject", "cli.facts:reject", "reject a fact in review; the summaries forget it too"),
            ("forget", "cli.facts:forget", "delete one fact; the summaries that repeat it are "
                                           "re-derived without it")):
        command = facts_sub.add_parser(name, help=text)
        command.add_argument("fact_id", type=int)
        command.add_argument("--reason", default="", help="why (kept with the decision)")
        command.set_defaults(run=run)
    extract = facts_sub.add_parser("extract", help="enqueue fact extraction for a conversation")
    add_conversation_ref(extract)
    extract.set_defaults(run="cli.facts:extract")
    add_facts_commands(facts_sub)


def _add_process_commands(sub: Any) -> None:
    """`wagent web|worker|cron`: the processes."""
    for name, run, text in (("web", "cli.web:web", "run the webhook web process"),
                            ("worker", "cli.worker:worker", "run an RQ worker (and a "
                                                            "keeper: the product's scheduler)"),
                            ("cron", "cli.cron:cron", "enqueue the periodic jobs (one is "
                                                      "enough; each job is guarded per period)")):
        command = sub.add_parser(name, help=text)
        command.set_defaults(run=run)
        if name == "worker":
            command.add_argument("--burst", action="store_true", help="exit when idle")
        if name == "web":
            command.add_argument("--processes", type=int, default=1, metavar="N",
                                 help="serve from N processes sharing the port (SO_REUSEPORT; "
                                      "default 1)")


def _add_dev_command(sub: Any) -> None:
    dev = sub.add_parser("dev", help="run web, worker and cron side by side for local use (the "
                         "Procfile); Ctrl-C stops all three, as does any one exiting")
    dev.set_defaults(run="cli.dev:dev")


def add_webhook_commands(sub: Any) -> None:
    """`wagent webhooks add|list|remove|rotate-secret` (cli/webhooks.py)."""
    hooks = sub.add_parser("webhooks", help="signed webhooks to the business's own systems")
    hooks_sub = hooks.add_subparsers(title="webhooks commands")
    add = hooks_sub.add_parser("add", help="add an endpoint; prints its secret once")
    add.add_argument("phone_number_id")
    add.add_argument("url", help="https://... (http only to WEBHOOK_ALLOWED_NETWORKS)")
    add.add_argument("--events", required=True, help="comma-separated: appointment.booked, "
                     "appointment.rescheduled, appointment.cancelled, handoff.requested, "
                     "fact.review_needed, message.failed")
    add.add_argument("--description", default="")
    add.set_defaults(run="cli.webhooks:add")
    listing = hooks_sub.add_parser("list", help="the tenant's endpoints (no secrets)")
    listing.add_argument("phone_number_id")
    listing.set_defaults(run="cli.webhooks:list_")
    for name, run, text in (("remove", "cli.webhooks:remove", "remove an endpoint"),
                            ("rotate-secret", "cli.webhooks:rotate_secret",
                             "a new secret, printed once; the old one signs beside it for "
                             "--grace-hours")):
        command = hooks_sub.add_parser(name, help=text)
        command.add_argument("phone_number_id")
        command.add_argument("id", type=int, help="the endpoint's id (from list)")
        if name == "rotate-secret":
            command.add_argument("--grace-hours", type=float, default=24.0)
        command.set_defaults(run=run)


if __name__ == "__main__":
    raise SystemExit(main())
