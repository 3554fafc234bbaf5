"""Delivery truth (issue 17): what the business sees is what reached the customer.

Sends that never left are retried on the same outbox row; one that may have arrived stays
unknown and is never resent; a rate-limited reply retries on a flush job of its own while the
customer's next message gets its turn at once; refusals move the reply's aggregate state; the
admin API, the console, `wagent report` and /metrics show it. Real worker, the real Graph
client against the Graph double (which can refuse connections and drop answers).
"""

import json
import logging
import re
import urllib.request
from datetime import timedelta
from typing import Any

import pytest
from rq.registry import ScheduledJobRegistry
from sqlmodel import col, select

from operations import service
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.jobs import FLUSH_JOB, TURN_JOB
from storage.messages import mark_outbound
from storage.models import Message, Outbound, Tenant
from tests.conftest import START
from tests.console_helpers import GARAGE
from tests.factories import TENANT, text_body
from tests.test_console import Browser
from tests.test_graph import emoji_heavy, non_space
from usage.report import conversation_report
from workers.maintenance import STALE_SENDING, reconcile_pending, settle_stale_sends
from workers.outbox import MAX_SEND_ATTEMPTS


def _post(env: ReplayEnvironment, text: str, n: int) -> None:
    body = text_body(text, n, sent_at=env.clock.now())
    assert env.post_webhook(json.dumps(body).encode()) == 200


def _answer(env: ReplayEnvironment, text: str, n: int, reply: str) -> None:
    env.messages_api.script("turn", [{"text": reply}])
    _post(env, text, n)
    env.drain()


def _rows(env: ReplayEnvironment) -> list[Outbound]:
    with session_scope(env.engine) as session:
        return list(session.exec(select(Outbound).order_by(col(Outbound.id))).all())


def _replies(env: ReplayEnvironment) -> list[Message]:
    with session_scope(env.engine) as session:
        return list(session.exec(select(Message).where(Message.direction == "outbound")
                                 .order_by(col(Message.id))).all())


def _view(env: ReplayEnvironment, language: str = "en") -> dict[str, Any]:
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).first()
        assert tenant is not None
        return service.conversation_view(session, tenant, 1, now=env.clock.now(),
                                         language=language)


def _deliveries(env: ReplayEnvironment) -> list[dict[str, Any]]:
    return [m["delivery"] for m in _view(env)["messages"] if m["direction"] == "outbound"]


def _sent_texts(env: ReplayEnvironment) -> list[str]:
    return [s.body["text"]["body"] for s in env.graph_api.accepted]


# -- item 2: a send that never left the machine is retried, one that may have arrived is not --

def test_a_send_that_never_left_is_retried_on_the_same_row_and_arrives_once(
        env: ReplayEnvironment) -> None:
    env.graph_unreachable(True)
    _answer(env, "oi", 1, "Olá! Como posso ajudar?")
    (row,) = _rows(env)
    assert row.status == "pending", "nothing reached Meta: it waits for a retry"
    assert (row.attempts, row.error_cause) == (1, "refused")
    assert row.retry_at == env.clock.now() + timedelta(seconds=30)
    assert _deliveries(env)[0]["state"] == "queued"
    env.graph_unreachable(False)
    env.clock.advance(timedelta(seconds=30))
    env.drain()
    assert _sent_texts(env) == ["Olá! Como posso ajudar?"]
    (again,) = _rows(env)
    assert (again.id, again.status, again.attempts) == (row.id, "sent", 2)
    assert _replies(env)[0].delivery_status == "sent"
    env.clock.advance(timedelta(hours=2))
    env.drain()
    assert len(env.graph_api.sends) == 1, "sent once"
    errors = _scrape(env, "wagent_graph_errors_total")
    assert errors == {(("code", "unreachable"),): 1.0}, "counted apart from `network`"


