"""What every `wagent` command reads first: the settings, or exit status 2 naming each problem."""

import sys

from core.errors import SettingsError
from core.settings import Settings


def settings_or_exit(require: bool | tuple[str, ...] = True) -> Settings:
    """Settings from the environment (and `.env`); a missing or bad one is printed to stderr
    and the command exits with status 2. `require`: as Settings.from_env."""
    try:
        return Settings.from_env(require=require)
    except SettingsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
