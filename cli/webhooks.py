"""`wagent webhooks add|list|remove|rotate-secret`: a tenant's webhook endpoints from a shell
(operations/webhooks.py does the work, as for the admin API and the console). A secret prints
once, when it is made; `list` never shows one."""

import argparse
from datetime import datetime, timedelta
from typing import Any

from cli.admin import run_for_tenant
from operations import webhooks as hook_ops


@run_for_tenant
def add(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    events = [e.strip() for e in args.events.split(",") if e.strip()]
    body = hook_ops.validated_create({"url": args.url, "events": events,
                                      "description": args.description})
    return hook_ops.add_endpoint(session, tenant, body, now=now)


@run_for_tenant
def list_(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return hook_ops.list_endpoints(session, tenant, now=now)


@run_for_tenant
def remove(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    hook_ops.remove_endpoint(session, tenant, args.id)
    return {"removed": args.id}


@run_for_tenant
def rotate_secret(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return hook_ops.rotate_secret(session, tenant, args.id,
                                  grace=timedelta(hours=args.grace_hours), now=now)