def test_an_unreachable_graph_api_is_tried_eight_times_then_the_reply_fails(
        env: ReplayEnvironment) -> None:
    env.graph_unreachable(True)
    _answer(env, "oi", 1, "Olá!")
    for _ in range(40):
        env.clock.advance(timedelta(minutes=10))
        env.drain()
    (row,) = _rows(env)
    assert (row.status, row.attempts, row.error_cause) == ("failed", MAX_SEND_ATTEMPTS,
                                                           "refused")
    delivery = _deliveries(env)[0]
    assert delivery["state"] == "failed" and "refused" in delivery["reason"]
    assert f"after {MAX_SEND_ATTEMPTS} tries" in delivery["reason"]


def test_a_send_whose_answer_was_lost_stays_unknown_and_is_never_resent(
        env: ReplayEnvironment) -> None:
    env.graph_api.drop()
    _answer(env, "oi", 1, "Olá!")
    env.clock.advance(timedelta(hours=3))
    env.drain()
    assert _sent_texts(env) == ["Olá!"], "WhatsApp took it once, and only once"
    (row,) = _rows(env)
    assert (row.status, row.error_cause) == ("unknown", "closed")
    delivery = _deliveries(env)[0]
    assert delivery["state"] == "unknown" and "may or may not" in delivery["meaning"]


@pytest.mark.parametrize("status", [500, 502, 504])
def test_a_gateway_error_page_after_meta_took_the_send_is_unknown_and_never_resent(
        env: ReplayEnvironment, status: int) -> None:
    env.graph_api.gateway_error(status)
    _answer(env, "oi", 1, "Olá!")
    env.clock.advance(timedelta(hours=3))
    env.drain()
    assert _sent_texts(env) == ["Olá!"], "WhatsApp took it once: the customer has it once"
    (row,) = _rows(env)
    assert (row.status, row.error_cause) == ("unknown", "gateway")
    delivery = _deliveries(env)[0]
    assert delivery["state"] == "unknown" and "gateway" in delivery["reason"]
    assert _scrape(env, "wagent_graph_errors_total") == {(("code", f"http_{status}"),): 1.0}


def test_metas_own_coded_transient_error_is_still_retried(
        env: ReplayEnvironment) -> None:
    env.graph_api.fail(131000)  # Meta's JSON error body: it did not take the send
    _answer(env, "oi", 1, "Olá!")
    (row,) = _rows(env)
    assert (row.status, row.attempts, row.error_code) == ("pending", 1, 131000)
    env.clock.advance(timedelta(seconds=30))
    env.drain()
    assert _sent_texts(env) == ["Olá!"]


def _reconcile_during_the_graph_call(env: ReplayEnvironment,
                                     ahead: timedelta) -> list[tuple[int, str]]:
    """Meta takes the send and, before its answer is back, the reconciler settles stale sends
    at the product's time + `ahead`; returns (how many it settled, the part's status then)."""
    seen: list[tuple[int, str]] = []

    def reconcile(_taken: Any) -> None:
        seen.append((settle_stale_sends(env.engine, now=env.clock.now() + ahead),
                     _rows(env)[0].status))

    env.graph_api.on_taken = reconcile
    return seen


def _retried_after_eleven_minutes(env: ReplayEnvironment) -> None:
    env.graph_unreachable(True)
    _answer(env, "oi", 1, "Olá!")
    env.graph_unreachable(False)
    env.clock.advance(timedelta(minutes=11))  # the row is older than STALE_SENDING


def test_the_reconciler_leaves_a_send_in_its_graph_call_alone_however_old_its_row(
        env: ReplayEnvironment, caplog: pytest.LogCaptureFixture) -> None:
    _retried_after_eleven_minutes(env)
    seen = _reconcile_during_the_graph_call(env, timedelta(0))
    with caplog.at_level(logging.ERROR):
        env.drain()
    assert seen == [(0, "sending")], "claimed a moment ago: stale by its claim, not its row"
    assert "send_outcome_unknown_after_crash" not in caplog.text
    assert [(r.status, r.error_cause) for r in _rows(env)] == [("sent", None)]


