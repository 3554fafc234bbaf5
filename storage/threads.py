"""Who holds each WhatsApp thread, beside Meta Business Agent (issue 45).

Meta keeps one thread per business number and customer, owned by one app, by Meta Business
Agent, or idle; no endpoint reports the owner, so the product keeps it itself, on the contact
(`Contact.thread_owner`), driven by the events (docs/DEPLOY.md section 11,
[S10]):

- a customer message on `messages`, a `control_passed` (sent to the new owner: us), our `take`
  → OURS;
- a copy on `standby` (a message, an echo, a status), a `control_taken` (sent to the previous
  owner: us), our `pass` to `ai_agent` → META_AGENT, or OTHER_APP when the event names
  another role (an escalation partner that is not us);
- our `release` → IDLE (Meta sends no event for it);
- 24 hours with no customer message → IDLE, whatever was stored (`owner`).

Two behaviours Meta does not document are handled on the safe side: `messaging_handovers` may
never arrive (a customer message on `messages` then says the thread is ours, a standby copy
that it is not), and whether a template is accepted in a thread another app holds (the
tenant's `busy_thread_rule` decides; default: skip it and show it to staff).
"""

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlmodel import Session, col, update

from core.numbers import phone_variants
from storage.models import Contact, Tenant

OURS = "ours"
META_AGENT = "meta_agent"
OTHER_APP = "other_app"
IDLE = "idle"
OWNERS = (OURS, META_AGENT, OTHER_APP, IDLE)
OTHERS = (META_AGENT, OTHER_APP)  # another sender holds the thread: the agent does not answer

META_AGENT_ROLE = "ai_agent"  # Meta Business Agent's role in thread control ([S10])
IDLE_AFTER = timedelta(hours=24)  # a thread with no customer message this long is idle ([S10])

SKIP_AND_SHOW = "skip_and_show"
SEND_TEMPLATE = "send_template"
BUSY_THREAD_RULES = (SKIP_AND_SHOW, SEND_TEMPLATE)


def owner(contact: Contact, now: datetime) -> str:
    """Who holds `contact`'s thread at `now`: the stored owner, or IDLE when none is stored or
    the customer's last message is IDLE_AFTER old (or there is none)."""
    stored = contact.thread_owner
    if stored not in OWNERS or contact.last_inbound_at is None \
            or now - contact.last_inbound_at >= IDLE_AFTER:
        return IDLE
    return str(stored)


def held_by_other(contact: Contact, now: datetime) -> bool:
    """True while Meta's agent or another app holds the thread: nothing is sent into it but
    what the tenant's `busy_thread_rule` allows (a template)."""
    return owner(contact, now) in OTHERS


def role_owner(role: str | None) -> str:
    """The owner a thread-control role names: META_AGENT for `ai_agent`, else OTHER_APP."""
    return META_AGENT if role == META_AGENT_ROLE else OTHER_APP


def set_owner(session: Session, contact_ids: Iterable[int], new_owner: str, *,
              now: datetime) -> None:
    """Record `new_owner` (one of OWNERS) on the contacts' threads, in one UPDATE."""
    if new_owner not in OWNERS:
        raise ValueError(f"unknown thread owner {new_owner!r} (known: {', '.join(OWNERS)})")
    ids = sorted(set(contact_ids))
    if ids:
        session.exec(update(Contact).where(col(Contact.id).in_(ids))
                     .values(thread_owner=new_owner, thread_owner_at=now))


def standby_owner(contact: Contact, now: datetime) -> str:
    """The owner a standby copy says holds the thread: the other app already recorded, else
    Meta's agent (the primary responder by default when it is on, [S10])."""
    return OTHER_APP if owner(contact, now) == OTHER_APP else META_AGENT


def note_standby(session: Session, tenant_id: int, *, now: datetime) -> bool:
    """Record the number's first standby event (the console's banner); True when this is
    it."""
    done = session.exec(update(Tenant).where(
        col(Tenant.id) == tenant_id, col(Tenant.standby_seen_at).is_(None))
        .values(standby_seen_at=now))
    return bool(done.rowcount)


def allowed(tenant: Tenant, contact: Contact) -> bool:
    """Whether the agent answers `contact` under the tenant's `agent_allowlist` (staged launch):
    an empty list opens it to everyone; else the contact's number (`wa_id`, digits) must be on
    it, with or without Brazil's ninth mobile digit (`core.numbers.phone_variants`: a wa_id
    often lacks it, the business types it). A contact known only by its BSUID (no `wa_id`)
    is on no list."""
    numbers = {digits(str(n)) for n in tenant.agent_allowlist or []}
    if not numbers:
        return True
    own = digits(contact.wa_id or "")
    return bool(own) and not numbers.isdisjoint([own, *phone_variants(own)])


def digits(number: str) -> str:
    """A phone number as its digits: "+55 (11) 98888-7777" → "5511988887777"."""
    return "".join(c for c in number if c.isdigit())


# the status reasons of what is not sent, or not answered, because of the thread (shown to
# staff: the console's conversation and agenda, the reminder's and notice's reason)
SKIPPED_HELD = "another sender holds the thread (Meta's agent or another app): not sent"
NOT_OURS = "another sender holds the thread"
NOT_ALLOWLISTED = "not on the agent allowlist"


def busy_rule(tenant: Tenant, contact: Contact, now: datetime) -> str | None:
    """What a reminder or business notice does now: None when the thread is not another
    sender's (the usual rules apply), else the tenant's `busy_thread_rule`: SKIP_AND_SHOW
    (skipped, its reason shown to staff) or SEND_TEMPLATE (the declared template, never
    free-form text)."""
    if not held_by_other(contact, now):
        return None
    return SEND_TEMPLATE if tenant.busy_thread_rule == SEND_TEMPLATE else SKIP_AND_SHOW


def why_not_answered(tenant: Tenant, contact: Contact, now: datetime) -> str | None:
    """Why the agent does not answer `contact` now (NOT_OURS, NOT_ALLOWLISTED), or None: it
    does. The one place this decision is made (workers/turns.py, workers/receipts.py)."""
    if held_by_other(contact, now):
        return NOT_OURS
    if not allowed(tenant, contact):
        return NOT_ALLOWLISTED
    return None


def may_send(tenant: Tenant, contact: Contact, kind: str, now: datetime) -> bool:
    """Whether a part of `kind` (text, interactive, template) may go out now: always while
    the thread is not another sender's; then only a template under SEND_TEMPLATE (the outbox's
    last check, workers/outbox.py: what was queued before the thread changed hands)."""
    rule = busy_rule(tenant, contact, now)
    return rule is None or (rule == SEND_TEMPLATE and kind == "template")
