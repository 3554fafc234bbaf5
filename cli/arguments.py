"""The parsers of `wagent tenant|catalog|facts|conversations|appointments ...` and their
argument types. Light on purpose (argparse only): `wagent --help` builds every parser; each
command names its handler ("cli.tenants:show"), which cli/main.py imports when it runs."""

import argparse
from pathlib import Path
from typing import Any


def record_id(text: str) -> int:
    """An argparse type: a database id (1 … 2^31-1)."""
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 2**31:
        raise argparse.ArgumentTypeError(f"{text!r} is not an id")
    return int(text)


def booking_number(text: str) -> int:
    """An argparse type: the customer's booking number, as told ("2" or "#2")."""
    number = text.strip().removeprefix("#")
    if not (number.isascii() and number.isdigit()) or not 0 < int(number) < 2**31:
        raise argparse.ArgumentTypeError(f"{text!r} is not a booking number (#N, as the "
                                         "customer is told)")
    return int(number)


BOOKING_HELP = ("the customer's booking number (#N as they were told; `booking_number` in "
                "listings, not the row `id`)")
SERVICE_HELP = "one service of the visit, by code (required when it has several)"


def add_conversation_ref(parser: argparse.ArgumentParser) -> None:
    """`PHONE_NUMBER_ID CONVERSATION_ID`, as every command naming a conversation takes them;
    the one-argument form (CONVERSATION_ID alone) still works, with a warning
    (cli/admin.py: conversation_ref)."""
    parser.add_argument("phone_number_id", metavar="PHONE_NUMBER_ID",
                        help="the business number's phone_number_id")
    parser.add_argument("conversation_id", metavar="CONVERSATION_ID", nargs="?", default=None,
                        help="the conversation's id")


