"""Micro-benchmark: the CPU a webhook process spends storing and enqueueing a group commit,
without HTTP, and what PostgreSQL spends on it.

Calls `intake.posts.store_posts` (the group thread's work: parse, `intake.group.store_group`, the
group's turn enqueue) on groups of `--group` POSTs, each one new contact's text message, as in
the web process (JSON logs at INFO, the debounce on). Prints CPU milliseconds per POST of this
process, of every PostgreSQL process (from /proc, so other PostgreSQL work counts too), and
the split between parsing, storing and enqueueing.

Needs PostgreSQL at env WS_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test; a
fresh schema `wagent_ws_*`, dropped at the end) and Redis at env WS_REDIS_URL (default
127.0.0.1:6379 database 11; flushed at the start and end: give one that holds nothing else).

Usage: .venv/bin/python bench/webhook_store.py [--group 12] [--groups 150] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # load.py's /proc reading

POSTGRES_URL = os.environ.get("WS_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("WS_REDIS_URL", "redis://127.0.0.1:6379/11")  # flushed: its own
WARMUP_GROUPS = 10


def postgres_cpu_seconds() -> float:
    """CPU seconds of every process named postgres (the server and its backends, with the
    backends that exited and were reaped), read as bench/load.py reads /proc."""
    from load import proc_snapshot

    return sum(own + reaped for comm, _, own, reaped in proc_snapshot().values()
               if comm.startswith("postgres"))


def fresh_schema(prefix: str) -> tuple[str, Any, str]:
    """A new PostgreSQL schema `<prefix>_<random>` at POSTGRES_URL: (its name, an engine on
    the database, to drop it after, and the URL whose connections use it)."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from storage.db import make_engine

    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = make_engine(POSTGRES_URL)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(POSTGRES_URL).update_query_dict(
        {"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    return schema, admin, url


def drop_schema(admin: Any, schema: str) -> None:
    """Drop what `fresh_schema` made, and dispose of its engine."""
    from sqlalchemy import text

    with admin.begin() as connection:
        connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    admin.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", type=int, default=12, help="POSTs a group (default 12)")
    parser.add_argument("--groups", type=int, default=150, help="timed groups (default 150)")
    parser.add_argument("--profile", action="store_true",
                        help="also print cProfile's top functions by CPU time")
    args = parser.parse_args(argv)
    if not 1 <= args.group <= 200 or not 1 <= args.groups <= 10_000:
        parser.error("out of bounds: group 1-200, groups 1-10000")

    import redis

    import intake.posts as webhook
    from bot.app import create_app
    from bot.webhook import stores_of
    from core.logs import configure_logging
    from core.settings import Settings
    from storage.db import create_schema, make_engine, session_scope
    from storage.tenants import upsert_tenant
    from tests.factories import TENANT, text_body

    schema, admin, url = fresh_schema("wagent_ws")
    engine = make_engine(url)
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    try:
        create_schema(engine)
        with session_scope(engine) as session:
            upsert_tenant(session, TENANT, now=datetime.now(UTC))
        sys.stdout = io.StringIO()  # the product's log lines (INFO, JSON) go here, not out
        configure_logging("INFO", "json")
        settings = Settings(database_url=url, redis_url=REDIS_URL, whatsapp_app_secret="x",
                            redis_prefix="wagent-ws", queue_name="wagent-ws")
        stores = stores_of(create_app(settings, engine=engine, redis_client=client))
        now = datetime.now(UTC)

        def group(k: int) -> list[tuple[bytes, datetime]]:
            posts = []
            for i in range(args.group):
                contact = k * args.group + i
                who = (f"55{11_900_000_000 + contact:011d}", f"BR.WS{contact:012d}")
                payload = text_body(f"oi, tem horário amanhã? [{contact}]", contact, who=who,
                                    sent_at=now)
                payload["entry"][0]["changes"][0]["value"]["messages"][0]["id"] = \
                    f"wamid.WS{contact:010d}"
                posts.append((json.dumps(payload).encode(), now))
            return posts

        groups = [group(k) for k in range(WARMUP_GROUPS + args.groups)]
        split: dict[str, float] = {}

        def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
            def run(*a: Any, **k: Any) -> Any:
                started = time.process_time()
                try:
                    return function(*a, **k)
                finally:
                    split[name] = split.get(name, 0.0) + time.process_time() - started
            return run

        for posts in groups[:WARMUP_GROUPS]:
            webhook.store_posts(stores, posts)
        steps = {"store_group": "store", "_enqueue_turns": "enqueue", "_inbound_only": "parse"}
        originals = {name: getattr(webhook, name) for name in steps}
        for name, label in steps.items():
            setattr(webhook, name, timed(label, originals[name]))
        profile = cProfile.Profile(time.process_time) if args.profile else None
        pg_before, cpu_before, wall_before = postgres_cpu_seconds(), time.process_time(), \
            time.perf_counter()
        if profile:
            profile.enable()
        for posts in groups[WARMUP_GROUPS:]:
            outcomes = webhook.store_posts(stores, posts)
            failures = [o for o in outcomes if isinstance(o, BaseException)]
            if failures:
                raise RuntimeError(f"a POST was refused: {failures[0]!r}")
        if profile:
            profile.disable()
        cpu = time.process_time() - cpu_before
        wall = time.perf_counter() - wall_before
        pg = postgres_cpu_seconds() - pg_before
        for name, original in originals.items():
            setattr(webhook, name, original)
        sys.stdout = sys.__stdout__
        posts_count = args.group * args.groups
        print(json.dumps({
            "group": args.group, "groups": args.groups,
            "web_cpu_ms_per_post": round(cpu / posts_count * 1000, 3),
            "postgres_cpu_ms_per_post": round(pg / posts_count * 1000, 3),
            "wall_ms_per_group": round(wall / args.groups * 1000, 2),
            "split_cpu_ms_per_post": {k: round(v / posts_count * 1000, 3)
                                      for k, v in sorted(split.items())},
        }, indent=2))
        if profile:
            pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(25)
    finally:
        sys.stdout = sys.__stdout__
        engine.dispose()
        drop_schema(admin, schema)
        client.flushdb()
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
