"""`wagent tenant create|resume|show|list|update|token|revoke-token`: set up a tenant from a
file, change its settings, mint its admin API tokens, resume its sending."""

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from rq import Queue
from sqlmodel import col, select

from cli.admin import Lines, parse_assignments, print_json, read_document, run_for_tenant
from cli.environment import settings_or_exit
from core import clock
from operations import service
from operations import settings as settings_ops
from operations.service import clean_text
from storage.db import connect_redis, make_engine, session_scope
from storage.errors import CatalogueConflict, TenantConfigError
from storage.jobs import enqueue_flush
from storage.models import Tenant


def create(args: argparse.Namespace) -> int:
    settings = settings_or_exit(require=False)
    try:
        config = read_document(args.file)
        with session_scope(make_engine(settings.database_url)) as session:
            tenant = settings_ops.apply_config(session, config, now=clock.now())
            print(f"tenant {tenant.id} ({tenant.name}) for phone_number_id "
                  f"{tenant.phone_number_id}")
    except (OSError, ValueError, TenantConfigError, CatalogueConflict) as exc:
        print(f"cannot create tenant: {exc}", file=sys.stderr)
        return 2
    return 0


def resume(args: argparse.Namespace) -> int:
    settings = settings_or_exit(require=False)  # needs the database and Redis only
    with session_scope(make_engine(settings.database_url)) as session:
        tenant = settings_ops.find_tenant(session, args.phone_number_id)
        if tenant is None or tenant.id is None:
            print(f"no tenant {args.phone_number_id}", file=sys.stderr)
            return 2
        waiting = settings_ops.resume_sending(session, tenant)
    queue = Queue(settings.queue_name, connection=connect_redis(settings.redis_url))
    for conversation_id in waiting:
        enqueue_flush(queue, settings.redis_prefix, conversation_id)
    print(f"sending resumed; {len(waiting)} conversation(s) with replies waiting")
    return 0


def list_tenants(args: argparse.Namespace) -> int:
    with session_scope(make_engine(settings_or_exit(require=False).database_url)) as session:
        tenants = session.exec(select(Tenant).order_by(col(Tenant.id))).all()
        print_json([{k: v for k, v in service.tenant_view(t).items()
                     if k in ("id", "phone_number_id", "name", "timezone",
                              "inactivity_timeout_minutes", "sending_paused_reason")}
                    for t in tenants])
    return 0


@run_for_tenant
def show(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return {**service.tenant_view(tenant), "counts": service.counts(session, tenant)}


@run_for_tenant
def update(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    changes = read_document(args.file) if args.file else {}
    if not isinstance(changes, dict):
        raise ValueError("the file must hold an object of settings")
    changes.update(parse_assignments(args.set or []))
    if not changes:
        raise ValueError("nothing to change: give --set key=value or --file")
    problems = clean_text(changes, "set")
    if problems:
        raise ValueError("; ".join(problems))
    before = service.tenant_view(tenant)
    after = service.tenant_view(settings_ops.apply_settings(
        session, tenant, settings_ops.settings_change(changes), now=now))
    return changed_lines(before, after)


SHOWN_CHARACTERS = 80  # a longer value (instructions) is cut, with "…"


def changed_lines(before: dict[str, Any], after: dict[str, Any]) -> Lines:
    """`key: old → new`, one line per setting whose value changed (values as JSON, cut at
    SHOWN_CHARACTERS); one line saying so when none did (`wagent tenant show` prints all)."""
    def shown(value: Any) -> str:
        text = json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS - 1] + "…"
    lines = [f"{key}: {shown(before.get(key))} → {shown(value)}"
             for key, value in after.items() if before.get(key) != value]
    return Lines(lines or ["nothing changed: the settings already had these values"])


@run_for_tenant
def token(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return service.create_token(session, tenant, label=args.label, now=now)


@run_for_tenant
def revoke_token(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    service.revoke_token(session, tenant, args.token_id, now=now)
    return {"revoked": args.token_id}
