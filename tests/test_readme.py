"""The front door (issue 44 item 1): a README under 250 lines whose commands and tenant file
work as written, one guide per reader in docs/, and no link among them that leads nowhere."""

import re
from pathlib import Path

import pytest
import yaml

from cli.main import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GUIDES = ("CONFIGURE.md", "SETTINGS.md", "DEPLOY.md", "OPERATE.md", "REPLAY.md",
          "ARCHITECTURE.md")


def _block(name: str) -> str:
    found = re.search(rf"<!-- {name} -->\n```\w*\n(.*?)```\n<!-- /{name} -->",
                      README.read_text(encoding="utf-8"), re.S)
    assert found is not None, name
    return found.group(1)


def test_the_readme_is_short_and_links_every_guide() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    assert all(f"](docs/{guide})" in text for guide in GUIDES)
    assert "wagent dev" in text and "wagent chat" in text


@pytest.mark.parametrize("page", ["README.md", *(f"docs/{g}" for g in GUIDES)])
def test_every_relative_link_and_anchor_leads_somewhere(page: str) -> None:
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(((?!https?:|mailto:)[^)\s]+)\)", text):
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), (page, target)
        if anchor and linked.suffix == ".md" and linked.parent != ROOT / "bench":
            headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, (page, target)


def test_the_readmes_tenant_file_creates_a_business(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/wagent.db")
    assert main(["db", "upgrade"]) == 0
    tenant_file = tmp_path / "barbearia.yaml"
    tenant_file.write_text(_block("tenant-example"), encoding="utf-8")
    assert main(["tenant", "create", str(tenant_file)]) == 0
    assert "Barbearia Exemplo" in capsys.readouterr().out
    tenant = yaml.safe_load(_block("tenant-example"))
    assert main(["catalog", "show", tenant["phone_number_id"]]) == 0
    assert "Corte masculino" in capsys.readouterr().out


def test_every_tier_the_main_command_leaves_out_has_a_command_ci_runs() -> None:
    """No test is left out of CI unnoticed: each marker the README's test-command deselects
    (`not faults`, `not fuzz`...) has its own `<!-- NAME-command -->` block running `-m NAME`,
    and .ci/run's tier loop names every such block, the main one first."""
    main_command = _block("test-command")
    left_out = re.findall(r"not (\w+)", main_command)
    assert set(left_out) == {"faults", "browser", "fuzz"}, main_command
    loop = re.search(r"^for tier in ([\w\- ]+); do", (ROOT / ".ci/run").read_text(encoding="utf-8"),
                     re.M)
    assert loop is not None
    tiers = loop.group(1).split()
    assert tiers[0] == "test-command"
    for marker in left_out:
        assert f"-m {marker} " in _block(f"{marker}-command"), marker
        assert f"{marker}-command" in tiers, marker
