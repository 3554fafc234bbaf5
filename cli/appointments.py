"""`wagent appointments list|cancel`: a tenant's bookings."""

import argparse
from datetime import datetime
from typing import Any

from cli.admin import run_for_tenant
from operations import agenda, service


@run_for_tenant
def list_appointments(args: argparse.Namespace, session: Any, tenant: Any,
                      now: datetime) -> Any:
    query = service.validated(service.AppointmentQuery, {
        k: v for k, v in (("from", args.date_from), ("to", args.date_to),
                          ("status", args.status), ("contact", args.contact)) if v})
    return service.list_appointments(session, tenant, query)


@run_for_tenant
def cancel(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    row_id = service.row_of_booking(session, tenant, args.booking_number, args.service,
                                    whole_visit=args.rest)
    if args.rest:  # the visit and its series' later ones (issue 46)
        return agenda.cancel_series(session, tenant, row_id, now=now)
    return service.cancel_appointment(session, tenant, row_id, now=now)
