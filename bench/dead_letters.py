"""Benchmark: erasing a contact (`wagent contact forget`) with a large dead-letter table.

1. A fresh database (a temporary SQLite file, or a fresh PostgreSQL schema dropped after) with
   one tenant, the contact to erase and `--megabytes` of dead letters: webhook bodies of about
   3 KB (a POST of one to five text messages from other customers), written through the product's
   write path (`storage.dead_letters.add_dead_letter`), 20 of them naming the contact.
2. The erasure runs in a fresh child process, so that its peak resident memory (ru_maxrss) is
   its own: the figure printed is that peak above the process's size before the call, with the
   wall time of `storage.rights.forget_contact` and what it deleted. `--code DIR` (repeatable)
   runs the erasure of another checkout of the product (e.g. `git archive` of an older commit)
   against the same table, to measure before and after; the contact and its 20 dead letters
   are written again before each run.

Usage: python bench/dead_letters.py [--megabytes 900] [--database-url URL] [--code DIR ...]
Prints one JSON object. A script that prints figures, not a timed test.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from storage.db import create_schema, make_engine, session_scope  # noqa: E402
from storage.dead_letters import add_dead_letter  # noqa: E402
from storage.models import Contact, Tenant  # noqa: E402

NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)
PHONE_NUMBER_ID = "109876543210987"
ERASED = ("5511999990001", "BR.9000000000000000001")
BODY_BYTES = 3000
NAMING_THE_CONTACT = 20
BATCH = 1000

CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from datetime import UTC, datetime
from storage.db import make_engine, session_scope
from storage.rights import find_contact, forget_contact

engine = make_engine(sys.argv[1])
with engine.connect() as connection:  # connected and imported before the measure
    pass
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
began = time.perf_counter()
with session_scope(engine) as session:
    contact = find_contact(session, 1, sys.argv[3])
    counts = forget_contact(session, contact, now=datetime(2026, 6, 10, 12, 0, tzinfo=UTC))
seconds = time.perf_counter() - began
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": round(seconds, 3), "rss_before_mb": round(before / 1024, 1),
                  "peak_rss_mb": round(peak / 1024, 1),
                  "peak_above_before_mb": round((peak - before) / 1024, 1),
                  "dead_letters_deleted": counts.get("dead_letters")}))
"""


def fresh_url(database_url: str | None, directory: str) -> tuple[str, Any]:
    if not database_url:
        return f"sqlite:///{directory}/dead_letters.db", None
    schema = f"wagent_dl_{uuid.uuid4().hex[:8]}"
    admin = make_engine(database_url)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(database_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False), (admin, schema)


def webhook_body(rng: random.Random, n: int, who: tuple[str, str] | None = None) -> bytes:
    """A POST of 1 to 5 text messages, padded to about BODY_BYTES."""
    count = rng.randint(1, 5)
    senders = [who or (f"55{rng.randrange(10**10, 10**11)}", f"BR.{rng.randrange(10**18)}")
               for _ in range(count)]
    text_ = "x" * max(1, (BODY_BYTES - 420 * count) // count)
    value = {"messaging_product": "whatsapp",
             "metadata": {"display_phone_number": "5511999990000",
                          "phone_number_id": PHONE_NUMBER_ID},
             "contacts": [{"profile": {"name": "Cliente"}, "wa_id": w, "user_id": u}
                          for w, u in senders],
             "messages": [{"from": w, "from_user_id": u, "id": f"wamid.B{n:09d}{i}",
                           "timestamp": "1780318830", "type": "text", "text": {"body": text_}}
                          for i, (w, u) in enumerate(senders)]}
    return json.dumps({"object": "whatsapp_business_account", "entry": [
        {"id": "102030405060708", "changes": [{"field": "messages", "value": value}]}]}).encode()


def populate(url: str, megabytes: int) -> dict[str, Any]:
    engine = make_engine(url)
    create_schema(engine)
    with session_scope(engine) as session:
        session.add(Tenant(phone_number_id=PHONE_NUMBER_ID, name="Bench", created_at=NOW))
    rng = random.Random(16)
    total, letters, began = 0, 0, time.perf_counter()
    while total < megabytes * 1_000_000:
        with session_scope(engine) as session:
            for _ in range(BATCH):
                body = webhook_body(rng, letters)
                add_dead_letter(session, body=body, reason="bench", now=NOW,
                                phone_number_id=PHONE_NUMBER_ID)
                total, letters = total + len(body), letters + 1
    engine.dispose()
    return {"dead_letters": letters, "body_megabytes": round(total / 1e6, 1),
            "populate_seconds": round(time.perf_counter() - began, 1)}


def add_the_contact(url: str, run: int) -> None:
    """The contact to erase and the dead letters naming it (written again before each run)."""
    engine = make_engine(url)
    rng = random.Random(run)
    with session_scope(engine) as session:
        session.add(Contact(tenant_id=1, wa_id=ERASED[0], user_id=ERASED[1], created_at=NOW))
        for n in range(NAMING_THE_CONTACT):
            add_dead_letter(session, body=webhook_body(rng, 10**8 * (run + 1) + n, ERASED),
                            reason="bench", now=NOW, phone_number_id=PHONE_NUMBER_ID)
    engine.dispose()


def erase(url: str, code: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run([sys.executable, "-c", CHILD, url, str(code), ERASED[0]],
                          capture_output=True, text=True, env=env, cwd=code, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=900)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--code", type=Path, action="append",
                        help="a checkout whose erasure runs (repeatable; default: this one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        url, cleanup = fresh_url(args.database_url, directory)
        try:
            report: dict[str, Any] = {"database": make_url(url).get_backend_name(),
                                      **populate(url, args.megabytes), "erasures": []}
            for run, code in enumerate(args.code or [ROOT]):
                add_the_contact(url, run)
                report["erasures"].append({"code": str(code), **erase(url, code.resolve())})
        finally:
            if cleanup is not None:
                admin, schema = cleanup
                with admin.begin() as connection:
                    connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
                admin.dispose()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
