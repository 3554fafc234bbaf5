"""A 14-day slot search on a busy agenda (issue 22): 20 professionals, 5,000 appointments and
500 blocks; and the same tenant's twin whose agenda holds 50,000 more appointments outside the
searched range. The search reads only the range (two indexed range reads per call), so its
time must not grow with the appointments outside it.

    .venv/bin/python bench/schedule_search.py [--database-url URL] [--runs 40]

Prints the median time of `find_available_slots` over 14 days (all professionals, through
`execute_tool`: the tool's transaction, the search, the formatting) and of `free_slots` alone,
for both tenants, timed alternately (the machine's noise falls on both), and their ratio.
SQLite in a temporary file by default.
"""

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text  # noqa: E402
from sqlmodel import select  # noqa: E402

from agent.tools import availability  # noqa: E402
from agent.tools.base import ToolContext  # noqa: E402
from agent.tools.registry import execute_tool  # noqa: E402
from storage.db import create_schema, make_engine, session_scope  # noqa: E402
from storage.models import (  # noqa: E402
    Appointment,
    Contact,
    Conversation,
    Professional,
    ScheduleBlock,
    Service,
    Tenant,
)
from storage.tenants import upsert_tenant  # noqa: E402

SP = ZoneInfo("America/Sao_Paulo")
NOW = datetime(2026, 6, 1, 11, 0, tzinfo=UTC)  # Mon 08:00 in São Paulo
FIRST = NOW.astimezone(SP).date()
PROS = 20


def _tenant() -> dict[str, object]:
    week = {d: ["09:00-12:00", "13:00-19:00"] for d in ("mon", "tue", "wed", "thu", "fri")}
    pros = [{"code": f"p{n:02d}", "name": f"Pro {n}", "services": ["corte"],
             **({"hours": {"tue": ["10:00-18:00"], "sat": ["09:00-13:00"]}} if n % 4 == 0
                else {}),
             **({"time_off": [{"from": "2026-06-08", "to": "2026-06-10"}]} if n % 5 == 0
                else {})} for n in range(PROS)]
    return {"phone_number_id": "109876543210987", "name": "Bench", "timezone": SP.key,
            "booking_horizon_days": 3650, "services": [
                {"code": "corte", "name": "Corte", "duration_minutes": 60,
                 "buffer_minutes": 10}],
            "professionals": pros, "hours": {**week, "sat": ["09:00-13:00"]}}


def _fill(engine: object, tenant_id: int, appointments: int, blocks: int, *, inside: bool,
          seed: int) -> None:
    """Appointments (and blocks) on whole hours: inside the 14 days searched, or in the
    two years before and after them."""
    rng = random.Random(seed)
    with session_scope(engine) as session:  # type: ignore[arg-type]
        tenant = session.get(Tenant, tenant_id)
        assert tenant is not None
        service = session.exec(select(Service).where(Service.tenant_id == tenant_id)).one()
        pros = [p.id for p in session.exec(select(Professional).where(
            Professional.tenant_id == tenant_id).order_by(Professional.code))]
        contact = session.exec(select(Contact).where(Contact.tenant_id == tenant_id)).first()
        assert contact is not None and contact.id is not None
        rows = []
        for _ in range(appointments):
            day = rng.randrange(14) if inside else rng.choice([-1, 1]) * (
                20 + rng.randrange(700))
            start = datetime.combine(FIRST + timedelta(days=day),
                                     datetime.min.time(), SP) + timedelta(hours=rng.choice(
                                         [9, 10, 11, 13, 14, 15, 16, 17, 18]))
            rows.append(Appointment(tenant_id=tenant.id or 0, contact_id=contact.id,
                                    service_id=service.id or 0, professional_id=rng.choice(pros),
                                    start_at=start.astimezone(UTC),
                                    end_at=(start + timedelta(minutes=60)).astimezone(UTC),
                                    created_at=NOW, status="booked"))
        for _ in range(blocks):
            day = rng.randrange(14) if inside else rng.choice([-1, 1]) * (
                20 + rng.randrange(700))
            start = datetime.combine(FIRST + timedelta(days=day), datetime.min.time(),
                                     SP) + timedelta(hours=rng.choice([9, 12, 15]))
            rows.append(ScheduleBlock(tenant_id=tenant.id or 0, professional_id=rng.choice(pros),
                                      start_at=start.astimezone(UTC),
                                      end_at=(start + timedelta(minutes=90)).astimezone(UTC),
                                      created_at=NOW))
        session.add_all(rows)
    if url_of(engine).startswith("postgresql"):  # fresh statistics, as autovacuum keeps them
        with engine.connect() as connection:  # type: ignore[attr-defined]
            connection.execute(text("ANALYZE"))
            connection.commit()