def test_a_send_that_succeeds_after_the_reconciler_settled_it_ends_sent(
        env: ReplayEnvironment) -> None:
    _retried_after_eleven_minutes(env)
    seen = _reconcile_during_the_graph_call(env, STALE_SENDING)
    env.drain()
    assert seen == [(1, "unknown")], "a claim that old looks like a crash"
    (row,) = _rows(env)
    assert (row.status, row.error_cause, row.wamid) == ("sent", None, "wamid.OUT000001"), \
        "the Graph call did succeed: its outcome wins"
    assert _deliveries(env)[0]["state"] == "sent" and _sent_texts(env) == ["Olá!"]


def test_settling_a_stale_send_is_a_compare_and_set_on_its_claim(env: ReplayEnvironment) -> None:
    _answer(env, "oi", 1, "Olá!")
    (row,) = _rows(env)
    assert row.id is not None and row.status == "sent"
    later = env.clock.now() + timedelta(hours=1)
    with session_scope(env.engine) as session:
        assert mark_outbound(session, row.id, status="unknown", now=later, cause="crashed",
                             claimed_before=later) is None
    assert [(r.status, r.wamid) for r in _rows(env)] == [("sent", row.wamid)]


# -- item 3: a rate-limited reply retries on its own job; the next message is answered now ----

def test_a_rate_limited_send_retries_on_a_flush_job_not_on_a_turn(
        env: ReplayEnvironment) -> None:
    env.graph_api.fail(131056)
    _answer(env, "oi", 1, "Olá!")
    scheduled = ScheduledJobRegistry(queue=env.queue).get_job_ids()
    funcs = {env.queue.fetch_job(job_id).func_name for job_id in scheduled}
    assert funcs == {FLUSH_JOB} and TURN_JOB not in funcs
    env.clock.advance(timedelta(seconds=30))
    env.drain()
    assert _sent_texts(env) == ["Olá!"]
    assert len(env.messages_api.calls) == 1, "the retry asked the model nothing"


def test_a_new_message_gets_its_own_turn_at_once_and_both_replies_go_out_in_order(
        env: ReplayEnvironment) -> None:
    env.graph_api.fail(131056)
    _answer(env, "oi", 1, "Olá! Em que posso ajudar?")
    assert _sent_texts(env) == []
    env.clock.advance(timedelta(seconds=5))
    _answer(env, "tem horário amanhã?", 2, "Tenho 14h amanhã.")
    assert len(env.messages_api.calls) == 2, "the new message had its own turn, at once"
    assert _sent_texts(env) == ["Olá! Em que posso ajudar?", "Tenho 14h amanhã."]
    env.clock.advance(timedelta(minutes=5))
    env.drain()
    assert len(env.graph_api.accepted) == 2, "the scheduled retry finds nothing to send"


def test_a_new_reply_waits_behind_a_part_that_is_refused_again(env: ReplayEnvironment) -> None:
    env.graph_api.fail(131056, times=2)
    _answer(env, "oi", 1, "Olá!")
    env.clock.advance(timedelta(seconds=5))
    _answer(env, "alô?", 2, "Estou aqui!")
    assert _sent_texts(env) == [], "the newer reply never overtakes the older one"
    assert [r.status for r in _rows(env)] == ["pending", "pending"]
    env.clock.advance(timedelta(minutes=2))
    env.drain()
    assert _sent_texts(env) == ["Olá!", "Estou aqui!"]