def _pnid(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("phone_number_id", help="the business number's phone_number_id")


class _SettingsHelp(argparse.Action):
    """`tenant update --help`: the keys come from storage/tenant_config.TenantSettings
    (cli/settings_reference.update_help), imported only when this help is asked for, so that
    `wagent --help` stays light (cli/main.py)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from cli.settings_reference import update_help
        parser.epilog = update_help()
        parser.print_help()
        parser.exit()


def add_tenant_commands(tenant_sub: Any) -> None:
    show = tenant_sub.add_parser("show", help="print a tenant's settings and counts as JSON")
    _pnid(show)
    show.set_defaults(run="cli.tenants:show")
    listing = tenant_sub.add_parser("list", help="list every tenant")
    listing.set_defaults(run="cli.tenants:list_tenants")
    update = tenant_sub.add_parser(
        "update", help="change settings; the next turn uses them (a new "
        "inactivity_timeout_minutes also moves the open conversations' due times)",
        description="Change a tenant's settings; every key, its default and meaning is listed "
        "below (docs/SETTINGS.md, generated from the same definitions).",
        formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False)
    update.add_argument("-h", "--help", action=_SettingsHelp, nargs=0,
                        help="show this help, with every key, and exit")
    _pnid(update)
    update.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="one setting (repeatable); JSON values are parsed: "
                             "--set inactivity_timeout_minutes=60")
    update.add_argument("--file", type=Path, help="a JSON or YAML object of settings")
    update.set_defaults(run="cli.tenants:update")
    token = tenant_sub.add_parser("token", help="create an admin API token that sees only "
                                  "this tenant (printed once)")
    _pnid(token)
    token.add_argument("--label", default="", help="who or what uses it")
    token.set_defaults(run="cli.tenants:token")
    revoke = tenant_sub.add_parser("revoke-token", help="revoke a tenant's admin API token")
    _pnid(revoke)
    revoke.add_argument("token_id", type=record_id)
    revoke.set_defaults(run="cli.tenants:revoke_token")


def add_catalog_commands(sub: Any) -> None:
    catalog = sub.add_parser("catalog", help="services, professionals, opening hours and "
                             "holidays of a tenant")
    catalog_sub = catalog.add_subparsers(title="catalog commands")
    show = catalog_sub.add_parser("show", help="print the catalogue as JSON")
    _pnid(show)
    show.set_defaults(run="cli.catalog:show")
    replace = catalog_sub.add_parser(
        "set", help="replace the parts given in a JSON/YAML file: services, professionals, "
        "hours, hours_exceptions (services and professionals left out are archived)")
    _pnid(replace)
    replace.add_argument("file", type=Path)
    replace.set_defaults(run="cli.catalog:replace")
    service = catalog_sub.add_parser("service", help="create or change a service")
    _pnid(service)
    service.add_argument("code")
    service.add_argument("--name", default=None, help="shown to customers (kept when left out)")
    service.add_argument("--duration", type=int, default=None,
                         help="minutes (required for a new service; kept when left out)")
    service.add_argument("--price", default=None,
                         help='in the tenant\'s currency: 80 or 80,00; "" clears it '
                              "(kept when left out)")
    service.add_argument("--price-from", default=None, action=argparse.BooleanOptionalAction,
                         help='the price is a minimum ("a partir de")')
    service.add_argument("--description", default=None,
                         help="one line the agent may quote (kept when left out)")
    service.add_argument("--buffer", type=int, default=None,
                         help="minutes busy after the visit, clean-up (kept when left out)")
    service.set_defaults(run="cli.catalog:service")
    _add_catalog_removals_and_hours(catalog_sub)


def _add_catalog_removals_and_hours(catalog_sub: Any) -> None:
    """`wagent catalog remove-service|professional|remove-professional|hours|exception|
    remove-exception`."""
    remove = catalog_sub.add_parser("remove-service", help="archive a service (refused while "
                                    "it has upcoming appointments)")
    _pnid(remove)
    remove.add_argument("code")
    remove.set_defaults(run="cli.catalog:remove_service")
    pro = catalog_sub.add_parser("professional", help="create or change a professional")
    _pnid(pro)
    pro.add_argument("code")
    pro.add_argument("--name", default=None, help="kept when left out")
    pro.add_argument("--services", default=None,
                     help="service codes, comma-separated (kept when left out)")
    pro.add_argument("--week", type=Path, default=None,
                     help="JSON/YAML file with any of hours, time_off, hours_exceptions, "
                          "durations (their own week; keys left out are kept)")
    pro.set_defaults(run="cli.catalog:professional")
    remove_pro = catalog_sub.add_parser("remove-professional", help="archive a professional "
                                        "(refused while they have upcoming appointments)")
    _pnid(remove_pro)
    remove_pro.add_argument("code")
    remove_pro.set_defaults(run="cli.catalog:remove_professional")
    hours = catalog_sub.add_parser("hours", help="replace the weekly hours: "
                                   "mon=09:00-12:00,13:00-18:00 sat=09:00-13:00 (others closed)")
    _pnid(hours)
    hours.add_argument("days", nargs="+", metavar="DAY=INTERVALS")
    hours.set_defaults(run="cli.catalog:hours")
    exception = catalog_sub.add_parser("exception", help="one date's hours instead of its "
                                       "weekday's; without --hours it is closed (a holiday)")
    _pnid(exception)
    exception.add_argument("day", help="YYYY-MM-DD, local")
    exception.add_argument("--hours", action="append", metavar="HH:MM-HH:MM[,...]",
                           help="open intervals that day (repeatable or comma-separated)")
    exception.add_argument("--note", default="")
    exception.set_defaults(run="cli.catalog:exception")
    reopen = catalog_sub.add_parser("remove-exception", help="the date follows its weekday "
                                    "again")
    _pnid(reopen)
    reopen.add_argument("day")
    reopen.set_defaults(run="cli.catalog:remove_exception")


def add_facts_commands(facts_sub: Any) -> None:
    edit = facts_sub.add_parser("edit", help="correct a fact's value (confirmed, origin "
                                "admin; the old value is kept as history)")
    _pnid(edit)
    edit.add_argument("fact_id", type=record_id)
    edit.add_argument("value")
    edit.add_argument("--reason", required=True, help="why (kept with the decision)")
    edit.set_defaults(run="cli.facts:edit")


def add_conversation_commands(sub: Any) -> None:
    conversations = sub.add_parser("conversations", help="read conversations")
    conv_sub = conversations.add_subparsers(title="conversations commands")
    listing = conv_sub.add_parser("list", help="newest first")
    _pnid(listing)
    listing.add_argument("--contact", help="phone number, user id or contact id")
    listing.add_argument("--state", choices=("open", "closed"))
    listing.add_argument("--limit", type=int)
    listing.set_defaults(run="cli.conversations:list_conversations")
    show = conv_sub.add_parser("show", help="messages, summary, facts in context, usage per "
                               "call")
    _pnid(show)
    show.add_argument("conversation_id", type=record_id)
    show.set_defaults(run="cli.conversations:show")
    reply = conv_sub.add_parser("reply", help="a staff reply (text inside the 24-hour window, "
                                "else --template); staff keep the conversation")
    _pnid(reply)
    reply.add_argument("conversation_id", type=record_id)
    reply.add_argument("text", nargs="?", help="the reply's text")
    reply.add_argument("--template", help="one of the tenant's templates, by name")
    reply.add_argument("--param", action="append", help="a template parameter, in order")
    reply.add_argument("--author", help="the name shown with the reply (default: cli)")
    reply.set_defaults(run="cli.staff:reply_and_flush")
    back = conv_sub.add_parser("hand-back", help="back to the agent now")
    _pnid(back)
    back.add_argument("conversation_id", type=record_id)
    back.set_defaults(run="cli.staff:hand_back")
    thread = conv_sub.add_parser(
        "thread", help="beside Meta's agent: take the conversation's WhatsApp thread, pass it "
        "back to Meta's agent, or release it (POST /{phone_number_id}/thread_control)")
    _pnid(thread)
    thread.add_argument("conversation_id", type=record_id)
    thread.add_argument("action", choices=("take", "pass", "release"))
    thread.set_defaults(run="cli.staff:thread_control")
    attention = conv_sub.add_parser("attention", help="what needs a person, with counts")
    _pnid(attention)
    attention.set_defaults(run="cli.staff:attention")
    appointments = sub.add_parser("appointments", help="list and cancel bookings")
    app_sub = appointments.add_subparsers(title="appointments commands")
    listing = app_sub.add_parser("list", help="by start time")
    _pnid(listing)
    listing.add_argument("--from", dest="date_from", help="first local day YYYY-MM-DD")
    listing.add_argument("--to", dest="date_to", help="last local day YYYY-MM-DD")
    listing.add_argument("--status", choices=("booked", "cancelled"))
    listing.add_argument("--contact")
    listing.set_defaults(run="cli.appointments:list_appointments")
    cancel = app_sub.add_parser("cancel", help="cancel a booking (the customer gets a "
                                "notice: docs/CONFIGURE.md, Reminders)")
    _pnid(cancel)
    cancel.add_argument("booking_number", type=booking_number, help=BOOKING_HELP)
    cancel.add_argument("--service", help=SERVICE_HELP)
    cancel.add_argument("--rest", action="store_true",
                        help="a series' visit: cancel it and the series' later visits")
    cancel.set_defaults(run="cli.appointments:cancel")
    add_agenda_commands(app_sub)
    add_package_commands(sub)
    add_results_command(sub)


def add_agenda_commands(app_sub: Any) -> None:
    """`wagent appointments book|move|block|unblock|outcome|deposit-paid|day|waitlist-offer`
    (operations/agenda.py)."""
    book = app_sub.add_parser("book", help="book for a contact (existing, or new by phone)")
    _pnid(book)
    book.add_argument("--service", required=True,
                      help="code; several, comma-separated: one visit, in order")
    book.add_argument("--for-name", default="", help="who the visit is for, if not the contact")
    book.add_argument("--start", required=True, help="local YYYY-MM-DDTHH:MM")
    book.add_argument("--professional", help="code (default: anyone free)")
    who = book.add_mutually_exclusive_group(required=True)
    who.add_argument("--contact", help="contact id, phone or user id of an existing contact")
    who.add_argument("--phone", help="the customer's phone (a new contact when unknown)")
    book.add_argument("--name", default="", help="a new contact's name")
    book.add_argument("--note", default="")
    book.add_argument("--repeat", help="a recurring series: an RFC 5545 RRULE from --start, "
                                       "e.g. FREQ=WEEKLY;BYDAY=TU;COUNT=10")
    book.set_defaults(run="cli.agenda:book")
    move = app_sub.add_parser("move", help="move an upcoming booking")
    _pnid(move)
    move.add_argument("booking_number", type=booking_number, help=BOOKING_HELP)
    move.add_argument("--service", help=SERVICE_HELP)
    move.add_argument("--start", required=True, help="local YYYY-MM-DDTHH:MM")
    move.add_argument("--professional")
    move.set_defaults(run="cli.agenda:move")
    block = app_sub.add_parser("block", help="block a professional's time (hides slots)")
    _pnid(block)
    block.add_argument("--professional", required=True)
    block.add_argument("--start", required=True, help="local YYYY-MM-DDTHH:MM")
    block.add_argument("--end", required=True, help="local YYYY-MM-DDTHH:MM")
    block.add_argument("--note", default="")
    block.add_argument("--force", action="store_true",
                       help="block over bookings (they are kept and listed)")
    block.set_defaults(run="cli.agenda:block")
    unblock = app_sub.add_parser("unblock", help="remove a block")
    _pnid(unblock)
    unblock.add_argument("block_id", type=record_id)
    unblock.set_defaults(run="cli.agenda:unblock")
    outcome = app_sub.add_parser("outcome", help="mark a visit completed or no_show")
    _pnid(outcome)
    outcome.add_argument("booking_number", type=booking_number, help=BOOKING_HELP)
    outcome.add_argument("outcome", choices=("completed", "no_show"))
    outcome.add_argument("--note", default="", help="what was done (at most 200 characters)")
    outcome.set_defaults(run="cli.agenda:outcome")
    day = app_sub.add_parser("day", help="one local day: each professional's hours, bookings, "
                             "blocks and waitlist")
    _pnid(day)
    day.add_argument("day", help="YYYY-MM-DD")
    day.set_defaults(run="cli.agenda:day")
    _add_held_slot_commands(app_sub)


def _add_held_slot_commands(app_sub: Any) -> None:
    """`wagent appointments deposit-paid|waitlist-offer`: a held visit paid (issue 48), a
    freed slot held for a waiting customer (issue 47)."""
    paid = app_sub.add_parser("deposit-paid", help="staff saw the visit's Pix deposit paid "
                              "(issue 48): books a held visit")
    _pnid(paid)
    paid.add_argument("booking_number", type=booking_number, help=BOOKING_HELP)
    paid.add_argument("--amount-cents", type=int, default=None,
                      help="the amount seen, in cents (default: the amount asked)")
    paid.set_defaults(run="cli.agenda:deposit_paid")
    offer = app_sub.add_parser("waitlist-offer", help="hold a free slot for a waiting "
                               "customer (issue 47); the offer goes out within 30 s")
    _pnid(offer)
    offer.add_argument("entry_id", type=record_id, help="the waitlist entry (appointments day)")
    offer.add_argument("--professional", required=True)
    offer.add_argument("--start", required=True, help="local YYYY-MM-DDTHH:MM")
    offer.set_defaults(run="cli.agenda:waitlist_offer")



def add_results_command(sub: Any) -> None:
    """`wagent results PNID [--period week|month]` (operations/results.py, issue 49)."""
    results = sub.add_parser("results", help="what the agent brought in this week or month and "
                             "the one before, as JSON (the console's Resultados)")
    _pnid(results)
    results.add_argument("--period", choices=("week", "month"), default="week")
    results.set_defaults(run="cli.results:show")


def add_package_commands(sub: Any) -> None:
    """`wagent packages define|sell|adjust|list` (operations/packages.py, issue 46)."""
    packages = sub.add_parser("packages", help="session packages and authorisations")
    pk_sub = packages.add_subparsers(title="packages commands")
    define = pk_sub.add_parser("define", help="create or change a package the business sells")
    _pnid(define)
    define.add_argument("code")
    define.add_argument("--name", required=True)
    define.add_argument("--service", required=True, help="the service code it covers")
    define.add_argument("--sessions", type=int, required=True)
    define.add_argument("--validity-days", type=int, required=True)
    define.add_argument("--price-cents", type=int)
    define.set_defaults(run="cli.packages:define")
    sell = pk_sub.add_parser("sell", help="a package for a customer")
    _pnid(sell)
    sell.add_argument("package", help="package code")
    sell.add_argument("--contact", required=True, help="contact id, phone or user id")
    sell.add_argument("--authorisation", default="", help="a health plan's number")
    sell.add_argument("--expires-on", help="YYYY-MM-DD (default: the package's validity)")
    sell.set_defaults(run="cli.packages:sell")
    adjust = pk_sub.add_parser("adjust", help="set the sessions used of a customer's package")
    _pnid(adjust)
    adjust.add_argument("id", type=int, help="the customer package's id")
    adjust.add_argument("--used", type=int, required=True)
    adjust.set_defaults(run="cli.packages:adjust")
    listing = pk_sub.add_parser("list", help="a customer's live packages")
    _pnid(listing)
    listing.add_argument("--contact", required=True)
    listing.set_defaults(run="cli.packages:list_packages")