def url_of(engine: object) -> str:
    return str(engine.url)  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    url = args.database_url or f"sqlite:///{folder}/bench.db"
    engine = make_engine(url)
    create_schema(engine)
    ids = []
    for number in ("109876543210987", "109876543210988"):
        with session_scope(engine) as session:
            tenant = upsert_tenant(session, {**_tenant(), "phone_number_id": number}, now=NOW)
            contact = Contact(tenant_id=tenant.id, wa_id="5511999990001", created_at=NOW)
            session.add(contact)
            session.flush()
            conversation = Conversation(tenant_id=tenant.id, contact_id=contact.id,
                                        last_activity_at=NOW, due_at=NOW, opened_at=NOW)
            session.add(conversation)
            session.flush()
            ids.append((tenant.id or 0, contact.id or 0, conversation.id or 0))
    # each: 5,000 appointments and 500 blocks, 1,500 and 150 of them in the 14 days
    for tenant_ids in ids:
        _fill(engine, tenant_ids[0], 1500, 150, inside=True, seed=1)
        _fill(engine, tenant_ids[0], 3500, 350, inside=False, seed=2)
    _fill(engine, ids[1][0], 50_000, 0, inside=False, seed=3)  # the twin: 50,000 more outside
    calls = iter(range(10**9))

    def tool(which: tuple[int, int, int]) -> None:
        ctx = ToolContext(engine=engine, tenant_id=which[0], contact_id=which[1],
                          conversation_id=which[2], timezone=SP, now=NOW,
                          tool_use_id=f"toolu_bench_{next(calls)}")
        text, is_error = execute_tool(ctx, "find_available_slots", {
            "service": "corte", "date": FIRST.isoformat(),
            "date_to": (FIRST + timedelta(days=13)).isoformat()})
        assert not is_error, text

    def search(which: tuple[int, int, int]) -> int:
        with session_scope(engine) as session:
            tenant = session.get(Tenant, which[0])
            service = session.exec(select(Service).where(Service.tenant_id == which[0])).one()
            pros = availability.candidates(session, which[0], service, None)
            assert tenant is not None
            return len(availability.free_slots(session, tenant=tenant, service=service,
                                               pros=pros, first=FIRST,
                                               last=FIRST + timedelta(days=13), now=NOW))

    slots = [search(which) for which in ids]
    assert slots[0] == slots[1], slots  # the same agenda inside the range
    timings: dict[str, list[float]] = {"tool0": [], "tool1": [], "search0": [], "search1": []}
    for _ in range(args.runs):
        for n, which in enumerate(ids):
            for name, fn in (("tool", tool), ("search", search)):
                began = time.perf_counter()
                fn(which)
                timings[f"{name}{n}"].append(time.perf_counter() - began)
    ms = {k: statistics.median(v) * 1000 for k, v in timings.items()}
    print(f"database: {url.split(':')[0]}; {PROS} professionals; 14 days; {slots[0]} free "
          f"(start, professional) pairs; median of {args.runs} alternate runs")
    print(f"5,000 appointments + 500 blocks: find_available_slots {ms['tool0']:.1f} ms, "
          f"free_slots {ms['search0']:.1f} ms")
    print(f"the same + 50,000 appointments outside the range: find_available_slots "
          f"{ms['tool1']:.1f} ms, free_slots {ms['search1']:.1f} ms")
    print(f"ratio (twin / base): tool {ms['tool1'] / ms['tool0']:.2f}, "
          f"search {ms['search1'] / ms['search0']:.2f} (target: about 1)")


if __name__ == "__main__":
    main()
