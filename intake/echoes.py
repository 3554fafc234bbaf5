"""Storing an echo: a message the owner sent from the WhatsApp Business app (coexistence,
`smb_message_echoes`; whatsapp.inbound.StaffEcho).

Each echo is a staff message of that customer's open conversation (storage/staff.py),
deduplicated by its wamid; an echo of one of our own sends is ignored: its wamid is an outbox
part's, or (the echo can arrive before the outbox has stored the wamid the Graph API answered,
issue 35) it matches a part in flight, one claimed for sending in the last OWN_SEND_GRACE with
no wamid yet, to the same recipient and, for a text, with the same body; an echo to a
customer we never saw opens a contact and a conversation. The conversation is then with staff
for the tenant's `echo_pause_minutes` (0: echoes never pause the agent).
"""

from datetime import datetime, timedelta

import structlog
from sqlalchemy import Engine, or_
from sqlmodel import Session, col, select

from storage import contacts, conversations, staff, tenants
from storage.db import session_scope
from storage.models import Contact, Conversation, Message, Outbound, Tenant
from whatsapp.inbound import StaffEcho

log = structlog.get_logger(__name__)

# how long after its claim a part whose wamid is not stored yet still owns a matching echo
# (a Graph call takes seconds; a part left `unknown` by a crash is matched too, within it)
OWN_SEND_GRACE = timedelta(minutes=5)


def store_echo(engine: Engine, echo: StaffEcho, now: datetime) -> str:
    """Store one echo; returns its outcome: staff_echo, duplicate, own_send or
    unknown_tenant."""
    with session_scope(engine) as session:
        tenant = tenants.get_by_phone_number_id(session, echo.phone_number_id)
        if tenant is None or tenant.id is None:
            return "unknown_tenant"
        if session.exec(select(Outbound.id).where(Outbound.wamid == echo.wamid)).first() or \
                _in_flight(session, tenant.id, echo, now):
            return "own_send"
        if session.exec(select(Message.id).where(Message.wamid == echo.wamid)).first():
            return "duplicate"
        contact = contacts.find_or_create(session, tenant_id=tenant.id, wa_id=echo.to,
                                          user_id=echo.to_user_id, profile_name=None, now=now)
        conversation = open_conversation(session, tenant, contact, now)
        staff.record_staff_message(session, conversation, tenant, author=staff.ECHO_AUTHOR,
                                   text=echo.text, now=now,
                                   pause=timedelta(minutes=tenant.echo_pause_minutes),
                                   wamid=echo.wamid)
    log.info("staff_echo_stored", wa_type=echo.wa_type)
    return "staff_echo"


def open_conversation(session: Session, tenant: Tenant, contact: Contact,
                      now: datetime) -> Conversation:
    """The contact's open conversation, or a new one when there is none or it is stale (then
    closed): where a message the business or another sender wrote is stored."""
    assert tenant.id is not None and contact.id is not None
    timeout = conversations.inactivity_timeout(tenant.inactivity_timeout_minutes)
    conversation = conversations.get_open(session, contact.id)
    if conversation is not None and conversations.is_stale(
            conversation.last_activity_at, now=now, inactivity_timeout=timeout):
        conversations.close(session, conversation, now=now)
        conversation = None
    if conversation is None:
        conversations.open_new(session, tenant_id=tenant.id, contact_id=contact.id,
                               now=now, inactivity_timeout=timeout)
        conversation = conversations.get_open(session, contact.id)
    assert isinstance(conversation, Conversation)
    return conversation


def _in_flight(session: Session, tenant_id: int, echo: StaffEcho, now: datetime) -> bool:
    """Whether `echo` matches one of our parts in flight (module docstring): claimed since
    OWN_SEND_GRACE, no wamid stored, to the echo's recipient (phone or user id), and for a
    text echo the part's body is the echo's text (else the part is a list, buttons or a
    template)."""
    recipients = [col(Outbound.to) == echo.to] if echo.to else []
    if echo.to_user_id:
        recipients.append(col(Outbound.recipient) == echo.to_user_id)
    query = select(Outbound.body, Outbound.kind).where(
        col(Outbound.tenant_id) == tenant_id, col(Outbound.wamid).is_(None),
        col(Outbound.status).in_(("sending", "unknown")),
        col(Outbound.claimed_at) >= now - OWN_SEND_GRACE, or_(*recipients))
    parts = session.exec(query).all()
    if echo.wa_type != "text":
        return any(kind != "text" for _, kind in parts)  # a list, buttons or a template
    return any(kind == "text" and body.strip() == echo.text.strip() for body, kind in parts)
