"""Tenant administration operations, shared by the admin HTTP API and the CLI.

Every function takes an open session and the tenant it acts on (the caller has checked that the
caller may see it), returns JSON-ready data, and raises:
(the tree and its statuses: `operations/errors.py`)
- `NotFound` (HTTP 404) for an unknown id, or one of another tenant: never its data;
- `Invalid` (422) with the list of problems, for input that passed the shape checks but not the
  rules (unknown service code, a value the fact rules refuse);
- `Conflict` (409) when the change clashes with the state (an existing phone_number_id, a
  service with upcoming appointments, an appointment no longer booked).
"""

import hashlib
import json
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlmodel import Session, col, func, select

from agent.tools.facts_rules import Catalogue, check_value
from core import clock
from core.credentials import mint_tenant_token
from operations.errors import (  # noqa: F401  (AdminError: the name callers know here)
    AdminError,
    Conflict,
    Invalid,
    NotFound,
    admin_error,
)
from storage import appointments, delivery, deposits, failures, reminders, rights, threads, webhooks
from storage import facts as fact_repo
from storage import messages as message_repo
from storage.catalogue import catalogue_names
from storage.conversations import with_staff
from storage.fact_keys import resolve_keys
from storage.models import (
    AdminToken,
    Appointment,
    Contact,
    ContactFact,
    Conversation,
    Message,
    Outbound,
    Professional,
    ProviderFailure,
    Service,
    Tenant,
    Usage,
)
from storage.rights import export_contact, forget_contact
from storage.tenant_config import price_text, problems_of
from usage.report import call_of, summarize_calls

MAX_PAGE = 500
MAX_DEPTH = 16


def clean_text(value: Any, where: str = "body") -> list[str]:
    """What PostgreSQL cannot store or a person would not send: NUL characters, lone
    surrogates, JSON nested deeper than MAX_DEPTH. Iterative: a deep body cannot overflow."""
    problems: list[str] = []
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack and len(problems) < 20:
        item, at, depth = stack.pop()
        if depth > MAX_DEPTH:
            return [f"{where}: nested deeper than {MAX_DEPTH} levels"]
        if isinstance(item, str):
            if "\x00" in item:
                problems.append(f"{at}: NUL characters are not allowed")
            elif not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    problems.append(f"{at}: invalid Unicode (lone surrogate)")
        elif isinstance(item, dict):
            for key, child in item.items():
                stack += [(key, at, depth + 1), (child, f"{at}.{key}", depth + 1)]
        elif isinstance(item, list):
            stack += [(child, f"{at}.{i}", depth + 1) for i, child in enumerate(item)]
    return problems


def validated(model: type[BaseModel], data: Any) -> Any:
    """`model` validated from `data`, or Invalid listing every problem as "where: what"."""
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        problems = problems_of(exc)
        raise Invalid("; ".join(problems), problems) from None


# -- tenants ---------------------------------------------------------------------------------

def tenant_view(tenant: Tenant) -> dict[str, Any]:
    return dict(tenant.model_dump(mode="json"))


def create_token(session: Session, tenant: Tenant, *, label: str, now: datetime) -> dict[str, Any]:
    """A new bearer token that sees only this tenant. The token is returned once; only its
    SHA-256 is stored."""
    token = mint_tenant_token(tenant.id or 0)
    row = AdminToken(tenant_id=tenant.id or 0, token_hash=token_hash(token), label=label[:100],
                     created_at=now)
    session.add(row)
    session.flush()
    return {"id": row.id, "label": row.label, "token": token,
            "created_at": now.isoformat()}


def revoke_token(session: Session, tenant: Tenant, token_id: int, *, now: datetime) -> None:
    row = session.get(AdminToken, token_id)
    if row is None or row.tenant_id != tenant.id or row.revoked_at is not None:
        raise NotFound(f"no active token #{token_id}")
    row.revoked_at = now
    session.add(row)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def tenant_for_token(session: Session, token: str) -> int | None:
    """The tenant id of an active per-tenant token, else None."""
    row = session.exec(select(AdminToken).where(AdminToken.token_hash == token_hash(token),
                                                col(AdminToken.revoked_at).is_(None))).first()
    return row.tenant_id if row else None


