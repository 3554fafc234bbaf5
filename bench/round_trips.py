"""Benchmark: SQL statements, commits and connection checkouts per 3-call turn (issue 43).

The replay harness (replay/environment.py: the real web app, an in-process RQ worker, the
Messages API and Graph doubles) on PostgreSQL. A SQLAlchemy listener on every engine counts
the statements sent (`before_cursor_execute`), the commits (`commit`; and those whose transaction
holds a transaction id, so wait for a WAL flush) and the pool checkouts
(each one a pre-ping round trip, `pool_pre_ping`). One customer message is posted and its
turn drained; the model answers in three calls (find_available_slots, book_appointment, a
text). The conversation's first turn (it creates the contact and the conversation) and a
later turn are counted apart, the webhook POST apart from the worker's drain.

`--history N` gives the conversation N older messages after its first turn (one
`INSERT ... SELECT generate_series` on PostgreSQL, customer and reply alternating, all but the
last 40 summarised, as a long thread is after its compactions) and reports the later turns'
median and least seconds, and the median CPU seconds of this process (the web app and the
worker run in it; PostgreSQL's own work is not counted there): run it at 1,000 and 100,000
to compare a turn's time at both lengths (issue 43: at most 1.2x).

Usage: python bench/round_trips.py [--database-url URL] [--redis-url URL]
PostgreSQL by default (TEST_POSTGRES_URL or postgresql://postgres@127.0.0.1:5432/test; the run
gets its own schema, dropped after); without --redis-url an in-process Redis.
Prints JSON (`--out FILE` too).
"""

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import event, text  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402
from sqlalchemy.pool import Pool  # noqa: E402

from replay.environment import ReplayEnvironment  # noqa: E402
from tests.factories import text_body  # noqa: E402

START = datetime(2026, 6, 1, 13, 0, 30, tzinfo=UTC)
TENANT = {"phone_number_id": "109876543210987", "name": "Salão Exemplo",
          "services": [{"code": "corte", "name": "Corte feminino", "duration_minutes": 60}],
          "professionals": [{"code": "julia", "name": "Júlia", "services": ["corte"]}],
          "hours": {"tue": ["09:00-18:00"]}}
COUNTS: Counter[str] = Counter()


def _statement(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
    COUNTS["statements"] += 1
    COUNTS["statement:" + statement.lstrip().split(None, 1)[0].upper()] += 1


def _commit(conn: Any) -> None:
    """Counts the commit, and whether its transaction holds a transaction id (its commit then
    waits for a WAL flush): asked on the driver's connection, so not counted as a statement."""
    COUNTS["commits"] += 1
    if conn.dialect.name == "postgresql":
        with conn.connection.dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT txid_current_if_assigned()")
            row = cursor.fetchone()
        COUNTS["commits_with_xid"] += int(row is not None and row[0] is not None)


def _checkout(*_: Any) -> None:
    COUNTS["checkouts"] += 1


def three_calls(day: str, hour: str) -> list[dict[str, Any]]:
    return [{"tool": "find_available_slots", "input": {"service": "corte", "date": day}},
            {"tool": "book_appointment", "input": {"service": "corte",
                                                   "start": f"{day}T{hour}"}},
            {"text": f"Marcado: {hour} com a Júlia."}]


def measure(env: ReplayEnvironment, n: int, hour: str) -> dict[str, Any]:
    env.messages_api.script("turn", three_calls("2026-06-02", hour))
    COUNTS.clear()
    began, cpu = time.perf_counter(), time.process_time()
    status = env.post_webhook(json.dumps(text_body(f"quero corte terça {hour}", n)).encode())
    webhook = dict(COUNTS)
    COUNTS.clear()
    env.drain()
    drained = dict(COUNTS)
    return {"status": status, "seconds": round(time.perf_counter() - began, 3),
            "cpu_seconds": round(time.process_time() - cpu, 3),
            "webhook": _short(webhook), "worker": _short(drained),
            "worker_by_kind": {k.split(":", 1)[1]: v for k, v in sorted(drained.items())
                               if k.startswith("statement:")}}


HISTORY_SQL = """
    INSERT INTO message (tenant_id, conversation_id, role, direction, position, content,
                         wamid, received_at, starts_turn, answered_at)
    SELECT c.tenant_id, c.id,
           CASE n % 2 WHEN 1 THEN 'user' ELSE 'assistant' END,
           CASE n % 2 WHEN 1 THEN 'inbound' ELSE 'outbound' END,
           m.top + n, CAST('[{"type": "text", "text": "oi, tudo bem?"}]' AS jsonb),
           CASE n % 2 WHEN 1 THEN 'wamid.history.' || n END, :now, true, :now
    FROM conversation c, (SELECT coalesce(max(position), 0) AS top FROM message
                          WHERE conversation_id = :conversation) m,
         generate_series(1, :count) AS n
    WHERE c.id = :conversation"""


def add_history(env: ReplayEnvironment, count: int) -> None:
    """`count` older messages in the tenant's one conversation, all but the last 40 summarised
    (PostgreSQL only: generate_series). Positions continue after the first turn's."""
    with env.engine.begin() as connection:
        conversation = connection.execute(text("SELECT max(id) FROM conversation")).scalar_one()
        connection.execute(text(HISTORY_SQL), {"conversation": conversation, "count": count,
                                               "now": START})
        cut = connection.execute(text(
            "SELECT id FROM message WHERE conversation_id = :c ORDER BY position DESC "
            "LIMIT 1 OFFSET 40"), {"c": conversation}).scalar_one()
        connection.execute(text(
            "UPDATE conversation SET summarized_until_id = :cut, summary = :summary "
            "WHERE id = :c"), {"cut": cut, "c": conversation,
                               "summary": "A cliente costuma marcar corte com a Júlia."})
        connection.execute(text("ANALYZE message"))


def _short(counts: dict[str, int]) -> dict[str, int]:
    return {k: counts.get(k, 0) for k in ("statements", "commits", "commits_with_xid",
                                           "checkouts")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get(
        "TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--turns", type=int, default=3, help="later turns counted (default 3)")
    parser.add_argument("--history", type=int, default=0,
                        help="older messages added after the first turn (PostgreSQL)")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write the JSON here (the product logs to stdout too)")
    args = parser.parse_args()
    event.listen(Engine, "before_cursor_execute", _statement)
    event.listen(Engine, "commit", _commit)
    event.listen(Pool, "checkout", _checkout)
    env = ReplayEnvironment(start=START, database_url=args.database_url,
                            redis_url=args.redis_url)
    try:
        env.add_tenant(TENANT)
        first = measure(env, 1, "09:00")
        if args.history:
            add_history(env, args.history)
        later = [measure(env, n, f"{9 + n}:00") for n in range(2, 2 + args.turns)]
        sent = [str(send.body.get("text", {}).get("body", ""))[:60]
                for send in env.graph_api.sends if send.wamid]
    finally:
        env.close()
    report = {"database": "postgresql" if "postgres" in args.database_url else "other",
              "history": args.history, "first_turn": first, "later_turns": later,
              "later_seconds_median": statistics.median(t["seconds"] for t in later),
              "later_seconds_min": min(t["seconds"] for t in later),
              "later_cpu_seconds_median": statistics.median(t["cpu_seconds"] for t in later),
              "replies": sent}
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
