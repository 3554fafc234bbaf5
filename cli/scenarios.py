"""`wagent replay FILE...` and `wagent demo`: run replay scenarios (docs/REPLAY.md) against
the doubles, with a transcript or one JSON object per scenario; exit status 1 when one fails."""

import argparse
import json
import os
import sys
from pathlib import Path

from cli import demo_view
from cli.chat import key_problem, relay_from_environment
from cli.main import main
from core.logs import configure_logging
from operations.costs import usd_fine
from replay.relay import Relay
from replay.runner import run_scenario_file

BUNDLED_SCENARIOS = Path(__file__).resolve().parent.parent / "replay" / "scenarios"


def replay(args: argparse.Namespace) -> int:
    live = None
    if getattr(args, "live", False):
        live = relay_from_environment()
        if live is None:
            print("wagent replay --live: no model to talk to. Set ANTHROPIC_API_KEY (or "
                  "ANTHROPIC_BASE_URL) to send the recorded customer messages to the real "
                  "model; without --live the scripted responses are replayed.", file=sys.stderr)
            return 2
        if problem := key_problem(live):
            print(f"wagent replay --live: {problem} Without --live the scripted responses "
                  "are replayed.", file=sys.stderr)
            return 2
    return _run_scenarios(list(args.files), as_json=args.json, quiet=args.quiet, live=live)


def demo(args: argparse.Namespace) -> int:
    """The bundled scenarios, each shown to both readers (cli/demo_view.py): the conversation
    in Portuguese, then the developer's trace in English; the verdicts as `wagent replay`'s."""
    files = sorted(BUNDLED_SCENARIOS.glob("*.json"))
    if args.json:
        return _run_scenarios(files, as_json=True, quiet=False)
    configure_logging(os.environ.get("REPLAY_LOG_LEVEL", "ERROR"), fmt="console")
    failed = 0
    for path in files:
        trace: list[str] = []
        result = run_scenario_file(path, echo=trace.append, cli=main)
        failed += not result.passed
        print("\n".join(demo_view.for_readers(path.name, trace)))
        _print_verdict(result)
    print(demo_view.VERDICT_NOTE)
    return 1 if failed else 0


def _run_scenarios(files: list[Path], *, as_json: bool, quiet: bool,
                   live: Relay | None = None) -> int:
    # LOG_LEVEL is the services' level; a replay prints its transcript and only errors
    configure_logging(os.environ.get("REPLAY_LOG_LEVEL", "ERROR"), fmt="console")
    failed = 0
    for path in files:
        echo = None if (as_json or quiet) else print
        if echo:
            print(f"== {path.name}")
        result = run_scenario_file(path, echo=echo, cli=main, live=live)
        failed += not result.passed
        if as_json:
            print(json.dumps(result.to_json(), ensure_ascii=False))
        else:
            _print_verdict(result)
    return 1 if failed else 0


def _scripted(errors: list[str]) -> str:
    """ " + 2 scripted error(s) (turn 529, turn 529)": the `model_fail` steps answered."""
    return f" + {len(errors)} scripted error(s) ({', '.join(errors)})" if errors else ""


def _print_verdict(result) -> None:  # type: ignore[no-untyped-def]
    usage = result.usage
    if not result.requests and not result.passed:
        print(f"-- {result.name}: FAILED")
        for failure in result.failures:
            print(f"   ✗ {failure}")
        print()
        return
    print(f"-- {result.name}: {'PASSED' if result.passed else 'FAILED'} · "
          f"{result.requests} Claude call(s), {result.api_errors} API error(s)"
          f"{_scripted(result.scripted_errors)}, "
          f"{len(result.sent)} send(s) · tokens in {usage['input_tokens']}, "
          f"cache write {usage['cache_creation_input_tokens']}, "
          f"cache read {usage['cache_read_input_tokens']}, out {usage['output_tokens']} · "
          f"model US$ {usd_fine(result.model_micro_usd)}")
    per = result.per_customer_message()
    if per["model_calls"] is not None:
        print(f"   per customer message ({result.customer_messages}): "
              f"{per['model_calls']:.2f} turn call(s) (facts and summaries apart), "
              f"{per['whatsapp_messages']:.2f} WhatsApp message(s)")
    for failure in result.failures:
        print(f"   ✗ {failure}")
    print()
