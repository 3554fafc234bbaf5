"""`wagent results PNID [--period week|month]`: the results page's figures as JSON
(operations/results.py; the console's Resultados and GET /admin/tenants/{id}/results)."""

import argparse
from datetime import datetime
from typing import Any

from cli.admin import run_for_tenant
from operations import results as results_ops


@run_for_tenant
def show(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return results_ops.results_view(results_ops.results(session, tenant, args.period, now=now))
