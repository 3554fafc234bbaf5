"""Storing an echo: a message the owner sent from the WhatsApp Business app (coexistence,
`smb_message_echoes`; whatsapp.inbound.StaffEcho).

Each echo is a staff message of that customer's open conversation (storage/staff.py),
deduplicated by its wamid; an echo of one of our own sends (its wamid is an outbox part's) is
ignored; an echo to a customer we never saw opens a contact and a conversation. The
conversation is then with staff for the tenant's `echo_pause_minutes` (0: echoes never pause
the agent).
"""

from datetime import datetime, timedelta

import structlog
from sqlalchemy import Engine
from sqlmodel import select

from storage import contacts, conversations, staff, tenants
from storage.db import session_scope
from storage.models import Conversation, Message, Outbound
from whatsapp.inbound import StaffEcho

log = structlog.get_logger(__name__)


def store_echo(engine: Engine, echo: StaffEcho, now: datetime) -> str:
    """Store one echo; returns its outcome: staff_echo, duplicate, own_send or
    unknown_tenant."""
    with session_scope(engine) as session:
        tenant = tenants.get_by_phone_number_id(session, echo.phone_number_id)
        if tenant is None or tenant.id is None:
            return "unknown_tenant"
        if session.exec(select(Outbound.id).where(Outbound.wamid == echo.wamid)).first():
            return "own_send"
        if session.exec(select(Message.id).where(Message.wamid == echo.wamid)).first():
            return "duplicate"
        contact = contacts.find_or_create(session, tenant_id=tenant.id, wa_id=echo.to,
                                          user_id=echo.to_user_id, profile_name=None, now=now)
        assert contact.id is not None
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
        staff.record_staff_message(session, conversation, tenant, author=staff.ECHO_AUTHOR,
                                   text=echo.text, now=now,
                                   pause=timedelta(minutes=tenant.echo_pause_minutes),
                                   wamid=echo.wamid)
    log.info("staff_echo_stored", wa_type=echo.wa_type)
    return "staff_echo"
