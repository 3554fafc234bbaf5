"""Issue 46 (2): session packages. A session is used when a visit of the package's service is
marked completed (a no-show by the tenant's rule), once per visit, never on booking; the
soonest-to-expire live package pays; the context line warns when one runs out or expires;
staff adjust within bounds; bad input is refused and changes nothing."""

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlmodel import select

from operations import agenda, packages
from operations.errors import Invalid, NotFound
from storage.db import session_scope
from storage.models import Contact, CustomerPackage, Tenant
from storage.tenants import upsert_tenant
from tests.factories import TENANT

NOW = datetime(2026, 6, 1, 11, 0, tzinfo=UTC)  # Mon 08:00 in São Paulo
CLINIC: dict[str, Any] = {
    **TENANT,
    "services": [{"code": "fisio", "name": "Fisioterapia", "duration_minutes": 60},
                 {"code": "pilates", "name": "Pilates", "duration_minutes": 60}],
    "professionals": [{"code": "julia", "name": "Júlia", "services": ["fisio", "pilates"]}],
    "hours": {day: ["08:00-20:00"] for day in ("mon", "tue", "wed", "thu", "fri")},
}


def _setup(engine: Engine, **changes: Any) -> int:
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, {**CLINIC, **changes}, now=NOW)
        contact = Contact(tenant_id=tenant.id, wa_id="5511999990001", profile_name="Ana",
                          created_at=NOW)
        session.add(contact)
        session.flush()
        for code, name, service, sessions in (("fisio10", "Fisioterapia", "fisio", 10),
                                              ("fisio2", "Fisio curto", "fisio", 2)):
            packages.define(session, tenant, packages.PackageSpec(
                code=code, name=name, service=service, sessions=sessions, validity_days=60))
        return contact.id or 0


def _do(engine: Engine, action: Any, *args: Any, **kwargs: Any) -> Any:
    with session_scope(engine) as session:
        return action(session, session.get(Tenant, 1), *args, **kwargs)


def _visit(engine: Engine, contact_id: int, start: str, service: str = "fisio") -> int:
    view = _do(engine, agenda.book, agenda.StaffBooking.model_validate(
        {"service": service, "start": start, "contact": str(contact_id)}), now=NOW)
    return int(view["id"])


def _used(engine: Engine) -> list[int]:
    with session_scope(engine) as session:
        return [p.used for p in session.exec(select(CustomerPackage)
                                             .order_by(CustomerPackage.id)).all()]


@pytest.mark.parametrize(("rule", "used"), [(True, 3), (False, 2)])
def test_completed_visits_use_sessions_and_a_no_show_by_the_tenants_rule(
        engine: Engine, rule: bool, used: int) -> None:
    contact_id = _setup(engine, no_show_uses_session=rule)
    _do(engine, packages.sell, packages.Sale(contact=str(contact_id), package="fisio10"),
        now=NOW)
    visits = [_visit(engine, contact_id, f"2026-06-01T{h:02d}:00") for h in (9, 10, 11)]
    assert _used(engine) == [0]  # booking uses nothing
    later = NOW + timedelta(hours=6)
    for visit, outcome in zip(visits, ("completed", "completed", "no_show"), strict=True):
        _do(engine, agenda.set_outcome, visit, outcome, now=later)
    _do(engine, agenda.set_outcome, visits[0], "completed", now=later)  # again: nothing
    assert _used(engine) == [used]
    pilates = _visit(engine, contact_id, "2026-06-01T12:00", "pilates")
    _do(engine, agenda.set_outcome, pilates, "completed", now=later)
    assert _used(engine) == [used]  # another service: no package of it


def test_the_soonest_to_expire_pays_and_the_context_warns(engine: Engine) -> None:
    contact_id = _setup(engine)
    _do(engine, packages.sell, packages.Sale(contact=str(contact_id), package="fisio10",
                                             authorisation="AUT-1"), now=NOW)
    _do(engine, packages.sell, packages.Sale(contact=str(contact_id), package="fisio2",
                                             expires_on=date(2026, 6, 5)), now=NOW)
    visit = _visit(engine, contact_id, "2026-06-01T09:00")
    _do(engine, agenda.set_outcome, visit, "completed", now=NOW + timedelta(hours=3))
    assert _used(engine) == [0, 1]
    with session_scope(engine) as session:
        tenant = session.get(Tenant, 1)
        assert tenant is not None
        lines = packages.context_lines(session, tenant, contact_id, NOW)
        assert lines == [
            "pacote Fisio curto: 1 de 2 usadas, válido até 05/06 (acabando, vence em breve)",
            "pacote Fisioterapia: 0 de 10 usadas, válido até 31/07, autorização AUT-1"]
        # expired or used up: not in the context, and pays nothing
        assert packages.context_lines(session, tenant, contact_id,
                                      NOW + timedelta(days=61)) == []


def test_staff_adjust_within_bounds_and_bad_input_changes_nothing(engine: Engine) -> None:
    contact_id = _setup(engine)
    sold = _do(engine, packages.sell, packages.Sale(contact=str(contact_id),
                                                    package="fisio10"), now=NOW)
    assert _do(engine, packages.adjust, sold["id"], used=4)["left"] == 6
    with pytest.raises(Invalid):
        _do(engine, packages.adjust, sold["id"], used=11)
    with pytest.raises(NotFound):
        _do(engine, packages.adjust, 999, used=1)
    with pytest.raises(NotFound):
        _do(engine, packages.sell, packages.Sale(contact=str(contact_id), package="nope"),
            now=NOW)
    with pytest.raises(Invalid):
        _do(engine, packages.define, packages.PackageSpec(
            code="x", name="X", service="nope", sessions=1, validity_days=1))
    assert _used(engine) == [4]


def test_an_expired_or_used_up_package_is_listed_for_staff_but_not_usable(
        engine: Engine) -> None:
    """The expiry day (local, São Paulo) is included; the next local day, or no sessions
    left, the package is out of the agent's context and staff see it `usable: false`."""
    contact_id = _setup(engine)
    sold = _do(engine, packages.sell, packages.Sale(contact=str(contact_id),
                                                    package="fisio10"), now=NOW)
    assert sold["expires_on"] == "2026-07-31"
    last_evening = datetime(2026, 8, 1, 2, 59, tzinfo=UTC)  # 31/07 23:59 local
    next_morning = datetime(2026, 8, 1, 3, 0, tzinfo=UTC)  # 01/08 00:00 local
    for now, usable in ((last_evening, True), (next_morning, False)):
        listed = _do(engine, packages.of_customer, str(contact_id), now)
        assert [(p["id"], p["usable"]) for p in listed] == [(sold["id"], usable)], now
        with session_scope(engine) as session:
            lines = packages.context_lines(session, session.get(Tenant, 1), contact_id, now)
        assert len(lines) == int(usable), now
    _do(engine, packages.adjust, sold["id"], used=10)
    assert _do(engine, packages.of_customer, str(contact_id), last_evening)[0]["usable"] \
        is False
    with session_scope(engine) as session:
        assert packages.context_lines(session, session.get(Tenant, 1), contact_id,
                                      last_evening) == []
    with pytest.raises(NotFound):
        _do(engine, packages.of_customer, "5511000000000", NOW)
