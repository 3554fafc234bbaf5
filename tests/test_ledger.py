"""The cost ledger (usage/ledger.py, issue 49): model prices to the µUSD, local days in the
tenant's timezone, one tenant's usage never in another's ledger, per-day sums = the total."""

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from storage.db import session_scope
from storage.models import Usage
from storage.tenants import upsert_tenant
from usage.ledger import (
    PURPOSES,
    model_cost_micro_usd,
    month_model_micro_usd,
    next_month,
    tenant_costs,
    totals,
)
from usage.report import Call, summarize_calls

NOW = datetime(2026, 12, 1, 13, tzinfo=UTC)


def test_model_prices_per_family_and_cache_multipliers() -> None:
    # 1 MTok at $3/$15 (sonnet): input 3 USD = 3,000,000 µUSD; output 15 USD.
    assert model_cost_micro_usd("claude-sonnet-5-5", 1_000_000, 0, 0, 0, 0) == 3_000_000
    assert model_cost_micro_usd("claude-sonnet-5-5", 0, 0, 0, 0, 1_000_000) == 15_000_000
    assert model_cost_micro_usd("claude-haiku-4-5", 1_000_000, 0, 0, 0, 1_000_000) == 6_000_000
    assert model_cost_micro_usd("claude-opus-5", 1_000_000, 0, 0, 0, 1_000_000) == 30_000_000
    # reads 0.1×: 1M read on sonnet = 0.30 USD; 5-min writes 1.25× = 3.75; 1-h writes 2× = 6.
    assert model_cost_micro_usd("claude-sonnet-5-5", 0, 0, 0, 1_000_000, 0) == 300_000
    assert model_cost_micro_usd("claude-sonnet-5-5", 0, 1_000_000, 0, 0, 0) == 3_750_000
    assert model_cost_micro_usd("claude-sonnet-5-5", 0, 1_000_000, 1_000_000, 0, 0) == 6_000_000
    assert model_cost_micro_usd("some-new-model", 1_000_000, 0, 0, 0, 0) == 3_000_000  # sonnet


def test_model_cost_rounds_once_per_call_half_up() -> None:
    # 1 read on haiku = 0.1 µUSD → 0; 5 reads = 0.5 → 1 (half up); 1 write 5-min = 1.25 → 1.
    assert model_cost_micro_usd("claude-haiku-4-5", 0, 0, 0, 1, 0) == 0
    assert model_cost_micro_usd("claude-haiku-4-5", 0, 0, 0, 5, 0) == 1
    assert model_cost_micro_usd("claude-haiku-4-5", 0, 1, 0, 0, 0) == 1
    assert model_cost_micro_usd("claude-haiku-4-5", 0, 2, 0, 0, 0) == 3  # 2.5 → 3
    with pytest.raises(ValueError, match="must be >= 0"):
        model_cost_micro_usd("claude-haiku-4-5", -1, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="1h writes <= writes"):
        model_cost_micro_usd("claude-haiku-4-5", 0, 1, 2, 0, 0)


def _usage(engine: Engine, tenant_id: int, at: datetime, purpose: str = "turn",
           model: str = "claude-sonnet-5-5", tokens: tuple[int, int, int, int, int] = (
               100, 1000, 0, 5000, 200)) -> int:
    cost = model_cost_micro_usd(model, *tokens)
    with session_scope(engine) as session:
        session.add(Usage(tenant_id=tenant_id, purpose=purpose, model=model,
                          input_tokens=tokens[0], cache_creation_input_tokens=tokens[1],
                          cache_creation_1h_input_tokens=tokens[2],
                          cache_read_input_tokens=tokens[3], output_tokens=tokens[4],
                          micro_usd=cost, created_at=at))
    return cost


def _tenant(engine: Engine, phone_number_id: str, timezone: str = "America/Sao_Paulo") -> int:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, {"phone_number_id": phone_number_id, "name": "X",
                                         "timezone": timezone}, now=NOW)
        return int(tenant.id or 0)


