"""docs/SETTINGS.md, generated from the code's own definitions, and the key list of
`wagent tenant update --help`: the tenant settings (storage/tenant_config.TenantSettings, whose
fields are the `--set` keys, the console's settings and the admin API's PATCH; defaults from
storage/models.Tenant), the tenant file's catalogue keys (TenantConfig and its specs) and the
environment variables (core/settings.Settings, each field's `doc`).

`python -m cli.settings_reference` (or `wagent docs settings`) writes the page; `--check` exits
1 when the page is stale. tests/test_settings_reference.py fails when a field has no
description or the page is stale: a new field with a `description=` only needs the page
regenerated.
"""

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from core.settings import Settings
from storage.models import Tenant
from storage.tenant_config import (
    FactKeySpec,
    HoursExceptionSpec,
    ProfessionalSpec,
    ServiceSpec,
    TemplateButton,
    TemplateSpec,
    TenantConfig,
    TenantSettings,
    TimeOffSpec,
)

PAGE = Path(__file__).resolve().parent.parent / "docs" / "SETTINGS.md"
# the tenant file's nested objects: (heading, model, where it goes)
NESTED: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("A service", ServiceSpec, "`services[]`"),
    ("A professional", ProfessionalSpec, "`professionals[]`"),
    ("Time off", TimeOffSpec, "`professionals[].time_off[]`"),
    ("An hours exception", HoursExceptionSpec,
     "`hours_exceptions[]`, `professionals[].hours_exceptions[]`"),
    ("A template", TemplateSpec, "`templates[]`"),
    ("A template's button", TemplateButton, "`templates[].buttons[]` (or a plain title)"),
    ("A fact key of your own", FactKeySpec, "`fact_keys[]` (or a default key's name)"),
)
# variables read outside Settings, where they are read (`doc` of their own)
OTHER_VARIABLES = (
    ("REPLAY_LOG_LEVEL", "ERROR", "log level of `wagent replay`, `wagent demo` and "
                                  "`wagent chat` (cli/scenarios.py, replay/chat.py)"),
)


def _default(value: Any) -> str:
    """A default as the page shows it: none, empty, `text`, or JSON (`[1440]`, `false`)."""
    if value is None:
        return "none"
    if value == "":
        return "empty"
    if isinstance(value, str):
        return f"`{value}`"
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _model_default(info: FieldInfo) -> Any:
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return info.default


def tenant_default(key: str) -> str:
    """The stored default of a tenant setting (storage/models.Tenant), as the page shows it."""
    info = Tenant.model_fields.get(key)
    return "" if info is None else _nested_default(key, info)


def _values(info: FieldInfo) -> str:
    """The values a field takes, in words: a Literal's choices, numeric bounds, max length."""
    parts = []
    choices = [a for arg in get_args(info.annotation) if get_origin(arg) is Literal
               for a in get_args(arg)]
    if get_origin(info.annotation) is Literal:
        choices = list(get_args(info.annotation))
    if choices:
        parts.append(" | ".join(f"`{c}`" for c in choices))
    bounds = {type(m).__name__: m for m in info.metadata}
    low, high = getattr(bounds.get("Ge"), "ge", None), getattr(bounds.get("Le"), "le", None)
    if low is not None or high is not None:
        parts.append(f"{'' if low is None else f'{low:,}'}–{'' if high is None else f'{high:,}'}")
    longest = getattr(bounds.get("MaxLen"), "max_length", None)
    if longest is not None:
        parts.append(f"≤ {longest:,} {'items' if _is_list(info) else 'chars'}")
    return ", ".join(parts)


def _is_list(info: FieldInfo) -> bool:
    kinds = [info.annotation, *get_args(info.annotation)]
    return any(get_origin(k) in (list, dict) for k in kinds) or any(
        get_origin(a) in (list, dict) for k in kinds for a in get_args(k))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _rows(model: type[BaseModel], keys: list[str], default: Any) -> Iterator[str]:
    for key in keys:
        info = model.model_fields[key]
        name = info.alias or key
        yield (f"| `{name}` | {_cell(default(key, info))} | {_cell(_values(info))} | "
               f"{_cell(info.description or '')} |")


def settings_keys() -> list[str]:
    """The keys a business may change (`--set`, the console, PATCH), in the model's order."""
    return list(TenantSettings.model_fields)


def file_only_keys() -> list[str]:
    """Keys of a tenant file that are not settings: the number and the catalogue."""
    return [k for k in TenantConfig.model_fields if k not in TenantSettings.model_fields]