def test_with_redis_flushed_the_reconciler_gets_a_waiting_retry_sent_once(
        env: ReplayEnvironment) -> None:
    env.graph_api.fail(131056)
    _answer(env, "oi", 1, "Olá!")
    for key in env.redis.scan_iter(f"*{env.namespace}*"):  # Redis lost the scheduled flush
        env.redis.delete(key)
    env.clock.advance(timedelta(seconds=30))
    env.drain()
    assert _sent_texts(env) == []
    env.clock.advance(timedelta(minutes=2))
    reconcile_pending(env.runtime, now=env.clock.now())
    reconcile_pending(env.runtime, now=env.clock.now())  # coalesced: one flush
    env.drain()
    assert _sent_texts(env) == ["Olá!"]


# -- item 4: refusals and final failures move the reply's aggregate state ---------------------

def test_a_refusal_by_meta_marks_the_reply_failed_with_its_code(env: ReplayEnvironment) -> None:
    env.graph_api.fail(131030)
    _answer(env, "oi", 1, "Olá!")
    (reply,) = _replies(env)
    assert reply.delivery_status == "failed"
    delivery = _deliveries(env)[0]
    assert delivery["error_code"] == 131030 and "allowed list" in delivery["reason"]


def test_the_products_own_24_hour_refusal_marks_the_reply_failed_with_131047(
        env: ReplayEnvironment) -> None:
    env.graph_unreachable(True)
    _answer(env, "oi", 1, "Olá!")
    env.graph_unreachable(False)
    env.clock.advance(timedelta(hours=25))
    env.drain()
    assert env.graph_api.sends == []
    (row,) = _rows(env)
    assert (row.status, row.error_code, row.error_cause) == ("refused", 131047,
                                                             "window_closed")
    assert _replies(env)[0].delivery_status == "failed"
    assert "24 hours" in _deliveries(env)[0]["reason"]


def test_a_pair_rate_limit_after_its_last_try_marks_the_reply_failed(
        env: ReplayEnvironment) -> None:
    env.graph_api.fail(131056, times=MAX_SEND_ATTEMPTS)
    _answer(env, "oi", 1, "Olá!")
    for _ in range(12):
        env.clock.advance(timedelta(hours=1))
        env.drain()
    assert len(env.graph_api.sends) == MAX_SEND_ATTEMPTS
    assert _replies(env)[0].delivery_status == "failed"
    assert _deliveries(env)[0]["error_code"] == 131056


def test_every_part_counts_a_reply_is_delivered_only_when_all_parts_are(
        env: ReplayEnvironment) -> None:
    long_reply = "\n\n".join(f"Parágrafo {i}: " + "texto " * 120 for i in range(12))
    _answer(env, "me explica tudo", 1, long_reply)
    wamids = [s.wamid for s in env.graph_api.accepted]
    assert len(wamids) >= 2
    for wamid in wamids[:-1]:
        _status(env, wamid, "delivered")
    assert _replies(env)[0].delivery_status == "sent"
    _status(env, wamids[-1], "read")
    assert _replies(env)[0].delivery_status == "delivered"


def _status(env: ReplayEnvironment, wamid: str | None, status: str, *, code: int | None = None,
            after: timedelta = timedelta(0)) -> None:
    item: dict[str, Any] = {"id": wamid, "status": status, "recipient_id": "5511999990001",
                            "timestamp": str(int((env.clock.now() + after).timestamp()))}
    if code is not None:
        item["errors"] = [{"code": code, "title": "Message undeliverable",
                           "error_data": {"details": "Message Undeliverable."}}]
    body = {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [
        {"field": "messages", "value": {"messaging_product": "whatsapp", "metadata": {
            "phone_number_id": TENANT["phone_number_id"]}, "statuses": [item]}}]}]}
    assert env.post_webhook(json.dumps(body).encode()) == 200


