"""`wagent tenant|catalog|facts|conversations|appointments ...`: the admin API's operations
from a shell, for scripts and first set-up (operations/service.py does the work for both).

Tenants are named by their phone_number_id. Results print as JSON on stdout; errors print on
stderr and exit with status 2. Files may be JSON or YAML.
"""

import argparse
import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from cli.environment import settings_or_exit

TenantAction = Callable[[argparse.Namespace, Any, Any, datetime], Any]


def read_document(path: Path) -> Any:
    """A JSON or YAML file's content (YAML by extension .yaml/.yml); ValueError when malformed
    (nested too deep, NUL characters included)."""
    from bot.admin.api import clean_text

    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            document = yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError) as exc:
            raise ValueError(f"{path}: not valid YAML: {str(exc)[:300]}") from None
    else:
        try:
            document = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"{path}: not valid JSON: {str(exc)[:300]}") from None
    problems = clean_text(document, "file")
    if problems:
        raise ValueError(f"{path}: {'; '.join(problems[:5])}")
    return document


def record_id(text: str) -> int:
    """An argparse type: a database id (1 … 2^31-1)."""
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 2**31:
        raise argparse.ArgumentTypeError(f"{text!r} is not an id")
    return int(text)


def parse_assignments(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs; a value that reads as JSON (numbers, lists, true) is taken as such."""
    changes: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{pair!r}: use key=value")
        try:
            changes[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            changes[key.strip()] = raw
    return changes


def _print(result: Any) -> None:
    if result is not None:
        print(json.dumps(result, ensure_ascii=False, indent=2, default=str))


def run_for_tenant(action: TenantAction) -> Callable[[argparse.Namespace], int]:
    """Wrap `action(args, session, tenant, now)` in one transaction on the tenant named by
    `args.phone_number_id`; print its result; map errors to a message and exit status 2."""
    def run(args: argparse.Namespace) -> int:
        from operations.service import NotFound
        from storage.tenants import get_by_phone_number_id

        def act(session: Any, now: datetime) -> Any:
            tenant = get_by_phone_number_id(session, args.phone_number_id)
            if tenant is None:
                raise NotFound(f"no tenant with phone_number_id {args.phone_number_id}")
            return action(args, session, tenant, now)
        return _in_transaction(act)
    return run


def run_for_fact(action: Callable[[Any, Any, datetime], Any], *,
                 after: Callable[[], object] | None = None
                 ) -> Callable[[argparse.Namespace], int]:
    """`run_for_tenant` for a command that names only a fact (`args.fact_id`): the operator's
    shell sees every tenant, so the tenant is the fact's. `action(session, tenant, now)` is a
    `operations.service` operation, the one the API and the console call; `after` runs once it
    is committed (a job to enqueue)."""
    def run(args: argparse.Namespace) -> int:
        from operations.service import NotFound
        from storage.models import ContactFact, Tenant

        def act(session: Any, now: datetime) -> Any:
            fact = session.get(ContactFact, args.fact_id)
            tenant = session.get(Tenant, fact.tenant_id) if fact is not None else None
            if tenant is None:
                raise NotFound(f"no fact #{args.fact_id}")
            return action(session, tenant, now)
        return _in_transaction(act, after=after)
    return run


def _in_transaction(act: Callable[[Any, datetime], Any], *,
                    after: Callable[[], object] | None = None) -> int:
    """Run `act(session, now)` in one transaction, print its result, then `after`; errors
    print on stderr with exit status 2."""
    from core import clock
    from operations.service import AdminError
    from storage.db import make_engine, session_scope
    from storage.tenants import CatalogueConflict, TenantConfigError

    try:
        with session_scope(make_engine(settings_or_exit(require=False).database_url)) as session:
            result = act(session, clock.now())
    except AdminError as exc:
        if len(exc.problems) > 1:
            print("error:", file=sys.stderr)
            for problem in exc.problems:
                print(f"  {problem}", file=sys.stderr)
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 2
    except (TenantConfigError, CatalogueConflict, LookupError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _print(result)
    if after is not None:
        try:
            after()
        except Exception as exc:  # committed: say what is left to do
            print(f"error: done, but its follow-up job was not enqueued: {exc}",
                  file=sys.stderr)
            return 2
    return 0


# -- actions ---------------------------------------------------------------------------------

def _show(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    return {**service.tenant_view(tenant), "counts": service.counts(session, tenant)}


def _update(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    changes = read_document(args.file) if args.file else {}
    if not isinstance(changes, dict):
        raise ValueError("the file must hold an object of settings")
    changes.update(parse_assignments(args.set or []))
    if not changes:
        raise ValueError("nothing to change: give --set key=value or --file")
    from bot.admin.api import clean_text

    problems = clean_text(changes, "set")
    if problems:
        raise ValueError("; ".join(problems))
    return service.tenant_view(service.update_tenant(session, tenant, changes))


def _token(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    return service.create_token(session, tenant, label=args.label, now=now)


def _revoke(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    service.revoke_token(session, tenant, args.token_id, now=now)
    return {"revoked": args.token_id}


def _catalog_show(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    return service.catalogue_view(session, tenant)


def _catalog_set(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    return service.replace_catalogue(session, tenant, read_document(args.file), now=now)


def _service(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    from storage.tenants import change_service
    row = change_service(session, tenant.id, args.code, name=args.name,
                         duration_minutes=args.duration)[0]
    return service.service_view(row)


def _remove_service(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from storage.tenants import archive_service
    archive_service(session, tenant.id, args.code, now=now)
    return {"removed": args.code}


def _professional(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    from storage.tenants import change_professional
    services = None if args.services is None else [
        s.strip() for s in args.services.split(",") if s.strip()]
    row = change_professional(session, tenant.id, args.code, name=args.name,
                              services=services, now=now)[0]
    return service.professional_view(row)


def _remove_professional(args: argparse.Namespace, session: Any, tenant: Any,
                         now: datetime) -> Any:
    from storage.tenants import archive_professional
    archive_professional(session, tenant.id, args.code, now=now)
    return {"removed": args.code}


def _hours(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from storage.tenants import set_hours
    hours: dict[str, list[str]] = {}
    for item in args.days:
        day, sep, intervals = item.partition("=")
        if not sep:
            raise ValueError(f"{item!r}: use day=HH:MM-HH:MM[,HH:MM-HH:MM]")
        if day.strip() in hours:
            raise ValueError(f"{day.strip()} given twice: put its intervals in one argument, "
                             f"{day.strip()}=09:00-12:00,13:00-18:00")
        hours[day.strip()] = [i.strip() for i in intervals.split(",") if i.strip()]
    return set_hours(session, tenant.id, hours)


def _exception(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    from storage.tenants import HoursExceptionSpec, put_hours_exception
    hours = [i.strip() for value in args.hours or [] for i in value.split(",") if i.strip()]
    spec = service.validated(HoursExceptionSpec, {"day": args.day, "hours": hours,
                                                  "note": args.note})
    row = put_hours_exception(session, tenant.id, spec)[0]
    return {"day": row.day.isoformat(), "hours": row.hours, "note": row.note}


def _reopen(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from datetime import date

    from storage.tenants import delete_hours_exception
    delete_hours_exception(session, tenant.id, date.fromisoformat(args.day))
    return {"removed": args.day}


def _conversations(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    query = service.validated(service.ConversationQuery, {
        k: v for k, v in (("contact", args.contact), ("state", args.state),
                          ("limit", args.limit)) if v is not None})
    return service.list_conversations(session, tenant, query)


def _conversation(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    return service.conversation_view(session, tenant, args.conversation_id, now=now)


def _appointments(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    query = service.validated(service.AppointmentQuery, {
        k: v for k, v in (("from", args.date_from), ("to", args.date_to),
                          ("status", args.status), ("contact", args.contact)) if v})
    return service.list_appointments(session, tenant, query)


def _cancel(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    return service.cancel_appointment(session, tenant, args.appointment_id, now=now)


def _fact_edit(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    from operations import service
    edit = service.validated(service.FactEdit, {"value": args.value, "reason": args.reason})
    return service.edit_fact(session, tenant, args.fact_id, edit, by="cli", now=now)


# -- parsers ---------------------------------------------------------------------------------

def _pnid(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("phone_number_id", help="the business number's phone_number_id")


def add_tenant_commands(tenant_sub: Any) -> None:
    show = tenant_sub.add_parser("show", help="print a tenant's settings and counts as JSON")
    _pnid(show)
    show.set_defaults(run=run_for_tenant(_show))
    listing = tenant_sub.add_parser("list", help="list every tenant")
    listing.set_defaults(run=_list_tenants)
    update = tenant_sub.add_parser(
        "update", help="change settings; the next turn uses them (a new "
        "inactivity_timeout_minutes also moves the open conversations' due times)",
        description="Keys: name, timezone, language, instructions, inactivity_timeout_minutes, "
        "compaction_threshold_tokens, compaction_min_gain_tokens, keep_messages, "
        "prune_after_user_turns, agent_model, summary_model, slot_granularity_minutes, "
        "booking_horizon_days, booking_notice_minutes, max_upcoming_bookings, "
        "retention_days, followup_template, followup_template_language, fact_keys.")
    _pnid(update)
    update.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="one setting (repeatable); JSON values are parsed: "
                             "--set inactivity_timeout_minutes=60")
    update.add_argument("--file", type=Path, help="a JSON or YAML object of settings")
    update.set_defaults(run=run_for_tenant(_update))
    token = tenant_sub.add_parser("token", help="create an admin API token that sees only "
                                  "this tenant (printed once)")
    _pnid(token)
    token.add_argument("--label", default="", help="who or what uses it")
    token.set_defaults(run=run_for_tenant(_token))
    revoke = tenant_sub.add_parser("revoke-token", help="revoke a tenant's admin API token")
    _pnid(revoke)
    revoke.add_argument("token_id", type=record_id)
    revoke.set_defaults(run=run_for_tenant(_revoke))


def add_catalog_commands(sub: Any) -> None:
    catalog = sub.add_parser("catalog", help="services, professionals, opening hours and "
                             "holidays of a tenant")
    catalog_sub = catalog.add_subparsers(title="catalog commands")
    show = catalog_sub.add_parser("show", help="print the catalogue as JSON")
    _pnid(show)
    show.set_defaults(run=run_for_tenant(_catalog_show))
    replace = catalog_sub.add_parser(
        "set", help="replace the parts given in a JSON/YAML file: services, professionals, "
        "hours, hours_exceptions (services and professionals left out are archived)")
    _pnid(replace)
    replace.add_argument("file", type=Path)
    replace.set_defaults(run=run_for_tenant(_catalog_set))
    service = catalog_sub.add_parser("service", help="create or change a service")
    _pnid(service)
    service.add_argument("code")
    service.add_argument("--name", default=None, help="shown to customers (kept when left out)")
    service.add_argument("--duration", type=int, default=None,
                         help="minutes (required for a new service; kept when left out)")
    service.set_defaults(run=run_for_tenant(_service))
    remove = catalog_sub.add_parser("remove-service", help="archive a service (refused while "
                                    "it has upcoming appointments)")
    _pnid(remove)
    remove.add_argument("code")
    remove.set_defaults(run=run_for_tenant(_remove_service))
    pro = catalog_sub.add_parser("professional", help="create or change a professional")
    _pnid(pro)
    pro.add_argument("code")
    pro.add_argument("--name", default=None, help="kept when left out")
    pro.add_argument("--services", default=None,
                     help="service codes, comma-separated (kept when left out)")
    pro.set_defaults(run=run_for_tenant(_professional))
    remove_pro = catalog_sub.add_parser("remove-professional", help="archive a professional "
                                        "(refused while they have upcoming appointments)")
    _pnid(remove_pro)
    remove_pro.add_argument("code")
    remove_pro.set_defaults(run=run_for_tenant(_remove_professional))
    hours = catalog_sub.add_parser("hours", help="replace the weekly hours: "
                                   "mon=09:00-12:00,13:00-18:00 sat=09:00-13:00 (others closed)")
    _pnid(hours)
    hours.add_argument("days", nargs="+", metavar="DAY=INTERVALS")
    hours.set_defaults(run=run_for_tenant(_hours))
    exception = catalog_sub.add_parser("exception", help="one date's hours instead of its "
                                       "weekday's; without --hours it is closed (a holiday)")
    _pnid(exception)
    exception.add_argument("day", help="YYYY-MM-DD, local")
    exception.add_argument("--hours", action="append", metavar="HH:MM-HH:MM[,...]",
                           help="open intervals that day (repeatable or comma-separated)")
    exception.add_argument("--note", default="")
    exception.set_defaults(run=run_for_tenant(_exception))
    reopen = catalog_sub.add_parser("remove-exception", help="the date follows its weekday "
                                    "again")
    _pnid(reopen)
    reopen.add_argument("day")
    reopen.set_defaults(run=run_for_tenant(_reopen))


def add_facts_commands(facts_sub: Any) -> None:
    edit = facts_sub.add_parser("edit", help="correct a fact's value (confirmed, origin "
                                "admin; the old value is kept as history)")
    _pnid(edit)
    edit.add_argument("fact_id", type=record_id)
    edit.add_argument("value")
    edit.add_argument("--reason", required=True, help="why (kept with the decision)")
    edit.set_defaults(run=run_for_tenant(_fact_edit))


def add_conversation_commands(sub: Any) -> None:
    conversations = sub.add_parser("conversations", help="read conversations")
    conv_sub = conversations.add_subparsers(title="conversations commands")
    listing = conv_sub.add_parser("list", help="newest first")
    _pnid(listing)
    listing.add_argument("--contact", help="phone number, user id or contact id")
    listing.add_argument("--state", choices=("open", "closed"))
    listing.add_argument("--limit", type=int)
    listing.set_defaults(run=run_for_tenant(_conversations))
    show = conv_sub.add_parser("show", help="messages, summary, facts in context, usage per "
                               "call")
    _pnid(show)
    show.add_argument("conversation_id", type=record_id)
    show.set_defaults(run=run_for_tenant(_conversation))
    appointments = sub.add_parser("appointments", help="list and cancel bookings")
    app_sub = appointments.add_subparsers(title="appointments commands")
    listing = app_sub.add_parser("list", help="by start time")
    _pnid(listing)
    listing.add_argument("--from", dest="date_from", help="first local day YYYY-MM-DD")
    listing.add_argument("--to", dest="date_to", help="last local day YYYY-MM-DD")
    listing.add_argument("--status", choices=("booked", "cancelled"))
    listing.add_argument("--contact")
    listing.set_defaults(run=run_for_tenant(_appointments))
    cancel = app_sub.add_parser("cancel", help="cancel a booking (the customer is not "
                                "messaged)")
    _pnid(cancel)
    cancel.add_argument("appointment_id", type=record_id)
    cancel.set_defaults(run=run_for_tenant(_cancel))


def _list_tenants(args: argparse.Namespace) -> int:
    from sqlmodel import col, select

    from operations import service
    from storage.db import make_engine, session_scope
    from storage.models import Tenant

    with session_scope(make_engine(settings_or_exit(require=False).database_url)) as session:
        tenants = session.exec(select(Tenant).order_by(col(Tenant.id))).all()
        _print([{k: v for k, v in service.tenant_view(t).items()
                 if k in ("id", "phone_number_id", "name", "timezone",
                          "inactivity_timeout_minutes", "sending_paused_reason")}
                for t in tenants])
    return 0
