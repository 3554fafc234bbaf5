"""`wagent packages define|sell|adjust|list`: session packages (issue 46, operations/packages)."""

import argparse
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from cli.admin import run_for_tenant
from operations import packages
from operations.service import find_contact, validated


@run_for_tenant
def define(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    spec = validated(packages.PackageSpec, {
        "code": args.code, "name": args.name, "service": args.service,
        "sessions": args.sessions, "validity_days": args.validity_days,
        "price_cents": args.price_cents})
    return packages.define(session, tenant, spec)


@run_for_tenant
def sell(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    sale = validated(packages.Sale, {k: v for k, v in (
        ("contact", args.contact), ("package", args.package),
        ("authorisation", args.authorisation), ("expires_on", args.expires_on)) if v})
    return packages.sell(session, tenant, sale, now=now)


@run_for_tenant
def adjust(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return packages.adjust(session, tenant, args.id, used=args.used)


@run_for_tenant
def list_packages(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    contact = find_contact(session, tenant, args.contact)
    today = now.astimezone(ZoneInfo(tenant.timezone)).date()
    return [packages.view(session, cp) for cp, _ in packages.of_contact(
        session, tenant.id, contact.id or 0, today)]
