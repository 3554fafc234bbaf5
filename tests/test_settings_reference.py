"""The references that cannot drift (issue 44 item 2): docs/SETTINGS.md and `wagent tenant update
--help` generated from the settings' own definitions (cli/settings_reference.py), the admin
API's OpenAPI document describing every route, docs/REPLAY.md naming every key the replay
runner accepts."""

import re
from dataclasses import fields
from pathlib import Path

import pytest
from pydantic.fields import FieldInfo

from bot.admin.api import ROUTES
from bot.admin.openapi import openapi_document
from cli import settings_reference
from cli.main import main
from core.settings import Settings
from replay import media_steps, runner, seen
from storage.tenant_config import ServiceSpec, TenantConfig, TenantSettings

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_has_a_description() -> None:
    assert settings_reference.missing_descriptions() == []


def test_the_page_is_the_one_the_code_generates() -> None:
    """Stale after a field was added, removed or described anew: `wagent docs settings`."""
    assert settings_reference.PAGE.read_text(encoding="utf-8") == settings_reference.render()


@pytest.mark.parametrize(("model", "key"), [(TenantSettings, "keep_cpf"),
                                             (TenantConfig, "hours"),
                                             (ServiceSpec, "buffer_minutes")])
def test_a_field_whose_description_is_removed_is_named_and_the_page_goes_stale(
        monkeypatch: pytest.MonkeyPatch, model: type, key: str) -> None:
    info: FieldInfo = model.model_fields[key]  # type: ignore[attr-defined]
    monkeypatch.setattr(info, "description", None)
    missing = settings_reference.missing_descriptions()
    assert any(m.endswith(f".{key}") for m in missing)
    assert settings_reference.render() != settings_reference.PAGE.read_text(encoding="utf-8")
    assert settings_reference.write(type("Args", (), {"check": True})()) == 1


def test_the_check_command_passes_on_the_committed_page(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs", "settings", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_the_page_lists_every_set_key_every_file_key_and_every_variable() -> None:
    page = settings_reference.PAGE.read_text(encoding="utf-8")
    keys = set(re.findall(r"^\| `([A-Za-z_]+)` \|", page, re.M))
    assert set(TenantSettings.model_fields) <= keys
    assert set(TenantConfig.model_fields) <= keys
    assert {f.name.upper() for f in fields(Settings) if f.name != "extra"} <= keys


def test_every_variable_of_env_example_is_a_setting_and_on_the_page() -> None:
    example = (ROOT / ".env.example").read_text()
    named = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]+)=", example, re.M))
    page = settings_reference.PAGE.read_text(encoding="utf-8")
    assert named and [n for n in named if f"`{n}`" not in page] == []


def test_tenant_update_help_gives_each_key_its_default_and_meaning(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["tenant", "update", "--help"])
    shown = capsys.readouterr().out
    keys = shown.split("keys (docs/SETTINGS.md):")[1].splitlines()
    for key, info in TenantSettings.model_fields.items():
        line = next(ln for ln in keys if ln.strip().startswith(f"{key} ")
                    or ln.strip().startswith(f"{key}:"))
        assert " ".join((info.description or "").split())[:30] in line, key
    assert "reminder_lead_minutes (default [1440])" in shown


def test_the_admin_api_document_describes_every_route_and_query_parameter() -> None:
    document = openapi_document(ROUTES)
    for route in ROUTES:
        operation = document["paths"][route.path][route.method.lower()]
        assert operation["summary"].strip(), (route.method, route.path)
        for parameter in operation["parameters"]:
            if parameter["in"] == "query":
                assert parameter["description"].strip(), (route.path, parameter["name"])


def test_replay_md_names_every_key_the_runner_accepts() -> None:
    text = (ROOT / "docs" / "REPLAY.md").read_text(encoding="utf-8")
    accepted = {
        *runner.SCENARIO_KEYS, *runner.STEP_OPTIONS, *runner.EXPECT_KEYS, *runner.NOTE_KEYS,
        *runner.PURPOSES, *runner.NETWORK_MODES, *runner.GRAPH_TEMPLATE_KEYS,
        *runner.GRAPH_FAIL_KEYS, *seen.KEYS, *media_steps.MEDIA_KEYS,
        *(option for options in runner.STEP_OPTIONS.values() for option in options),
        *(key for keys in runner.MATCHER_KEYS.values() for key in keys)}
    missing = sorted(k for k in accepted if f"`{k}`" not in text and f'"{k}"' not in text)
    assert missing == []
