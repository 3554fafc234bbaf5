"""Benchmark: the reminders pass (workers/reminders.py) with 100 tenants and 100,000 future
appointments, each with its 24 h reminder.

1. None due: the time of one pass (median of 50), first with 1,000 appointments and then
   with 100,000: it must not grow (one query on the partial index of scheduled reminders by
   due time, one on the pending notices), and the query plan that shows it.
2. 5,000 due (spread over the 100 tenants): the time of the pass that stores each as an
   outbound message with its outbox part and enqueues its flush (an in-process Redis), and
   how the flushes were paced (the last flush's delay, at 80 sends/s per number).

Usage: python bench/reminders.py [--database-url URL] [--count 100000] [--due 5000]
SQLite by default (a temporary file); a PostgreSQL URL gets a fresh schema, dropped after.
Prints one JSON object.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fakeredis  # noqa: E402
from rq.registry import ScheduledJobRegistry  # noqa: E402
from sqlalchemy import insert, text  # noqa: E402

from bench.sweeper import fresh_engine  # noqa: E402
from core.settings import Settings  # noqa: E402
from storage.db import create_schema, session_scope  # noqa: E402
from storage.models import (  # noqa: E402
    Appointment,
    Contact,
    Professional,
    Reminder,
    Service,
    Tenant,
)
from workers.reminders import reminder_pass  # noqa: E402
from workers.runtime import build_runtime  # noqa: E402

NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)
TENANTS = 100


def populate(engine: Any, count: int, *, due: int, first: int = 0) -> None:
    """`count` appointments over the tenants (made once), the first `due` of them due now."""
    with session_scope(engine) as session:
        tenants = session.exec(text("SELECT id FROM tenant")).all()
        if not tenants:
            for n in range(TENANTS):
                tenant = Tenant(phone_number_id=f"{10**14 + n}", name=f"Bench {n}",
                                created_at=NOW)
                session.add(tenant)
                session.flush()
                session.add(Service(tenant_id=tenant.id or 0, code="corte", name="Corte",
                                    duration_minutes=60))
                session.add(Professional(tenant_id=tenant.id or 0, code="julia", name="Júlia",
                                         service_codes=["corte"]))
            session.flush()
        ids = [int(r[0]) for r in session.exec(text("SELECT id FROM tenant ORDER BY id")).all()]
        # a service and a professional per tenant, in tenant order (ids follow)
        services = dict(session.exec(text("SELECT tenant_id, id FROM service")).all())
        pros = dict(session.exec(text("SELECT tenant_id, id FROM professional")).all())
    for start in range(0, count, 5000):
        size = min(5000, count - start)
        rows = range(first + start, first + start + size)
        with engine.begin() as connection:
            contacts = connection.execute(insert(Contact).returning(Contact.id), [
                {"tenant_id": ids[n % TENANTS], "wa_id": f"55{n:011d}",
                 "profile_name": "Cliente", "last_inbound_at": NOW - timedelta(hours=2),
                 "created_at": NOW} for n in rows]).scalars().all()
            starts = [NOW + timedelta(days=1) if n < due
                      else NOW + timedelta(days=2, minutes=n % 5000) for n in rows]
            appointments = connection.execute(insert(Appointment).returning(Appointment.id), [
                {"tenant_id": ids[n % TENANTS], "contact_id": cid,
                 "service_id": services[ids[n % TENANTS]],
                 "professional_id": pros[ids[n % TENANTS]],
                 "start_at": at, "end_at": at + timedelta(hours=1), "status": "booked",
                 "created_at": NOW - timedelta(days=3), "note": ""}
                for n, cid, at in zip(rows, contacts, starts, strict=True)]).scalars().all()
            connection.execute(insert(Reminder), [
                {"tenant_id": ids[n % TENANTS], "appointment_id": aid, "lead_minutes": 1440,
                 "due_at": at - timedelta(minutes=1440), "status": "scheduled", "reason": "",
                 "created_at": NOW - timedelta(days=3)}
                for n, aid, at in zip(rows, appointments, starts, strict=True)])


def time_pass(runtime: Any, rounds: int = 50) -> float:
    timings = []
    for _ in range(rounds):
        began = time.perf_counter()
        assert reminder_pass(runtime, now=NOW - timedelta(minutes=1)) == 0
        timings.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(timings), 3)


def query_plan(engine: Any) -> list[str]:
    sql = ("SELECT id FROM reminder WHERE status = 'scheduled' AND due_at <= {p} "
           "ORDER BY due_at, id LIMIT 500")
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            rows = connection.exec_driver_sql("EXPLAIN QUERY PLAN " + sql.format(p="?"),
                                              (NOW.isoformat(),)).all()
            return [str(row[-1]) for row in rows]
        rows = connection.exec_driver_sql("EXPLAIN " + sql.format(p="%s"), (NOW,)).all()
        return [str(row[0]) for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--due", type=int, default=5_000)
    args = parser.parse_args()
    report: dict[str, Any] = {"tenants": TENANTS, "appointments": args.count, "due": args.due}
    with tempfile.TemporaryDirectory() as tmp:
        engine, cleanup = fresh_engine(args.database_url, tmp)
        try:
            create_schema(engine)
            report["database"] = engine.dialect.name
            redis_client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
            prefix = f"bench-{uuid.uuid4().hex[:6]}"
            runtime = build_runtime(Settings(database_url=str(engine.url), redis_prefix=prefix,
                                             queue_name=prefix), engine=engine,
                                    redis_client=redis_client)
            populate(engine, 1_000, due=args.due)
            report["pass_ms_none_due"] = {"1000_appointments": time_pass(runtime)}
            populate(engine, args.count - 1_000, due=args.due, first=1_000)
            report["pass_ms_none_due"][f"{args.count}_appointments"] = time_pass(runtime)
            report["query_plan"] = query_plan(engine)
            began = time.perf_counter()
            queued = reminder_pass(runtime, now=NOW)
            seconds = time.perf_counter() - began
            scheduled = ScheduledJobRegistry(queue=runtime.queue)  # type: ignore[no-untyped-call]
            latest = max((s for _, s in redis_client.zrange(scheduled.key, 0, -1,
                                                            withscores=True)), default=None)
            report["pass_due"] = {
                "queued": queued, "seconds": round(seconds, 2),
                "per_reminder_ms": round(seconds * 1000 / max(queued, 1), 3),
                "flushes_at_once": runtime.queue.count,
                "flushes_scheduled_later": scheduled.count,
                "last_flush_delay_s": round(latest - NOW.timestamp(), 1) if latest else 0}
        finally:
            engine.dispose()
            if cleanup:
                admin, schema = cleanup
                with admin.begin() as connection:
                    connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
                admin.dispose()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