# Meta orders nothing: whatever order its statuses arrive in, a reply the customer's phone
# acknowledged (delivered, read) reached the customer; a failed status outranks only sent
@pytest.mark.parametrize(("statuses", "final"), [
    ([("read", 20, None), ("failed", 10, 131026)], "read"),
    ([("failed", 10, 131026), ("read", 20, None)], "read"),
    ([("delivered", 5, None), ("failed", 10, 131026)], "delivered"),
    ([("failed", 10, 131026), ("sent", 5, None)], "failed"),
    ([("sent", 5, None), ("failed", 10, 131026), ("delivered", 2, None)], "delivered"),
])
def test_a_failed_status_never_undoes_delivered_or_read_in_any_order(
        env: ReplayEnvironment, statuses: list[tuple[str, int, int | None]], final: str) -> None:
    _answer(env, "oi", 1, "Olá!")
    wamid = env.graph_api.accepted[0].wamid
    for status, seconds, code in statuses:
        _status(env, wamid, status, code=code, after=timedelta(seconds=seconds))
    (row,) = _rows(env)
    delivery = _deliveries(env)[0]
    assert (row.status, delivery["state"]) == (final, final)
    if final == "failed":
        assert delivery["error_code"] == 131026
    else:
        assert (delivery["error_code"], delivery["reason"]) == (None, "")
        assert _scrape_undelivered(env) == {"failed": 0.0, "unknown": 0.0}, \
            "not counted as a reply that did not reach the customer"


# -- item 1: every view shows the real state --------------------------------------------------

def _mixed_states(env: ReplayEnvironment) -> None:
    """Replies 1..4 of one conversation: delivered, failed (131030), unknown, queued."""
    _answer(env, "oi", 1, "Olá! Resposta entregue.")
    _status(env, env.graph_api.accepted[0].wamid, "delivered")
    env.graph_api.fail(131030)
    _answer(env, "e agora?", 2, "Resposta recusada.")
    env.graph_api.drop()
    _answer(env, "alô?", 3, "Resposta incerta.")
    env.graph_unreachable(True)
    _answer(env, "tem alguém?", 4, "Resposta na fila.")


def test_the_admin_api_and_the_report_show_each_replys_state(env: ReplayEnvironment) -> None:
    _mixed_states(env)
    states = [(d["state"], d["error_code"]) for d in _deliveries(env)]
    assert states == [("delivered", None), ("failed", 131030), ("unknown", None),
                      ("queued", None)]
    queued = _deliveries(env)[3]
    assert queued["retry_at"] and "refused" in queued["reason"]
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).first()
        assert tenant is not None
        (listed,) = service.list_conversations(session, tenant, service.ConversationQuery())
    assert listed["last_reply"]["state"] == "queued" and not listed["last_reply"]["not_delivered"]
    replies = conversation_report(env.engine, 1)["replies"]
    assert replies["by_state"] == {"queued": 1, "sending": 0, "sent": 0, "delivered": 1,
                                   "read": 0, "failed": 1, "unknown": 1}
    assert [(r["state"], r["error_code"]) for r in replies["not_delivered"]] == [
        ("failed", 131030), ("unknown", None), ("queued", None)]


def _signed_in(env: ReplayEnvironment) -> Browser:
    """A console signed in as the environment's first tenant (lowest id: without the order,
    PostgreSQL may return a tenant added later, e.g. GARAGE, from a reused schema's heap)."""
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant).order_by(col(Tenant.id))).first()
        assert tenant is not None
        token = service.create_token(session, tenant, label="dona", now=env.clock.now())
    browser = Browser(env.web_url)
    browser.sign_in(token["token"])
    return browser


def test_the_console_shows_each_replys_state_and_reason_in_its_language(
        env: ReplayEnvironment) -> None:
    _mixed_states(env)
    browser = _signed_in(env)
    status, page, _ = browser.request("/console/conversations/1")
    assert status == 200
    assert re.findall(r'data-delivery="(\w+)"', page) == ["delivered", "failed", "unknown",
                                                          "queued"]
    for words in ("entregue", "falhou", "incerta", "na fila", "131030",
                  "não está na lista permitida", "pode ter chegado ou não", "nova tentativa às"):
        assert words in page, words
    browser.request("/console/language", {"csrf": browser.csrf, "language": "en",
                                          "next": "/console/conversations/1"})
    page = browser.request("/console/conversations/1")[1]
    for words in ("delivered", "failed", "not in the test number", "may or may not"):
        assert words in page, words