def test_local_day_boundary_purposes_and_tenants_apart(engine: Engine) -> None:
    first, second = _tenant(engine, "1"), _tenant(engine, "2")
    # São Paulo is UTC-3: 02:59 UTC on Dec 2 is still Dec 1 locally; 03:00 UTC is Dec 2.
    late = _usage(engine, first, datetime(2026, 12, 2, 2, 59, tzinfo=UTC))
    early = _usage(engine, first, datetime(2026, 12, 2, 3, 0, tzinfo=UTC), purpose="compaction",
                   model="claude-haiku-4-5")
    _usage(engine, first, datetime(2026, 12, 2, 4, 0, tzinfo=UTC), purpose="probe")
    _usage(engine, second, datetime(2026, 12, 1, 15, 0, tzinfo=UTC))  # the other tenant's
    days = tenant_costs(engine, first, date(2026, 12, 1), date(2026, 12, 3))
    assert [d.day for d in days] == [date(2026, 12, 1), date(2026, 12, 2)]
    assert days[0].model_micro_usd == {**dict.fromkeys(PURPOSES, 0), "turn": late}
    assert days[0].model_calls == 1
    assert days[1].model_micro_usd["compaction"] == early
    assert days[1].model_micro_usd["other"] > 0 and days[1].model_calls == 2
    assert days[1].whatsapp_micro_usd == {} and days[1].whatsapp_total == 0
    assert [d.model_calls for d in tenant_costs(engine, second, date(2026, 12, 1),
                                                date(2026, 12, 3))] == [1, 0]
    assert month_model_micro_usd(engine, first, date(2026, 12, 1)) == sum(
        d.model_total for d in days)
    assert month_model_micro_usd(engine, first, date(2026, 11, 1)) == 0
    with pytest.raises(LookupError):
        tenant_costs(engine, 99, date(2026, 12, 1), date(2026, 12, 2))
    with pytest.raises(ValueError, match="before start"):
        tenant_costs(engine, first, date(2026, 12, 2), date(2026, 12, 1))


TOKENS = st.tuples(*[st.integers(0, 200_000)] * 5).map(
    lambda t: (t[0], t[1] + t[2], t[2], t[3], t[4]))  # 1-hour writes are part of the writes


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(st.tuples(st.integers(0, 40 * 24 * 60 - 1), st.sampled_from(
    ["turn", "summary", "compaction", "facts", "probe"]), st.sampled_from(
    ["claude-sonnet-5-5", "claude-haiku-4-5", "claude-opus-5"]), TOKENS), max_size=30))
def test_the_sum_of_the_days_is_the_total(
        engine: Engine, calls: list[tuple[int, str, str, tuple[int, int, int, int, int]]]) -> None:
    tenant = _tenant(engine, "1")
    start = datetime(2026, 11, 1, 3, tzinfo=UTC)  # local midnight of Nov 1 in São Paulo
    rows = [Usage(tenant_id=tenant, purpose=p, model=model, input_tokens=t[0],
                  cache_creation_input_tokens=t[1], cache_creation_1h_input_tokens=t[2],
                  cache_read_input_tokens=t[3], output_tokens=t[4],
                  micro_usd=model_cost_micro_usd(model, *t),
                  created_at=start + timedelta(minutes=m)) for m, p, model, t in calls]
    with session_scope(engine) as session:  # one example's rows only
        session.exec(Usage.__table__.delete())  # type: ignore[attr-defined]
        session.add_all(rows)
    days = tenant_costs(engine, tenant, date(2026, 11, 1), date(2026, 12, 11))  # 40 days
    assert sum(d.total for d in days) == totals(days).total == sum(r.micro_usd for r in rows)
    assert totals(days).model_calls == len(calls)


@given(day=st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 12, 31)))
def test_next_month_is_the_first_day_after_the_month_of_the_day(day: date) -> None:
    """One rule for a month's end: the budget's month sum and the results page's months."""
    following = next_month(day)
    assert following.day == 1 and following > day
    assert (following - timedelta(days=1)).month == day.month


def test_a_conversation_reports_cost_is_the_ledgers_rounded_per_call() -> None:
    """usage/report prices calls by the ledger's rule: three calls of 0.3 µUSD each (one
    sonnet cache read) are 0 µUSD in the ledger, so 0 in the report, not 0.9 rounded up."""
    at = NOW
    calls = [Call(at, "turn", "claude-sonnet-5-5", 0, 0, 0, 1, 0) for _ in range(3)]
    assert [model_cost_micro_usd(c.model, 0, 0, 0, 1, 0) for c in calls] == [0, 0, 0]
    assert summarize_calls(calls)["cost_usd"] == 0
    mixed = [Call(at, "turn", "claude-haiku-4-5", 1_000, 400, 100, 2_000, 300),
             Call(at, "summary", "claude-sonnet-5-5", 7, 0, 0, 3, 11)]
    ledger_micro_usd = sum(model_cost_micro_usd(c.model, c.input_tokens,
                                                c.cache_creation_input_tokens,
                                                c.cache_creation_1h_input_tokens,
                                                c.cache_read_input_tokens, c.output_tokens)
                           for c in mixed)
    assert summarize_calls(mixed)["cost_usd"] == ledger_micro_usd / 1_000_000
    assert summarize_calls(mixed)["billed_equivalent_input"] == round(
        1_000 + 0.1 * 2_000 + 1.25 * 300 + 2 * 100 + 7 + 0.1 * 3)
