"""`wagent catalog show|set|service|remove-service|professional|remove-professional|hours|
exception|remove-exception`: a tenant's services, professionals, opening hours and holidays."""

import argparse
from datetime import date, datetime
from typing import Any

from cli.admin import read_document, run_for_tenant
from operations import service as operations
from storage.catalogue import (
    archive_professional,
    archive_service,
    change_professional,
    change_service,
    delete_hours_exception,
    put_hours_exception,
    set_hours,
)
from storage.tenant_config import HoursExceptionSpec, parse_price


@run_for_tenant
def show(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return operations.catalogue_view(session, tenant)


@run_for_tenant
def replace(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return operations.replace_catalogue(session, tenant, read_document(args.file), now=now)


@run_for_tenant
def service(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    fields: dict[str, Any] = {}
    if args.price is not None:
        fields["price_cents"] = parse_price(args.price)
    if args.price_from is not None:
        fields["price_from"] = args.price_from
    if args.description is not None:
        fields["description"] = args.description
    if getattr(args, "buffer", None) is not None:
        fields["buffer_minutes"] = args.buffer
    row = change_service(session, tenant.id, args.code, name=args.name,
                         duration_minutes=args.duration, **fields)[0]
    return operations.service_view(row)


@run_for_tenant
def remove_service(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    archive_service(session, tenant.id, args.code, now=now)
    return {"removed": args.code}


@run_for_tenant
def professional(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    services = None if args.services is None else [
        s.strip() for s in args.services.split(",") if s.strip()]
    week = read_document(args.week) if getattr(args, "week", None) else {}
    if not isinstance(week, dict) or set(week) - {"hours", "time_off", "hours_exceptions",
                                                  "durations"}:
        raise ValueError("--week: an object with hours, time_off, hours_exceptions, durations")
    row = change_professional(session, tenant.id, args.code, name=args.name,
                              services=services, now=now, **week)[0]
    return operations.professional_view(row)


@run_for_tenant
def remove_professional(args: argparse.Namespace, session: Any, tenant: Any,
                        now: datetime) -> Any:
    archive_professional(session, tenant.id, args.code, now=now)
    return {"removed": args.code}


@run_for_tenant
def hours(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    weekly: dict[str, list[str]] = {}
    for item in args.days:
        day, sep, intervals = item.partition("=")
        if not sep:
            raise ValueError(f"{item!r}: use day=HH:MM-HH:MM[,HH:MM-HH:MM]")
        if day.strip() in weekly:
            raise ValueError(f"{day.strip()} given twice: put its intervals in one argument, "
                             f"{day.strip()}=09:00-12:00,13:00-18:00")
        weekly[day.strip()] = [i.strip() for i in intervals.split(",") if i.strip()]
    return set_hours(session, tenant.id, weekly)


@run_for_tenant
def exception(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    intervals = [i.strip() for value in args.hours or [] for i in value.split(",") if i.strip()]
    spec = operations.validated(HoursExceptionSpec, {"day": args.day, "hours": intervals,
                                                     "note": args.note})
    row = put_hours_exception(session, tenant.id, spec)[0]
    return {"day": row.day.isoformat(), "hours": row.hours, "note": row.note}


@run_for_tenant
def remove_exception(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    delete_hours_exception(session, tenant.id, date.fromisoformat(args.day))
    return {"removed": args.day}
