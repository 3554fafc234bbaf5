"""The outbox's own round trips (issue 43): a flush with nothing to send opens no transaction,
a send is one claim and one mark, and the reply's state is folded in SQL by the rule of
storage/delivery.py. Changes at once: a reply's state folds every part's latest status, a
claim fails on a part tried since the flush looked, and two statuses of one send are stored
one after the other. SQLite and PostgreSQL, the real Graph client against its double."""

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from itertools import combinations_with_replacement
from typing import Any

import pytest
from sqlalchemy import event
from sqlmodel import col, select

from intake.statuses import apply_statuses
from replay.environment import ReplayEnvironment
from storage import batched, delivery
from storage import messages as message_repo
from storage.db import session_scope
from storage.models import Contact, ContactFact, Conversation, Message, Outbound
from storage.rights import forget_contact
from tests.factories import PHONE_NUMBER_ID, text_body
from whatsapp.inbound import StatusUpdate
from workers.outbox import flush_outbox

STATUSES = ("pending", "sending", "sent", "delivered", "read", "played", "failed", "refused",
            "unknown", "queued", "mislabelled")  # the last: outside the vocabulary


@contextmanager
def _counted(env: ReplayEnvironment) -> Iterator[dict[str, int]]:
    """Statements (BEGIN IMMEDIATE, SQLite's own, apart) and commits on the product's engine."""
    seen = {"statements": 0, "commits": 0}

    def statement(_c: Any, _cur: Any, sql: str, *_: Any) -> None:
        if not sql.startswith("BEGIN"):
            seen["statements"] += 1

    def commit(_c: Any) -> None:
        seen["commits"] += 1

    listeners: list[tuple[str, Callable[..., None]]] = [
        ("before_cursor_execute", statement), ("commit", commit)]
    for name, listener in listeners:
        event.listen(env.engine, name, listener)
    try:
        yield seen
    finally:
        for name, listener in listeners:
            event.remove(env.engine, name, listener)


def _answered_conversation(env: ReplayEnvironment) -> int:
    env.messages_api.script("turn", [{"text": "Olá!"}])
    assert env.post_webhook(json.dumps(text_body("oi", 1)).encode()) == 200
    env.drain()
    with session_scope(env.engine) as session:
        conversation = session.exec(select(Conversation)).one()
    assert conversation.id is not None
    return conversation.id


def _queue_reply(env: ReplayEnvironment, conversation_id: int, parts: list[str]) -> int:
    with session_scope(env.engine) as session:
        conversation = session.get(Conversation, conversation_id)
        assert conversation is not None
        reply = message_repo.append(
            session, tenant_id=conversation.tenant_id, conversation_id=conversation_id,
            role="assistant", direction="outbound", content=[{"type": "text", "text": "x"}],
            now=env.clock.now())
        message_repo.add_outbound(session, message=reply, parts=parts, to="5511999990001",
                                  recipient=None, now=env.clock.now())
        assert reply.delivery_status == "queued", "the caller's copy shows the new state"
        assert reply.id is not None
        return reply.id


def test_a_flush_with_nothing_to_send_is_one_statement_and_no_transaction(
        env: ReplayEnvironment) -> None:
    conversation_id = _answered_conversation(env)
    with _counted(env) as seen:
        assert flush_outbox(env.runtime, conversation_id) == 0
    assert seen == {"statements": 1, "commits": 0}


def test_a_send_is_a_claim_and_a_mark_of_two_statements_each(env: ReplayEnvironment) -> None:
    conversation_id = _answered_conversation(env)
    reply_id = _queue_reply(env, conversation_id, ["Primeira parte", "Segunda parte"])
    before = len(env.graph_api.accepted)
    with _counted(env) as seen:
        assert flush_outbox(env.runtime, conversation_id) == 2
    # one read of the parts with their tenant and contact; per part: claim + fold, mark + fold
    assert seen == {"statements": 1 + 2 * 4, "commits": 2 * 2}
    assert [s.body["text"]["body"] for s in env.graph_api.accepted[before:]] == [
        "Primeira parte", "Segunda parte"]
    with session_scope(env.engine) as session:
        reply = session.get(Message, reply_id)
        parts = session.exec(select(Outbound).where(Outbound.message_id == reply_id)
                             .order_by(col(Outbound.part))).all()
    assert reply is not None and reply.delivery_status == "sent"
    assert [(p.status, p.attempts, p.wamid is not None) for p in parts] == [
        ("sent", 1, True), ("sent", 1, True)]


