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
