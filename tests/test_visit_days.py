"""Settings and days off that would strand visits, and the staff's numbers (breaker trial):
`parallel_services` names only the tenant's service codes; closing a public holiday again or
a day by a closed hours exception is refused while it holds upcoming bookings."""

from typing import Any

import pytest
from sqlalchemy import Engine
from sqlmodel import select

from cli.main import main
from core import clock
from operations import agenda
from operations import catalogue as catalogue_ops
from operations.errors import Invalid
from operations.settings import apply_settings, settings_change
from storage.db import session_scope
from storage.errors import CatalogueConflict
from storage.models import Appointment, HoursException, Tenant
from tests.test_visits import NOW, THREE, Customer


def _tenant(session: Any) -> Tenant:
    tenant = session.get(Tenant, 1)
    assert tenant is not None
    return tenant


@pytest.mark.parametrize(("codes", "said"), [
    (["nope"], "'nope' is not one of the tenant's service codes (alinhamento, diagnostico, oleo)"),
    (["OLEO"], "'OLEO' is not one of the tenant's service codes (codes are case-sensitive: "
               "'oleo'?)"),
    (["oleo", "x", "y"], "parallel_services: 2 unknown service codes"),
])
def test_parallel_services_names_only_the_tenants_codes(engine: Engine, codes: list[str],
                                                        said: str) -> None:
    Customer(engine)
    with session_scope(engine) as session:
        with pytest.raises(Invalid, match="parallel_services") as caught:
            apply_settings(session, _tenant(session),
                           settings_change({"parallel_services": codes}))
        assert said in str(caught.value) + " ".join(caught.value.problems)
    with session_scope(engine) as session:
        apply_settings(session, _tenant(session),
                       settings_change({"parallel_services": ["diagnostico"]}))
    with session_scope(engine) as session:
        assert _tenant(session).parallel_services == ["diagnostico"]