def test_the_console_list_flags_a_conversation_whose_last_reply_did_not_arrive(
        env: ReplayEnvironment) -> None:
    env.add_tenant(GARAGE)
    env.graph_api.fail(131026)
    _answer(env, "oi", 1, "Olá!")  # conversation 1: refused, undeliverable
    body = text_body("oi", 2, sent_at=env.clock.now(), who=("5511999990002", "BR.2"))
    env.messages_api.script("turn", [{"text": "Olá, Bruno!"}])
    assert env.post_webhook(json.dumps(body).encode()) == 200
    env.drain()  # conversation 2: sent
    page = _signed_in(env).request("/console/conversations")[1]
    rows = re.findall(r'<tr( class="not-delivered" data-flag="not-delivered")?><td[^>]*><a '
                      r'href="/console/conversations/(\d+)"', page)
    assert sorted((cid, bool(flag)) for flag, cid in rows) == [("1", True), ("2", False)]
    assert "não chegou ao cliente" in page and "131026" in page


def test_metrics_count_open_conversations_whose_last_reply_did_not_arrive(
        env: ReplayEnvironment) -> None:
    env.graph_api.fail(131026)
    _answer(env, "oi", 1, "Olá!")
    assert _scrape_undelivered(env) == {"failed": 1.0, "unknown": 0.0}
    _answer(env, "tá aí?", 2, "Estou sim!")  # the last reply now arrived
    assert _scrape_undelivered(env) == {"failed": 0.0, "unknown": 0.0}


