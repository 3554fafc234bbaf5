"""Follow-ups: a customer's edit or deletion of an earlier message (`msg.refers_to`), applied
to what is stored for both (docs/ARCHITECTURE.md, How a message is answered; the shapes: the
fixtures message_edit_text.json and message_revoke.json)."""

from datetime import datetime

import structlog
from sqlmodel import Session

from intake.stamp import customer_sent_at, local_when, zone
from intake.text import content
from storage import memory, messages
from storage.models import Message
from whatsapp.inbound import DELETED, InboundMessage, edit_text

log = structlog.get_logger(__name__)

DELETED_REASON = "not answered: the customer deleted it"


def follow_up(session: Session, msg: InboundMessage, stored: Message, *, contact_id: int,
              timezone: str, now: datetime, sent_at: datetime,
              keep_cpf: bool = False) -> int | None:
    """Apply an edit or a deletion to the message it names (`msg.refers_to`), and set what is
    stored for it (`stored`: content, starts_turn, deleted_at). Returns the id of an open
    conversation whose summary covers the deleted message (the caller enqueues
    `workers.compaction.rederive_summary`, which rewrites it from the history), else None.

    A deletion starts no turn and is stored without content; the original (and each stored
    edit of it) keeps only DELETED in place of its text, so no later request, summary or
    extraction reads it: a message the model already saw changes bytes, so the cached prefix
    breaks once there (the next turn writes it again). One not answered yet never will be. An
    edit starts a turn with its new text, marked as an edit of the original (by when that was
    sent); the original stays as the customer sent it (its bytes, cached, unchanged), and an
    edit of a deleted message is deleted too.

    Meta orders nothing: an original that has not arrived is claimed now (`_claim`), so that
    when it comes it is a redelivery, its text never stored nor answered. An original of
    another contact, or erased, is left alone: the edit or deletion then stands alone; and a
    claim made by another contact's follow-up is voided when the original comes
    (`messages.void_claim`): a follow-up may name any wamid.
    """
    revoke, wamid = msg.wa_type == "revoke", msg.refers_to
    if revoke:
        stored.content, stored.starts_turn = [], False
    else:
        stored.content = content(edit_text(msg.text, None), now, timezone, sent_at=sent_at,
                                 keep_cpf=keep_cpf)
    if wamid is None or messages.is_tombstoned(session, wamid) or \
            _claim(session, msg, stored, wamid, timezone=timezone, now=now):
        return None
    found = messages.inbound_for_update(session, wamid)
    if found is None or found[1] != contact_id:
        log.warning("inbound_follow_up_not_applied", wa_type=msg.wa_type,
                    reason="another contact's message" if found else "not found")
        return None
    original = found[0]
    if revoke:
        rows = [original, *messages.edits_of(session, wamid, contact_id)]
        deleted = delete(session, rows, timezone, now)
        log.info("inbound_deleted", message_id=original.id, rows=deleted)
        return memory.open_summary_covering(session, rows)
    if original.deleted_at is not None:
        stored.content, stored.starts_turn, stored.deleted_at = [], False, now
    else:
        when = None if original.meta_timestamp is None else local_when(
            customer_sent_at(original.meta_timestamp, original.received_at),
            now.astimezone(zone(timezone)))
        stored.content = content(edit_text(msg.text, when), now, timezone, sent_at=sent_at,
                                 keep_cpf=keep_cpf)
    return None


def _claim(session: Session, msg: InboundMessage, stored: Message, wamid: str, *,
           timezone: str, now: datetime) -> bool:
    """Claim the original `wamid` when it has not arrived: a row under its wamid
    (`starts_turn` false; DELETED for a deletion, empty for an edit), on both store paths
    alike; under a race the unique wamid decides (the claim waits for the original's
    transaction and then finds it). Whether it was claimed."""
    revoke = msg.wa_type == "revoke"
    claim = Message(tenant_id=stored.tenant_id, conversation_id=stored.conversation_id,
                    role="user", direction="inbound", wamid=wamid, wa_type=messages.CLAIM,
                    received_at=now,
                    content=content(DELETED, now, timezone, sent_at=None) if revoke else [],
                    starts_turn=False, answered_at=now, deleted_at=now if revoke else None)
    if messages.insert_inbound(session, claim) is None:
        return False
    log.info("inbound_original_claimed", wa_type=msg.wa_type)
    return True


def delete(session: Session, rows: list[Message], timezone: str, now: datetime) -> int:
    """The customer deleted these rows' message: DELETED in place of each text (its stamp
    kept), and one no turn has taken yet is never answered. Returns how many changed."""
    changed = 0
    for row in rows:
        if row.deleted_at is not None:
            continue
        if row.content:  # a claim made by an edit has none: it stays empty
            row.content = content(DELETED, row.received_at, timezone, sent_at=customer_sent_at(
                row.meta_timestamp, row.received_at))
        row.deleted_at = now
        if row.starts_turn and row.answered_at is None and row.position is None:
            row.answered_at, row.status_reason = now, DELETED_REASON
        session.add(row)
        changed += 1
    session.flush()
    return changed
