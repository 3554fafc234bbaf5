"""The catalogue's and settings' typed changes (operations/catalogue.py, operations/settings.py),
the one home the admin API, the console and the CLI call: what a change leaves out is kept, a
cleared price takes its minimum flag with it, a code is judged before anything else."""

from datetime import UTC, date, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine
from sqlmodel import Session

from operations import catalogue as catalogue_ops
from operations import settings as settings_ops
from operations.errors import Invalid
from storage.errors import TenantConfigError
from storage.models import Tenant
from tests.factories import TENANT

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


def _tenant(session: Session) -> Tenant:
    return settings_ops.apply_config(session, dict(TENANT), now=NOW)


def test_a_service_change_keeps_what_it_leaves_out_and_a_cleared_price_drops_its_minimum(
        engine: Engine) -> None:
    with Session(engine) as session:
        tenant = _tenant(session)
        change = catalogue_ops.ServiceChange(code="barba", name="Barba", duration_minutes=30,
                                             price_cents=4500, price_from=True,
                                             description="com  toalha\nquente")
        row, created = catalogue_ops.save_service(session, tenant, change)
        assert created and row.price_cents == 4500 and row.price_from
        renamed, created = catalogue_ops.save_service(
            session, tenant, catalogue_ops.ServiceChange(code="barba", name="Barba completa"))
        assert not created
        assert (renamed.name, renamed.duration_minutes, renamed.price_cents,
                renamed.price_from, renamed.description) == (
            "Barba completa", 30, 4500, True, "com toalha quente")
        cleared, _ = catalogue_ops.save_service(
            session, tenant, catalogue_ops.ServiceChange(code="barba", price_cents=None))
        assert (cleared.price_cents, cleared.price_from) == (None, False)
        assert catalogue_ops.service_view(cleared)["name"] == "Barba completa"


def test_a_code_that_cannot_be_one_is_said_alone_before_the_missing_duration(
        engine: Engine) -> None:
    with Session(engine) as session:
        tenant = _tenant(session)
        with pytest.raises(Invalid) as bad_code:
            catalogue_ops.save_service(session, tenant, catalogue_ops.ServiceChange(code="a b"))
        assert [p.split(":")[0] for p in bad_code.value.problems] == ["code"]
        with pytest.raises(TenantConfigError, match="duration_minutes: required"):
            catalogue_ops.save_service(session, tenant, catalogue_ops.ServiceChange(code="ab"))


def test_a_professional_change_names_a_key_that_is_not_of_a_week(engine: Engine) -> None:
    with Session(engine) as session:
        tenant = _tenant(session)
        with pytest.raises(Invalid, match="unknown key\\(s\\) shifts"):
            catalogue_ops.save_professional(
                session, tenant, catalogue_ops.ProfessionalChange(
                    code="julia", week={"shifts": []}), now=NOW)
        row, created = catalogue_ops.save_professional(
            session, tenant, catalogue_ops.ProfessionalChange(
                code="julia", week={"hours": {"mon": ["10:00-12:00"]}}), now=NOW)
        assert not created and row.service_codes == ["corte"]  # services left out: kept
        assert catalogue_ops.professional_view(row)["hours"] == {"mon": ["10:00-12:00"]}


def test_hours_and_a_holiday_go_through_their_changes(engine: Engine) -> None:
    with Session(engine) as session:
        tenant = _tenant(session)
        week = catalogue_ops.set_opening_hours(session, tenant, catalogue_ops.OpeningHoursChange(
            {"fri": ("13:00-18:00", "09:00-12:00")}))
        assert week == {"fri": ["09:00-12:00", "13:00-18:00"]}
        view, created = catalogue_ops.save_hours_exception(
            session, tenant, catalogue_ops.HoursExceptionChange(day="2026-12-25", note="Natal"))
        assert created and view == {"day": "2026-12-25", "hours": [], "note": "Natal"}
        with pytest.raises(Invalid) as no_day:
            catalogue_ops.save_hours_exception(session, tenant,
                                               catalogue_ops.HoursExceptionChange(day=None))
        assert no_day.value.problems[0].startswith("day:")
        catalogue_ops.remove_hours_exception(session, tenant, date(2026, 12, 25))
        with pytest.raises(LookupError):
            catalogue_ops.remove_hours_exception(session, tenant, date(2026, 12, 25))


def test_a_settings_change_names_every_problem_and_applies_only_what_it_gives(
        engine: Engine) -> None:
    with Session(engine) as session:
        tenant = _tenant(session)
        with pytest.raises(Invalid) as caught:
            settings_ops.settings_change({"keep_messages": -1, "timezone": "Mars/Base"})
        assert sorted(p.split(":")[0] for p in caught.value.problems) == [
            "keep_messages", "timezone"]
        before = tenant.inactivity_timeout_minutes
        settings_ops.apply_settings(session, tenant,
                                    settings_ops.settings_change({"retention_days": 30}))
        assert (tenant.retention_days, tenant.inactivity_timeout_minutes) == (30, before)


OPTIONAL = {"price_from": st.none() | st.booleans(),
            "description": st.none() | st.text(max_size=5),
            "buffer_minutes": st.none() | st.integers(0, 240)}


@given(price=st.just(catalogue_ops.KEEP) | st.none() | st.integers(0, 10_000),
       fields=st.fixed_dictionaries({}, optional=OPTIONAL))
