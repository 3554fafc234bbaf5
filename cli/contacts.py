"""`wagent contact export|forget`: a contact's data-subject rights (LGPD)."""

import argparse
import json
import sys
from typing import Any

from cli.environment import settings_or_exit
from core import clock
from storage.db import make_engine, session_scope
from storage.rights import export_contact, find_contact, forget_contact
from storage.tenants import get_by_phone_number_id


def _lookup(args: argparse.Namespace, session: Any) -> Any:
    tenant = get_by_phone_number_id(session, args.phone_number_id)
    contact = find_contact(session, tenant.id or 0, args.contact) if tenant else None
    if contact is None:
        print(f"no contact {args.contact!r} for phone_number_id {args.phone_number_id}",
              file=sys.stderr)
    return contact


def export(args: argparse.Namespace) -> int:
    with session_scope(make_engine(settings_or_exit(require=False).database_url)) as session:
        contact = _lookup(args, session)
        if contact is None:
            return 2
        print(json.dumps(export_contact(session, contact), ensure_ascii=False, indent=2))
    return 0


def forget(args: argparse.Namespace) -> int:
    with session_scope(make_engine(settings_or_exit(require=False).database_url)) as session:
        contact = _lookup(args, session)
        if contact is None:
            return 2
        counts = forget_contact(session, contact, now=clock.now())
    print(json.dumps({"erased": True, "counts": counts}))
    return 0
