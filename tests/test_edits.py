"""Edits and deletions of a customer's earlier message (`type` edit / revoke), end to end:
signed webhooks, the real worker, the Messages API double. In any order (Meta orders nothing),
on both store paths (one POST, a group commit), SQLite and PostgreSQL.
"""

import json
from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import col, select

from intake.posts import Stores, store_posts
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import Conversation, Message
from tests.conftest import START, WHATSAPP
from tests.factories import BRUNO, TENANT, text_body
from whatsapp.inbound import DELETED, InboundMessage, parse_update

ORIGINAL = "Oi! Vocês abrem no sábado? 😊"  # message_text.json, the message both fixtures name
EDITED = "na verdade prefiro quinta de manhã"  # message_edit_text.json


def fixture(name: str) -> bytes:
    return (WHATSAPP / name).read_bytes()


def post(env: ReplayEnvironment, body: bytes | dict[str, Any]) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    assert env.post_webhook(raw) == 200


def follow_up(kind: str, wamid: str, original: str, *, text: str = EDITED,
              who: tuple[str, str] = ("5511999990001", "BR.9000000000000000001"),
              ts: int = 1780318900) -> dict[str, Any]:
    """An edit or a revoke from `who` naming `original`, in the fixtures' shape."""
    body = json.loads(fixture(f"message_{'edit_text' if kind == 'edit' else 'revoke'}.json"))
    value = body["entry"][0]["changes"][0]["value"]
    value["contacts"][0].update(wa_id=who[0], user_id=who[1])
    item = value["messages"][0]
    item.update({"from": who[0], "from_user_id": who[1], "id": wamid, "timestamp": str(ts)})
    item[kind]["original_message_id"] = original
    if kind == "edit":
        item["edit"]["message"]["text"]["body"] = text
    return body


def inbound(env: ReplayEnvironment) -> list[Message]:
    with session_scope(env.engine) as session:
        return list(session.exec(select(Message).where(Message.direction == "inbound")
                                 .order_by(col(Message.id))).all())


def texts(content: list[dict[str, Any]]) -> str:
    return "\n".join(str(b.get("text", "")) for b in content)


def requests_text(env: ReplayEnvironment, purpose: str = "turn") -> list[str]:
    return [json.dumps(c.request, ensure_ascii=False) for c in env.messages_api.calls
            if c.purpose == purpose]


ORIGINAL_WAMID = json.loads(fixture("message_text.json"))["entry"][0]["changes"][0]["value"][
    "messages"][0]["id"]


# --- parsing ---------------------------------------------------------------------------------


def test_an_edit_carries_its_new_text_and_the_wamid_it_changes() -> None:
    (edit,) = parse_update(json.loads(fixture("message_edit_text.json")))
    assert isinstance(edit, InboundMessage)
    assert (edit.wa_type, edit.text, edit.starts_turn) == ("edit", EDITED, True)
    assert edit.refers_to == ORIGINAL_WAMID


def test_a_revoke_starts_no_turn_and_names_the_deleted_message() -> None:
    (revoke,) = parse_update(json.loads(fixture("message_revoke.json")))
    assert isinstance(revoke, InboundMessage)
    assert (revoke.wa_type, revoke.text, revoke.starts_turn) == ("revoke", DELETED, False)
    assert revoke.refers_to == ORIGINAL_WAMID


def test_an_edited_caption_and_an_edit_naming_nothing_still_read_as_text() -> None:
    body = json.loads(fixture("message_edit_text.json"))
    item = body["entry"][0]["changes"][0]["value"]["messages"][0]
    item["edit"] = {"message": {"type": "image", "image": {"id": "1", "caption": "meu cabelo"}}}
    (edit,) = parse_update(body)
    assert isinstance(edit, InboundMessage) and edit.refers_to is None
    assert edit.text == '[sent a image we cannot open: "meu cabelo"]' and edit.starts_turn


# --- deletions -------------------------------------------------------------------------------


def test_a_deletion_starts_no_turn_and_later_requests_never_carry_the_text(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"text": "Abrimos sim, das 9h às 13h."},
                                     {"text": "Claro! Quer marcar?"}])
    post(env, fixture("message_text.json"))
    env.drain()
    post(env, fixture("message_revoke.json"))
    env.drain()
    assert len(env.messages_api.calls) == 1 and len(env.graph_api.sends) == 1, "no turn"
    original, revoke = inbound(env)
    assert texts(original.content) == f"[Mon 2026-06-01 10:00] {DELETED}"
    assert original.deleted_at is not None and revoke.content == []
    post(env, text_body("queria cortar o cabelo", 5, sent_at=env.clock.now()))
    env.drain()
    later = requests_text(env)[1]
    assert DELETED in later and "abrem no sábado" not in later
    assert ORIGINAL not in json.dumps([m.content for m in inbound(env)], ensure_ascii=False)


