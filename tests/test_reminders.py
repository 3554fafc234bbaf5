"""Reminders and one-tap confirmations (issue 25): the scenarios of "How to show it", the
quiet-hours rule, the signed payloads, and what stays the same for "holds the slot"."""

from pathlib import Path

import pytest

from cli.main import main
from replay.runner import run_scenario_file

SCENARIOS = Path(__file__).parent / "scenarios" / "reminders"


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.json")))
def test_reminder_scenarios(name: str) -> None:
    result = run_scenario_file(SCENARIOS / f"{name}.json", cli=main)
    assert result.passed, "\n".join(result.failures + result.transcript)
    assert result.api_errors == 0 and result.unscripted_calls == 0 and not result.leftover
