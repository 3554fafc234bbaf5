"""`wagent costs [--tenant PHONE_NUMBER_ID] [--from DAY] [--to DAY] [--json]`: model and
WhatsApp costs per local day (operations/costs.py, usage/ledger.py); every tenant's totals
when no tenant is named. The totals line in US$ (the total to the cent, its parts to US$ 0.0001,
halves up: operations/costs.py); the per-day table and --json in exact µUSD."""

import argparse
import json
import sys
from typing import Any

from pydantic import ValidationError
from sqlmodel import col, select

from cli.environment import settings_or_exit
from core import clock
from operations.costs import CostQuery, cost_report, usd_fine
from operations.errors import AdminError
from operations.settings import find_tenant
from storage.db import make_engine, session_scope
from storage.models import Tenant


def costs(args: argparse.Namespace) -> int:
    settings = settings_or_exit(require=False)
    try:
        query = CostQuery.model_validate({"from": args.date_from, "to": args.date_to})
    except ValidationError as exc:
        print(f"costs: {exc.errors()[0]['msg']}", file=sys.stderr)
        return 2
    with session_scope(make_engine(settings.database_url)) as session:
        if args.tenant:
            tenant = find_tenant(session, args.tenant)
            if tenant is None:
                print(f"no tenant with phone_number_id {args.tenant}", file=sys.stderr)
                return 2
            tenants = [tenant]
        else:
            tenants = list(session.exec(select(Tenant).order_by(col(Tenant.id))).all())
        try:
            reports = [(t, cost_report(session, t, query, now=clock.now())) for t in tenants]
        except AdminError as exc:
            print(f"costs: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps([r for _, r in reports] if not args.tenant else reports[0][1]))
        return 0
    for tenant, report in reports:
        _print(tenant, report, days=bool(args.tenant))
    return 0


def _print(tenant: Tenant, report: dict[str, Any], *, days: bool) -> None:
    total = report["total"]
    print(f"{tenant.phone_number_id} {tenant.name} · {report['from']} to {report['to']} "
          f"({report['timezone']}) · total US$ {total['usd']} · "
          f"model US$ {usd_fine(total['model_total'])} "
          f"in {_count(total['model_calls'], 'call')} · "
          f"WhatsApp US$ {usd_fine(total['whatsapp_total'])} "
          f"for {_count(total['billed_messages'], 'billed message')}")
    if not days:
        return
    print("µUSD per local day (1 µUSD = US$ 0.000001)")
    print(f"{'day':<10} {'turn':>9} {'summary':>8} {'compact':>8} {'facts':>8} {'other':>7} "
          f"{'whatsapp':>9} {'total':>9}")
    for d in report["days"]:
        model = d["model_micro_usd"]
        print(f"{d['day']:<10} {model['turn']:>9} {model['summary']:>8} {model['compaction']:>8} "
              f"{model['facts']:>8} {model['other']:>7} {d['whatsapp_total']:>9} {d['total']:>9}")


def _count(n: int, noun: str) -> str:
    """ "1 call", "2 calls", "0 calls"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
