"""A provider outage the owner sees and that is repaired (issue 36): failed calls stored and
shown, one apology per conversation per outage, later messages held, one real answer once the
Messages API answers again (the cron's probe, or the next successful call of any turn)."""

import json
from datetime import timedelta
from pathlib import Path

from sqlmodel import select

from operations import service
from replay.environment import ReplayEnvironment
from replay.runner import run_scenario_file
from storage import failures
from storage.db import session_scope
from storage.keys import provider_down_key
from storage.models import Conversation, Message, ProviderFailure, Tenant
from tests.factories import ANA, BRUNO, TENANT, text_body
from tests.test_console import Browser
from workers import outages

SCENARIOS = Path(__file__).parent / "scenarios"
APOLOGY = "Desculpe, estou com uma instabilidade agora"


def _post(env: ReplayEnvironment, text: str, n: int, who: tuple[str, str] = ANA) -> None:
    assert env.post_webhook(json.dumps(text_body(text, n, who=who,
                                                 sent_at=env.clock.now())).encode()) == 200


def _through_every_retry(env: ReplayEnvironment) -> None:
    """The turn's four attempts (workers/jobs.RETRY_POLICIES: 10 s, 40 s, 120 s apart)."""
    env.drain()
    for wait in (10, 40, 120):
        env.clock.advance(timedelta(seconds=wait))
        env.drain()


def _texts(env: ReplayEnvironment) -> list[str]:
    return [s.body["text"]["body"] for s in env.graph_api.sends
            if s.wamid and s.body.get("type") == "text"]


def _console(env: ReplayEnvironment) -> Browser:
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).one()
        token = service.create_token(session, tenant, label="dona", now=env.clock.now())
    browser = Browser(env.web_url)
    browser.sign_in(token["token"])
    return browser


