"""Monthly model budgets (issue 49 item 3): usage rows push a tenant's month-to-date model cost
(the ledger's, usage/ledger.py) past 80 % and then 100 % of its budget; the owner is told once
per level and month (the budgetalert row, the webhook event, the console's banner), then the
turns use the fallback model (the Messages API double sees it) or hand off; a new month in the
tenant's timezone starts again; one tenant's spend never counts toward another's budget.

Budgets are set from the measured cost of the rows (never from prices written here), so the
tests hold whatever the ledger's price table says.
"""

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlmodel import Session, select

from cli.main import main
from operations import service
from replay.environment import ReplayEnvironment
from storage import budgets, webhooks
from storage.db import create_schema, make_engine, session_scope
from storage.models import (
    BudgetAlert,
    Conversation,
    Tenant,
    Usage,
    WebhookEvent,
)
from tests.conftest import START, require_postgres
from tests.console_helpers import GARAGE
from tests.factories import BRUNO, TENANT, text_body
from tests.test_admin_api import OPERATOR, call
from tests.test_console import Browser
from usage.ledger import model_cost_micro_usd, month_model_micro_usd
from workers import budgets as turn_budgets

FALLBACK = "claude-haiku-4-5"
EVENTS = ["budget.warning", "budget.reached", "handoff.requested"]


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    environment.add_tenant(TENANT)
    environment.add_tenant(GARAGE)
    turn_budgets.forget()
    yield environment
    turn_budgets.forget()
    environment.close()


def _tenant(session: Session, phone_number_id: str = TENANT["phone_number_id"]) -> Tenant:
    return session.exec(select(Tenant).where(Tenant.phone_number_id == phone_number_id)).one()


