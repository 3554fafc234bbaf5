"""The cost ledger end to end (issue 49): a scripted day of known usage rows and known
pricing status webhooks, through the real webhook and intake path, gives the hand-computed
totals to the µUSD; duplicate statuses charge once; two tenants sharing the web and workers
never see each other's costs; the local day is São Paulo's; the rate card's dates apply."""

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlmodel import select

from operations.costs import cost_block, usd_cents, usd_fine
from replay.environment import ReplayEnvironment
from storage.db import make_engine, session_scope
from storage.models import Tenant, Usage, WhatsAppCharge
from storage.tenants import upsert_tenant
from tests.conftest import START
from tests.factories import TENANT, text_body
from usage.ledger import model_cost_micro_usd, month_model_micro_usd, tenant_costs, totals
from whatsapp.rate_card import Pricing, RateCardError, load_rate_card, parse_rate_card

FIXTURE = Path(__file__).parent / "fixtures" / "whatsapp" / "status_sent.json"
OTHER = {**TENANT, "phone_number_id": "109876543210999", "name": "Oficina Outra"}


def _status_body(phone_number_id: str, wamid: str, status: str, at: datetime,
                 pricing: dict[str, Any] | None, recipient: str = "5511999990001") -> bytes:
    body = copy.deepcopy(json.loads(FIXTURE.read_text()))
    value = body["entry"][0]["changes"][0]["value"]
    value["metadata"]["phone_number_id"] = phone_number_id
    item = value["statuses"][0]
    item.update(id=wamid, status=status, timestamp=str(int(at.timestamp())),
                recipient_id=recipient)
    value["contacts"][0]["wa_id"] = recipient
    if pricing is None:
        item.pop("pricing")
    else:
        item["pricing"] = pricing
    return json.dumps(body).encode()


def _pricing(category: str, kind: str = "regular", billable: bool = True) -> dict[str, Any]:
    return {"billable": billable, "pricing_model": "PMP", "type": kind, "category": category}


def _usage(env: ReplayEnvironment, tenant_id: int, at: datetime, purpose: str, model: str,
           tokens: tuple[int, int, int, int, int]) -> None:
    with session_scope(env.engine) as session:
        session.add(Usage(tenant_id=tenant_id, purpose=purpose, model=model,
                          input_tokens=tokens[0], cache_creation_input_tokens=tokens[1],
                          cache_creation_1h_input_tokens=tokens[2],
                          cache_read_input_tokens=tokens[3], output_tokens=tokens[4],
                          micro_usd=model_cost_micro_usd(model, *tokens), created_at=at))