def test_a_message_deleted_before_its_turn_ran_is_never_answered(
        env: ReplayEnvironment) -> None:
    post(env, fixture("message_text.json"))
    post(env, fixture("message_revoke.json"))  # before the worker took the first one
    env.drain()
    assert env.messages_api.calls == [] and env.graph_api.sends == []
    original, _ = inbound(env)
    assert original.answered_at is not None and "deleted" in (original.status_reason or "")


def test_a_deletion_before_its_original_keeps_the_original_from_being_stored_or_answered(
        env: ReplayEnvironment) -> None:
    post(env, fixture("message_revoke.json"))
    post(env, fixture("message_text.json"))  # Meta's late delivery of what was deleted
    env.drain()
    assert env.messages_api.calls == [] and env.graph_api.sends == []
    rows = inbound(env)
    assert {m.wa_type for m in rows} == {"revoke", "claim"}
    claimed = next(m for m in rows if m.wamid == ORIGINAL_WAMID)
    assert claimed.deleted_at is not None and texts(claimed.content).endswith(DELETED)
    assert ORIGINAL not in json.dumps([m.content for m in rows], ensure_ascii=False)


def test_a_deletion_that_names_another_customers_message_changes_nothing(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"text": "Abrimos sim."}])
    post(env, fixture("message_text.json"))  # Ana's
    env.drain()
    post(env, follow_up("revoke", "wamid.BRUNO.R1", ORIGINAL_WAMID, who=BRUNO))
    env.drain()
    anas = next(m for m in inbound(env) if m.wamid == ORIGINAL_WAMID)
    assert anas.deleted_at is None and texts(anas.content).endswith(ORIGINAL)


@pytest.mark.parametrize("kind", ["revoke", "edit"])
def test_another_customers_follow_up_arriving_first_cannot_keep_a_message_from_being_answered(
        env: ReplayEnvironment, kind: str) -> None:
    """Bruno's edit or deletion names Ana's wamid before Ana's message arrives: its claim is
    voided when Ana's message comes, which is stored and answered like any other."""
    env.messages_api.script("turn", [{"text": "Abrimos sim."}, {"text": "Certo."}])
    post(env, follow_up(kind, "wamid.BRUNO.F1", ORIGINAL_WAMID, who=BRUNO))
    post(env, fixture("message_text.json"))  # Ana's, late
    env.drain()
    anas = next(m for m in inbound(env) if m.wamid == ORIGINAL_WAMID)
    assert anas.wa_type == "text" and anas.deleted_at is None
    assert texts(anas.content).endswith(ORIGINAL) and anas.answered_at is not None
    assert any(ORIGINAL in r for r in requests_text(env))
    ana = json.loads(fixture("message_text.json"))["entry"][0]["changes"][0]["value"][
        "messages"][0]["from"]
    assert [s.body["to"] for s in env.graph_api.accepted].count(ana) == 1  # answered once


def test_in_a_group_too_another_customers_claim_is_voided_and_the_message_stored(
        env: ReplayEnvironment) -> None:
    app = Stores(engine=env.engine, settings=env.settings, queue=env.queue)
    now = env.clock.now()
    bruno_revoke = json.dumps(follow_up("revoke", "wamid.BRUNO.R9", ORIGINAL_WAMID,
                                        who=BRUNO)).encode()
    store_posts(app, [(bruno_revoke, now), (json.dumps(text_body("oi", 1, who=BRUNO)).encode(),
                                            now)])
    second = store_posts(app, [(fixture("message_text.json"), now),
                               (json.dumps(text_body("tudo bem?", 2, who=BRUNO)).encode(), now)])
    assert second[0].counts == {"message": 1} and len(second[0].turn_conversation_ids) == 1
    anas = next(m for m in inbound(env) if m.wamid == ORIGINAL_WAMID)
    assert texts(anas.content).endswith(ORIGINAL) and anas.starts_turn


def test_a_customers_own_follow_up_claim_still_holds_against_the_late_original(
        env: ReplayEnvironment) -> None:
    post(env, follow_up("revoke", "wamid.ANA.R1", ORIGINAL_WAMID))
    post(env, fixture("message_text.json"))
    env.drain()
    assert env.messages_api.calls == []
    claimed = next(m for m in inbound(env) if m.wamid == ORIGINAL_WAMID)
    assert claimed.wa_type == "claim" and claimed.deleted_at is not None


# --- edits -----------------------------------------------------------------------------------


