"""The cost ledger under hostile input (issue 49, the breaker's pass): status webhooks whose
`pricing` is missing, null, of the wrong types, huge or on a `failed` status; a status of one
tenant's wamid arriving on another tenant's number; and the admin API's `from`/`to` at the
ends of the calendar. Expect: 200, nothing lost, no 500, no charge to the wrong tenant."""

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlmodel import select
from structlog.testing import capture_logs

from intake.failures import retry_on_conflict
from intake.statuses import store_statuses
from operations.costs import usd_cents
from replay.environment import ReplayEnvironment
from storage.db import create_schema, make_engine, session_scope
from storage.errors import TenantConfigError
from storage.models import Outbound, Usage, WhatsAppCharge
from storage.tenant_config import MAX_PRICE_CENTS, parse_price
from storage.tenants import upsert_tenant
from tests.factories import TENANT, text_body
from tests.test_costs import (
    OTHER,
    _get,
    _pricing,
    _scrape,
    _status_body,
    _tenant_ids,
    admin_env,
)
from usage.ledger import model_cost_micro_usd, tenant_costs, totals
from whatsapp.inbound import StatusUpdate
from whatsapp.rate_card import Pricing, RateCardError, parse_rate_card

__all__ = ["admin_env"]  # the fixture, imported for the tests below

DAY = datetime(2026, 12, 7, 15, tzinfo=UTC)


def _charges(env: ReplayEnvironment) -> dict[tuple[int, str], WhatsAppCharge]:
    with session_scope(env.engine) as session:
        return {(c.tenant_id, c.wamid): c for c in session.exec(select(WhatsAppCharge))}


def test_odd_pricing_objects_are_stored_without_a_500(env: ReplayEnvironment) -> None:
    phone = TENANT["phone_number_id"]
    odd: list[tuple[str, Any]] = [
        ("wamid.null", None),
        ("wamid.list", ["billable", True]),
        ("wamid.yes", {"billable": "yes", "pricing_model": "PMP", "category": "utility",
                       "type": "regular"}),
        ("wamid.42", {"billable": True, "pricing_model": 7, "category": 42, "type": []}),
        ("wamid.huge", {"billable": True, "pricing_model": "P" * 5000,
                        "category": "ütïlïty🙂" * 400, "type": "\u0000regular" * 100}),
        ("wamid.unknown", _pricing("surprise_category")),
    ]
    with capture_logs() as logs:
        for wamid, pricing in odd:
            body = json.loads(_status_body(phone, wamid, "sent", DAY, _pricing("utility")))
            body["entry"][0]["changes"][0]["value"]["statuses"][0]["pricing"] = pricing
            assert env.post_webhook(json.dumps(body).encode()) == 200, wamid
    charges = _charges(env)
    mine = next(iter(charges))[0]
    missing = [e for e in logs if e["event"] == "whatsapp_rate_missing"]
    assert len(missing) == 3 and all(len(e["category"]) <= 32 for e in missing)  # no flood
    assert (mine, "wamid.null") not in charges and (mine, "wamid.list") not in charges
    # billable "yes" is not a bool: unknown, billed at the card as Meta bills by default
    assert charges[(mine, "wamid.yes")].micro_usd == 6800
    assert charges[(mine, "wamid.42")].category == "42"
    huge = charges[(mine, "wamid.huge")]
    assert len(huge.category) <= 32 and len(huge.pricing_model) <= 16
    assert charges[(mine, "wamid.unknown")].micro_usd == 0  # no rate on the card: logged


def test_a_failed_status_with_a_pricing_charges_nothing(env: ReplayEnvironment) -> None:
    phone = TENANT["phone_number_id"]
    assert env.post_webhook(_status_body(phone, "wamid.F", "failed", DAY,
                                         _pricing("marketing"))) == 200
    assert _charges(env) == {}


def test_a_wamid_of_one_tenant_on_anothers_number_is_not_charged_to_it(
        admin_env: ReplayEnvironment) -> None:
    env = admin_env
    mine, other = _tenant_ids(env)
    env.messages_api.script("turn", [{"text": "Olá! Temos horário amanhã."}])
    assert env.post_webhook(json.dumps(text_body("Oi", 1, sent_at=env.clock.now())).encode()) \
        == 200
    env.drain()
    with session_scope(env.engine) as session:
        wamid = next(o.wamid for o in session.exec(select(Outbound)) if o.wamid)
    at = env.clock.now()
    assert env.post_webhook(_status_body(OTHER["phone_number_id"], wamid, "sent", at,
                                         _pricing("marketing"))) == 200
    assert (other, wamid) not in _charges(env)
    assert env.post_webhook(_status_body(TENANT["phone_number_id"], wamid, "sent", at,
                                         _pricing("service"))) == 200
    assert _charges(env)[(mine, wamid)].category == "service"


def test_the_cost_range_at_the_ends_of_the_calendar_is_a_422_not_a_500(
        admin_env: ReplayEnvironment) -> None:
    mine = _tenant_ids(admin_env)[0]
    for query in ("from=9999-12-31&to=9999-12-31", "to=9999-12-31", "from=9999-12-31",
                  "from=0001-01-01&to=0001-01-01", "from=2026-13-01", "from=garbage",
                  "from=2026-12-07&to=2025-12-06", "from=2025-01-01&to=2026-12-31",
                  "bogus=1"):
        status, _ = _get(admin_env, f"/admin/tenants/{mine}/costs?{query}")
        assert status == 422, query
    status, report = _get(admin_env, f"/admin/tenants/{mine}/costs?from=2025-12-08&to=2026-12-08")
    assert status == 200 and len(report["days"]) == 366


