"""`wagent conversations reply|hand-back|thread|attention`: a person takes over
(operations/staff.py, operations/threads.py)."""

import argparse
import sys
from datetime import datetime
from typing import Any

from rq import Queue

from cli.admin import run_for_tenant
from cli.environment import settings_or_exit
from operations import staff as staff_ops
from operations import threads as thread_ops
from storage.db import connect_redis
from storage.jobs import enqueue_flush


@run_for_tenant
def reply(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    """Store the reply and queue it in the outbox; the flush job is enqueued after the command
    (`_flush_soon`). Outside the 24-hour window give `--template NAME [--param P ...]`."""
    body: dict[str, Any] = {"author": args.author}
    if args.template:
        body["template"] = {"name": args.template, "parameters": list(args.param or [])}
    else:
        body["text"] = args.text
    return staff_ops.reply(session, tenant, args.conversation_id, body, author="cli", now=now)


def reply_and_flush(args: argparse.Namespace) -> int:
    status = reply(args)
    if status == 0:
        _flush_soon(args.conversation_id)
    return status


def _flush_soon(conversation_id: int) -> None:
    """Enqueue the outbox flush; without Redis the reconciler sends the part (stranded sends,
    workers/maintenance.py), which the command says."""
    settings = settings_or_exit(require=False)
    try:
        queue = Queue(settings.queue_name, connection=connect_redis(settings.redis_url))
        enqueue_flush(queue, settings.redis_prefix, conversation_id)
    except Exception as exc:  # redis' errors, or the URL's: the reply is stored either way
        print(f"note: the reply is queued in the outbox; Redis was not reachable ({exc}), so "
              "the reconciler sends it", file=sys.stderr)


@run_for_tenant
def hand_back(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return staff_ops.hand_back(session, tenant, args.conversation_id, now=now)


@run_for_tenant
def thread_control(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    """Take, pass back to Meta's agent, or release a conversation's thread (a Graph call with
    the environment's WhatsApp settings)."""
    with thread_ops.graph_client(settings_or_exit(require=False)) as graph:
        return thread_ops.thread_control(session, tenant, args.conversation_id,
                                         {"action": args.action}, graph=graph, now=now)


@run_for_tenant
def attention(args: argparse.Namespace, session: Any, tenant: Any, now: datetime) -> Any:
    return staff_ops.attention(session, tenant, now=now)
