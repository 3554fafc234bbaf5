"""`wagent appointments book|move|block|unblock|outcome|day|waitlist-offer`: the business's
own agenda (issue 22; operations/agenda.py, the same operations as the admin API and the
console)."""

import argparse
from datetime import date, datetime
from typing import Any

from cli.admin import run_for_tenant
from operations import agenda
from operations.service import row_of_booking, validated


@run_for_tenant
def book(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    first, *then = [c.strip() for c in args.service.split(",")]  # "oleo,alinhamento": a visit
    body = validated(agenda.StaffBooking, {
        k: v for k, v in (("service", first), ("then", then), ("start", args.start),
                          ("professional", args.professional), ("contact", args.contact),
                          ("phone", args.phone), ("name", args.name), ("note", args.note),
                          ("for_name", args.for_name), ("repeat", args.repeat))
        if v})
    return agenda.book(session, tenant, body, now=now)


@run_for_tenant
def move(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    body = validated(agenda.Move, {k: v for k, v in (("start", args.start),
                                                     ("professional", args.professional)) if v})
    row_id = row_of_booking(session, tenant, args.booking_number, args.service)
    return agenda.move(session, tenant, row_id, body, now=now)


@run_for_tenant
def block(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    body = validated(agenda.Block, {"professional": args.professional, "start": args.start,
                                    "end": args.end, "note": args.note, "force": args.force})
    return agenda.block(session, tenant, body, now=now)


@run_for_tenant
def unblock(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    agenda.unblock(session, tenant, args.block_id)
    return {"removed": args.block_id}


@run_for_tenant
def outcome(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    row_id = row_of_booking(session, tenant, args.booking_number, whole_visit=True)
    return agenda.set_outcome(session, tenant, row_id, args.outcome, now=now, note=args.note)


@run_for_tenant
def deposit_paid(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    row_id = row_of_booking(session, tenant, args.booking_number, whole_visit=True)
    body = validated(agenda.DepositPaid, {"amount_cents": args.amount_cents})
    return agenda.mark_paid(session, tenant, row_id, now=now, amount_cents=body.amount_cents)


@run_for_tenant
def day(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    try:
        which = date.fromisoformat(args.day)
    except ValueError:
        raise ValueError(f"{args.day!r}: use YYYY-MM-DD") from None
    return agenda.day_view(session, tenant, which)


@run_for_tenant
def waitlist_offer(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    body = validated(agenda.WaitlistOffer, {"professional": args.professional,
                                            "start": args.start})
    return agenda.offer_slot(session, tenant, args.entry_id, body, now=now)