def test_a_change_gives_exactly_the_fields_it_names(price: object,
                                                     fields: dict[str, object]) -> None:
    change = catalogue_ops.ServiceChange(code="x", price_cents=price, **fields)  # type: ignore[arg-type]
    expected = {k: v for k, v in fields.items() if v is not None}
    if price is not catalogue_ops.KEEP:
        expected["price_cents"] = price
    assert change.given() == expected


# -- what a breaker trial found: a refusal names the fault and nothing is lost -------------

def _view(session: Session, tenant: Tenant) -> dict[str, object]:
    return catalogue_ops.catalogue_view(session, tenant)


@pytest.mark.parametrize(("body", "named"), [
    ({"professionals": [{"code": "julia", "services": ["corte"]},
                        {"code": "julia", "services": []}]}, "professionals: code given more "
                                                               "than once (case ignored): julia"),
    ({"services": [{"code": "corte", "duration_minutes": 60},
                   {"code": "corte", "duration_minutes": 30}]}, "services: code given more "
                                                                "than once (case ignored): corte"),
    ({"services": [{"code": "corte", "duration_minutes": 60},
                   {"code": "Corte", "duration_minutes": 30}]}, "(case ignored): Corte, corte"),
    ({"hours_exceptions": [{"day": "2026-11-20", "hours": ["09:00-12:00"]},
                           {"day": "2026-11-20"}]}, "more than one exception on 2026-11-20"),
    ({"services": [{"code": "corte", "name": " ", "duration_minutes": 60}]},
     "services.0.name: must not be blank"),
])
def test_a_replaced_catalogue_refuses_what_it_would_collapse_and_keeps_the_old_one(
        engine: Engine, body: dict[str, object], named: str) -> None:
    with Session(engine) as session:
        tenant = _tenant(session)
        before = _view(session, tenant)
        with pytest.raises(TenantConfigError) as refused:
            catalogue_ops.replace_catalogue(session, tenant, body, now=NOW)
        assert any(named in p for p in refused.value.args), refused.value.args
        assert _view(session, tenant) == before


def test_a_code_differing_only_by_case_from_an_active_one_is_refused(engine: Engine) -> None:
    with Session(engine) as session:
        tenant = _tenant(session)
        with pytest.raises(TenantConfigError, match="'Corte' differs only by case from "
                                                    "service 'corte'"):
            catalogue_ops.save_service(session, tenant, catalogue_ops.ServiceChange(
                code="Corte", name="Corte masculino", duration_minutes=30))
        with pytest.raises(TenantConfigError, match="'JULIA' differs only by case from "
                                                    "professional 'julia'"):
            catalogue_ops.save_professional(session, tenant, catalogue_ops.ProfessionalChange(
                code="JULIA", services=["corte"]), now=NOW)
        assert [s["code"] for s in _view(session, tenant)["services"]] == ["corte"]  # type: ignore[index]
        # once the old one is archived, its code's other case is free
        catalogue_ops.remove_professional(session, tenant, "julia", now=NOW)
        catalogue_ops.remove_service(session, tenant, "corte", now=NOW)
        row, created = catalogue_ops.save_service(session, tenant, catalogue_ops.ServiceChange(
            code="Corte", duration_minutes=30))
        assert created and row.code == "Corte"


@pytest.mark.parametrize("name", ["", "   "])
def test_a_blank_name_is_refused_not_made_the_code(engine: Engine, name: str) -> None:
    with Session(engine) as session:
        tenant = _tenant(session)
        with pytest.raises(TenantConfigError, match="name: must not be blank"):
            catalogue_ops.save_service(session, tenant, catalogue_ops.ServiceChange(
                code="novo", name=name, duration_minutes=30))
        with pytest.raises(TenantConfigError, match="name: must not be blank"):
            catalogue_ops.save_service(session, tenant, catalogue_ops.ServiceChange(
                code="corte", name=name))
        with pytest.raises(TenantConfigError, match="name: must not be blank"):
            catalogue_ops.save_professional(session, tenant, catalogue_ops.ProfessionalChange(
                code="julia", name=name), now=NOW)
        view = _view(session, tenant)
        assert [(s["code"], s["name"]) for s in view["services"]] == [  # type: ignore[index]
            ("corte", "Corte feminino")]
        assert view["professionals"][0]["name"] == "Júlia"  # type: ignore[index]
        # left out, the name stays (or is the code for a new one)
        row, _ = catalogue_ops.save_service(session, tenant, catalogue_ops.ServiceChange(
            code="novo", duration_minutes=30))
        assert row.name == "novo"


def test_open_holidays_keep_only_public_holidays_once_and_sorted(engine: Engine) -> None:
    with Session(engine) as session:
        tenant = _tenant(session)  # America/Sao_Paulo: Brazil's calendar
        settings_ops.apply_settings(session, tenant, settings_ops.settings_change(
            {"open_holidays": ["2026-11-20", "2026-10-12", "2026-11-20"]}))
        assert tenant.open_holidays == ["2026-10-12", "2026-11-20"]
        with pytest.raises(TenantConfigError, match="open_holidays: 2026-11-21, 2026-11-23 "
                                                    "not a public holiday of BR"):
            settings_ops.apply_settings(session, tenant, settings_ops.settings_change(
                {"open_holidays": ["2026-11-23", "2026-10-12", "2026-11-21"]}))
        assert tenant.open_holidays == ["2026-10-12", "2026-11-20"]
        with pytest.raises(TenantConfigError, match="follows no holiday calendar"):
            settings_ops.apply_settings(session, tenant, settings_ops.settings_change(
                {"holiday_calendar": "none", "open_holidays": ["2026-12-25"]}))