def test_two_messages_in_an_outage_get_one_apology_then_one_real_answer(
        env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    browser = _console(env)
    env.messages_api.fail("turn", 529, times=8)
    _post(env, "oi, quero marcar um corte", 1)
    _through_every_retry(env)
    assert len(_texts(env)) == 1 and APOLOGY in _texts(env)[0]
    page = browser.request("/console/attention")[1]
    assert 'id="not-answered"' in page and "O assistente não conseguiu responder" in page
    home = browser.request("/console/")[1]
    assert 'id="provider-down"' in home and 'id="attention-count">1<' in home
    env.clock.advance(timedelta(minutes=1))
    _post(env, "amanhã às 10h pode ser?", 2)
    _through_every_retry(env)
    assert len(_texts(env)) == 1  # held, not apologised for again
    with session_scope(env.engine) as session:
        rows = session.exec(select(ProviderFailure).order_by(ProviderFailure.id)).all()
        assert [(r.kind, r.status, r.tries, r.outcome) for r in rows] == [
            ("overloaded", 529, 4, "apology"), ("overloaded", 529, 4, "held")]
        held = session.exec(select(Message).where(Message.direction == "inbound")).all()
        assert [m.status_reason for m in held] == [failures.HELD_REASON] * 2
    page = browser.request("/console/conversations/1")[1]
    assert page.count('class="failure"') == 2 and "serviço sobrecarregado (529)" in page
    assert "4 tentativas" in page and "mensagem em espera" in page
    assert 'id="no-calls"' not in page

    env.messages_api.script("probe", [{"text": "ok"}])  # the provider is back
    env.messages_api.script("turn", [{"text": "Oi! Tenho amanhã às 10h com a Júlia."}])
    assert env.cron()["probe"] == 1
    assert _texts(env)[1:] == ["Oi! Tenho amanhã às 10h com a Júlia."]
    request = json.dumps(env.messages_api.last_requests["turn"]["messages"],
                         ensure_ascii=False)
    assert "quero marcar um corte" in request and "amanhã às 10h pode ser?" in request
    assert env.messages_api.api_errors == 0
    page = browser.request("/console/conversations/1")[1]
    assert 'id="answered-late"' in page
    assert 'id="not-answered"' not in browser.request("/console/attention")[1]
    env.clock.advance(timedelta(minutes=5))
    assert env.cron()["probe"] == -1  # not marked down: no call
    assert len(_texts(env)) == 2 and env.messages_api.unscripted_calls == 0


def test_the_next_successful_turn_of_another_customer_starts_the_late_answers(
        env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    env.messages_api.fail("turn", 429, times=4)
    _post(env, "oi", 1)
    _through_every_retry(env)
    assert len(_texts(env)) == 1
    env.messages_api.script("turn", [{"text": "Olá Bruno!"}, {"text": "Oi Ana, desculpe a "
                                                                   "demora!"}])
    _post(env, "bom dia", 2, who=BRUNO)
    env.drain()
    assert sorted(_texts(env)[1:]) == ["Oi Ana, desculpe a demora!", "Olá Bruno!"]
    request = env.messages_api.last_requests["turn"]["messages"]
    assert request[-1]["role"] == "user"  # the apology is followed by the product's note
    assert "answer them now" in json.dumps(request)
    with session_scope(env.engine) as session:
        ana = session.get(Conversation, 1)
        assert ana is not None and ana.outage_state == failures.ANSWERED_LATE
        (row,) = session.exec(select(ProviderFailure)).all()
        assert (row.kind, row.tries) == ("rate_limit", 4)
    env.drain()
    assert len(_texts(env)) == 3 and env.messages_api.api_errors == 0


def test_past_two_hours_nothing_is_sent_and_the_conversation_stays_listed(
        env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    browser = _console(env)
    env.messages_api.fail("turn", 500, times=4)
    _post(env, "oi", 1)
    _through_every_retry(env)
    env.clock.advance(failures.RECOVER_WITHIN + timedelta(minutes=5))
    env.messages_api.script("probe", [{"text": "ok"}])
    assert env.cron()["probe"] == 1
    assert len(_texts(env)) == 1 and env.messages_api.unscripted_calls == 0
    page = browser.request("/console/attention")[1]
    assert 'id="not-answered"' in page and "responda você" in page


def test_the_outage_scenario(database_url: str | None, redis_url: str | None) -> None:
    """tests/scenarios/provider_outage.json: the issue's "How to show it", as a replay."""
    result = run_scenario_file(SCENARIOS / "provider_outage.json", database_url=database_url,
                               redis_url=redis_url)
    assert result.passed, "\n".join(result.failures + result.transcript)


def test_a_graph_rate_limit_shows_in_the_same_places_with_its_own_words(
        env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    browser = _console(env)
    env.graph_api.fail(130429, times=1)
    env.messages_api.script("turn", [{"text": "Olá!"}])
    _post(env, "oi", 1)
    env.drain()
    page = browser.request("/console/")[1]
    assert 'id="provider-down"' in page and "WhatsApp: limite de uso atingido" in page
    page = browser.request("/console/conversations/1")[1]
    assert "WhatsApp: limite de uso atingido (400) · 1 tentativa · tentando de novo" in page
    env.clock.advance(timedelta(seconds=30))
    env.drain()
    assert _texts(env) == ["Olá!"]
    page = browser.request("/console/conversations/1")[1]
    assert "respondeu numa nova tentativa" in page
    assert 'id="provider-down"' not in browser.request("/console/")[1]  # recovered: no banner


def test_a_worker_that_saw_the_provider_up_skips_the_mark_for_30_seconds_not_after_its_failure(
        env: ReplayEnvironment) -> None:
    """workers/outages.py: after a call found no mark, the next calls of this process within
    KNOWN_UP make no Redis round trip; a mark another process set is taken off (and the late
    answers enqueued) by the first call after it; this process's own failure is never skipped."""
    runtime, key = env.runtime, provider_down_key(env.runtime.settings.redis_prefix)
    assert outages.provider_answered(runtime) is False  # no mark: now known up here
    env.redis.set(key, "1")  # another worker's call failed
    assert outages.provider_answered(runtime) is False and env.redis.exists(key)
    env.clock.advance(outages.KNOWN_UP - timedelta(seconds=1))
    assert outages.provider_answered(runtime) is False and env.redis.exists(key)  # not past
    env.clock.advance(timedelta(seconds=2))
    assert outages.provider_answered(runtime) is True and not env.redis.exists(key)
    assert [j.func_name for j in env.queue.jobs][-1] == "workers.outages.run_recover"
    outages.provider_failed(runtime)  # this worker's own failure: looked at at once
    assert outages.provider_answered(runtime) is True and not env.redis.exists(key)
