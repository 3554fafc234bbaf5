"""The memory rows of a conversation: window reads by position and the compaction's
compare-and-set update of summary, `summarized_until_id`, `pruned_until_id` and context block.
"""

from sqlmodel import Session, col, func, select, update

from storage.models import Conversation, Message


def position_of(session: Session, message_id: int) -> int:
    """History position of message `message_id`; 0 for 0 or an unknown id."""
    if not message_id:
        return 0
    position = session.exec(select(Message.position).where(Message.id == message_id)).first()
    return int(position or 0)


def max_position(session: Session, conversation_id: int) -> int:
    current = session.exec(select(func.max(Message.position)).where(
        Message.conversation_id == conversation_id)).one()
    return int(current or 0)


def window_rows(session: Session, conversation_id: int, *, after_position: int,
                tail: int | None = None) -> list[Message]:
    """Messages placed after `after_position`, in history order; with `tail`, only the last
    `tail` positions (the hard cap never reads the whole history). Indexed on
    (conversation_id, position).
    """
    lower = after_position
    if tail is not None:
        lower = max(lower, max_position(session, conversation_id) - tail)
    return list(session.exec(select(Message).where(
        Message.conversation_id == conversation_id, col(Message.position) > lower,
    ).order_by(col(Message.position))).all())


def id_at_position(session: Session, conversation_id: int, position: int) -> int:
    """Id of the message at `position` (0 for position 0)."""
    if position <= 0:
        return 0
    found = session.exec(select(Message.id).where(
        Message.conversation_id == conversation_id, Message.position == position)).first()
    return int(found or 0)


def insert_after(session: Session, message: Message, *, position: int) -> Message:
    """Insert `message` right after `position` of its conversation's history, moving the later
    messages one place on (repairs a tool round a crash left without its results).
    """
    session.exec(update(Message).where(
        col(Message.conversation_id) == message.conversation_id, col(Message.position) > position,
    ).values(position=col(Message.position) + 1))
    message.position = position + 1
    session.add(message)
    session.flush()
    return message


def open_summary_covering(session: Session, rows: list[Message]) -> int | None:
    """The id of the open conversation whose summary covers one of `rows` (placed at or
    before its `summarized_until_id`), else None: a summary written from a message the
    customer has since deleted may repeat it."""
    for conversation_id in sorted({m.conversation_id for m in rows if m.position is not None}):
        conversation = session.get(Conversation, conversation_id)
        if conversation is None or conversation.status != "open" \
                or not conversation.summarized_until_id:
            continue
        end = position_of(session, conversation.summarized_until_id)
        if any(m.position is not None and m.position <= end for m in rows
               if m.conversation_id == conversation_id):
            return conversation_id
    return None


def rows_until(session: Session, conversation_id: int, *, position: int) -> list[Message]:
    """Messages placed at or before `position`, in history order (what a summary covers)."""
    return list(session.exec(select(Message).where(
        Message.conversation_id == conversation_id, col(Message.position) <= position,
    ).order_by(col(Message.position))).all())


def replace_summary(session: Session, conversation_id: int, *,
                    expected_summarized_until_id: int, summary: str, context_block: str) -> bool:
    """Compare-and-set: a summary re-derived over the same messages (and the context block
    made from it), only if no compaction moved `summarized_until_id` meanwhile."""
    result = session.exec(update(Conversation).where(
        col(Conversation.id) == conversation_id,
        col(Conversation.summarized_until_id) == expected_summarized_until_id,
    ).values(summary=summary, context_block=context_block))
    return bool(result.rowcount)


def apply_compaction(session: Session, conversation_id: int, *, expected_summarized_until_id: int,
                     summary: str, summarized_until_id: int, pruned_until_id: int,
                     context_block: str) -> bool:
    """Compare-and-set: write the new summary, window start, prune boundary and context block
    together, only if nobody moved `summarized_until_id` since the job read it. Returns False
    when the row had moved (the job's work is discarded; nothing is applied twice).
    """
    result = session.exec(update(Conversation).where(
        col(Conversation.id) == conversation_id,
        col(Conversation.summarized_until_id) == expected_summarized_until_id,
    ).values(summary=summary, summarized_until_id=summarized_until_id,
             pruned_until_id=pruned_until_id, context_block=context_block,
             compactions=Conversation.compactions + 1))
    return bool(result.rowcount)