def _scrape(env: ReplayEnvironment, name: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{env.web_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {json.dumps(s.labels, sort_keys=True): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name}


def _tenant_ids(env: ReplayEnvironment) -> tuple[int, int]:
    with session_scope(env.engine) as session:
        ids = dict(session.exec(select(Tenant.phone_number_id, Tenant.id)).all())
    return int(ids[TENANT["phone_number_id"]] or 0), int(ids[OTHER["phone_number_id"]] or 0)


def test_a_scripted_day_matches_the_hand_computation(env: ReplayEnvironment) -> None:
    env.add_tenant(OTHER)
    mine, other = _tenant_ids(env)
    day = datetime(2026, 12, 7, 15, tzinfo=UTC)  # Monday 12:00 in São Paulo
    # model calls: (input, all cache writes, of which 1-hour, cache reads, output)
    _usage(env, mine, day, "turn", "claude-sonnet-5-5", (200, 4000, 4000, 0, 150))
    _usage(env, mine, day, "turn", "claude-sonnet-5-5", (120, 300, 0, 4000, 80))
    _usage(env, mine, day, "compaction", "claude-haiku-4-5", (6000, 0, 0, 0, 400))
    _usage(env, mine, day, "facts", "claude-haiku-4-5", (1500, 0, 0, 0, 90))
    # 23:30 local (02:30 UTC the next day) is still Dec 7 in São Paulo
    _usage(env, mine, datetime(2026, 12, 8, 2, 30, tzinfo=UTC), "summary",
           "claude-haiku-4-5", (1000, 0, 0, 0, 100))
    _usage(env, other, day, "turn", "claude-opus-5", (1000, 0, 0, 0, 1000))  # not mine
    phone = TENANT["phone_number_id"]
    posts = [
        ("wamid.A", "sent", _pricing("service")),      # a service reply (billed since 10-01)
        ("wamid.A", "delivered", _pricing("service")),  # the same pricing again: once
        ("wamid.A", "read", None),
        ("wamid.B", "sent", _pricing("service")),
        ("wamid.B", "sent", _pricing("service")),       # Meta's redelivery: once
        ("wamid.C", "sent", _pricing("utility")),
        ("wamid.D", "sent", _pricing("marketing")),
        ("wamid.E", "sent", _pricing("marketing", "free_entry_point")),  # free
        ("wamid.F", "sent", _pricing("service", "free_customer_service", billable=False)),
    ]
    for wamid, status, pricing in posts:
        assert env.post_webhook(_status_body(phone, wamid, status, day, pricing)) == 200
    # a recipient of a market not on the card (49: Germany): the fallback market's rate, BR
    assert env.post_webhook(_status_body(phone, "wamid.G", "sent", day, _pricing("marketing"),
                                         recipient="4915112345678")) == 200
    # 00:00 local on Dec 8 (03:00 UTC): the next local day
    assert env.post_webhook(_status_body(phone, "wamid.H", "sent",
                                         datetime(2026, 12, 8, 3, tzinfo=UTC),
                                         _pricing("utility"))) == 200
    assert env.post_webhook(_status_body(OTHER["phone_number_id"], "wamid.A", "sent", day,
                                         _pricing("marketing"))) == 200  # same wamid, other
    days = tenant_costs(env.engine, mine, date(2026, 12, 7), date(2026, 12, 9))
    # Hand computation, µUSD (USD per MTok = µUSD per token):
    # turn 1  sonnet 3*(200 + 2*4000) + 15*150            = 24,600 + 2,250 = 26,850
    # turn 2  sonnet 3*(120 + 1.25*300 + 0.1*4000) + 15*80 = 2,685 + 1,200 =  3,885
    # compaction haiku 1*6000 + 5*400                                      =  8,000
    # facts      haiku 1*1500 + 5*90                                       =  1,950
    # summary    haiku 1*1000 + 5*100 (23:30 local)                        =  1,500
    # WhatsApp BR: service 0.0068 × 2 (A, B) = 13,600; utility 0.0068 (C) = 6,800;
    # marketing 0.0625 × 2 (D; G at the fallback) = 125,000; E, F free = 0
    assert days[0].model_micro_usd == {"turn": 30_735, "summary": 1_500, "compaction": 8_000,
                                       "facts": 1_950, "other": 0}
    assert days[0].whatsapp_micro_usd == {"service": 13_600, "utility": 6_800,
                                          "marketing": 125_000}
    assert (days[0].model_calls, days[0].whatsapp_messages, days[0].billed_messages) == (
        5, 7, 5)
    assert days[0].total == 187_585  # 42,185 + 145,400 = $0.187585 → $0.19 to the cent
    assert days[1].whatsapp_micro_usd == {"utility": 6_800} and days[1].model_total == 0
    assert totals(days).total == 194_385
    theirs = tenant_costs(env.engine, other, date(2026, 12, 7), date(2026, 12, 9))
    assert theirs[0].model_micro_usd["turn"] == 5 * 1000 + 25 * 1000  # opus: 30,000
    assert theirs[0].whatsapp_micro_usd == {"marketing": 62_500}
    assert month_model_micro_usd(env.engine, mine, date(2026, 12, 1)) == 42_185
    with session_scope(env.engine) as session:
        charges = {(c.tenant_id, c.wamid): c for c in session.exec(select(WhatsAppCharge))}
    assert len(charges) == 9  # A to H, and the other tenant's A
    assert charges[(mine, "wamid.G")].market == "BR"
    assert (charges[(mine, "wamid.E")].rate_micro_usd, charges[(mine, "wamid.E")].micro_usd) \
        == (62_500, 0)
    whatsapp = _scrape(env, "wagent_whatsapp_cost_micro_usd_total")
    assert whatsapp['{"category": "marketing"}'] == 187_500
    assert whatsapp['{"category": "service"}'] == 13_600


CARD = {"fallback_market": "BR", "calling_codes": {"55": "BR", "1": "US"}, "rates": [
    {"market": "BR", "category": "service", "from": "2025-07-01", "usd": "0"},
    {"market": "BR", "category": "service", "from": "2026-10-01", "usd": "0.0068"},
    {"market": "US", "category": "marketing", "from": "2025-07-01", "usd": 0.025}]}


def test_rate_card_dates_markets_and_the_bundled_card() -> None:
    card = parse_rate_card(CARD)
    service = Pricing(True, "PMP", "service", "regular")
    assert card.charge(service, "BR", date(2026, 9, 30)).micro_usd == 0
    assert card.charge(service, "BR", date(2026, 10, 1)).micro_usd == 6_800
    assert card.rate("BR", "service", date(2025, 6, 30)) is None  # before any entry
    assert card.market_of("5511999990001", None) == "BR"
    assert card.market_of("14155550100", None) == "US"
    assert card.market_of(None, "BR.9000000000000000001") == "BR"
    assert card.market_of("4915112345678", None) is None
    unknown = card.charge(service, None, date(2026, 12, 1))
    assert (unknown.market, unknown.market_known, unknown.micro_usd) == ("BR", False, 6_800)
    bundled = load_rate_card(None)
    day = date(2026, 12, 7)
    assert [bundled.rate("BR", c, day) for c in ("marketing", "utility", "authentication",
                                                 "service")] == [62_500, 6_800, 6_800, 6_800]
    assert bundled.rate("BR", "service", date(2026, 9, 30)) == 0


@pytest.mark.parametrize(("change", "error"), [
    ({"rates": "x"}, "a list `rates`"),
    ({"fallback_market": "AR"}, "`fallback_market` must name a market"),
    ({"calling_codes": {"+55": "BR"}}, "`calling_codes` maps digits"),
    ({"rates": [{"market": "BR", "category": "utility", "from": "1/10/2026", "usd": "1"}]},
     "rates[0]: `from` must be a date"),
    ({"rates": [{"market": "BR", "category": "utility", "from": "2026-10-01",
                 "usd": "0.00000001"}]}, "at most 6 decimals"),
    ({"rates": [{"market": "BR", "category": "utility", "from": "2026-10-01", "usd": "-1"}]},
     ">= 0"),
    ({"rates": [{"market": "BR", "category": "utility", "from": "2026-10-01", "usd": "x"}]},
     "`usd` must be a decimal"),
    ({"rates": [{"market": "BR", "category": "utility", "from": "2026-10-01", "usd": "1"}] * 2},
     "from 2026-10-01 twice"),
])
def test_a_bad_rate_card_is_refused_with_the_entry_named(
        change: dict[str, Any], error: str) -> None:
    with pytest.raises(RateCardError) as caught:
        parse_rate_card({**CARD, **change}, "card.json")
    assert error in str(caught.value) and "card.json" in str(caught.value)


def test_a_missing_or_broken_rate_card_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RateCardError, match="rate card .*nope.json"):
        load_rate_card(tmp_path / "nope.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(RateCardError, match="broken.json"):
        load_rate_card(broken)


OPERATOR = "operator-token-for-tests"


@pytest.fixture
def admin_env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url,
                                    admin_token=OPERATOR)
    environment.add_tenant(TENANT)
    environment.add_tenant(OTHER)
    yield environment
    environment.close()


def _get(env: ReplayEnvironment, path: str, token: str = OPERATOR) -> tuple[int, Any]:
    request = urllib.request.Request(env.web_url + path)
    request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_a_real_turn_is_priced_at_record_time_and_every_door_shows_it(
        admin_env: ReplayEnvironment) -> None:
    env = admin_env
    mine, other = _tenant_ids(env)
    env.messages_api.script("turn", [{"text": "Olá! Temos horário amanhã."}])
    assert env.post_webhook(json.dumps(text_body("Oi", 1, sent_at=env.clock.now())).encode()) \
        == 200
    env.drain()
    with session_scope(env.engine) as session:
        rows = list(session.exec(select(Usage).where(Usage.tenant_id == mine)))
    assert rows and all(r.micro_usd == model_cost_micro_usd(
        r.model, r.input_tokens, r.cache_creation_input_tokens, r.cache_creation_1h_input_tokens,
        r.cache_read_input_tokens, r.output_tokens) > 0 for r in rows)
    spent = sum(r.micro_usd for r in rows)
    counted = _scrape(env, "wagent_model_cost_micro_usd_total")
    assert sum(counted.values()) == spent
    assert all('"tenant' not in labels for labels in counted)  # no tenant label
    day = START.astimezone(ZoneInfo(TENANT["timezone"])).date().isoformat()
    status, report = _get(env, f"/admin/tenants/{mine}/costs?from={day}&to={day}")
    assert status == 200 and report["total"]["model_total"] == spent
    assert report["days"][0]["day"] == day and report["days"][0]["model_calls"] == len(rows)
    status, theirs = _get(env, f"/admin/tenants/{other}/costs?from={day}&to={day}")
    assert status == 200 and theirs["total"]["total"] == 0  # one tenant's usage only
    status, created = _post_token(env, other)
    assert _get(env, f"/admin/tenants/{mine}/costs", token=created)[0] == 404
    assert _get(env, f"/admin/tenants/{mine}/costs?from=2026-06-02&to=2026-06-01")[0] == 422
    with session_scope(env.engine) as session:
        tenant = session.get(Tenant, mine)
        assert tenant is not None
        block = cost_block(session, tenant, now=env.clock.now())
    assert block["month_to_date"]["model_micro_usd"] == spent == block["today_costs"][
        "total_micro_usd"] and block["month"] == "2026-06"


def _post_token(env: ReplayEnvironment, tenant_id: int) -> tuple[int, str]:
    request = urllib.request.Request(f"{env.web_url}/admin/tenants/{tenant_id}/tokens",
                                     data=json.dumps({"label": "t"}).encode(), method="POST")
    request.add_header("Authorization", f"Bearer {OPERATOR}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, str(json.loads(response.read())["token"])


@pytest.mark.parametrize(("micro_usd", "fine", "cents"), [
    (16_302, "0.0163", "0.02"), (50, "0.0001", "0.00"), (49, "0.0000", "0.00"),
    (1_234_550, "1.2346", "1.23"), (0, "0.0000", "0.00"), (-16_302, "-0.0163", None)])
def test_usd_fine_rounds_halves_up_to_a_ten_thousandth_as_cents_of_does_to_the_cent(
        micro_usd: int, fine: str, cents: str | None) -> None:
    assert usd_fine(micro_usd) == fine
    if cents is not None:
        assert usd_cents(micro_usd) == cents


def test_wagent_costs_prints_a_tenants_days_and_every_tenants_totals(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main

    url = f"sqlite:///{tmp_path}/wagent.db"
    monkeypatch.setenv("DATABASE_URL", url)
    assert main(["db", "upgrade"]) == 0
    capsys.readouterr()
    with session_scope(make_engine(url)) as session:
        tenant = upsert_tenant(session, {"phone_number_id": "1", "name": "X"},
                               now=datetime(2026, 12, 1, tzinfo=UTC))
        session.add(Usage(tenant_id=tenant.id, purpose="compaction", model="claude-haiku-4-5",
                          input_tokens=6000, output_tokens=400, micro_usd=8000,
                          created_at=datetime(2026, 12, 7, 15, tzinfo=UTC)))
    assert main(["costs", "--tenant", "1", "--from", "2026-12-07", "--to", "2026-12-08",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [d["model_micro_usd"]["compaction"] for d in report["days"]] == [8000, 0]
    assert report["total"]["usd"] == "0.01"
    assert main(["costs", "--from", "2026-12-07", "--to", "2026-12-07"]) == 0
    out = capsys.readouterr().out
    assert ("total US$ 0.01 · model US$ 0.0080 in 1 call · WhatsApp US$ 0.0000 for 0 billed "
            "messages") in out  # one unit for money on the line (the table keeps exact µUSD)
    assert main(["costs", "--tenant", "1", "--from", "2026-12-07", "--to", "2026-12-07"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1] == "µUSD per local day (1 µUSD = US$ 0.000001)"  # the table's unit
    assert table[3].split() == ["2026-12-07", "0", "0", "8000", "0", "0", "0", "8000"]
    assert main(["costs", "--tenant", "9"]) == 2
    assert "no tenant with phone_number_id 9" in capsys.readouterr().err
    assert main(["costs", "--from", "2026-12-08", "--to", "2026-12-07"]) == 2
    assert "`to` is before `from`" in capsys.readouterr().err


def test_sent_and_delivered_of_one_wamid_in_one_post_charge_once(env: ReplayEnvironment) -> None:
    day = datetime(2026, 12, 7, 15, tzinfo=UTC)
    body = json.loads(_status_body(TENANT["phone_number_id"], "wamid.X", "sent", day,
                                   _pricing("utility")))
    statuses = body["entry"][0]["changes"][0]["value"]["statuses"]
    statuses.append({**statuses[0], "status": "delivered"})
    assert env.post_webhook(json.dumps(body).encode()) == 200
    assert env.post_webhook(json.dumps(body).encode()) == 200  # and Meta's redelivery of it
    with session_scope(env.engine) as session:
        charges = list(session.exec(select(WhatsAppCharge)))
    assert [(c.wamid, c.category, c.micro_usd) for c in charges] == [("wamid.X", "utility", 6800)]
    assert _scrape(env, "wagent_whatsapp_cost_micro_usd_total") == {
        '{"category": "utility"}': 6800}