def _spend(env: ReplayEnvironment, tenant_id: int, *, tokens: int, at: datetime) -> None:
    """A Messages API call's usage row of the tenant at `at` (no conversation: a test's),
    costed as workers/jobs.record_call_usage costs one."""
    model = "claude-sonnet-5-5"
    with session_scope(env.engine) as session:
        session.add(Usage(tenant_id=tenant_id, conversation_id=None, purpose="turn",
                          model=model, input_tokens=tokens, output_tokens=tokens // 10,
                          created_at=at, micro_usd=model_cost_micro_usd(
                              model, tokens, 0, 0, 0, tokens // 10)))  # the ledger's price
    turn_budgets.forget()  # this process's cached cost: read it again


def _spent(env: ReplayEnvironment, tenant_id: int) -> int:
    with session_scope(env.engine) as session:
        tenant = session.get(Tenant, tenant_id)
        assert tenant is not None
        month = budgets.month_of(tenant, env.clock.now())
    return month_model_micro_usd(env.engine, tenant_id, month)


def _set_budget(env: ReplayEnvironment, tenant_id: int, cents: int, **more: Any) -> None:
    with session_scope(env.engine) as session:
        tenant = session.get(Tenant, tenant_id)
        assert tenant is not None
        tenant.model_budget_cents = cents
        for key, value in more.items():
            setattr(tenant, key, value)
        session.add(tenant)
        webhooks.create_endpoint(session, tenant_id, url="https://hooks.example/budget",
                                 events=EVENTS, now=env.clock.now())
    turn_budgets.forget()


def _budget_for(spent: int, percent: int) -> int:
    """The budget in cents that `spent` µUSD is `percent` % of (rounded up: just under)."""
    return -(-spent * 100 // (percent * budgets.MICRO_USD_PER_CENT))


def _turn(env: ReplayEnvironment, text: str, n: int, script: list[dict[str, Any]],
          who: tuple[str, str] = BRUNO, phone_number_id: str = TENANT["phone_number_id"]
          ) -> None:
    env.messages_api.script("turn", script)
    body = text_body(text, n, who=who, sent_at=env.clock.now(), phone_number_id=phone_number_id)
    assert env.post_webhook(json.dumps(body).encode()) == 200
    env.drain()


def _texts_sent(env: ReplayEnvironment) -> list[str]:
    return [str(s.body["text"]["body"]) for s in env.graph_api.sends
            if s.body.get("type") == "text"]


def _counted(env: ReplayEnvironment, name: str) -> dict[str, float]:
    """The counter `name` by its labels' JSON (core/metrics.py: one Redis hash)."""
    fields = env.redis.hgetall(f"{env.settings.redis_prefix}:metrics")
    return {field.decode().split("\t")[2]: float(value) for field, value in fields.items()
            if field.decode().split("\t")[0] == name}


def _events(env: ReplayEnvironment, tenant_id: int) -> list[str]:
    """The tenant's webhook events' types, sorted (one frozen clock: equal times)."""
    with session_scope(env.engine) as session:
        return sorted(session.exec(select(WebhookEvent.type).where(
            WebhookEvent.tenant_id == tenant_id)))


def _banner(env: ReplayEnvironment, tenant_id: int) -> str:
    with session_scope(env.engine) as session:
        tenant = session.get(Tenant, tenant_id)
        assert tenant is not None
        token = str(service.create_token(session, tenant, label="dona",
                                         now=env.clock.now())["token"])
    browser = Browser(env.web_url)
    browser.sign_in(token)
    page = browser.request("/console/")[1]
    start = page.find('id="budget-banner"')
    return "" if start < 0 else page[start:page.find("</div>", start)]


def test_a_crossing_warns_once_then_the_fallback_model_answers_and_a_new_month_resets(
        env: ReplayEnvironment) -> None:
    with session_scope(env.engine) as session:
        tenant_id = int(_tenant(session).id or 0)
    _spend(env, tenant_id, tokens=100_000, at=START - timedelta(hours=1))
    spent = _spent(env, tenant_id)
    assert spent > 0
    _set_budget(env, tenant_id, _budget_for(spent, 85))  # 85 %: past the warning
    _turn(env, "oi", 1, [{"text": "Olá! Em que posso ajudar?"}])
    _turn(env, "tem horário?", 2, [{"text": "Tenho amanhã às 14h."}])
    models = [c.request["model"] for c in env.messages_api.calls if c.purpose == "turn"]
    assert models == ["claude-sonnet-5-5"] * 2  # under 100 %: the tenant's model
    assert _events(env, tenant_id) == ["budget.warning"]  # once, not per turn
    assert "80%" in _banner(env, tenant_id)

    _spend(env, tenant_id, tokens=100_000, at=env.clock.now())  # now well past 100 %
    _turn(env, "e amanhã?", 3, [{"text": "Amanhã às 15h."}])
    _turn(env, "ok", 4, [{"text": "Combinado."}])
    models = [c.request["model"] for c in env.messages_api.calls if c.purpose == "turn"]
    assert models[2:] == [FALLBACK, FALLBACK]
    assert _events(env, tenant_id) == ["budget.reached", "budget.warning"]
    assert "orçamento do agente para este mês foi atingido" in _banner(env, tenant_id)
    assert _texts_sent(env)[-1] == "Combinado."
    assert _counted(env, "wagent_budget_turns_total") == {'{"action":"fallback"}': 2}
    assert _counted(env, "wagent_budget_alerts_total") == {'{"level":"warning"}': 1,
                                                           '{"level":"reached"}': 1}

    env.clock.advance(timedelta(days=30))  # 2026-07-01 10:00 in São Paulo: a new month
    turn_budgets.forget()
    _turn(env, "oi de novo", 5, [{"text": "Olá!"}])
    models = [c.request["model"] for c in env.messages_api.calls if c.purpose == "turn"]
    assert models[-1] == "claude-sonnet-5-5"
    assert _banner(env, tenant_id) == ""
    assert _events(env, tenant_id) == ["budget.reached", "budget.warning"]


def test_over_budget_with_handoff_the_customer_gets_the_handoff_text_and_staff_hold(
        env: ReplayEnvironment) -> None:
    with session_scope(env.engine) as session:
        tenant_id = int(_tenant(session).id or 0)
    _spend(env, tenant_id, tokens=200_000, at=START - timedelta(hours=1))
    _set_budget(env, tenant_id, _budget_for(_spent(env, tenant_id), 100) - 1,
                budget_action="handoff", handoff_text="Já te chamo alguém da equipe.")
    calls = len(env.messages_api.calls)
    _turn(env, "oi, quero marcar", 1, [])
    assert len(env.messages_api.calls) == calls  # no model call at all
    sent = _texts_sent(env)
    assert sent and sent[-1].startswith("Já te chamo alguém da equipe.")
    with session_scope(env.engine) as session:
        conversation = session.exec(select(Conversation).where(
            Conversation.tenant_id == tenant_id)).one()
        assert conversation.staff_until is not None and conversation.staff_until > \
            env.clock.now()
        assert conversation.handoff_at is not None
    assert _events(env, tenant_id) == ["budget.reached", "budget.warning",
                                       "handoff.requested"]
    assert "passam para a equipe" in _banner(env, tenant_id)


def test_one_tenants_spend_never_counts_toward_anothers_budget(env: ReplayEnvironment) -> None:
    with session_scope(env.engine) as session:
        salon_id = int(_tenant(session).id or 0)
        garage_id = int(_tenant(session, GARAGE["phone_number_id"]).id or 0)
    _spend(env, salon_id, tokens=50_000, at=START - timedelta(hours=1))
    salon_spent = _spent(env, salon_id)
    _set_budget(env, salon_id, _budget_for(salon_spent, 50))  # the salon at 50 %
    _spend(env, garage_id, tokens=5_000_000, at=START - timedelta(hours=1))  # the garage: lots
    assert _spent(env, salon_id) == salon_spent
    _turn(env, "oi", 1, [{"text": "Olá!"}])
    assert env.messages_api.calls[-1].request["model"] == "claude-sonnet-5-5"
    assert _events(env, salon_id) == [] and _banner(env, salon_id) == ""


def test_the_month_is_the_tenants_calendar_month(env: ReplayEnvironment) -> None:
    """A call at 23:30 of 31 May in São Paulo (02:30 UTC on 1 June) is May's."""
    with session_scope(env.engine) as session:
        tenant_id = int(_tenant(session).id or 0)
    _spend(env, tenant_id, tokens=100_000, at=datetime(2026, 6, 1, 2, 30, tzinfo=UTC))
    assert _spent(env, tenant_id) == 0
    _spend(env, tenant_id, tokens=100_000, at=datetime(2026, 6, 1, 3, 0, tzinfo=UTC))
    assert _spent(env, tenant_id) > 0


@given(cents=st.integers(1, 100_000_000), spent=st.integers(0, 2 * 10**12))
def test_the_levels_are_integer_thresholds(cents: int, spent: int) -> None:
    tenant = Tenant(phone_number_id="1", name="x", created_at=START, model_budget_cents=cents)
    budget = cents * budgets.MICRO_USD_PER_CENT
    level = budgets.level_of(tenant, spent)
    assert (level == budgets.REACHED) == (spent >= budget)
    assert (level == budgets.WARNING) == (5 * spent >= 4 * budget and spent < budget)
    tenant.model_budget_cents = 0
    assert budgets.level_of(tenant, spent) is None


def test_concurrent_crossings_record_each_level_once_on_postgres() -> None:
    """Eight sessions race to record the same month's levels: one row and one event each."""
    url = require_postgres()
    environment = ReplayEnvironment(start=START, database_url=url)
    try:
        environment.add_tenant(TENANT)
        with session_scope(environment.engine) as session:
            tenant = _tenant(session)
            tenant.model_budget_cents = 100
            session.add(tenant)
            webhooks.create_endpoint(session, int(tenant.id or 0),
                                     url="https://hooks.example/budget", events=EVENTS,
                                     now=START)
            tenant_id = int(tenant.id or 0)
        engine = make_engine(environment.engine.url.render_as_string(hide_password=False))
        barrier, recorded = threading.Barrier(8), []

        def race() -> None:
            with session_scope(engine) as session:
                tenant = session.get(Tenant, tenant_id)
                assert tenant is not None
                barrier.wait()
                recorded.extend(budgets.record_level(session, tenant, budgets.REACHED,
                                                     spent_micro_usd=2_000_000, now=START))

        threads = [threading.Thread(target=race) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        engine.dispose()
        assert sorted(recorded) == [budgets.REACHED, budgets.WARNING]
        with session_scope(environment.engine) as session:
            rows = session.exec(select(BudgetAlert.level).where(
                BudgetAlert.tenant_id == tenant_id)).all()
            events = session.exec(select(WebhookEvent.type).where(
                WebhookEvent.tenant_id == tenant_id)).all()
        assert sorted(rows) == ["reached", "warning"]
        assert sorted(events) == ["budget.reached", "budget.warning"]
    finally:
        environment.close()


def test_the_budget_is_set_by_the_cli_and_the_admin_api_and_bad_values_change_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        redis_url: str | None) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/wagent.db")
    engine = make_engine(f"sqlite:///{tmp_path}/wagent.db")
    create_schema(engine)  # the models' schema (migration 0030 is chained by the merge)
    engine.dispose()
    (tmp_path / "tenant.json").write_text(json.dumps(TENANT))
    assert main(["tenant", "create", str(tmp_path / "tenant.json")]) == 0
    pnid = TENANT["phone_number_id"]
    capsys.readouterr()
    assert main(["tenant", "update", pnid, "--set", "model_budget_cents=5000", "--set",
                 "budget_action=handoff"]) == 0
    changed = capsys.readouterr().out.splitlines()  # `key: old → new`, one line a change
    assert sorted(changed) == ["budget_action: \"fallback\" → \"handoff\"",
                               "model_budget_cents: null → 5000"]
    assert main(["tenant", "update", pnid, "--set", "model_budget_cents=-1", "--set",
                 "budget_action=stop"]) == 2
    err = capsys.readouterr().err
    assert "model_budget_cents" in err and "budget_action" in err

    environment = ReplayEnvironment(start=START, redis_url=redis_url, admin_token=OPERATOR)
    try:
        environment.add_tenant(TENANT)
        status, body = call(environment, "PATCH", "/admin/tenants/1",
                            {"model_budget_cents": 1234, "fallback_model": "claude-haiku-4-5"})
        assert status == 200 and body["model_budget_cents"] == 1234
        status, body = call(environment, "PATCH", "/admin/tenants/1",
                            {"fallback_model": "gpt-4", "model_budget_cents": 1})
        assert status == 422 and "fallback_model" in json.dumps(body)
        assert call(environment, "GET", "/admin/tenants/1")[1]["model_budget_cents"] == 1234
    finally:
        environment.close()


def test_a_budget_raised_then_reached_again_is_told_again(env: ReplayEnvironment) -> None:
    """The owner raises the budget after it was reached; when the month's cost reaches the new
    one, the turns fall back again and the owner is told again (banner, webhook): never
    silently. The worker process keeps what it saw (no `forget`), as a real one does."""
    with session_scope(env.engine) as session:
        tenant_id = int(_tenant(session).id or 0)
    _spend(env, tenant_id, tokens=100_000, at=START - timedelta(hours=1))
    first = _budget_for(_spent(env, tenant_id), 100) - 1
    _set_budget(env, tenant_id, first)
    _turn(env, "oi", 1, [{"text": "Olá!"}])
    assert _events(env, tenant_id) == ["budget.reached", "budget.warning"]
    with session_scope(env.engine) as session:
        tenant = _tenant(session)
        tenant.model_budget_cents = first * 3  # raised: under 80 % again
        session.add(tenant)
    turn_budgets._spent.clear()  # the 30-second cache, as if 30 s passed
    _turn(env, "tem horário?", 2, [{"text": "Tenho amanhã."}])
    assert env.messages_api.calls[-1].request["model"] == "claude-sonnet-5-5"
    assert _banner(env, tenant_id) == ""
    with session_scope(env.engine) as session:
        session.add(Usage(tenant_id=tenant_id, purpose="turn", model="claude-sonnet-5-5",
                          micro_usd=first * 3 * budgets.MICRO_USD_PER_CENT,
                          created_at=env.clock.now()))
    turn_budgets._spent.clear()
    _turn(env, "ok", 3, [{"text": "Combinado."}])
    assert env.messages_api.calls[-1].request["model"] == FALLBACK
    assert "orçamento do agente para este mês foi atingido" in _banner(env, tenant_id)
    assert _events(env, tenant_id) == ["budget.reached"] * 2 + ["budget.warning"] * 2
