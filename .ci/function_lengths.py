"""Fail when a function of the product source is longer than LIMIT lines (docs/ARCHITECTURE.md:
small functions). Tests, migrations and benchmarks are apart. Run by .ci/run:
`.venv/bin/python .ci/function_lengths.py [--limit N]`; prints each offender as path:line name
length, longest first, and exits 1 when there is one.
"""

import argparse
import ast
import sys
import tomllib
from pathlib import Path

LIMIT = 60  # lines from `def` to the last line of the body, docstring included
ROOT = Path(__file__).resolve().parent.parent


def product_packages() -> list[str]:
    """The packages import-linter guards ([tool.importlinter] root_packages): the product."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["importlinter"]["root_packages"])


def long_functions(limit: int) -> list[tuple[int, str]]:
    """(length, "path:line name length") of each function over `limit` lines."""
    found: list[tuple[int, str]] = []
    for package in product_packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > limit:
                        where = f"{path.relative_to(ROOT)}:{node.lineno}"
                        found.append((length, f"{where} {node.name} {length}"))
    return sorted(found, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=LIMIT)
    limit = parser.parse_args().limit
    found = long_functions(limit)
    for _, line in found:
        print(line)
    if found:
        print(f"{len(found)} function(s) over {limit} lines", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
