"""The `wagent` command: run the processes, set up the database and tenants, replay scenarios.

Entry points are the only place that reads `.env` (python-dotenv).
"""

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cli.environment import settings_or_exit

BUNDLED_SCENARIOS = Path(__file__).resolve().parent.parent / "replay" / "scenarios"


def main(argv: Sequence[str] | None = None) -> int:
    from dotenv import find_dotenv, load_dotenv

    load_dotenv(find_dotenv(usecwd=True))  # the .env of the directory you run wagent in
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    from sqlalchemy.exc import OperationalError

    try:
        return int(args.run(args) or 0)
    except OperationalError as exc:
        hint = " (run `wagent db upgrade` first)" if "no such table" in str(exc) \
            or "does not exist" in str(exc) else ""
        print(f"database error{hint}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    from cli.admin import (
        add_catalog_commands,
        add_conversation_commands,
        add_facts_commands,
        add_tenant_commands,
    )

    parser = argparse.ArgumentParser(
        prog="wagent", description="The WhatsApp booking agent: run the processes, set up "
        "the database and tenants, review facts, exercise data rights, replay scenarios.")
    sub = parser.add_subparsers(title="commands")

    replay = sub.add_parser("replay", help="run replay scenario files (REPLAY.md)")
    replay.add_argument("files", nargs="+", type=Path)
    replay.add_argument("--json", action="store_true", help="one JSON object per scenario")
    replay.add_argument("--quiet", action="store_true", help="no transcript, only the verdicts")
    replay.set_defaults(run=_replay)

    demo = sub.add_parser("demo", help="run the bundled example scenario(s) with a transcript")
    demo.add_argument("--json", action="store_true")
    demo.set_defaults(run=_demo)

    db = sub.add_parser("db", help="database schema")
    db_sub = db.add_subparsers(title="db commands")
    upgrade = db_sub.add_parser("upgrade", help="create or migrate the schema (Alembic head)")
    upgrade.set_defaults(run=_db_upgrade)

    report = sub.add_parser("report", help="usage of one conversation: context per call "
                            "(the saw-tooth), cache-read share, compactions, cost, and its "
                            "replies by delivery state; writes a plot")
    report.add_argument("conversation_id", type=int)
    report.add_argument("--plot", type=Path, default=None,
                        help="SVG file to write (default: conversation-<id>.svg)")
    report.add_argument("--json", action="store_true")
    report.set_defaults(run=_report)

    tenant = sub.add_parser("tenant", help="tenant set-up")
    tenant_sub = tenant.add_subparsers(title="tenant commands")
    create = tenant_sub.add_parser(
        "create", help="create or update a tenant, with its catalogue, from a JSON or YAML "
        "file (the `tenant` object of REPLAY.md; see examples/tenant.yaml)")
    create.add_argument("file", type=Path)
    create.set_defaults(run=_tenant_create)
    resume = tenant_sub.add_parser("resume", help="resume sending after the access token was "
                                   "fixed (a 190 from the Graph API paused the tenant)")
    resume.add_argument("phone_number_id")
    resume.set_defaults(run=_tenant_resume)
    add_tenant_commands(tenant_sub)
    add_catalog_commands(sub)
    add_conversation_commands(sub)

    contact = sub.add_parser("contact", help="data-subject rights (LGPD) for one contact")
    contact_sub = contact.add_subparsers(title="contact commands")
    for name, run, text in (
            ("export", _contact_export, "print everything stored about a contact as JSON"),
            ("forget", _contact_forget, "erase a contact from every layer; prints the receipt")):
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
    listing.set_defaults(run=_facts_review)
    for name, run, text in (
            ("approve", _facts_approve, "confirm a fact in review"),
            ("reject", _facts_reject, "reject a fact in review; the summaries forget it too"),
            ("forget", _facts_forget, "delete one fact; the summaries that repeat it are "
                                      "re-derived without it")):
        command = facts_sub.add_parser(name, help=text)
        command.add_argument("fact_id", type=int)
        command.add_argument("--reason", default="", help="why (kept with the decision)")
        command.set_defaults(run=run)
    extract = facts_sub.add_parser("extract", help="enqueue fact extraction for a conversation")
    extract.add_argument("conversation_id", type=int)
    extract.set_defaults(run=_facts_extract)
    add_facts_commands(facts_sub)

    for name, run, text in (("web", _web, "run the webhook web process"),
                            ("worker", _worker, "run an RQ worker (and a keeper: the "
                                                "product's scheduler)"),
                            ("cron", _cron, "enqueue the periodic jobs (one is enough; each "
                                             "job is guarded per period)")):
        command = sub.add_parser(name, help=text)
        command.set_defaults(run=run)
        if name == "worker":
            command.add_argument("--burst", action="store_true", help="exit when idle")
        if name == "web":
            command.add_argument("--processes", type=int, default=1, metavar="N",
                                 help="serve from N processes sharing the port (SO_REUSEPORT; "
                                      "default 1)")
    return parser