def test_an_edit_reaches_the_agent_as_its_new_text_marked_as_an_edit(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"text": "Abrimos sim."},
                                     {"text": "Quinta de manhã tenho 9h. Serve?"}])
    post(env, fixture("message_text.json"))
    env.drain()
    post(env, fixture("message_edit_text.json"))
    env.drain()
    assert len(env.graph_api.sends) == 2, "the edit was answered"
    last_user = env.messages_api.calls[1].request["messages"][-1]
    assert texts(last_user["content"]) == (
        f"[Mon 2026-06-01 10:00] [the customer edited their message of Mon 10:00 to:] {EDITED}")
    first, again = (c.request["messages"][0]["content"][0]["text"]
                    for c in env.messages_api.calls)
    assert again == first == f"[Mon 2026-06-01 10:00] {ORIGINAL}", \
        "the original keeps its bytes: the cached prefix holds"


def test_an_edit_before_its_original_stands_alone_and_the_original_is_not_answered_again(
        env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"text": "Quinta de manhã tenho 9h. Serve?"}])
    post(env, fixture("message_edit_text.json"))
    env.drain()
    post(env, fixture("message_text.json"))  # the original, late
    env.drain()
    assert len(env.messages_api.calls) == 1 and len(env.graph_api.sends) == 1
    assert f"[the customer edited an earlier message to:] {EDITED}" in requests_text(env)[0]
    assert ORIGINAL not in json.dumps([m.content for m in inbound(env)], ensure_ascii=False)


def test_deleting_an_edited_message_deletes_its_edits_too(env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"text": "Abrimos sim."}, {"text": "Quinta, 9h?"},
                                     {"text": "Claro!"}])
    post(env, fixture("message_text.json"))
    env.drain()
    post(env, fixture("message_edit_text.json"))
    env.drain()
    post(env, fixture("message_revoke.json"))
    env.drain()
    original, edit, revoke = inbound(env)
    assert original.deleted_at and edit.deleted_at and not revoke.deleted_at
    assert texts(edit.content) == f"[Mon 2026-06-01 10:00] {DELETED}"
    post(env, text_body("e sábado?", 7, sent_at=env.clock.now()))
    env.drain()
    later = requests_text(env)[2]
    assert "quinta de manhã" not in later and "abrem no sábado" not in later
    assert later.count(DELETED) == 2


def test_an_edit_of_a_deleted_message_is_deleted_and_starts_no_turn(
        env: ReplayEnvironment) -> None:
    post(env, fixture("message_revoke.json"))
    post(env, fixture("message_edit_text.json"))
    env.drain()
    assert env.messages_api.calls == []
    edit = next(m for m in inbound(env) if m.wa_type == "edit")
    assert edit.deleted_at is not None and EDITED not in json.dumps(edit.content,
                                                                     ensure_ascii=False)


# --- both store paths ------------------------------------------------------------------------


def test_a_group_commit_stores_a_late_original_as_the_one_post_path_does(
        env: ReplayEnvironment) -> None:
    """Concurrent POSTs of customer messages share a transaction (store_group); an edit or a
    deletion among them is stored alone after the set-based pass, and an original that
    arrives in a group after its deletion is a redelivery there too."""
    app = Stores(engine=env.engine, settings=env.settings, queue=env.queue)  # workers.inbox's
    now = env.clock.now()
    bruno = json.dumps(text_body("oi", 1, who=BRUNO)).encode()
    first = store_posts(app, [(fixture("message_revoke.json"), now), (bruno, now)])
    assert [r.grouped for r in first] == [True, True]
    second = store_posts(app, [(fixture("message_text.json"), now),
                               (json.dumps(text_body("tudo bem?", 2, who=BRUNO)).encode(),
                                now)])
    assert [r.grouped for r in second] == [True, True]
    assert second[0].counts == {"duplicate": 1} and second[0].turn_conversation_ids == []
    env.drain()
    assert all("abrem no sábado" not in r for r in requests_text(env))
    claimed = next(m for m in inbound(env) if m.wamid == ORIGINAL_WAMID)
    assert claimed.deleted_at is not None and not claimed.starts_turn


def test_a_deletion_and_its_original_in_one_group_keep_their_order(
        env: ReplayEnvironment) -> None:
    """Meta orders nothing: in one group, a deletion POSTed before its original claims it, so
    the original is a redelivery (never stored nor answered), as when POSTed one by one."""
    app = Stores(engine=env.engine, settings=env.settings, queue=env.queue)
    now = env.clock.now()
    results = store_posts(app, [(fixture("message_revoke.json"), now),
                                (fixture("message_text.json"), now)])
    assert [r.grouped for r in results] == [True, True]
    assert results[1].counts == {"duplicate": 1} and results[1].turn_conversation_ids == []
    claimed = next(m for m in inbound(env) if m.wamid == ORIGINAL_WAMID)
    assert claimed.deleted_at is not None and not claimed.starts_turn
    assert all("abrem no sábado" not in texts(m.content) for m in inbound(env))