def test_the_sql_fold_of_a_replys_parts_is_the_delivery_rule(env: ReplayEnvironment) -> None:
    conversation_id = _answered_conversation(env)
    mixes = [mix for n in (1, 2, 3) for mix in combinations_with_replacement(STATUSES, n)]
    with session_scope(env.engine) as session:
        conversation = session.get(Conversation, conversation_id)
        assert conversation is not None
        folded: dict[tuple[str, ...], str | None] = {}
        for mix in mixes:
            reply = message_repo.append(
                session, tenant_id=conversation.tenant_id, conversation_id=conversation_id,
                role="assistant", direction="outbound", content=[{"type": "text", "text": "x"}],
                now=env.clock.now())
            assert reply.id is not None
            session.add_all([Outbound(tenant_id=reply.tenant_id, conversation_id=conversation_id,
                                      message_id=reply.id, part=i, body="x", status=status,
                                      created_at=env.clock.now())
                             for i, status in enumerate(mix)])
            session.flush()
            folded[mix] = message_repo.refresh_delivery(session, reply.id)
            assert message_repo.refresh_delivery(session, reply.id) is None, "unchanged"
    wrong = {mix: state for mix, state in folded.items() if state != delivery.fold(mix)}
    assert not wrong, wrong


POSTGRES_ONLY = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
WAMIDS = ("wamid.HBgLNTUxMTk5OTk5MDAwMRUCABEYEjA=", "wamid.HBgLNTUxMTk5OTk5MDAwMRUCABEYEjE=")


class _Beside:
    """`work` on a thread of its own, a transaction beside the test's: `ended` once it
    returned or raised, `errors` what it raised."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self.ended = threading.Event()
        self.errors: list[Exception] = []

        def run() -> None:
            try:
                work()
            except Exception as exc:  # reported by the test's assertion
                self.errors.append(exc)
            self.ended.set()

        self.thread = threading.Thread(target=run)

    def start(self, env: ReplayEnvironment, waiting: int = 1,
              *others: "_Beside") -> None:
        """Start it, then wait (10 s at most) until `waiting` transactions of the test's
        database wait for a lock, or it or one of `others` ended."""
        self.thread.start()
        deadline = time.monotonic() + 10
        while _lock_waits(env) < waiting and time.monotonic() < deadline \
                and not any(b.ended.is_set() for b in (self, *others)):
            time.sleep(0.02)

    def run_here(self) -> None:
        """Run it on the caller's thread instead."""
        self.thread.run()

    def finish(self) -> bool:
        """Whether it ended without raising (10 s at most)."""
        if self.thread.ident is not None:  # started on its own thread
            self.thread.join(10)
        return self.ended.is_set() and not self.errors


