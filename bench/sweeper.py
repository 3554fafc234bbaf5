"""Benchmark: the inactivity sweeper on 100,000 conversations.

1. 100,000 open conversations, all idle past their timeout: time for `close_due` to close them
   all (batches of `workers.sweeper.BATCH` read in index order, one compare-and-set each).
2. 1,000 and then 100,000 open conversations, none due: time for one sweep pass, which must
   not grow with the number of open conversations (one query on the (status, due_at) index),
   and the query plan that shows it.

Usage: python bench/sweeper.py [--database-url URL] [--count 100000]
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

from sqlalchemy import insert, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from storage.db import create_schema, make_engine, session_scope  # noqa: E402
from storage.models import Contact, Conversation, Tenant  # noqa: E402
from workers.sweeper import BATCH, close_due, find_due  # noqa: E402

NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)


def fresh_engine(database_url: str | None, directory: str) -> tuple[Any, Any]:
    if not database_url:
        return make_engine(f"sqlite:///{directory}/sweeper.db"), None
    schema = f"wagent_bench_{uuid.uuid4().hex[:8]}"
    admin = make_engine(database_url)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(database_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return make_engine(url.render_as_string(hide_password=False)), (admin, schema)


def populate(engine: Any, count: int, *, due: bool) -> None:
    with session_scope(engine) as session:
        tenant = Tenant(phone_number_id=f"bench-{uuid.uuid4().hex[:6]}", name="Bench",
                        created_at=NOW)
        session.add(tenant)
        session.flush()
        tenant_id = tenant.id
    last = NOW - timedelta(hours=25 if due else 1)
    for start in range(0, count, 5000):
        size = min(5000, count - start)
        with engine.begin() as connection:
            ids = connection.execute(insert(Contact).returning(Contact.id), [
                {"tenant_id": tenant_id, "wa_id": f"{uuid.uuid4().int % 10**13:013d}",
                 "created_at": NOW} for _ in range(size)]).scalars().all()
            connection.execute(insert(Conversation), [
                {"tenant_id": tenant_id, "contact_id": cid, "status": "open", "summary": "",
                 "summarized_until_id": 0, "pruned_until_id": 0, "context_block": "",
                 "compactions": 0, "last_input_tokens": 0, "last_activity_at": last,
                 "due_at": last + timedelta(hours=24), "opened_at": last} for cid in ids])


def time_pass(engine: Any, rounds: int = 50) -> float:
    timings = []
    for _ in range(rounds):
        began = time.perf_counter()
        with session_scope(engine) as session:
            assert find_due(session, now=NOW) == []
        timings.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(timings), 3)


def query_plan(engine: Any) -> list[str]:
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            rows = connection.exec_driver_sql(
                "EXPLAIN QUERY PLAN SELECT id FROM conversation WHERE status = 'open' "
                f"AND due_at <= ? ORDER BY due_at LIMIT {BATCH}", (NOW.isoformat(),)).all()
            return [str(row[-1]) for row in rows]
        rows = connection.exec_driver_sql(
            "EXPLAIN SELECT id FROM conversation WHERE status = 'open' AND due_at <= %s "
            f"ORDER BY due_at LIMIT {BATCH}", (NOW,)).all()
        return [str(row[0]) for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url")
    parser.add_argument("--count", type=int, default=100_000)
    args = parser.parse_args()
    report: dict[str, Any] = {"count": args.count}
    with tempfile.TemporaryDirectory() as tmp:
        engine, cleanup = fresh_engine(args.database_url, tmp)
        try:
            create_schema(engine)
            report["database"] = engine.dialect.name
            populate(engine, args.count, due=True)
            began = time.perf_counter()
            closed = close_due(engine, now=NOW)
            report["close_all_due"] = {"closed": closed,
                                       "seconds": round(time.perf_counter() - began, 2)}
            populate(engine, 1_000, due=False)
            report["pass_ms_none_due"] = {"1000_open": time_pass(engine)}
            populate(engine, args.count - 1_000, due=False)
            report["pass_ms_none_due"][f"{args.count}_open"] = time_pass(engine)
            report["query_plan"] = query_plan(engine)
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
