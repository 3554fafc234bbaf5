"""Every Redis key of the product is named in storage/keys.py (the metrics hash in
core/metrics.py, which cannot import storage): a key renamed there is renamed for every
reader, such as the sweeper's check of the lock a running turn holds."""

import re
from pathlib import Path

from core.metrics import metrics_key
from storage import keys

ROOT = Path(__file__).resolve().parent.parent
HOMES = {Path("storage/keys.py"), Path("core/metrics.py")}
# an f-string that starts with a Redis prefix followed by a separator: a key being spelled
SPELLED = re.compile(r"""f["']\{[\w.]*prefix\}:""")


def _all_keys(prefix: str) -> list[str]:
    return [keys.token_key(prefix, "turn", 7), keys.token_key(prefix, "facts", 7),
            keys.lock_key(prefix, "turn", 7), keys.lock_key(prefix, "compact", 7),
            keys.period_key(prefix, "sweep", 7), keys.keeper_lock_key(prefix),
            keys.alive_key(prefix), keys.recovery_key(prefix),
            keys.console_session_key(prefix, "7"), keys.auth_failures_key(prefix, "tenant", "7"),
            metrics_key(prefix)]


def test_every_key_is_under_the_prefix_and_no_two_collide() -> None:
    names = _all_keys("wagent-a")
    assert all(name.startswith("wagent-a:") for name in names)
    assert len(set(names)) == len(names)
    assert not set(names) & set(_all_keys("wagent-b"))


def test_the_turn_token_is_the_turns_coalescing_token() -> None:
    assert keys.turn_token_key("p", 7) == keys.token_key("p", "turn", 7)


def test_no_module_spells_a_key_outside_its_home() -> None:
    spelled = []
    for package in ("bot", "cli", "core", "intake", "agent", "operations", "replay", "storage",
                    "usage", "whatsapp", "workers", "bench"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative not in HOMES and SPELLED.search(path.read_text(encoding="utf-8")):
                spelled.append(str(relative))
    assert spelled == []
