"""The catalogue in the cached prompt and prices (issue 21): rendering and its bounds
(agent/catalogue.py), price parsing and display (storage/tenant_config.py), the admin API, its
OpenAPI document, the console's catalogue page, and what list_services returns."""

from collections.abc import Iterator
from datetime import date, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlmodel import select

from agent.catalogue import (
    CATALOGUE_CHARS,
    EXCEPTIONS_SHOWN,
    CatalogueData,
    catalogue_text,
    load,
)
from agent.tools.base import ToolContext
from agent.tools.scheduling import list_services
from bot.admin.api import ROUTES
from bot.admin.openapi import openapi_document
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.errors import TenantConfigError
from storage.models import HoursException, Professional, Service, Tenant
from storage.tenant_config import parse_price, price_text, validate_config
from tests.conftest import START
from tests.console_helpers import seed
from tests.factories import TENANT
from tests.test_admin_api import OPERATOR, OTHER, call, ids
from tests.test_console import Browser


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url,
                                    admin_token=OPERATOR)
    environment.add_tenant(TENANT)
    environment.add_tenant(OTHER)
    yield environment
    environment.close()


@pytest.fixture
def console(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    yield environment
    environment.close()


def _service(code: str, *, price: int | None = None, minimum: bool = False,
             description: str = "", name: str = "") -> Service:
    return Service(tenant_id=1, code=code, name=name or code.title(), duration_minutes=60,
                   price_cents=price, price_from=minimum, description=description)


def _data(services: list[Service], pros: list[Professional] | None = None,
          exceptions: list[HoursException] | None = None) -> CatalogueData:
    return CatalogueData(services, pros or [], {"mon": ["09:00-18:00"], "sat": ["09:00-13:00"]},
                         exceptions or [])


def test_the_catalogue_names_codes_prices_professionals_hours_and_exceptions() -> None:
    text = catalogue_text(_data(
        [_service("coloracao", price=18000, minimum=True, name="Coloração",
                  description="sem amônia\nsob pedido"),
         _service("corte", price=8000, name="Corte feminino"), _service("escova")],
        [Professional(tenant_id=1, code="julia", name="Júlia",
                      service_codes=["corte", "coloracao"])],
        [HoursException(tenant_id=1, day=date(2026, 6, 4), hours=[], note="Corpus Christi")]))
    assert "- coloracao: Coloração, 60 min, a partir de R$ 180,00 (sem amônia sob pedido)" in text
    assert "- corte: Corte feminino, 60 min, R$ 80,00" in text
    assert "- escova: Escova, 60 min, price not stated" in text
    assert "- julia: Júlia; does corte, coloracao" in text
    assert "Weekly opening hours: mon 09:00-18:00; tue-fri closed" in text
    assert "sat 09:00-13:00; sun closed" in text
    assert "Dates with other hours: 2026-06-04 closed (Corpus Christi)" in text
    assert catalogue_text(_data([])) == "", "no service: no catalogue"


def test_the_catalogue_is_bounded_and_says_what_it_left_out() -> None:
    services = [_service(f"s{n:03d}", price=n * 100, description="x" * 300, name="y" * 200)
                for n in range(200)]
    pros = [Professional(tenant_id=1, code=f"p{n:03d}", name="z" * 200,
                         service_codes=[s.code for s in services]) for n in range(100)]
    text = catalogue_text(_data(services, pros))
    assert len(text) <= CATALOGUE_CHARS
    assert "more services left out: list_services with a query finds them" in text
    assert "Weekly opening hours" in text, "the hours are never cut"


def test_exceptions_shown_are_the_coming_ones_within_the_horizon(env: ReplayEnvironment) -> None:
    today = START.date()
    with session_scope(env.engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        for offset in (-1, 0, 5, tenant.booking_horizon_days + 1):
            session.add(HoursException(tenant_id=1, day=today + timedelta(days=offset),
                                       hours=[], note=f"d{offset}"))
        session.add_all(HoursException(tenant_id=1, day=today + timedelta(days=10 + n),
                                       hours=["10:00-12:00"]) for n in range(40))
        session.flush()
        data = load(session, tenant, today)
        tomorrow = load(session, tenant, today + timedelta(days=1))
    notes = [e.note for e in data.exceptions]
    assert notes[:2] == ["d0", "d5"] and "d-1" not in notes
    assert len(data.exceptions) == EXCEPTIONS_SHOWN
    assert catalogue_text(data) != catalogue_text(tomorrow), "the daily rebuild drops d0"
    assert catalogue_text(data) == catalogue_text(load_again(env, today)), "stable within a day"


def load_again(env: ReplayEnvironment, today: date) -> CatalogueData:
    with session_scope(env.engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        return load(session, tenant, today)


@pytest.mark.parametrize(("typed", "cents"), [
    ("80", 8000), ("80,00", 8000), ("80,5", 8050), ("80.5", 8050), ("R$ 1.200,00", 120000),
    ("1200.00", 120000), ("0", 0), ("", None), ("  ", None)])
def test_prices_as_owners_type_them(typed: str, cents: int | None) -> None:
    assert parse_price(typed) == cents


@pytest.mark.parametrize("typed", ["-5", "80,555", "oitenta", "1e3", "80,00,00", "99999999"])
def test_what_is_not_a_price_is_refused_clearly(typed: str) -> None:
    with pytest.raises(TenantConfigError, match="price: "):
        parse_price(typed)


def test_prices_read_as_people_read_them() -> None:
    assert price_text(120050) == "R$ 1.200,50"
    assert price_text(8000, minimum=True) == "a partir de R$ 80,00"
    assert price_text(8000, "USD", minimum=True, language="en") == "from US$ 80.00"
    assert price_text(None) == ""


def test_tenant_files_validate_prices() -> None:
    good = validate_config({**TENANT, "currency": "BRL", "services": [
        {"code": "corte", "name": "Corte", "duration_minutes": 60, "price_cents": 8000,
         "price_from": True, "description": "com lavagem"}]})
    assert good.services is not None and good.services[0].price_cents == 8000
    with pytest.raises(TenantConfigError) as caught:
        validate_config({**TENANT, "currency": "real", "services": [
            {"code": "corte", "duration_minutes": 60, "price_cents": -1},
            {"code": "escova", "duration_minutes": 60, "price_from": True}]})
    problems = caught.value.problems
    assert any(p.startswith("currency:") for p in problems)
    assert any(p.startswith("services.0.price_cents:") for p in problems)
    assert any("price_from needs price_cents" in p for p in problems)


def test_the_admin_api_sets_and_shows_prices_and_documents_them(
        env: ReplayEnvironment) -> None:
    salon, _ = ids(env)
    base = f"/admin/tenants/{salon}"
    status, body = call(env, "PUT", base + "/services/corte",
                        {"price_cents": 8000, "price_from": True, "description": "com lavagem"})
    assert status == 200 and (body["price_cents"], body["price_from"], body["duration_minutes"],
                              body["description"]) == (8000, True, 60, "com lavagem")
    assert call(env, "PUT", base + "/services/corte", {"name": "Corte"})[1]["price_cents"] \
        == 8000, "a field left out keeps its value"
    status, body = call(env, "PUT", base + "/services/corte", {"price_cents": -3})
    assert status == 422 and any("price_cents" in p for p in body["error"]["problems"])
    kept = call(env, "PUT", base + "/services/corte", {"price_from": None,
                                                        "description": None})[1]
    assert (kept["price_from"], kept["description"]) == (True, "com lavagem"), "null keeps"
    cleared = call(env, "PUT", base + "/services/corte", {"price_cents": None})[1]
    assert (cleared["price_cents"], cleared["price_from"]) == (None, False)
    schemas = openapi_document(ROUTES)["components"]["schemas"]
    assert "price_cents" in schemas["ServiceBody"]["properties"]
    assert "price_from" in schemas["ServiceSpec"]["properties"]


def test_the_console_catalogue_page_sets_and_shows_prices(console: ReplayEnvironment) -> None:
    seeded = seed(console)
    browser = Browser(console.web_url)
    browser.sign_in(seeded.salon_token)
    status, _, _ = browser.request("/console/catalog/services", {
        "csrf": browser.csrf, "code": "corte", "duration_minutes": "60", "price": "80,00",
        "price_from": "1", "description": "com lavagem"})
    assert status == 303
    page = browser.request("/console/catalog")[1]
    assert "a partir de R$ 80,00" in page and "com lavagem" in page
    status, _, _ = browser.request("/console/catalog/services", {
        "csrf": browser.csrf, "code": "corte", "duration_minutes": "60", "price": "oitenta"})
    page = browser.request("/console/catalog")[1]
    # the Portuguese page says the problem in Portuguese (bot/console/settings_texts.py)
    assert "não é um valor (ex.: 50 ou 50,00)" in page and "a partir de R$ 80,00" in page, \
        "nothing lost"


def test_list_services_names_professional_codes_and_prices(env: ReplayEnvironment) -> None:
    ctx = ToolContext(engine=env.engine, tenant_id=1, contact_id=0, conversation_id=0,
                      timezone=ZoneInfo("America/Sao_Paulo"), now=START, tool_use_id="t-ls")
    with session_scope(env.engine) as session:
        service = session.exec(select(Service)).first()
        assert service is not None
        service.price_cents = 8000
        session.add(service)
        session.flush()
        text = list_services(session, ctx, {})
    assert "- corte: Corte feminino, 60 min, R$ 80,00 (with julia (Júlia))" in text
