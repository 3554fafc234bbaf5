"""`wagent report PHONE_NUMBER_ID CONVERSATION_ID`: one conversation's usage (context per call, the
saw-tooth), cache-read share, compactions, cost and replies by delivery state; writes a plot."""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cli.admin import conversation_ref
from cli.environment import settings_or_exit
from storage.db import make_engine
from usage.report import conversation_report, render_svg


def report(args: argparse.Namespace) -> int:
    settings = settings_or_exit(require=False)
    engine = make_engine(settings.database_url)
    try:
        conversation_id = conversation_ref(args, "report", engine)
        report = conversation_report(engine, conversation_id)
    except (LookupError, ValueError) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    calls = report.pop("calls_detail")
    plot = args.plot or Path(f"conversation-{conversation_id}.svg")
    plot.write_text(render_svg(report["context_per_call"], title=(
        f"conversation {conversation_id}: context tokens per call")), encoding="utf-8")
    if args.json:
        print(json.dumps({**report, "plot": str(plot)}))
        return 0
    print(f"{'when (UTC)':<17} {'purpose':<8} {'context':>8} {'read':>8} {'write':>7} "
          f"{'input':>7} {'output':>6}")
    for c in calls:
        print(f"{c.at:%Y-%m-%d %H:%M} {c.purpose:<8} {c.context_tokens:>8} "
              f"{c.cache_read_input_tokens:>8} {c.cache_creation_input_tokens:>7} "
              f"{c.input_tokens:>7} {c.output_tokens:>6}")
    print(f"calls {report['calls']} · compactions {report['compactions']} · peak context "
          f"{report['peak_context']} · cache-read share {report['cache_read_share']:.1%} · "
          f"billed-equivalent input {report['billed_equivalent_input']} · "
          f"cost ${report['cost_usd']:.4f} · plot {plot}")
    _print_replies(report["replies"])
    return 0


def _print_replies(replies: dict[str, Any]) -> None:
    """`wagent report`'s delivery lines: replies by state, then each one not (yet) delivered."""
    counts = " · ".join(f"{state} {n}" for state, n in replies["by_state"].items() if n)
    print(f"replies {replies['total']}" + (f" · {counts}" if counts else ""))
    for reply in replies["not_delivered"]:
        print(f"  reply #{reply['message_id']} {reply['at'][:16].replace('T', ' ')} UTC: "
              f"{reply['state']} · {reply['reason']}")
