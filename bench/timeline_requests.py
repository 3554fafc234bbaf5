"""Benchmark: the long run of the timeline's property test (tests/test_timeline.py).

Builds random stored histories of every message kind the product stores (tests/histories.py:
customer texts, media, taps and held messages; the agent's replies and tool rounds; reminders,
notices, handoff alerts and messages, tap acknowledgements, template follow-ups, apologies,
staff replies, owner echoes, rows stored before authors were recorded; product sends inside a
tool round), with a random summary end, prune boundary, `keep_messages` and hard cap, builds
the turn's request as workers/turns.py does, and checks it against the Messages API double's
rules (replay/messages_api.validate_request) and that the waiting customer messages are in it.

Usage: python bench/timeline_requests.py [--histories 10000]
Prints one JSON object: histories tried, refusals, the first refusals' reasons, seconds.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.histories import Row, histories  # noqa: E402
from tests.test_timeline import check_history  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=10_000)
    args = parser.parse_args()
    tried, refused = 0, []
    kinds: set[str] = set()

    @settings(max_examples=args.histories, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(histories(), st.integers(0, 40), st.integers(0, 12), st.integers(0, 40),
           st.booleans())
    def run(rows: list[Row], summarized: int, keep: int, pruned: int, hard_cap: bool) -> None:
        nonlocal tried
        tried += 1
        kinds.update(r.kind for r in rows)
        problem = check_history(rows, summarized, keep, pruned, hard_cap)
        if problem:
            refused.append(problem)

    started = time.monotonic()
    run()
    print(json.dumps({"histories": tried, "refusals": len(refused),
                      "first_refusals": refused[:5], "kinds_seen": sorted(kinds),
                      "seconds": round(time.monotonic() - started, 1)}, ensure_ascii=False))


if __name__ == "__main__":
    main()
