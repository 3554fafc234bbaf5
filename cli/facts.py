"""`wagent facts review|approve|reject|forget|extract|edit`: contact facts waiting for a
person, their decisions (the operations the admin API and the console call), forgetting one,
extraction on demand."""

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from rq import Queue

from cli.admin import conversation_ref, run_for_fact, run_for_tenant
from cli.environment import settings_or_exit
from operations import service
from operations.settings import find_tenant
from storage.conversations import tenants_of
from storage.db import connect_redis, make_engine, session_scope
from storage.jobs import enqueue_facts


def review(args: argparse.Namespace) -> int:
    with session_scope(make_engine(settings_or_exit(require=False).database_url)) as session:
        tenant = find_tenant(session, args.phone_number_id)
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


def approve(args: argparse.Namespace) -> int:
    """`operations.service.approve_fact`, the operation (and checks) of the API and console."""
    return run_for_fact(lambda session, tenant, now: service.approve_fact(
        session, tenant, args.fact_id, by="cli", reason=args.reason, now=now))(args)


def reject(args: argparse.Namespace) -> int:
    """`operations.service.reject_fact` then its job (`workers.admin_jobs.reject_fact`, which
    re-derives the summaries), as the API and console do: a worker runs it. Redis is checked
    first, so a rejection is never recorded without the job that finishes it."""
    settings = settings_or_exit(require=False)  # the database and Redis; the worker calls Claude
    queue = Queue(settings.queue_name, connection=connect_redis(settings.redis_url))
    try:
        queue.connection.ping()
    except Exception as exc:  # redis' errors, or the URL's
        print(f"error: Redis at REDIS_URL is needed for the job that re-derives the "
              f"summaries: {exc}", file=sys.stderr)
        return 2

    def decide(session: Any, tenant: Any, now: Any) -> Any:
        return {**service.reject_fact(session, tenant, args.fact_id, by="cli",
                                      reason=args.reason, now=now), "summaries": "re-deriving"}
    return run_for_fact(decide, after=lambda: service.enqueue_rejection(
        queue, args.fact_id))(args)


def forget(args: argparse.Namespace) -> int:
    # anthropic (seconds to import) only for the one facts command that needs Claude's client:
    from workers.facts import forget_fact  # lazy: the other facts commands start without it
    from workers.runtime import build_runtime  # lazy: as above

    counts = forget_fact(build_runtime(settings_or_exit()), args.fact_id, reason=args.reason,
                         by="cli")
    if counts is None:
        print(f"no fact #{args.fact_id}", file=sys.stderr)
        return 2
    print(json.dumps({"fact_id": args.fact_id, "counts": counts}))
    return 0


def extract(args: argparse.Namespace) -> int:
    settings = settings_or_exit(require=False)  # needs the database and Redis only
    engine = make_engine(settings.database_url)
    try:
        conversation_id = conversation_ref(args, "facts extract", engine)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with session_scope(engine) as session:  # the fair move's tag (storage/jobs.job_id_for)
        tenant_id = tenants_of(session, [conversation_id]).get(conversation_id)
    queue = Queue(settings.queue_name, connection=connect_redis(settings.redis_url))
    job_id = enqueue_facts(queue, settings.redis_prefix, conversation_id, tenant_id=tenant_id)
    print(f"enqueued {job_id}" if job_id else "already queued")
    return 0


@run_for_tenant
def edit(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    change = service.validated(service.FactEdit, {"value": args.value, "reason": args.reason})
    return service.edit_fact(session, tenant, args.fact_id, change, by="cli", now=now)
