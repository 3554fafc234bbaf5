"""The breaker's probes of cand3's round trips work (a tool round in one transaction, the
booking locks in one round trip): what they found, pinned."""

import threading
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine
from sqlmodel import Session, select

from storage.appointments import lock_for_booking
from storage.models import Professional
from storage.tenants import upsert_tenant
from tests.factories import TENANT

NOW = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)


@pytest.mark.parametrize("engine", [pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
def test_two_rounds_each_placing_twice_never_deadlock(engine: Engine) -> None:
    # A tool round is one transaction: its booking locks are held until the round commits.
    # Round A moves one service of a visit onto julia (no new visit: professionals only),
    # then books a new visit with bia; round B books a new visit with julia meanwhile.
    # Every placement must take the locks in one order (tenant first), or A holds julia
    # waiting for the tenant while B holds the tenant waiting for julia: a deadlock, which
    # is an OperationalError, fatal to the turn (workers/turns.py `fatal`).
    tenant_keys = {**TENANT, "professionals": [
        {"code": "julia", "name": "Júlia", "services": ["corte"]},
        {"code": "bia", "name": "Bia", "services": ["corte"]}]}
    with Session(engine) as session:
        tenant = upsert_tenant(session, tenant_keys, now=NOW)
        session.commit()
        tenant_id = int(tenant.id or 0)
        ids = {p.code: int(p.id or 0) for p in session.exec(select(Professional).where(
            Professional.tenant_id == tenant_id))}
    b_locked, errors = threading.Event(), []

    def round_b() -> None:
        try:
            with Session(engine) as session:
                lock_for_booking(session, tenant_id, [ids["julia"]], new_visit=True)
                session.commit()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            b_locked.set()

    with Session(engine) as a:
        a.connection().exec_driver_sql("SET lock_timeout = '5s'")
        lock_for_booking(a, tenant_id, [ids["julia"]], new_visit=False)  # the move
        thread = threading.Thread(target=round_b)
        thread.start()
        b_locked.wait(0.5)  # B takes the tenant, then waits for julia (or is done)
        try:
            number, _ = lock_for_booking(a, tenant_id, [ids["bia"]], new_visit=True)
            a.commit()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            a.rollback()
        thread.join(10)
    assert not errors, [type(e).__name__ + ": " + str(e).splitlines()[0] for e in errors]
    assert number == 1
