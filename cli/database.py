"""`wagent db upgrade`: create or migrate the schema."""

import argparse

from cli.environment import settings_or_exit
from storage.migrate import upgrade as upgrade_to_head


def upgrade(args: argparse.Namespace) -> int:
    settings = settings_or_exit(require=False)
    upgrade_to_head(settings.database_url)
    print(f"schema at head on {settings.database_url.split('@')[-1]}")
    return 0
