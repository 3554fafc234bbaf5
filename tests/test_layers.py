"""The packages' arrows (docs/ARCHITECTURE.md, "Packages") and the job names RQ has stored.

`lint-imports` checks the contracts of pyproject.toml ([tool.importlinter]); a violation planted
in a copy of the tree must break them, and the copy without it must keep them. Jobs are stored by
dotted path: the names the previous release enqueued must still resolve and run.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from replay.environment import ReplayEnvironment
from tests.conftest import START
from tests.factories import TENANT
from workers.processes import InlineWorker

ROOT = Path(__file__).parent.parent
PACKAGES = ["cli", "replay", "bot", "workers", "operations", "intake", "agent", "usage",
            "whatsapp", "storage", "core", "payments"]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tree)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.html", "*.json"))
    return tree


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(tree), "PATH": ""})


@pytest.mark.parametrize(("module", "planted", "broken"), [
    ("bot/guard.py", "import workers.turns", "bot is not allowed to import workers"),
    ("workers/keeper.py", "import bot.webhook", "The HTTP edge and the job shells are independent"),
    ("storage/keys.py", "import intake.ingest", "storage and core import no product package"),
    ("storage/facts.py", "import storage.contacts", "No cycles are allowed in storage"),
    ("bot/console/catalogue.py", "import storage.catalogue",
     "bot is not allowed to import storage.catalogue"),
    ("cli/catalog.py", "from storage.tenants import upsert_tenant",
     "cli is not allowed to import storage.tenants"),
])
def test_a_planted_violation_breaks_the_contract_and_the_tree_without_it_keeps_them(
        tmp_path: Path, module: str, planted: str, broken: str) -> None:
    tree = _copy(tmp_path)
    clean = _lint(tree)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "5 kept, 0 broken" in clean.stdout
    with (tree / module).open("a") as source:
        source.write(f"\n\ndef _planted() -> None:\n    {planted}  # noqa\n")
    dirty = _lint(tree)
    assert dirty.returncode != 0
    assert broken in dirty.stdout, dirty.stdout


# every job name the previous release (29ad89e) enqueued: storage/jobs.py's constants,
# workers/keeper.py's RECONCILE_JOB, the admin's rejection, the cron's periodic jobs
PREVIOUS_RELEASE_JOBS = [
    ("workers.turns.run_turn", {"conversation_id": 424242}),
    ("workers.outbox.run_flush", {"conversation_id": 424242}),
    ("workers.compaction.compact_conversation", {"conversation_id": 424242}),
    ("workers.compaction.rederive_summary", {"conversation_id": 424242}),
    ("workers.facts.extract_facts", {"conversation_id": 424242}),
    ("workers.inbox.drain_inbox", {}),
    ("workers.maintenance.reconcile", {"recovery": True}),
    ("workers.maintenance.purge_retention", {}),
    ("workers.sweeper.sweep_inactive", {}),
    ("workers.admin_jobs.reject_fact", {"fact_id": 424242, "reason": "x", "by": "operator"}),
]


def test_jobs_enqueued_under_the_previous_release_names_run(redis_url: str | None) -> None:
    env = ReplayEnvironment(start=START, redis_url=redis_url)
    try:
        env.add_tenant(TENANT)
        jobs = [env.queue.enqueue(name, kwargs=kwargs) for name, kwargs in PREVIOUS_RELEASE_JOBS]
        InlineWorker([env.queue], connection=env.redis).work(burst=True,
                                                              logging_level="ERROR")
        outcomes = {job.func_name: job.get_status(refresh=True) for job in jobs}
        assert outcomes == {name: "finished" for name, _ in PREVIOUS_RELEASE_JOBS}
    finally:
        env.close()


def test_every_document_the_code_cites_is_in_the_repository() -> None:
    """A Markdown file named in a module (docstring or comment) is one of the repository, and a
    citation of the Sources names one ARCHITECTURE.md lists."""
    documents = {p.name for p in ROOT.rglob("*.md") if ".venv" not in p.parts}
    architecture = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    sources = set(re.findall(r"^- \*\*(\w+)\*\*", architecture, re.MULTILINE))
    missing, unlisted = [], []
    for package in [*PACKAGES, "tests", "bench"]:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            for name in re.findall(r"([\w./-]*\b[A-Za-z_]+\.md)\b", text):
                if Path(name).name not in documents:
                    missing.append(f"{path.relative_to(ROOT)}: {name}")
            for name in re.findall(r"Sources: (\w+)", text):
                if name not in sources:
                    unlisted.append(f"{path.relative_to(ROOT)}: {name}")
    assert sources >= {"WhatsApp", "Anthropic", "RQ"}
    assert missing == [] and unlisted == []