# -- conversations ---------------------------------------------------------------------------

class ConversationQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    contact: str | None = Field(None, max_length=160,
                                description="phone number (wa_id), user id, or contact id")
    state: str | None = Field(None, pattern="^(open|closed)$", description="open or closed")
    limit: int = Field(50, ge=1, le=MAX_PAGE, description="at most this many, newest first")
    before_id: int | None = Field(None, ge=1, le=2**31 - 1,
                                  description="only conversations older than this id")


def list_conversations(session: Session, tenant: Tenant, query: ConversationQuery,
                       language: str = "en") -> list[dict[str, Any]]:
    """Newest first, each with its `last_reply` (`last_reply_views`; None before any)."""
    statement = select(Conversation, Contact).join(
        Contact, col(Contact.id) == col(Conversation.contact_id)).where(
        Conversation.tenant_id == tenant.id)
    if query.contact:
        contact = find_contact(session, tenant, query.contact)
        statement = statement.where(Conversation.contact_id == contact.id)
    if query.state:
        statement = statement.where(Conversation.status == query.state)
    if query.before_id:
        statement = statement.where(col(Conversation.id) < query.before_id)
    rows = session.exec(statement.order_by(col(Conversation.id).desc()).limit(query.limit)).all()
    last = last_reply_views(session, [int(c.id or 0) for c, _ in rows], language)
    now = clock.now()
    return [{**_conversation_head(c), "contact": contact_view(k),
             "thread_owner": threads.owner(k, now),  # who holds the thread (issue 45)
             "last_reply": last.get(int(c.id or 0))} for c, k in rows]


def last_reply_views(session: Session, conversation_ids: list[int],
                     language: str = "en") -> dict[int, dict[str, Any]]:
    """Each conversation's latest reply: `message_id`, `at` and its delivery
    (storage/delivery.py), plus `not_delivered`: True when it failed or its fate is unknown
    (the console flags the conversation; /metrics counts the open ones)."""
    replies = message_repo.last_replies(session, conversation_ids)
    parts = message_repo.parts_of(session, [int(m.id or 0) for m in replies.values()])
    views = {}
    for conversation_id, message in replies.items():
        view = delivery_view(parts[int(message.id or 0)], language)
        if view is not None:
            views[conversation_id] = {
                "message_id": message.id, "at": _iso(message.received_at), **view,
                "not_delivered": view["state"] in delivery.NOT_DELIVERED}
    return views


def delivery_view(parts: list[Outbound], language: str = "en") -> dict[str, Any] | None:
    """A reply's delivery from its outbox parts (storage/delivery.py); None without any."""
    return delivery.reply_delivery(parts, language) if parts else None


def offered_view(parts: list[Outbound]) -> dict[str, Any] | None:
    """What a reply sent as a WhatsApp list or reply buttons offered (workers/choices.py: an
    `interactive` outbox part holds the `interactive` object as JSON): `{"kind": "list" |
    "button", "button": the list's label or None, "options": [titles, in order]}`; None for
    any other reply."""
    for part in parts:
        if part.kind != "interactive":
            continue
        try:
            interactive = json.loads(part.body)
        except ValueError:
            return None
        action = interactive.get("action") or {} if isinstance(interactive, dict) else {}
        kind = interactive.get("type") if isinstance(interactive, dict) else None
        if kind == "list":
            options = [str(r.get("title", "")) for section in action.get("sections") or []
                       for r in section.get("rows") or []]
        elif kind == "button":
            options = [str((b.get("reply") or {}).get("title", ""))
                       for b in action.get("buttons") or []]
        else:
            return None
        return {"kind": kind, "button": action.get("button") if kind == "list" else None,
                "options": options}
    return None


