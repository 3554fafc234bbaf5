"""The bytes of photos and PDFs customers sent (`media_file`): stored for the model, read back
into a request, deleted once the prune boundary passes their message, at retention (with their
messages) and at erasure. The rules of what may be stored are in agent/media.py.
"""

from datetime import datetime

from sqlmodel import Session, col, delete, select

from storage.models import MediaFile, Message


def add_file(session: Session, *, message: Message, data: bytes, media_type: str,
             sha256: str, now: datetime) -> int:
    """Store one file for `message`; returns its id. `sha256` is hex."""
    row = MediaFile(tenant_id=message.tenant_id, conversation_id=message.conversation_id,
                    message_id=message.id or 0, media_type=media_type, size_bytes=len(data),
                    sha256=sha256, created_at=now, data=data)
    session.add(row)
    session.flush()
    return row.id or 0


def load_files(session: Session, ids: list[int]) -> dict[int, bytes]:
    """The bytes of the files still stored among `ids` (a deleted one is absent)."""
    if not ids:
        return {}
    rows = session.exec(select(MediaFile.id, MediaFile.data).where(
        col(MediaFile.id).in_(ids))).all()
    return {int(i): bytes(d) for i, d in rows if i is not None}


def conversation_files(session: Session, conversation_id: int) -> list[MediaFile]:
    """The conversation's stored files (without loading their bytes' use: callers read
    id, message_id, media_type, sha256), oldest first."""
    return list(session.exec(select(MediaFile).where(
        MediaFile.conversation_id == conversation_id).order_by(col(MediaFile.id))).all())


def delete_files(session: Session, ids: list[int]) -> int:
    """Delete these files (a file the model refused: its block is a note from now on).
    Returns how many."""
    if not ids:
        return 0
    result = session.exec(delete(MediaFile).where(col(MediaFile.id).in_(ids)))
    return int(result.rowcount or 0)


def delete_pruned(session: Session, conversation_id: int, *, up_to_position: int) -> int:
    """Delete the files of the conversation's messages at or before `up_to_position` (the
    prune boundary: their blocks are sent as a note from now on). Returns how many."""
    messages = select(Message.id).where(Message.conversation_id == conversation_id,
                                        col(Message.position).is_not(None),
                                        col(Message.position) <= up_to_position)
    result = session.exec(delete(MediaFile).where(
        col(MediaFile.message_id).in_(messages)))
    return int(result.rowcount or 0)


def delete_for_conversations(session: Session, conversation_ids: list[int]) -> int:
    """Delete every file of these conversations (retention, erasure). Returns how many."""
    if not conversation_ids:
        return 0
    result = session.exec(delete(MediaFile).where(
        col(MediaFile.conversation_id).in_(conversation_ids)))
    return int(result.rowcount or 0)


def delete_older_than(session: Session, tenant_id: int, cutoff: datetime) -> int:
    """Delete the tenant's files stored before `cutoff` (its retention), whatever the state of
    their conversation: bytes never outlive the tenant's retention. Returns how many."""
    result = session.exec(delete(MediaFile).where(
        col(MediaFile.tenant_id) == tenant_id, col(MediaFile.created_at) < cutoff))
    return int(result.rowcount or 0)