def _replay(args: argparse.Namespace) -> int:
    return _run_scenarios(list(args.files), as_json=args.json, quiet=args.quiet)


def _demo(args: argparse.Namespace) -> int:
    files = sorted(BUNDLED_SCENARIOS.glob("*.json"))
    return _run_scenarios(files, as_json=args.json, quiet=False)


def _run_scenarios(files: list[Path], *, as_json: bool, quiet: bool) -> int:
    from core.logs import configure_logging
    from replay.runner import run_scenario_file

    # LOG_LEVEL is the services' level; a replay prints its transcript and only errors
    configure_logging(os.environ.get("REPLAY_LOG_LEVEL", "ERROR"), fmt="console")
    failed = 0
    for path in files:
        echo = None if (as_json or quiet) else print
        if echo:
            print(f"== {path.name}")
        result = run_scenario_file(path, echo=echo, cli=main)
        failed += not result.passed
        if as_json:
            print(json.dumps(result.to_json(), ensure_ascii=False))
        else:
            _print_verdict(result)
    return 1 if failed else 0


def _print_verdict(result) -> None:  # type: ignore[no-untyped-def]
    usage = result.usage
    if not result.requests and not result.passed:
        print(f"-- {result.name}: FAILED")
        for failure in result.failures:
            print(f"   ✗ {failure}")
        print()
        return
    print(f"-- {result.name}: {'PASSED' if result.passed else 'FAILED'} · "
          f"{result.requests} Claude call(s), {result.api_errors} API error(s), "
          f"{len(result.sent)} send(s) · tokens in {usage['input_tokens']}, "
          f"cache write {usage['cache_creation_input_tokens']}, "
          f"cache read {usage['cache_read_input_tokens']}, out {usage['output_tokens']}")
    for failure in result.failures:
        print(f"   ✗ {failure}")
    print()


