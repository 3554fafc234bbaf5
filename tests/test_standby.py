"""Living beside Meta Business Agent on the same number (issue 45): the `standby` and
`messaging_handovers` webhook fields, who holds each thread, thread control by staff, the
tenant's rule for reminders in a thread another sender holds, and the staged launch's
allowlist. Fixtures (tests/fixtures/standby/) follow Meta's documented examples
(/work/shared/reference/meta-business-agent.md §2.2-2.3) with invented numbers.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from replay.runner import run_scenario_file

FIXTURES = Path(__file__).parent / "fixtures" / "standby"
SCENARIOS = Path(__file__).parent / "scenarios" / "standby"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.json")))
def test_standby_scenarios(name: str) -> None:
    result = run_scenario_file(SCENARIOS / f"{name}.json", cli=main)
    assert result.passed, "\n".join(result.failures + result.transcript)
    assert result.api_errors == 0 and result.unscripted_calls == 0 and not result.leftover
