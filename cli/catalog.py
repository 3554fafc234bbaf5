"""`wagent catalog show|set|service|remove-service|professional|remove-professional|hours|
exception|remove-exception`: a tenant's services, professionals, opening hours and holidays."""

import argparse
from datetime import date, datetime
from typing import Any

from cli.admin import read_document, run_for_tenant
from operations import catalogue as catalogue_ops
from storage.tenant_config import parse_price


@run_for_tenant
def show(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return catalogue_ops.catalogue_view(session, tenant)


@run_for_tenant
def replace(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return catalogue_ops.replace_catalogue(session, tenant, read_document(args.file), now=now)


@run_for_tenant
def service(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    change = catalogue_ops.ServiceChange(
        code=args.code, name=args.name, duration_minutes=args.duration,
        price_cents=catalogue_ops.KEEP if args.price is None else parse_price(args.price),
        price_from=args.price_from, description=args.description,
        buffer_minutes=getattr(args, "buffer", None))
    return catalogue_ops.service_view(catalogue_ops.save_service(session, tenant, change)[0])


@run_for_tenant
def remove_service(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    catalogue_ops.remove_service(session, tenant, args.code, now=now)
    return {"removed": args.code}


@run_for_tenant
def professional(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    services = None if args.services is None else [
        s.strip() for s in args.services.split(",") if s.strip()]
    week = read_document(args.week) if getattr(args, "week", None) else {}
    if not isinstance(week, dict) or set(week) - set(catalogue_ops.WEEK_KEYS):
        raise ValueError("--week: an object with hours, time_off, hours_exceptions, durations")
    change = catalogue_ops.ProfessionalChange(code=args.code, name=args.name,
                                              services=services, week=week)
    row = catalogue_ops.save_professional(session, tenant, change, now=now)[0]
    return catalogue_ops.professional_view(row)


@run_for_tenant
def remove_professional(args: argparse.Namespace, session: Any, tenant: Any,
                        now: datetime) -> Any:
    catalogue_ops.remove_professional(session, tenant, args.code, now=now)
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
    return catalogue_ops.set_opening_hours(session, tenant,
                                           catalogue_ops.OpeningHoursChange(weekly))


@run_for_tenant
def exception(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    intervals = [i.strip() for value in args.hours or [] for i in value.split(",") if i.strip()]
    change = catalogue_ops.HoursExceptionChange(day=args.day, hours=intervals, note=args.note)
    return catalogue_ops.save_hours_exception(session, tenant, change, now=now)[0]


@run_for_tenant
def remove_exception(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    catalogue_ops.remove_hours_exception(session, tenant, date.fromisoformat(args.day))
    return {"removed": args.day}
