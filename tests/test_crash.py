"""Crash safety: a real worker process killed with SIGKILL at each named point of a turn.

The worker runs in a subprocess (workers.processes.InlineWorker, an RQ SimpleWorker: the job runs in
the worker process, so the kill takes the whole worker down, as `kill -9` or an OOM would). RQ
requeues a killed job only after its heartbeat expires and a maintenance pass runs: the test runs
that pass itself (with a timestamp past the heartbeat) and lets the dead worker's turn lock expire,
instead of waiting minutes. Then a healthy worker finishes, and the database and the Graph API
double must show one booking and one reply, every time. Needs a real Redis (a subprocess cannot
share fakeredis).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rq.registry import StartedJobRegistry
from sqlmodel import select

from core import faults
from replay.environment import ACCESS_TOKEN, API_KEY, APP_SECRET, ReplayEnvironment
from storage.db import session_scope
from storage.keys import lock_key
from storage.models import Appointment, Message, Usage
from tests.conftest import REDIS_UP, REDIS_URL, START
from tests.factories import TENANT, text_body

pytestmark = [pytest.mark.redis, pytest.mark.fuzz]  # the fuzz tier: real processes killed
ROOT = Path(__file__).resolve().parent.parent
WORKER = """
import sys
from datetime import datetime
from core import clock
from core.settings import Settings
from workers.processes import InlineWorker
from workers.runtime import build_runtime, set_runtime

clock.set_clock(clock.FrozenClock(datetime.fromisoformat(sys.argv[1])))
runtime = build_runtime(Settings.from_env())
set_runtime(runtime)
InlineWorker([runtime.queue], connection=runtime.redis).work(burst=True, logging_level="ERROR")
"""


def _run_worker(env: ReplayEnvironment, crash_at: str | None) -> int:
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
    done = subprocess.run([sys.executable, "-c", WORKER, env.clock.now().isoformat()],
                          cwd=ROOT, env=variables, timeout=120, capture_output=True)
    return done.returncode


def _maintenance_pass(env: ReplayEnvironment) -> None:
    """What a worker's maintenance does once the dead worker's heartbeat expired."""
    StartedJobRegistry(queue=env.queue).cleanup(timestamp=time.time() + 3600)
    for key in env.redis.scan_iter(lock_key(env.namespace, "turn", "*")):  # its TTL ran out
        env.redis.delete(key)


@pytest.mark.skipif(not REDIS_UP, reason="a worker subprocess needs a real Redis")
@pytest.mark.parametrize("point", ["before_model_call", "before_tool_round",
                                   "after_send_before_mark"])
def test_a_worker_killed_mid_turn_gives_one_booking_and_one_reply(point: str) -> None:
    env = ReplayEnvironment(start=START, redis_url=REDIS_URL)
    try:
        env.add_tenant(TENANT)
        env.messages_api.script("turn", [
            {"tool": "book_appointment", "input": {"service": "corte",
                                                   "start": "2026-06-02T14:00"}},
            {"text": "Marcado: terça 14:00 com a Júlia."}, {"text": "Marcado: terça 14:00."}])
        body = text_body("marca amanhã às 14h", 1, sent_at=env.clock.now())
        assert env.post_webhook(json.dumps(body).encode()) == 200
        assert _run_worker(env, crash_at=point) == -9, "the worker was killed"
        _maintenance_pass(env)
        assert _run_worker(env, crash_at=None) == 0
        env.drain()
        replies = [s for s in env.graph_api.sends if s.wamid]
        assert len(replies) == 1 and "14:00" in replies[0].body["text"]["body"]
        assert env.messages_api.api_errors == 0
        with session_scope(env.engine) as session:
            assert len(session.exec(select(Appointment)).all()) == 1
            inbound = session.exec(select(Message).where(Message.direction == "inbound")).one()
            assert inbound.answered_at is not None
            assert len(session.exec(select(Usage)).all()) == len(env.messages_api.calls), \
                "every model call answered keeps one usage row, none lost with the killed turn"
    finally:
        env.close()


def test_an_action_at_a_point_the_code_does_not_have_is_refused() -> None:
    """A renamed crash point cannot leave a test's action silently never run."""
    with pytest.raises(ValueError, match="no crash point"):
        with faults.meanwhile("after_tool_before_store", lambda: None):
            pass