def _conversation_head(c: Conversation) -> dict[str, Any]:
    return {"id": c.id, "status": c.status, "opened_at": _iso(c.opened_at),
            "closed_at": _iso(c.closed_at), "last_activity_at": _iso(c.last_activity_at),
            "due_at": _iso(c.due_at), "compactions": c.compactions,
            "last_input_tokens": c.last_input_tokens}


def conversation_view(session: Session, tenant: Tenant, conversation_id: int, *,
                      now: datetime, after_id: int = 0, limit: int = MAX_PAGE,
                      latest: bool = False, language: str = "en") -> dict[str, Any]:
    """One conversation: its messages (content blocks as sent to Claude; each reply with its
    `delivery`: state, meaning, Meta's code and a one-line reason in `language`, see
    storage/delivery.py), summary, the context block and the facts it holds, and token usage
    per Claude call with totals."""
    conversation = session.get(Conversation, conversation_id)
    if conversation is None or conversation.tenant_id != tenant.id:
        raise NotFound(f"no conversation #{conversation_id}")
    contact = session.get(Contact, conversation.contact_id)
    query = select(Message).where(Message.conversation_id == conversation_id,
                                  col(Message.id) > after_id)
    if latest:  # the last `limit` messages, oldest first
        messages = list(reversed(session.exec(query.order_by(col(Message.id).desc())
                                              .limit(limit)).all()))
    else:
        messages = list(session.exec(query.order_by(col(Message.id)).limit(limit)).all())
    total = int(session.exec(select(func.count()).select_from(Message).where(
        Message.conversation_id == conversation_id)).one())
    usage = session.exec(select(Usage).where(Usage.conversation_id == conversation_id)
                         .order_by(col(Usage.id))).all()
    keys = resolve_keys(tenant.fact_keys)
    facts = fact_repo.for_context(session, conversation.contact_id, now, keys)
    calls = [call_of(u) for u in usage]
    totals = summarize_calls(calls)
    parts = message_repo.parts_of(session, [int(m.id or 0) for m in messages
                                            if m.direction == "outbound"])
    return {
        **_conversation_head(conversation),
        "with_staff": with_staff(conversation, now),
        "staff_until": _iso(conversation.staff_until), "staff_by": conversation.staff_by,
        "staff_reason": conversation.staff_reason,
        "handoff_waiting": conversation.handoff_at is not None and with_staff(conversation, now),
        "contact": contact_view(contact) if contact else None,
        "thread_owner": threads.owner(contact, now) if contact else threads.IDLE,
        "summary": conversation.summary,
        "context_block": conversation.context_block,
        "messages_total": total,
        "outage_state": conversation.outage_state, "outage_at": _iso(conversation.outage_at),
        "failures": [failure_view(f) for f in failures.of_conversation(session,
                                                                       conversation_id)],
        "facts_in_context": [fact_view(f) for f in facts],
        "messages": [_message_view(m, parts.get(int(m.id or 0), []), language)
                     for m in messages],
        "usage": {"calls": [{"at": _iso(u.created_at), "purpose": u.purpose, "model": u.model,
                             "request_id": u.request_id, "input_tokens": u.input_tokens,
                             "cache_creation_input_tokens": u.cache_creation_input_tokens,
                             "cache_read_input_tokens": u.cache_read_input_tokens,
                             "output_tokens": u.output_tokens,
                             "context_tokens": c.context_tokens}
                            for u, c in zip(usage, calls, strict=True)],
                  "context_tokens_total": totals["input_tokens_total"],
                  "cache_read_input_tokens_total": sum(c.cache_read_input_tokens for c in calls),
                  "cache_read_share": totals["cache_read_share"],
                  "peak_context_tokens": totals["peak_context"],
                  "cost_usd": totals["cost_usd"]},
    }