def test_the_stamp_keeps_its_time_when_the_text_is_deleted(env: ReplayEnvironment) -> None:
    env.messages_api.script("turn", [{"text": "Abrimos sim."}])
    post(env, text_body("oi, meu cpf é 123", 1, sent_at=env.clock.now()))
    env.drain()
    env.clock.advance(timedelta(hours=2))
    post(env, follow_up("revoke", "wamid.R.LATER", "wamid.TEST0001000001",
                        ts=int(env.clock.now().timestamp())))
    env.drain()
    (original, _) = inbound(env)
    assert texts(original.content) == f"[Mon 2026-06-01 10:00] {DELETED}"


SECRET = "sou alérgica a amônia, não conta pra ninguém"


def test_neither_compaction_nor_extraction_reads_a_deleted_message(
        database_url: str | None, redis_url: str | None) -> None:
    env = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    try:
        env.add_tenant({**TENANT, "compaction_threshold_tokens": 300,
                        "compaction_min_gain_tokens": 0, "keep_messages": 2})
        env.messages_api.script("turn", [{"text": "Anotado."}])
        post(env, text_body(SECRET, 1, sent_at=env.clock.now()))
        env.drain()
        post(env, follow_up("revoke", "wamid.R.SECRET", "wamid.TEST0001000001",
                            ts=int(env.clock.now().timestamp())))
        for n, text in enumerate(["queria marcar um corte amanhã à tarde, pode ser?",
                                  "com a Júlia, por favor", "às 15h", "obrigada!"], 2):
            env.messages_api.script("turn", [{"text": f"Resposta {n}: " + "certo. " * 30}])
            env.messages_api.script("summary", [{"text": f"Resumo {n}: a cliente quer corte."}])
            env.clock.advance(timedelta(minutes=2))
            post(env, text_body(text, n, sent_at=env.clock.now()))
            env.drain()
        assert requests_text(env, "summary"), "a compaction ran"
        env.messages_api.script("facts", [{"text": json.dumps({"facts": []})}])
        env.clock.advance(timedelta(hours=25))
        env.sweep()
        (extraction,) = requests_text(env, "facts")
        summaries = requests_text(env, "summary")
        assert DELETED in summaries[0] and DELETED in extraction
        for request in [*summaries, extraction, *requests_text(env)[1:]]:
            assert "alérgica a amônia" not in request  # (the tools' own example says amônia)
    finally:
        env.close()


def test_a_summary_written_from_a_deleted_message_is_rewritten_from_the_history(
        database_url: str | None, redis_url: str | None) -> None:
    """The message was already folded into the summary (system[1]) when the customer deleted
    it: the summary is derived again from the messages, which no longer hold it."""
    env = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    try:
        env.add_tenant({**TENANT, "compaction_threshold_tokens": 300,
                        "compaction_min_gain_tokens": 0, "keep_messages": 2})
        turns = [SECRET, "queria marcar um corte amanhã à tarde", "com a Júlia", "às 15h",
                 "pode ser", "ok", "certo", "combinado"]
        for n, text in enumerate(turns, 1):
            if n > 4 and not env.messages_api.leftover().get("summary"):
                break  # compacted at least three times, no scripted summary left over
            env.messages_api.script("turn", [{"text": f"Resposta {n}: " + "certo. " * 30}])
            if not env.messages_api.leftover().get("summary"):
                env.messages_api.script("summary", [  # a summary model that repeats it all
                    {"text": f"Resumo {n}: a cliente disse que é alérgica a amônia."}])
            post(env, text_body(text, n, sent_at=env.clock.now()))
            env.drain()
            env.clock.advance(timedelta(minutes=2))
        assert not env.messages_api.leftover().get("summary")
        with session_scope(env.engine) as session:
            assert "amônia" in session.exec(select(Conversation)).one().context_block
        summaries = len(requests_text(env, "summary"))
        env.messages_api.script("summary", [{"text": "A cliente quer um corte às 15h."}])
        post(env, follow_up("revoke", "wamid.R.SECRET", "wamid.TEST0001000001",
                            ts=int(env.clock.now().timestamp())))
        env.drain()
        (rederived,) = requests_text(env, "summary")[summaries:]
        assert DELETED in rederived and "amônia" not in rederived
        assert "no record yet" in rederived, "written afresh, not from the old record"
        with session_scope(env.engine) as session:
            conversation = session.exec(select(Conversation)).one()
            assert conversation.summary == "A cliente quer um corte às 15h."
            assert "amônia" not in conversation.context_block
        env.messages_api.script("turn", [{"text": "Até amanhã!"}])
        post(env, text_body("obrigada", 19, sent_at=env.clock.now()))
        env.drain()
        assert "alérgica a amônia" not in requests_text(env)[-1]
    finally:
        env.close()