def _db_upgrade(args: argparse.Namespace) -> int:
    from storage.migrate import upgrade

    settings = settings_or_exit(require=False)
    upgrade(settings.database_url)
    print(f"schema at head on {settings.database_url.split('@')[-1]}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from storage.db import make_engine
    from usage.report import conversation_report, render_svg

    settings = settings_or_exit(require=False)
    try:
        report = conversation_report(make_engine(settings.database_url), args.conversation_id)
    except LookupError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    calls = report.pop("calls_detail")
    plot = args.plot or Path(f"conversation-{args.conversation_id}.svg")
    plot.write_text(render_svg(report["context_per_call"], title=(
        f"conversation {args.conversation_id}: context tokens per call")), encoding="utf-8")
    if args.json:
        print(json.dumps({**report, "plot": str(plot)}))
        return 0
    print(f"{'when (UTC)':<17} {'purpose':<8} {'context':>8} {'read':>8} {'write':>7} "
          f"{'input':>7} {'output':>6}")
    for c in calls:
        print(f"{c.at:%Y-%m-%d %H:%M} {c.purpose:<8} {c.context_tokens:>8} "
              f"{c.cache_read_input_tokens:>8} {c.cache_creation_input_tokens:>7} "
              f"{c.input_tokens:>7} {c.output_tokens:>6}")
    print(f"calls {report['calls']} · compactions {report['compactions']} · peak context "
          f"{report['peak_context']} · cache-read share {report['cache_read_share']:.1%} · "
          f"billed-equivalent input {report['billed_equivalent_input']} · "
          f"cost ${report['cost_usd']:.4f} · plot {plot}")
    _print_replies(report["replies"])
    return 0


def _print_replies(replies: dict[str, Any]) -> None:
    """`wagent report`'s delivery lines: replies by state, then each one not (yet) delivered."""
    counts = " · ".join(f"{state} {n}" for state, n in replies["by_state"].items() if n)
    print(f"replies {replies['total']}" + (f" · {counts}" if counts else ""))
    for reply in replies["not_delivered"]:
        print(f"  reply #{reply['message_id']} {reply['at'][:16].replace('T', ' ')} UTC: "
              f"{reply['state']} · {reply['reason']}")


def _contact_lookup(args: argparse.Namespace, session):  # type: ignore[no-untyped-def]
    from storage.rights import find_contact
    from storage.tenants import get_by_phone_number_id

    tenant = get_by_phone_number_id(session, args.phone_number_id)
    contact = find_contact(session, tenant.id, args.contact) if tenant else None
    if contact is None:
        print(f"no contact {args.contact!r} for phone_number_id {args.phone_number_id}",
              file=sys.stderr)
    return contact


def _contact_export(args: argparse.Namespace) -> int:
    from storage.db import make_engine, session_scope
    from storage.rights import export_contact

    with session_scope(make_engine(settings_or_exit(require=False).database_url)) as session:
        contact = _contact_lookup(args, session)
        if contact is None:
            return 2
        print(json.dumps(export_contact(session, contact), ensure_ascii=False, indent=2))
    return 0


def _contact_forget(args: argparse.Namespace) -> int:
    from core import clock
    from storage.db import make_engine, session_scope
    from storage.rights import forget_contact

    with session_scope(make_engine(settings_or_exit(require=False).database_url)) as session:
        contact = _contact_lookup(args, session)
        if contact is None:
            return 2
        counts = forget_contact(session, contact, now=clock.now())
    print(json.dumps({"erased": True, "counts": counts}))
    return 0


def _facts_review(args: argparse.Namespace) -> int:
    from operations import service
    from storage.db import make_engine, session_scope
    from storage.tenants import get_by_phone_number_id

    with session_scope(make_engine(settings_or_exit(require=False).database_url)) as session:
        tenant = get_by_phone_number_id(session, args.phone_number_id)
        if tenant is None or tenant.id is None:
            print(f"no tenant {args.phone_number_id}", file=sys.stderr)
            return 2
        queue = service.review_queue(session, tenant)
        for fact in queue:
            print(f"#{fact['id']} contact {fact['contact_id']} {fact['key']} = "
                  f"{fact['value']!r} [{fact['state']}, {fact['origin']}, source message "
                  f"{fact['source_message_id']}]")
        if not queue:
            print("no facts waiting for review")
    return 0


def _facts_approve(args: argparse.Namespace) -> int:
    """`operations.service.approve_fact`, the operation (and checks) of the API and console."""
    from cli.admin import run_for_fact
    from operations import service

    return run_for_fact(lambda session, tenant, now: service.approve_fact(
        session, tenant, args.fact_id, by="cli", reason=args.reason, now=now))(args)


def _facts_reject(args: argparse.Namespace) -> int:
    """`operations.service.reject_fact` then its job (`workers.admin_jobs.reject_fact`, which
    re-derives the summaries), as the API and console do: a worker runs it. Redis is checked
    first, so a rejection is never recorded without the job that finishes it."""
    from rq import Queue

    from cli.admin import run_for_fact
    from operations import service
    from storage.db import connect_redis

    settings = settings_or_exit(require=False)  # the database and Redis; the worker calls Claude
    queue = Queue(settings.queue_name, connection=connect_redis(settings.redis_url))
    try:
        queue.connection.ping()
    except Exception as exc:  # redis' errors, or the URL's
        print(f"error: Redis at REDIS_URL is needed for the job that re-derives the "
              f"summaries: {exc}", file=sys.stderr)
        return 2

    def reject(session: Any, tenant: Any, now: Any) -> Any:
        return {**service.reject_fact(session, tenant, args.fact_id, by="cli",
                                      reason=args.reason, now=now), "summaries": "re-deriving"}
    return run_for_fact(reject, after=lambda: service.enqueue_rejection(
        queue, args.fact_id))(args)


def _facts_forget(args: argparse.Namespace) -> int:
    from workers.facts import forget_fact
    from workers.runtime import build_runtime

    counts = forget_fact(build_runtime(settings_or_exit()), args.fact_id, reason=args.reason,
                         by="cli")
    if counts is None:
        print(f"no fact #{args.fact_id}", file=sys.stderr)
        return 2
    print(json.dumps({"fact_id": args.fact_id, "counts": counts}))
    return 0


def _facts_extract(args: argparse.Namespace) -> int:
    from rq import Queue

    from storage.db import connect_redis
    from storage.jobs import enqueue_facts

    settings = settings_or_exit(require=False)  # needs the database and Redis only
    queue = Queue(settings.queue_name, connection=connect_redis(settings.redis_url))
    job_id = enqueue_facts(queue, settings.redis_prefix, args.conversation_id)
    print(f"enqueued {job_id}" if job_id else "already queued")
    return 0


def _tenant_resume(args: argparse.Namespace) -> int:
    from rq import Queue

    from storage.db import connect_redis, make_engine, session_scope
    from storage.jobs import enqueue_flush
    from storage.tenants import get_by_phone_number_id, resume_sending

    settings = settings_or_exit(require=False)  # needs the database and Redis only
    with session_scope(make_engine(settings.database_url)) as session:
        tenant = get_by_phone_number_id(session, args.phone_number_id)
        if tenant is None or tenant.id is None:
            print(f"no tenant {args.phone_number_id}", file=sys.stderr)
            return 2
        waiting = resume_sending(session, tenant.id)
    queue = Queue(settings.queue_name, connection=connect_redis(settings.redis_url))
    for conversation_id in waiting:
        enqueue_flush(queue, settings.redis_prefix, conversation_id)
    print(f"sending resumed; {len(waiting)} conversation(s) with replies waiting")
    return 0


def _tenant_create(args: argparse.Namespace) -> int:
    from cli.admin import read_document
    from core import clock
    from storage.db import make_engine, session_scope
    from storage.tenants import CatalogueConflict, TenantConfigError, upsert_tenant

    settings = settings_or_exit(require=False)
    try:
        config = read_document(args.file)
        with session_scope(make_engine(settings.database_url)) as session:
            tenant = upsert_tenant(session, config, now=clock.now())
            print(f"tenant {tenant.id} ({tenant.name}) for phone_number_id "
                  f"{tenant.phone_number_id}")
    except (OSError, ValueError, TenantConfigError, CatalogueConflict) as exc:
        print(f"cannot create tenant: {exc}", file=sys.stderr)
        return 2
    return 0


def _web(args: argparse.Namespace) -> int:
    from aiohttp import web

    from bot.app import create_app
    from bot.bodies import return_large_buffers_to_os
    from core.logs import configure_logging

    settings = settings_or_exit()
    configure_logging(settings.log_level, settings.log_format,
                      secrets=settings.secret_values())
    return_large_buffers_to_os()
    processes = getattr(args, "processes", 1)
    if processes < 1:
        print("--processes must be at least 1", file=sys.stderr)
        return 2

    def serve() -> None:  # each process makes its own engine and Redis client
        web.run_app(create_app(settings), host=settings.web_host, port=settings.web_port,
                    access_log=None, reuse_port=processes > 1 or None)

    if processes == 1:
        serve()
        return 0
    return _fork_servers(processes, serve)


def _fork_servers(processes: int, serve: Callable[[], None]) -> int:
    """Run `serve` in `processes` forked children that share the port (SO_REUSEPORT: the
    kernel spreads connections) and wait. SIGTERM and SIGINT are passed on; when one child
    exits the others are stopped and its exit status is returned. The parent opens no
    connection before the fork; each child dies with the parent (Linux)."""
    import ctypes
    import signal

    children: list[int] = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
                serve()
                code = 0
            finally:
                os._exit(code)
        children.append(pid)

    def forward(signum: int, _: object) -> None:
        for child in children:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    while children:
        pid, wait_status = os.wait()
        if pid in children:
            children.remove(pid)
            status = status or os.waitstatus_to_exitcode(wait_status)
            forward(signal.SIGTERM, None)
    return 0 if status < 0 else status


def _worker(args: argparse.Namespace) -> int:
    from core.logs import configure_logging

    settings = settings_or_exit()
    configure_logging(settings.log_level, settings.log_format,
                      secrets=settings.secret_values())
    _lower_cpu_priority(settings.worker_cpu)
    # Import the job code once, before RQ forks a work horse per job: otherwise every job
    # re-imports anthropic, sqlmodel and psycopg (~2 CPU-s a turn, bench/load.py). Then build
    # the clients and warm what they build lazily, once, for every horse to inherit (I/O-free
    # in this process: workers/runtime.py).
    import psycopg  # noqa: F401  (SQLAlchemy imports the driver only when an engine is made)

    import workers.compaction  # noqa: F401
    import workers.facts  # noqa: F401
    import workers.inbox  # noqa: F401
    import workers.maintenance  # noqa: F401
    import workers.sweeper  # noqa: F401
    import workers.turns  # noqa: F401
    from workers.processes import run_worker
    from workers.runtime import prepare_worker_parent

    prepare_worker_parent(settings)
    return run_worker(settings, burst=args.burst)


def _lower_cpu_priority(policy: str) -> None:
    """`WORKER_CPU` (core/settings.py): on cores shared with `wagent web`, a worker takes only
    the CPU time the webhook leaves (bench/load.py measures the difference). Inherited by the
    work horses RQ forks. "low" is nice 19, the lowest priority that still guarantees a share;
    where SCHED_IDLE is missing (not Linux), "idle" falls back to it."""
    if policy == "low":
        os.nice(19)
    elif policy == "idle":
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError):
            os.nice(19)


def _cron(args: argparse.Namespace) -> int:
    from core.logs import configure_logging
    from workers.maintenance import RECONCILE_PERIOD_SECONDS, purge_retention, reconcile
    from workers.processes import run_cron
    from workers.sweeper import sweep_inactive

    settings = settings_or_exit()
    configure_logging(settings.log_level, settings.log_format,
                      secrets=settings.secret_values())
    # Each job is guarded per period inside (workers/maintenance.py): a second cron is harmless.
    return run_cron(settings, [(sweep_inactive, 300), (reconcile, RECONCILE_PERIOD_SECONDS),
                               (purge_retention, 3600)])


if __name__ == "__main__":
    raise SystemExit(main())