def missing_descriptions() -> list[str]:
    """Every documented field without a description: `model.field` or the variable's name."""
    missing = [f"TenantSettings.{k}" for k, info in TenantSettings.model_fields.items()
               if not info.description]
    missing += [f"TenantConfig.{k}" for k in file_only_keys()
                if not TenantConfig.model_fields[k].description]
    missing += [f"{model.__name__}.{k}" for _, model, _ in NESTED
                for k, info in model.model_fields.items() if not info.description]
    missing += [f.name.upper() for f in fields(Settings)
                if f.name != "extra" and not f.metadata.get("doc")]
    return missing


def _env_default(f: Any) -> str:
    value = f.default if f.default is not MISSING else ""
    return "(secret)" if not f.repr and value == "" else _default(value)


def render() -> str:
    """The whole page."""
    head = "| key | default | values | meaning |\n|---|---|---|---|"
    lines = [
        "# Settings reference",
        "",
        "<!-- Generated by `wagent docs settings` (cli/settings_reference.py) from the code's "
        "own definitions; do not edit by hand: tests/test_settings_reference.py fails when "
        "this page is stale. -->",
        "",
        "Generated from the code: the tenant settings of `storage/tenant_config.py` (defaults "
        "from `storage/models.py`), the environment variables of `core/settings.py`. How to "
        "use them: [CONFIGURE.md](CONFIGURE.md) (a business) and [DEPLOY.md](DEPLOY.md) (a "
        "machine).",
        "",
        "## Tenant settings",
        "",
        "What a business may change, by any of the three doors: `wagent tenant update "
        "PHONE_NUMBER_ID --set key=value` (JSON values parsed: `--set 'reminder_lead_minutes="
        "[1440,120]'`), the console's Settings page, `PATCH /admin/tenants/{id}`; and in the "
        "tenant file of `wagent tenant create`. Unknown keys and malformed values are refused "
        "with every problem named.",
        "",
        head,
        *_rows(TenantSettings, settings_keys(), lambda k, _: tenant_default(k)),
        "",
        "## Tenant file: the number and the catalogue",
        "",
        "Keys of the file given to `wagent tenant create` (and of a replay scenario's `tenant`) "
        "besides the settings above; `wagent catalog` changes the catalogue afterwards.",
        "",
        head,
        *_rows(TenantConfig, file_only_keys(), _nested_default),
    ]
    for heading, model, where in NESTED:
        lines += ["", f"### {heading}: {where}", "", head,
                  *_rows(model, list(model.model_fields), _nested_default)]
    lines += [
        "",
        "## Environment variables",
        "",
        "Read by every `wagent` process from the environment or the `.env` of the directory "
        "it runs in ([.env.example](../.env.example) is a starting file). Required in "
        "production: " + ", ".join(f"`{n.upper()}`" for n in Settings.REQUIRED_IN_PRODUCTION)
        + ". Units: seconds unless the name says otherwise.",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
        *(f"| `{f.name.upper()}` | {_cell(_env_default(f))} | {_cell(f.metadata['doc'])} |"
          for f in fields(Settings) if f.name != "extra"),
        *(f"| `{name}` | `{default}` | {_cell(doc)} |" for name, default, doc in OTHER_VARIABLES),
        "",
    ]
    return "\n".join(lines)


def _nested_default(key: str, info: FieldInfo) -> str:
    if info.is_required():
        return "(required)"
    return _default(_model_default(info))


def update_help() -> str:
    """The epilog of `wagent tenant update --help`: every key with its default and meaning."""
    lines = ["keys (docs/SETTINGS.md):"]
    for key in settings_keys():
        info = TenantSettings.model_fields[key]
        default = tenant_default(key).replace("`", "")
        shown = "" if default == "(required)" else f" (default {default})"
        lines.append(f"  {key}{shown}: {' '.join((info.description or '').split())}")
    return "\n".join(lines)


def write(args: argparse.Namespace) -> int:
    """`wagent docs settings [--check]`."""
    text = render()
    missing = missing_descriptions()
    if missing:
        print("no description: " + ", ".join(missing), file=sys.stderr)
        return 1
    if args.check:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is stale: run `wagent docs settings`", file=sys.stderr)
            return 1
        print(f"{PAGE.name} is up to date")
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m cli.settings_reference",
                                     description="write docs/SETTINGS.md from the code")
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    raise SystemExit(write(parser.parse_args()))
