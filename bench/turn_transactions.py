"""Benchmark: the database work of one turn (workers/turns.handle_turn), counted by SQLAlchemy
events on the replay environment's engine: transactions committed, statements executed, and
reads of the conversation row (a SELECT of `conversation` by id).

Three turns of the bundled tenant (tests/factories.TENANT): a greeting answered in one call; a
booking (one tool round, then the reply); a second message in the same session answered in one
call. Only the statements run inside `handle_turn` count (not the job shell's lock and fence).

With `--budget-cents N` the tenant has a monthly model budget of N US cents (issue 49,
workers/budgets.py): its turns read the month's cost from the ledger, at most once per
CACHE_SECONDS per process.

Usage: python bench/turn_transactions.py [--database-url URL] [--budget-cents N]
(default: a SQLite file, no budget)
Prints one JSON object: per turn and in total, commits, statements and conversation reads.
"""

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import event  # noqa: E402

from replay.environment import ReplayEnvironment  # noqa: E402
from tests.conftest import START  # noqa: E402
from tests.factories import TENANT, text_body  # noqa: E402
from workers import turns  # noqa: E402

CONVERSATION_READ = re.compile(r"FROM conversation\s+WHERE conversation\.id = ", re.I)


class Counter:
    """Counts commits and statements while `active`."""

    def __init__(self) -> None:
        self.active, self.commits, self.statements, self.conversation_reads = False, 0, 0, 0

    def on_commit(self, *_: Any) -> None:
        self.commits += self.active

    def on_statement(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if self.active:
            self.statements += 1
            self.conversation_reads += bool(CONVERSATION_READ.search(statement))

    def take(self) -> dict[str, int]:
        taken = {"commits": self.commits, "statements": self.statements,
                 "conversation_reads": self.conversation_reads}
        self.commits = self.statements = self.conversation_reads = 0
        return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--budget-cents", type=int, default=None)
    args = parser.parse_args()
    env = ReplayEnvironment(start=START, database_url=args.database_url)
    counter = Counter()
    event.listen(env.engine, "commit", counter.on_commit)
    event.listen(env.engine, "before_cursor_execute", counter.on_statement)
    handle = turns.handle_turn

    def counted(*a: Any, **kw: Any) -> Any:
        counter.active = True
        try:
            return handle(*a, **kw)
        finally:
            counter.active = False

    turns.handle_turn = counted  # the job shell looks it up at call time
    results: dict[str, dict[str, int]] = {}
    try:
        env.add_tenant({**TENANT, "model_budget_cents": args.budget_cents}
                       if args.budget_cents else TENANT)
        env.messages_api.script("turn", [{"text": "Oi! Como posso ajudar?"}])
        env.post_webhook(json.dumps(text_body("oi", 1)).encode())
        env.drain()
        results["greeting"] = counter.take()
        env.messages_api.script("turn", [
            {"tool": "book_appointment", "input": {"service": "corte",
                                                   "start": "2026-06-02T14:00"}},
            {"text": "Marcado: terça 14:00."}])
        env.post_webhook(json.dumps(text_body("marca amanhã 14h", 2)).encode())
        env.drain()
        results["booking"] = counter.take()
        env.messages_api.script("turn", [{"text": "De nada!"}])
        env.post_webhook(json.dumps(text_body("obrigada", 3)).encode())
        env.drain()
        results["thanks"] = counter.take()
        sends = len(env.graph_api.sends)
    finally:
        turns.handle_turn = handle
        env.close()
    total = {k: sum(r[k] for r in results.values()) for k in ("commits", "statements",
                                                            "conversation_reads")}
    print(json.dumps({"database": "postgresql" if args.database_url else "sqlite",
                      "budget_cents": args.budget_cents, "turns": results, "total": total,
                      "sends": sends}))


if __name__ == "__main__":
    main()
