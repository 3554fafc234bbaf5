"""`wagent conversations list|show`: read a tenant's conversations."""

import argparse
from datetime import datetime
from typing import Any

from cli.admin import run_for_tenant
from operations import service


@run_for_tenant
def list_conversations(args: argparse.Namespace, session: Any, tenant: Any,
                       now: datetime) -> Any:
    query = service.validated(service.ConversationQuery, {
        k: v for k, v in (("contact", args.contact), ("state", args.state),
                          ("limit", args.limit)) if v is not None})
    return service.list_conversations(session, tenant, query)


@run_for_tenant
def show(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return service.conversation_view(session, tenant, args.conversation_id, now=now)
