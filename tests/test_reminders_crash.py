"""The reminders pass killed (issue 25, "A kill test"): a worker killed with SIGKILL during a
reminder pass, then one killed mid-send. No reminder is sent twice; every reminder not in
flight at a kill is sent after the restart; the one killed mid-send is marked unknown (shown
as such: storage/delivery.py) and never sent again. Lighter than tests/test_faults.py: the
named crash points of core/faults.py in a subprocess, as tests/test_crash.py does."""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from rq.registry import StartedJobRegistry
from sqlmodel import col, select

from replay.environment import ACCESS_TOKEN, API_KEY, APP_SECRET, ReplayEnvironment
from storage import reminders
from storage.db import session_scope
from storage.keys import lock_key
from storage.models import Appointment, Contact, Message, Outbound, Reminder, Tenant
from tests.conftest import REDIS_UP, REDIS_URL, START
from tests.factories import TENANT
from workers.reminders import CHUNK

pytestmark = [pytest.mark.redis, pytest.mark.fuzz]  # the fuzz tier: real processes killed
ROOT = Path(__file__).resolve().parent.parent
PROCESS = """
import sys
from datetime import datetime
from core import clock
from core.settings import Settings
from workers.reminders import reminder_pass
from workers.processes import InlineWorker
from workers.runtime import build_runtime, set_runtime

clock.set_clock(clock.FrozenClock(datetime.fromisoformat(sys.argv[1])))
runtime = build_runtime(Settings.from_env())
set_runtime(runtime)
if sys.argv[2] == "pass":
    reminder_pass(runtime, now=clock.now())
else:
    InlineWorker([runtime.queue], connection=runtime.redis).work(burst=True,
                                                                  logging_level="ERROR")
"""
CUSTOMERS = CHUNK + 3  # a killed pass leaves its first chunk queued, the rest scheduled


def _run(env: ReplayEnvironment, what: str, crash_at: str | None) -> int:
    variables = {
        **os.environ, "DATABASE_URL": str(env.engine.url), "REDIS_URL": REDIS_URL,
        "REDIS_PREFIX": env.namespace, "QUEUE_NAME": env.namespace,
        "WHATSAPP_APP_SECRET": APP_SECRET, "WHATSAPP_VERIFY_TOKEN": "x",
        "WHATSAPP_ACCESS_TOKEN": ACCESS_TOKEN, "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": env.messages_api.base_url,
        "GRAPH_API_BASE_URL": env.graph_api.base_url, "LOG_LEVEL": "ERROR",
    }
    variables.pop("WAGENT_CRASH_AT", None)
    if crash_at:
        variables["WAGENT_CRASH_AT"] = crash_at
    done = subprocess.run([sys.executable, "-c", PROCESS, env.clock.now().isoformat(), what],
                          cwd=ROOT, env=variables, timeout=120, capture_output=True)
    return done.returncode


def _book(env: ReplayEnvironment) -> None:
    """CUSTOMERS bookings tomorrow at 10:00 local, made two days ago; the customers wrote an
    hour ago (the window is open: the reminders are texts with reply buttons)."""
    env.add_tenant(TENANT)
    now = env.clock.now()
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant)).one()
        for n in range(CUSTOMERS):
            contact = Contact(tenant_id=tenant.id or 0, wa_id=f"551199999{n:04d}",
                              profile_name="Cliente", last_inbound_at=now - timedelta(hours=1),
                              created_at=now)
            session.add(contact)
            session.flush()
            start = now + timedelta(hours=23, minutes=30)
            booking = Appointment(tenant_id=tenant.id or 0, contact_id=contact.id or 0,
                                  service_id=1, professional_id=1, start_at=start,
                                  end_at=start + timedelta(hours=1),
                                  created_at=now - timedelta(days=2))
            session.add(booking)
            session.flush()
            reminders.schedule(session, tenant, booking, now=now - timedelta(days=2))


def _cleanup_dead_worker(env: ReplayEnvironment) -> None:
    StartedJobRegistry(queue=env.queue).cleanup(timestamp=env.clock.now().timestamp() + 3600)
    for key in env.redis.scan_iter(lock_key(env.namespace, "*", "*")):  # their TTLs ran out
        env.redis.delete(key)


@pytest.mark.skipif(not REDIS_UP, reason="a worker subprocess needs a real Redis")
def test_killed_during_a_pass_and_mid_send_nothing_twice_nothing_lost() -> None:
    env = ReplayEnvironment(start=START, redis_url=REDIS_URL)
    try:
        _book(env)
        assert _run(env, "pass", "after_reminder_queued") == -9, "killed in the pass"
        with session_scope(env.engine) as session:
            statuses = sorted(r.status for r in session.exec(select(Reminder)))
        assert statuses == ["queued"] * CHUNK + ["scheduled"] * (CUSTOMERS - CHUNK)
        assert _run(env, "pass", None) == 0  # the restart: the rest are queued
        assert _run(env, "worker", "after_send_before_mark") == -9, "killed mid-send"
        assert len(env.graph_api.accepted) == 1
        _cleanup_dead_worker(env)
        env.clock.advance(timedelta(minutes=11))  # past STALE_SENDING: the claim is stale
        env.cron()  # settles the send killed mid-way, re-flushes the stranded ones
        env.cron()
        sends = [s.body["to"] for s in env.graph_api.accepted]
        assert sorted(sends) == sorted(set(sends)), "no reminder sent twice"
        assert len(sends) == CUSTOMERS, "every reminder not in flight was sent"
        with session_scope(env.engine) as session:
            rows = session.exec(select(Reminder)).all()
            assert all(r.status == "queued" and r.message_id for r in rows)
            messages = session.exec(select(Message).where(col(Message.id).in_(
                [r.message_id for r in rows]))).all()
            states = sorted(m.delivery_status or "" for m in messages)
            parts = session.exec(select(Outbound)).all()
        assert len(parts) == CUSTOMERS  # one outbox part per reminder, none made twice
        assert states == ["sent"] * (CUSTOMERS - 1) + ["unknown"]
    finally:
        env.close()