def test_the_cli_refuses_an_unknown_parallel_service(engine: Engine, capsys: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    Customer(engine)
    monkeypatch.setenv("DATABASE_URL", str(engine.url.render_as_string(hide_password=False)))
    assert main(["tenant", "update", "109876543210987", "--set",
                 'parallel_services=["nope"]']) == 2
    assert "'nope' is not one of the tenant's service codes" in capsys.readouterr().err


def test_a_closed_hours_exception_on_a_booked_day_is_refused(engine: Engine) -> None:
    ana = Customer(engine)
    assert not ana.call("book_appointment", {"services": THREE,
                                             "start": "2026-06-03T09:00"})[1]
    with session_scope(engine) as session:
        with pytest.raises(CatalogueConflict, match=r"2026-06-03: that day has 3 upcoming"):
            catalogue_ops.save_hours_exception(session, _tenant(session),
                                               catalogue_ops.HoursExceptionChange(
                                                   day="2026-06-03", hours=[]), now=NOW)
    with session_scope(engine) as session:  # shorter hours, or another day: fine
        assert not session.exec(select(HoursException)).all()
        catalogue_ops.save_hours_exception(session, _tenant(session),
                                           catalogue_ops.HoursExceptionChange(
                                               day="2026-06-03", hours=["08:00-12:00"]),
                                           now=NOW)
        catalogue_ops.save_hours_exception(session, _tenant(session),
                                           catalogue_ops.HoursExceptionChange(
                                               day="2026-06-04", hours=[]), now=NOW)


@pytest.mark.parametrize("day", ["9999-12-31", "0001-01-01", "2026-05-01"])
def test_closing_a_day_no_booking_can_lie_on_is_no_error(engine: Engine, day: str) -> None:
    """The admin fuzz's find: a closed exception on the last date there is answered 500
    (OverflowError: the next day); a past or unreachable day holds no upcoming booking."""
    Customer(engine)
    with session_scope(engine) as session:
        catalogue_ops.save_hours_exception(session, _tenant(session),
                                           catalogue_ops.HoursExceptionChange(day=day, hours=[]),
                                           now=NOW)
        assert [e.day.isoformat() for e in session.exec(select(HoursException))] == [day]


def test_closing_an_opened_holiday_with_bookings_is_refused(engine: Engine) -> None:
    from bot.console.holidays import switch_holiday
    Customer(engine)
    with session_scope(engine) as session:  # Mon 2026-09-07 is Independence Day: opened
        apply_settings(session, _tenant(session),
                       settings_change({"open_holidays": ["2026-09-07", "2026-10-12"]}),
                       now=NOW)
    with session_scope(engine) as session:
        agenda.book(session, _tenant(session), agenda.StaffBooking(
            service="oleo", start="2026-09-07T10:00", contact="1"), now=NOW)
    with session_scope(engine) as session:
        with pytest.raises(CatalogueConflict, match=r"closing the public holiday on "
                                                    r"2026-09-07: that day has 1 upcoming"):
            apply_settings(session, _tenant(session),
                           settings_change({"open_holidays": ["2026-10-12"]}), now=NOW)
    with session_scope(engine) as session:  # the console's switch: the same check
        with pytest.raises(CatalogueConflict, match="2026-09-07"):
            switch_holiday(session, _tenant(session), "2026-09-07", False, NOW.date(),
                           now=NOW)
    with session_scope(engine) as session:  # a holiday without bookings closes
        switch_holiday(session, _tenant(session), "2026-10-12", False, NOW.date(), now=NOW)
    with session_scope(engine) as session:
        assert _tenant(session).open_holidays == ["2026-09-07"]
        assert len(session.exec(select(Appointment)).all()) == 1


def test_staff_at_the_cli_cancel_and_move_the_booking_number_the_customer_quotes(
        engine: Engine, capsys: Any, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """Visit #1 is rows 1-3, visit #2 row 4: "#2" is the customer's second visit, never row 2
    (the alinhamento of visit #1); a visit of several services needs --service."""
    ana = Customer(engine)
    assert not ana.call("book_appointment", {"services": THREE,
                                             "start": "2026-06-03T09:00"})[1]
    assert not ana.call("book_appointment", {"service": "oleo",
                                             "start": "2026-06-04T09:00"})[1]
    monkeypatch.setenv("DATABASE_URL", str(engine.url.render_as_string(hide_password=False)))
    previous = clock.set_clock(clock.FrozenClock(NOW))
    request.addfinalizer(lambda: clock.set_clock(previous))
    pnid = "109876543210987"

    def status() -> list[tuple[int | None, str]]:
        with session_scope(engine) as session:
            return [(a.id, a.status) for a in session.exec(
                select(Appointment).order_by(Appointment.id)).all()]  # type: ignore[arg-type]

    assert main(["appointments", "cancel", pnid, "#1"]) == 2
    assert "booking #1 is a visit of 3 services (oleo, alinhamento, diagnostico): name the " \
           "one with --service" in capsys.readouterr().err
    assert main(["appointments", "move", pnid, "#1", "--service", "pintura",
                 "--start", "2026-06-03T14:00"]) == 2
    assert "booking #1 has no booked service 'pintura'" in capsys.readouterr().err
    assert main(["appointments", "cancel", pnid, "#9"]) == 2
    assert "no booking #9" in capsys.readouterr().err
    assert main(["appointments", "cancel", pnid, "#2"]) == 0
    assert status() == [(1, "booked"), (2, "booked"), (3, "booked"), (4, "cancelled")]
    assert main(["appointments", "move", pnid, "1", "--service", "diagnostico",
                 "--start", "2026-06-03T14:00"]) == 0
    assert main(["appointments", "cancel", pnid, "1", "--service", "oleo"]) == 0
    assert [s for _, s in status()] == ["cancelled", "booked", "cancelled", "cancelled",
                                        "booked"]


def test_a_whole_configuration_closing_a_booked_day_is_refused(engine: Engine) -> None:
    from storage.tenants import upsert_tenant
    from tests.test_visits import GARAGE
    ana = Customer(engine)
    assert not ana.call("book_appointment", {"service": "oleo",
                                             "start": "2026-06-03T09:00"})[1]
    closed = {"day": "2026-06-03", "hours": [], "note": "inventário"}
    with session_scope(engine) as session:
        with pytest.raises(CatalogueConflict, match="2026-06-03: that day has 1 upcoming"):
            upsert_tenant(session, {**GARAGE, "hours_exceptions": [closed]}, now=NOW)
    with session_scope(engine) as session:  # another day closes
        upsert_tenant(session, {**GARAGE, "hours_exceptions": [
            {**closed, "day": "2026-06-04"}]}, now=NOW)
