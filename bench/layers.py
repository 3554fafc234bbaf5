"""Per package: modules, lines, internal imports at the top and inside functions; then the
`lint-imports` verdict. Run from a checkout's root: `.venv/bin/python bench/layers.py [ROOT]`
(ROOT defaults to the current directory; a checkout without contracts says so)."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGES = ["cli", "replay", "bot", "workers", "operations", "intake", "agent", "usage",
            "whatsapp", "storage", "core"]


def imports(path: Path, internal: set[str]) -> tuple[int, int]:
    """(top-level, in-function) imports of our own packages in one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside = {id(node) for fn in ast.walk(tree)
              if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
              for node in ast.walk(fn) if node is not fn}
    top = nested = 0
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 \
            and node.module else []
        for name in names:
            if name.split(".")[0] in internal:
                nested += id(node) in inside
                top += id(node) not in inside
    return top, nested


def main(root: Path) -> None:
    present = [p for p in PACKAGES if (root / p).is_dir()]
    print("| package | modules | lines | imports at the top | in functions |")
    print("|---|---:|---:|---:|---:|")
    totals = [0, 0, 0, 0]
    for package in present:
        files = [f for f in (root / package).rglob("*.py") if "versions" not in f.parts]
        lines = sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files)
        top = nested = 0
        for f in files:
            t, n = imports(f, set(present))
            top, nested = top + t, nested + n
        row = [len(files), lines, top, nested]
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        print(f"| {package} | " + " | ".join(str(x) for x in row) + " |")
    share = totals[3] / max(1, totals[2] + totals[3])
    print("| all | " + " | ".join(str(x) for x in totals) + f" |\n\nin functions: {share:.0%}")
    linter = Path(sys.executable).parent / "lint-imports"
    if "importlinter" not in (root / "pyproject.toml").read_text(encoding="utf-8"):
        print("lint-imports: no contracts in pyproject.toml")
        return
    run = subprocess.run([str(linter), "--no-cache"], cwd=root, capture_output=True, text=True)
    verdicts = [line for line in run.stdout.splitlines() if line.endswith(("KEPT", "BROKEN"))
                or line.startswith("Contracts:")]
    print("lint-imports:\n" + "\n".join(verdicts))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("."))