def _message_view(m: Message, parts: list[Outbound], language: str) -> dict[str, Any]:
    """A message of `conversation_view`, with its reply's delivery and what it offered."""
    return {"id": m.id, "position": m.position, "role": m.role, "direction": m.direction,
            "content": m.content, "wa_type": m.wa_type, "author": m.author,
            "received_at": _iso(m.received_at), "answered_at": _iso(m.answered_at),
            "delivery_status": delivery.state_of(m.delivery_status),
            "delivery": delivery_view(parts, language), "offered": offered_view(parts),
            "deleted_at": _iso(m.deleted_at)}


def failure_view(row: ProviderFailure) -> dict[str, Any]:
    """A failed provider call (storage/failures.py): when, which provider, what failed (kind
    and HTTP status), how many tries, how it ended."""
    return {"id": row.id, "first_at": _iso(row.first_at), "last_at": _iso(row.last_at),
            "provider": row.provider, "purpose": row.purpose, "kind": row.kind,
            "status": row.status, "tries": row.tries, "outcome": row.outcome,
            "conversation_id": row.conversation_id}


# -- contacts --------------------------------------------------------------------------------

def contact_view(contact: Contact) -> dict[str, Any]:
    return {"id": contact.id, "wa_id": contact.wa_id, "user_id": contact.user_id,
            "profile_name": contact.profile_name}


def find_contact(session: Session, tenant: Tenant, ref: str) -> Contact:
    """A contact of this tenant by `storage.rights.find_contact`'s rule; NotFound if none."""
    contact = rights.find_contact(session, tenant.id or 0, ref)
    if contact is None:
        raise NotFound(f"no contact {ref!r}")
    return contact


def list_contacts(session: Session, tenant: Tenant, *, limit: int = 50,
                  after_id: int = 0) -> list[dict[str, Any]]:
    rows = session.exec(select(Contact).where(Contact.tenant_id == tenant.id,
                                              col(Contact.id) > after_id)
                        .order_by(col(Contact.id)).limit(limit)).all()
    return [contact_view(c) for c in rows]


def export(session: Session, tenant: Tenant, ref: str) -> dict[str, Any]:
    return export_contact(session, find_contact(session, tenant, ref))


def forget(session: Session, tenant: Tenant, ref: str, *, now: datetime) -> dict[str, Any]:
    counts = forget_contact(session, find_contact(session, tenant, ref), now=now)
    return {"erased": True, "counts": counts}


# -- facts -----------------------------------------------------------------------------------

def fact_view(fact: ContactFact, source_text: str | None = None) -> dict[str, Any]:
    view = {"id": fact.id, "contact_id": fact.contact_id, "key": fact.key, "value": fact.value,
            "state": fact.state, "origin": fact.origin,
            "source_message_id": fact.source_message_id,
            "valid_until": _iso(fact.valid_until), "decided_by": fact.decided_by,
            "decision_reason": fact.decision_reason, "created_at": _iso(fact.created_at)}
    if source_text is not None:
        view["source_text"] = source_text
    return view


def review_queue(session: Session, tenant: Tenant) -> list[dict[str, Any]]:
    """Facts waiting for a person (suggested, pending_review, contested), oldest first, each
    with the text of the customer message it came from."""
    assert tenant.id is not None
    items = []
    for fact in fact_repo.review_queue(session, tenant.id):
        source = session.get(Message, fact.source_message_id) if fact.source_message_id else None
        text = "\n".join(b.get("text", "") for b in (source.content if source else [])
                         if isinstance(b, dict) and b.get("type") == "text")
        items.append(fact_view(fact, text))
    return items


def _fact(session: Session, tenant: Tenant, fact_id: int) -> ContactFact:
    fact = session.get(ContactFact, fact_id)
    if fact is None or fact.tenant_id != tenant.id:
        raise NotFound(f"no fact #{fact_id}")
    return fact