def _lock_waits(env: ReplayEnvironment) -> int:
    with env.engine.connect() as connection:
        return int(connection.exec_driver_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()").scalar() or 0)


def _mark_sent(env: ReplayEnvironment, reply_id: int, wamids: tuple[str, ...]) -> list[int]:
    """The reply's parts sent, in part order, as `wamids`; their ids."""
    with session_scope(env.engine) as session:
        parts = session.exec(select(Outbound).where(Outbound.message_id == reply_id)
                             .order_by(col(Outbound.part))).all()
        for part, wamid in zip(parts, wamids, strict=True):
            assert part.id is not None
            message_repo.mark_outbound(session, part.id, status="sent", now=env.clock.now(),
                                       wamid=wamid, attempts=1)
        return [int(part.id or 0) for part in parts]


def _status(env: ReplayEnvironment, session: Any, wamid: str, state: str) -> None:
    message_repo.apply_status(session, wamid=wamid, status=state, error_code=None,
                              error_reason=None, now=env.clock.now())


@POSTGRES_ONLY
def test_two_parts_changed_at_once_leave_the_reply_folded_from_both(
        env: ReplayEnvironment) -> None:
    # The outbox marks part 1 sent while Meta's status of part 0 arrives: each transaction
    # folds the reply's parts. Without the reply's row locked before the fold, the second one
    # folds in a snapshot that misses the first's part, and the reply stays "queued".
    conversation_id = _answered_conversation(env)
    reply_id = _queue_reply(env, conversation_id, ["Primeira parte", "Segunda parte"])
    with session_scope(env.engine) as session:
        first, second = [p.id for p in session.exec(select(Outbound).where(
            Outbound.message_id == reply_id).order_by(col(Outbound.part)))]
    assert first is not None and second is not None
    now = env.clock.now()

    def mark_second() -> None:
        with session_scope(env.engine) as session:
            message_repo.mark_outbound(session, second, status="sent", now=now, attempts=1)

    other = _Beside(mark_second)
    with session_scope(env.engine) as session:
        message_repo.mark_outbound(session, first, status="sent", now=now, attempts=1)
        other.start(env)
    assert other.finish()
    with session_scope(env.engine) as session:
        reply = session.get(Message, reply_id)
        assert reply is not None and reply.delivery_status == "sent"


def test_a_part_another_flush_tried_since_the_look_is_not_claimed(
        env: ReplayEnvironment) -> None:
    # flush A reads the part; flush B claims it, Meta answers 429, B puts it back to wait 30 s
    # with one try counted; A's claim on what it read must fail: sending now would go ahead of
    # the schedule Meta asked for and count the tries from a stale zero.
    conversation_id = _answered_conversation(env)
    reply_id = _queue_reply(env, conversation_id, ["Só uma parte"])
    with session_scope(env.engine) as session:
        part = session.exec(select(Outbound).where(Outbound.message_id == reply_id)).one()
        assert part.id is not None
        seen = (part.attempts, part.retry_at)
        assert message_repo.claim_outbound(session, part.id, now=env.clock.now(),
                                           attempts=seen[0], retry_at=seen[1])
        message_repo.mark_outbound(session, part.id, status="pending", now=env.clock.now(),
                                   attempts=1, retry_at=env.clock.now() + timedelta(seconds=30))
    with session_scope(env.engine) as session:
        assert not message_repo.claim_outbound(session, part.id, now=env.clock.now(),
                                               attempts=seen[0], retry_at=seen[1])
        fresh = session.get(Outbound, part.id)
        assert fresh is not None and fresh.status == "pending"
        assert message_repo.claim_outbound(session, part.id, now=env.clock.now(),
                                           attempts=fresh.attempts, retry_at=fresh.retry_at)


@POSTGRES_ONLY
def test_read_and_delivered_arriving_at_once_end_read(env: ReplayEnvironment) -> None:
    # Meta's "read" is being stored while its "delivered" for the same send arrives: the
    # second must decide on the first's outcome, not on the "sent" both of them first saw.
    conversation_id = _answered_conversation(env)
    reply_id = _queue_reply(env, conversation_id, ["Só uma parte"])
    [part_id] = _mark_sent(env, reply_id, WAMIDS[1:])

    def delivered() -> None:
        with session_scope(env.engine) as session:
            _status(env, session, WAMIDS[1], "delivered")

    other = _Beside(delivered)
    with session_scope(env.engine) as session:
        _status(env, session, WAMIDS[1], "read")
        other.start(env)
    assert other.finish()
    with session_scope(env.engine) as session:
        stored = session.get(Outbound, part_id)
        assert stored is not None and stored.status == "read"
        reply = session.get(Message, reply_id)
        assert reply is not None and reply.delivery_status == "read"


@POSTGRES_ONLY
def test_a_status_run_over_two_parts_and_a_status_of_the_second_do_not_deadlock(
        env: ReplayEnvironment) -> None:
    # Meta's run of statuses stores part 0's "delivered", then part 1's; meanwhile a status of
    # part 1 alone arrives ("read", another POST). The run holds the reply's row from part 0's
    # fold; the other must not hold part 1 while it waits for that row, or the run's next
    # status waits for it and PostgreSQL aborts one of them (a deadlock).
    conversation_id = _answered_conversation(env)
    reply_id = _queue_reply(env, conversation_id, ["Primeira parte", "Segunda parte"])
    _mark_sent(env, reply_id, WAMIDS)

    def read_of_the_second() -> None:
        with session_scope(env.engine) as session:
            _status(env, session, WAMIDS[1], "read")

    def run() -> None:
        with session_scope(env.engine) as session:
            _status(env, session, WAMIDS[0], "delivered")
            other.start(env)
            _status(env, session, WAMIDS[1], "delivered")

    other, this = _Beside(read_of_the_second), _Beside(run)
    this.run_here()
    assert other.finish() and this.finish(), other.errors + this.errors
    with session_scope(env.engine) as session:
        parts = session.exec(select(Outbound).where(Outbound.message_id == reply_id)
                             .order_by(col(Outbound.part))).all()
        reply = session.get(Message, reply_id)
    assert [p.status for p in parts] == ["delivered", "read"]
    assert reply is not None and reply.delivery_status == "delivered"


@POSTGRES_ONLY
def test_two_runs_of_statuses_over_two_replies_in_opposite_orders_do_not_deadlock(
        env: ReplayEnvironment) -> None:
    # Two POSTs of Meta's statuses over the same two replies, in opposite orders, stored at
    # once: each status locks its reply's row until its run commits, so the runs must take
    # the rows in one order, or each waits for the other's first reply (a deadlock).
    conversation_id = _answered_conversation(env)
    first, second = (_queue_reply(env, conversation_id, [text]) for text in ("Uma", "Outra"))
    for reply_id, wamid in zip((first, second), WAMIDS, strict=True):
        _mark_sent(env, reply_id, (wamid,))
    now = env.clock.now()

    def status(wamid: str, state: str) -> StatusUpdate:
        return StatusUpdate(phone_number_id=PHONE_NUMBER_ID, wamid=wamid, status=state,
                            timestamp=now, recipient_id="5511999990001", recipient_user_id=None,
                            error_code=None, error_reason=None)

    outcomes: list[str] = []

    def reversed_run() -> None:
        with session_scope(env.engine) as session:
            outcomes.extend(apply_statuses(session, [status(WAMIDS[1], "read"),
                                                     status(WAMIDS[0], "read")], now))

    def run() -> None:  # a run [first, second], its second late
        with session_scope(env.engine) as session:
            apply_statuses(session, [status(WAMIDS[0], "delivered")], now)
            other.start(env)
            apply_statuses(session, [status(WAMIDS[1], "delivered")], now)

    other, this = _Beside(reversed_run), _Beside(run)
    this.run_here()
    assert other.finish() and this.finish(), other.errors + this.errors
    assert outcomes == ["status", "status"]
    with session_scope(env.engine) as session:
        replies = [session.get(Message, m) for m in (first, second)]
    assert [r.delivery_status for r in replies if r is not None] == ["read", "read"]


@POSTGRES_ONLY
def test_an_erasure_and_a_status_of_its_contact_at_once_do_not_deadlock(
        env: ReplayEnvironment) -> None:
    # The erasure has deleted the contact's outbox (its rows held until it commits) and waits
    # (here for a fact someone holds); a status of one of its sends arrives: it must not hold
    # the reply's row while it waits for the part, since the erasure deletes that row next.
    conversation_id = _answered_conversation(env)
    reply_id = _queue_reply(env, conversation_id, ["Só uma parte"])
    _mark_sent(env, reply_id, WAMIDS[1:])
    with session_scope(env.engine) as session:
        contact = session.exec(select(Contact)).one()
        assert contact.id is not None
        contact_id = contact.id
        session.add(ContactFact(tenant_id=contact.tenant_id, contact_id=contact_id,
                                key="shoe_size", value="38", created_at=env.clock.now()))

    def erase() -> None:
        with session_scope(env.engine) as session:
            found = session.get(Contact, contact_id)
            assert found is not None
            forget_contact(session, found, now=env.clock.now())

    def read() -> None:
        with session_scope(env.engine) as session:
            _status(env, session, WAMIDS[1], "read")

    erasure, status = _Beside(erase), _Beside(read)
    with session_scope(env.engine) as session:
        session.exec(select(ContactFact).with_for_update()).all()  # the erasure waits here
        erasure.start(env, 1, status)
        status.start(env, 2, erasure)
    assert erasure.finish() and status.finish(), erasure.errors + status.errors
    with session_scope(env.engine) as session:
        assert session.get(Message, reply_id) is None and session.get(Contact, contact_id) is None


def test_a_batched_statement_with_a_percent_sign_is_refused(env: ReplayEnvironment) -> None:
    # the driver's compiler doubles '%' for its placeholders; a query sent without parameters
    # (storage/batched.py) would keep both and match something else
    with session_scope(env.engine) as session:
        plain = batched.literal_sql(session, select(Outbound.id).where(Outbound.part == 1))
        assert "part = 1" in plain
        with pytest.raises(ValueError, match="may not hold '%'"):
            batched.literal_sql(session, select(Outbound.id).where(
                col(Outbound.body).like("%lembrete%")))