def _scrape(env: ReplayEnvironment, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """GET /metrics: the samples of `name`, by their labels."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{env.web_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {tuple(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name}


def _scrape_undelivered(env: ReplayEnvironment) -> dict[str, float]:
    return {dict(labels)["state"]: value for labels, value in
            _scrape(env, "wagent_conversations_not_delivered").items()}


def test_the_window_closed_template_claims_no_send_and_shows_its_state(
        env: ReplayEnvironment) -> None:
    env.add_tenant({**TENANT, "followup_template": "retorno_atendimento"})
    _post(env, "oi", 1)
    env.clock.advance(timedelta(hours=25))
    env.graph_unreachable(True)
    env.drain()
    (reply,) = _replies(env)
    assert "sent" not in reply.content[0]["text"]
    assert reply.delivery_status == "queued"
    assert _deliveries(env)[0]["state"] == "queued"


# -- item 5: an emoji counts two --------------------------------------------------------------

def test_a_3999_character_emoji_heavy_reply_reaches_the_customer_whole(
        env: ReplayEnvironment) -> None:
    reply = emoji_heavy(3999)
    _answer(env, "me manda tudo", 1, reply)
    assert len(env.graph_api.sends) >= 2
    assert [s.status for s in env.graph_api.sends] == [200] * len(env.graph_api.sends)
    assert non_space("".join(_sent_texts(env))) == non_space(reply)
    assert _replies(env)[0].delivery_status == "sent"


# -- item 6: logs name the cause, with no phone number or text --------------------------------

def test_logs_name_the_network_cause_of_graph_and_claude_failures(
        env: ReplayEnvironment, capsys: pytest.CaptureFixture[str]) -> None:
    from core.logs import configure_logging

    configure_logging("INFO", "json")
    try:
        env.graph_unreachable(True)
        _answer(env, "meu texto secreto", 1, "Segredo da resposta")
        env._loop.run(env.messages_api.stop())  # Claude unreachable: connection refused
        _post(env, "outro texto secreto", 2)
        env.drain()
    finally:
        logging.getLogger().handlers.clear()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith("{")]
    send = next(x for x in lines if x["event"] == "send_failed")
    assert (send.get("error"), send.get("cause")) == ("GraphUnreachable", "refused")
    turn = next(x for x in lines if x["event"] == "turn_retry_scheduled")
    assert (turn.get("error"), turn.get("cause")) == ("APIConnectionError", "refused")
    out = json.dumps(lines, ensure_ascii=False)
    for secret in ("5511999990001", "BR.9000000000000000001", "meu texto secreto",
                   "Segredo da resposta", "outro texto secreto"):
        assert secret not in out, secret


def test_replies_queued_during_an_outage_do_not_use_up_the_waiting_parts_tries(
        env: ReplayEnvironment) -> None:
    env.graph_unreachable(True)
    _answer(env, "mensagem 0", 1, "REPLY-0")
    for i in range(1, 9):  # the customer writes every 5 s: each reply tries REPLY-0 early
        env.clock.advance(timedelta(seconds=5))
        _answer(env, f"mensagem {i}", i + 1, f"REPLY-{i}")
    first = _rows(env)[0]
    assert (first.status, first.attempts) == ("pending", 2), \
        "40 s hold two scheduled tries (at 0 and 30 s); the 7 brought forward are extra"
    assert first.retry_at == START + timedelta(seconds=30) + timedelta(minutes=2), \
        "its schedule stays: the next try 2 min after the one at 30 s"
    assert len(env.graph_api.sends) == 0
    env.graph_unreachable(False)
    env.clock.advance(timedelta(minutes=10))
    env.drain()
    assert _sent_texts(env) == [f"REPLY-{i}" for i in range(9)], "all of them, in order"


def test_a_template_in_a_replay_transcript_names_the_template_and_its_parameters() -> None:
    from replay.runner import _sent_text

    template = {"messaging_product": "whatsapp", "type": "template", "template": {
        "name": "retorno_atendimento", "language": {"code": "pt_BR"},
        "components": [{"type": "body", "parameters": [{"type": "text", "text": "Ana"}]}]}}
    assert _sent_text(template) == "[template retorno_atendimento pt_BR] (Ana)"
    assert _sent_text({"type": "text", "text": {"body": "Oi!"}}) == "Oi!"
    assert _sent_text({"type": "interactive", "interactive": {}}) == "interactive"


# -- a POST's statuses are looked up set-based (issue 20, item 2) ------------------------------

def _statuses_post(env: ReplayEnvironment, items: list[tuple[str, str]]) -> None:
    body = {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [
        {"field": "messages", "value": {"messaging_product": "whatsapp", "metadata": {
            "phone_number_id": TENANT["phone_number_id"]}, "statuses": [
                {"id": wamid, "status": status, "recipient_id": "5511999990001",
                 "timestamp": str(int(env.clock.now().timestamp()))}
                for wamid, status in items]}}]}]}
    assert env.post_webhook(json.dumps(body).encode()) == 200


def _statements_for(env: ReplayEnvironment, post: Any) -> int:
    from sqlalchemy import event
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(env.engine, "before_cursor_execute", count)
    try:
        post()
    finally:
        event.remove(env.engine, "before_cursor_execute", count)
    return len(seen)


def test_a_posts_statuses_cost_a_few_queries_whatever_their_number_and_ours_still_advance(
        env: ReplayEnvironment) -> None:
    _answer(env, "oi", 1, "Olá!")
    ours = env.graph_api.accepted[0].wamid
    few = _statements_for(env, lambda: _statuses_post(
        env, [(f"wamid.unknown{i}", "delivered") for i in range(3)]))
    many = _statements_for(env, lambda: _statuses_post(
        env, [(f"wamid.other{i}", "delivered") for i in range(23)] + [(ours, "read")]))
    # (a POST of more than WEBHOOK_SPILL_UPDATES goes to the inbox: 24 are stored at once)
    assert many - few <= 12, (few, many)  # our one status's own statements, not 23 lookups
    (row,) = _rows(env)
    assert row.status == "read"