def approve_fact(session: Session, tenant: Tenant, fact_id: int, *, by: str, reason: str,
                 now: datetime) -> dict[str, Any]:
    fact = _fact(session, tenant, fact_id)
    if fact.state not in fact_repo.IN_REVIEW:
        raise Conflict(f"fact #{fact_id} is {fact.state}, not in review")
    if fact.key not in resolve_keys(tenant.fact_keys):
        raise Conflict(f"key {fact.key!r} is no longer among the tenant's fact_keys")
    decided = fact_repo.decide(session, fact_id, approve=True, by=by, reason=reason, now=now)
    assert decided is not None
    return fact_view(decided)


def reject_fact(session: Session, tenant: Tenant, fact_id: int, *, by: str, reason: str,
                now: datetime) -> dict[str, Any]:
    """Rejected at once (out of the review queue and of the next context block). The caller
    then enqueues `workers.admin_jobs.reject_fact` (`enqueue_rejection`), which re-derives
    the contact's summaries without the value: that calls Claude, which the web never does."""
    fact = _fact(session, tenant, fact_id)
    if fact.state not in (*fact_repo.IN_REVIEW, "confirmed"):
        raise Conflict(f"fact #{fact_id} is {fact.state}")
    decided = fact_repo.decide(session, fact_id, approve=False, by=by, reason=reason, now=now)
    assert decided is not None
    return fact_view(decided)


def enqueue_rejection(queue: Any, fact_id: int) -> None:
    """The job gets the fact's id only: its reason and who decided are read from the fact
    (RQ keeps a job's arguments, and logs them when it fails; a reason may describe the
    customer)."""
    from rq import Retry  # rq: the CLI's catalogue and conversation commands start without it

    queue.enqueue("workers.admin_jobs.reject_fact", fact_id=fact_id,
                  job_timeout=600, retry=Retry(max=5, interval=[10, 60, 300]),
                  result_ttl=3600, failure_ttl=7 * 86400)