def test_the_same_status_fifty_times_at_once_charges_once(env: ReplayEnvironment) -> None:
    status = StatusUpdate(phone_number_id=TENANT["phone_number_id"], wamid="wamid.BURST",
                          status="sent", timestamp=DAY, recipient_id="5511999990001",
                          recipient_user_id=None, error_code=None, error_reason=None,
                          pricing=Pricing(True, "PMP", "utility", "regular"))
    order = [replace(status, status=s) for s in ("read", "delivered", "sent")] * 17
    with ThreadPoolExecutor(max_workers=10) as pool:
        outcomes = list(pool.map(
            lambda s: retry_on_conflict(lambda: store_statuses(env.engine, [s], DAY), "Status"),
            order[:50]))
    assert len(outcomes) == 50
    assert [(c.category, c.micro_usd) for c in _charges(env).values()] == [("utility", 6800)]


ZONES = ("America/New_York", "Europe/Lisbon", "Asia/Kolkata", "America/Sao_Paulo")
CALLS = st.lists(st.tuples(
    st.integers(0, 400 * 24 * 60),  # minutes after 2026-01-01 00:00 UTC: DST changes inside
    st.sampled_from(("turn", "summary", "compaction", "facts", "odd")),
    st.sampled_from(("claude-haiku-4-5", "claude-sonnet-5-5", "claude-opus-5")),
    st.tuples(*[st.integers(0, 2_000_000)] * 3, st.integers(0, 2_000_000),
              st.integers(0, 200_000))), max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(zone=st.sampled_from(ZONES), calls=CALLS)
def test_day_sums_equal_the_calls_in_any_zone(tmp_path_factory: pytest.TempPathFactory,
                                              zone: str, calls: list[Any]) -> None:
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('ledger')}/l.db")
    create_schema(engine)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    expected: dict[date, int] = {}
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, {"phone_number_id": "1", "name": "X", "timezone": zone},
                               now=base)
        tenant_id = int(tenant.id or 0)
        for minutes, purpose, model, tokens in calls:
            writes, one_hour = sorted(tokens[1:3], reverse=True)
            usage = (tokens[0], writes, one_hour, tokens[3], tokens[4])
            at = base + timedelta(minutes=minutes)
            cost = model_cost_micro_usd(model, *usage)
            session.add(Usage(tenant_id=tenant_id, purpose=purpose, model=model,
                              input_tokens=usage[0], cache_creation_input_tokens=usage[1],
                              cache_creation_1h_input_tokens=usage[2],
                              cache_read_input_tokens=usage[3], output_tokens=usage[4],
                              micro_usd=cost, created_at=at))
            day = at.astimezone(ZoneInfo(zone)).date()
            expected[day] = expected.get(day, 0) + cost
    days = tenant_costs(engine, tenant_id, date(2025, 12, 31), date(2027, 2, 10))
    assert {d.day: d.model_total for d in days if d.model_calls} == expected
    assert totals(days).total == sum(expected.values())
    assert sum(d.model_calls for d in days) == len(calls)
    cents = usd_cents(totals(days).total)
    assert Decimal(cents) == (Decimal(sum(expected.values())) / 1_000_000).quantize(
        Decimal("0.01"), rounding=ROUND_HALF_UP)
    engine.dispose()


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
       | st.from_regex(r"\A(R\$ ?)?[0-9.,²٥]{1,10}\Z"))
def test_any_typed_amount_is_cents_or_a_clear_error(typed: str) -> None:
    """The console's budget field (and a service price) as an owner types it: an amount in
    [0, MAX_PRICE_CENTS] or TenantConfigError, never another exception (a 500)."""
    try:
        cents = parse_price(typed)
    except TenantConfigError:
        return
    assert cents is None or 0 <= cents <= MAX_PRICE_CENTS


def test_a_rate_card_typo_is_refused_at_load_not_at_every_status() -> None:
    """A rate the `whatsapp_charge` columns (32-bit integers on PostgreSQL) cannot hold would
    refuse every charge's transaction, and dead-letter every priced status: refused at load."""
    card = {"fallback_market": "BR", "rates": [
        {"market": "BR", "category": "utility", "from": "2025-07-01", "usd": "0.0068"}]}
    for usd in ("6800", "-0.0068", "NaN", "Infinity", True, None, "0.00000001"):
        bad = {**card, "rates": [{**card["rates"][0], "usd": usd}]}
        with pytest.raises(RateCardError, match=r"rates\[0\]"):
            parse_rate_card(bad)
    with pytest.raises(RateCardError, match="fallback_market"):
        parse_rate_card({**card, "fallback_market": "US"})  # no rates for the fallback: refused
    overlapping = {**card, "rates": [*card["rates"], {**card["rates"][0], "usd": "0.007"}]}
    with pytest.raises(RateCardError, match="twice"):
        parse_rate_card(overlapping)


def test_a_wamid_too_long_for_the_ledger_loses_nothing_else(env: ReplayEnvironment) -> None:
    """A priced status whose wamid is longer than `whatsapp_charge.wamid` (128) must not
    refuse its POST's transaction: the other status's charge and its counter are kept, and
    nothing is dead-lettered."""
    body = json.loads(_status_body(TENANT["phone_number_id"], "wamid.OK", "sent", DAY,
                                   _pricing("utility")))
    statuses = body["entry"][0]["changes"][0]["value"]["statuses"]
    statuses.append({**statuses[0], "id": "wamid." + "L" * 300})
    with capture_logs() as logs:
        assert env.post_webhook(json.dumps(body).encode()) == 200
    assert [(w, c.micro_usd) for (_, w), c in _charges(env).items()] == [("wamid.OK", 6800)]
    assert not [e for e in logs if "dead" in e["event"]], logs
    assert _scrape(env, "wagent_whatsapp_cost_micro_usd_total") == {
        '{"category": "utility"}': 6800}