class FactEdit(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    value: str = Field(min_length=1, max_length=200)
    reason: str = Field(min_length=1, max_length=500, description="why the value was changed")


def edit_fact(session: Session, tenant: Tenant, fact_id: int, edit: FactEdit, *, by: str,
              now: datetime) -> dict[str, Any]:
    """A person corrects a fact: the new value is confirmed (origin admin) and supersedes the
    old one, whose history stays. The value passes the same content rules as the model's."""
    fact = _fact(session, tenant, fact_id)
    if fact.state in ("superseded", "rejected", "archived"):
        raise Conflict(f"fact #{fact_id} is {fact.state}; edit the current one")
    keys = resolve_keys(tenant.fact_keys)
    if fact.key not in keys:
        raise Conflict(f"key {fact.key!r} is no longer among the tenant's fact_keys")
    verdict = check_value(edit.value, keys[fact.key],
                          Catalogue(*catalogue_names(session, fact.tenant_id)))
    if verdict.reason:
        raise Invalid(f"value: {verdict.reason}", [f"value: {verdict.reason}"])
    new = ContactFact(tenant_id=fact.tenant_id, contact_id=fact.contact_id,
                      conversation_id=fact.conversation_id, key=fact.key, value=verdict.value,
                      state="confirmed", origin="admin", source_message_id=fact.source_message_id,
                      valid_from=now, decided_by=by[:64], decision_reason=edit.reason,
                      created_at=now)
    new.valid_until = now + timedelta(days=keys[fact.key].validity_days)
    new.review_at = now + timedelta(days=keys[fact.key].review_days)
    session.add(new)
    session.flush()
    fact_repo.supersede_others(session, new, now=now)
    return fact_view(new)


# -- appointments ----------------------------------------------------------------------------

class AppointmentQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    date_from: date | None = Field(None, alias="from", description="first local day, YYYY-MM-DD")
    date_to: date | None = Field(None, alias="to", description="last local day, YYYY-MM-DD")
    status: str | None = Field(None, pattern="^(booked|cancelled)$",
                               description="booked or cancelled")
    contact: str | None = Field(None, max_length=160,
                                description="phone number (wa_id), user id, or contact id")
    limit: int = Field(200, ge=1, le=MAX_PAGE, description="at most this many")

    @field_validator("date_from", "date_to")
    @classmethod
    def _sane(cls, value: date | None) -> date | None:
        if value is not None and not 2000 <= value.year <= 2100:
            raise ValueError("year must be between 2000 and 2100")
        return value


def list_appointments(session: Session, tenant: Tenant, query: AppointmentQuery
                      ) -> list[dict[str, Any]]:
    """By start time; days are local to the tenant's timezone (no `from`: from the first)."""
    tz = ZoneInfo(tenant.timezone)
    statement = select(Appointment).where(Appointment.tenant_id == tenant.id)
    first = query.date_from
    if first is not None:
        statement = statement.where(col(Appointment.start_at)
                                    >= datetime.combine(first, time(), tz))
    if query.date_to is not None:
        statement = statement.where(col(Appointment.start_at) < datetime.combine(
            query.date_to + timedelta(days=1), time(), tz))
    if query.status:
        statement = statement.where(Appointment.status == query.status)
    if query.contact:
        statement = statement.where(
            Appointment.contact_id == find_contact(session, tenant, query.contact).id)
    rows = session.exec(statement.order_by(col(Appointment.start_at)).limit(query.limit)).all()
    return [appointment_view(session, a, tz) for a in rows]


def appointment_view(session: Session, a: Appointment, tz: ZoneInfo) -> dict[str, Any]:
    service = session.get(Service, a.service_id)
    pro = session.get(Professional, a.professional_id)
    contact = session.get(Contact, a.contact_id)
    return {"id": a.id, "contact_id": a.contact_id,
            "contact": contact_view(contact) if contact else None,
            "service": service.code if service else None,
            "service_name": service.name if service else None,
            "professional": pro.code if pro else None,
            "professional_name": pro.name if pro else None,
            "start": a.start_at.astimezone(tz).strftime("%Y-%m-%dT%H:%M"),
            "end": a.end_at.astimezone(tz).strftime("%Y-%m-%dT%H:%M"),
            "start_at": _iso(a.start_at), "status": a.status,
            "cancelled_at": _iso(a.cancelled_at), "note": a.note,
            "confirmed_at": _iso(a.confirmed_at), "outcome": a.outcome or None,
            "booked_by": a.booked_by,
            # issue 38: the visit it belongs to (the booking number: rows of one visit share
            # it), who it is for, the staff's note on what was done
            "visit_id": a.visit_id or a.id, "for_name": a.for_name,
            "series_id": a.series_id,  # issue 46: the recurring series it belongs to
            "booking_number": appointments.number_of(a),  # the number the customer is told
            "outcome_note": a.outcome_note, **_reminder_fields(session, a),
            "deposit": deposit_view(session, a.visit_id or a.id or 0)}


def deposit_view(session: Session, visit_id: int) -> dict[str, Any] | None:
    """The visit's deposit (issue 48): status, cents, until when, the reference and any
    refund owed, why its payment request did not go (`not_sent`, "" when it went); never
    the Pix code or key. None: the visit asked none."""
    deposit = deposits.of_visits(session, [visit_id]).get(visit_id)
    if deposit is None:
        return None
    return {"status": deposit.status, "amount_cents": deposit.amount_cents,
            "amount": price_text(deposit.amount_cents, deposit.currency),
            "currency": deposit.currency, "hold_until": _iso(deposit.hold_until),
            "reference": deposit.reference, "paid_cents": deposit.paid_cents,
            "paid_at": _iso(deposit.paid_at), "paid_by": deposit.paid_by,
            "refund": deposit.refund, "not_sent": deposit.not_sent}


def _reminder_fields(session: Session, a: Appointment) -> dict[str, Any]:
    """Its reminders and the last notice of a business change (issue 25)."""
    assert a.id is not None
    notice = reminders.last_notices(session, [a.id]).get(a.id)
    visit = a.visit_id or a.id  # reminders are the visit's (storage/reminders.py)
    return {"reminders": reminders.summary(reminders.of_appointments(session, [visit])
                                           .get(visit, [])),
            "notice": {"kind": notice.kind, "status": notice.status, "reason": notice.reason}
            if notice else None}


def row_of_booking(session: Session, tenant: Tenant, number: int,
                   service_code: str | None = None, *, whole_visit: bool = False) -> int:
    """The row id (`id` in listings) of the tenant's booking number `number` (what the
    customer is told and quotes, "#2": storage/appointments.number_of, `booking_number` in
    listings): the visit's only booked service, or its service `service_code` (`whole_visit`:
    its first booked service, for what applies to the whole visit, an outcome). A visit
    nothing of which is booked: its latest row (the door then says it is cancelled).
    NotFound: no booking #number; Invalid: several services and none (or another) named."""
    row = appointments.by_number(session, tenant.id or 0, number)
    if row is None:
        raise NotFound(f"no booking #{number} (the customer's booking number)")
    rows = appointments.booked(appointments.visit_rows(session, appointments.visit_of(row)))
    codes = {r.id: s.code for r in rows if (s := session.get(Service, r.service_id))}
    if service_code is not None:
        chosen = [r for r in rows if codes.get(r.id) == service_code]
        if not chosen:
            problem = (f"booking #{number} has no booked service {service_code!r} "
                       f"({', '.join(codes.values()) or 'none booked'})")
            raise Invalid(problem, [f"service: {problem}"])
        row = chosen[0]
    elif len(rows) > 1 and not whole_visit:
        problem = (f"booking #{number} is a visit of {len(rows)} services "
                   f"({', '.join(codes.values())}): name the one with --service")
        raise Invalid(problem, [f"service: {problem}"])
    elif rows:
        row = rows[0]
    assert row.id is not None
    return row.id


def cancel_appointment(session: Session, tenant: Tenant, appointment_id: int, *,
                       now: datetime) -> dict[str, Any]:
    """The business cancels a booking (its slot becomes free); its reminders are cancelled and
    the customer gets a notice (written and sent by the next reminders pass,
    workers/reminders.py: a text in the 24-hour window, the tenant's `notice_template`
    outside it, else recorded as not sent)."""
    appointment = appointments.locked(session, appointment_id)  # two cancels: one wins
    if appointment is None or appointment.tenant_id != tenant.id:
        raise NotFound(f"no appointment with row id {appointment_id} (`id` in listings; the "
                       "customer's number is `booking_number`)")
    if appointment.status != "booked":
        raise Conflict(f"appointment #{appointment_id} is {appointment.status}")
    if appointment.end_at <= now:
        raise Conflict(f"appointment #{appointment_id} already took place")
    visit_id = appointments.visit_of(appointment)
    starts_at = min(r.start_at for r in appointments.booked(
        appointments.visit_rows(session, visit_id, lock=True)))
    appointment.status, appointment.cancelled_at = "cancelled", now
    session.add(appointment)
    session.flush()
    reminders.after_change(session, tenant, visit_id, starts_at=starts_at,
                           reason="cancelled by the business", now=now)
    deposits.on_cancel(session, tenant, visit_id, starts_at=starts_at, now=now, by="business")
    reminders.record_notice(session, appointment, kind="cancelled", now=now)  # issue 25
    webhooks.emit(session, tenant.id or 0, "appointment.cancelled",
                  webhooks.appointment_data(session, appointment, by="business"), now=now)
    return appointment_view(session, appointment, ZoneInfo(tenant.timezone))


def counts(session: Session, tenant: Tenant) -> dict[str, int]:
    """Small figures for a tenant's overview."""
    def count(model: Any, *conditions: Any) -> int:
        return int(session.exec(select(func.count()).select_from(model).where(
            model.tenant_id == tenant.id, *conditions)).one())
    return {"contacts": count(Contact),
            "open_conversations": count(Conversation, Conversation.status == "open"),
            "facts_in_review": count(ContactFact, col(ContactFact.state).in_(fact_repo.IN_REVIEW)),
            "booked_appointments": count(Appointment, Appointment.status == "booked")}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
