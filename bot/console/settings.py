"""The console's settings page: the business's instructions, booking limits, reminders and
fact keys, the grouped sections (privacy and calendar, waitlist, Pix deposit, the monthly model
budget: GROUPS), with a
preview of what the agent reads. Every value goes through operations/settings.py, the admin
API's and the CLI's path: one home for the rules; a refused change changes nothing."""

import json
from typing import Any

import structlog

from agent.context import TenantPrompt, context_block, instructions_text
from agent.tools.facts_rules import render_awaiting_lines, render_fact_lines
from bot.console.frame import Page, PageResult, Redirect, _language
from bot.console.results_texts import usd_text
from bot.console.settings_texts import settings_texts
from bot.console.texts import translate_problem
from core import clock
from operations import settings as settings_ops
from operations.errors import MAPPED, admin_error
from operations.service import clean_text
from storage.errors import TenantConfigError
from storage.models import Tenant
from storage.tenant_config import KNOWN_MODELS, parse_price, price_text

log = structlog.get_logger(__name__)

BOOKING_LIMITS = ("booking_notice_minutes", "booking_horizon_days", "max_upcoming_bookings")
# reminders (issue 25): the lead times as "1440, 120", the rest as the tenant holds them
REMINDER_FIELDS = ("reminder_lead_minutes", "quiet_hours", "reminder_template", "notice_template",
                   "cancellation_window_minutes", "reminder_text")
# beside Meta's agent (issue 45): the rule for reminders in a thread another sender holds,
# and the staged launch's allowlist (one number a line)
THREAD_FIELDS = ("busy_thread_rule", "agent_allowlist")
SETTINGS_FIELDS = ("instructions", "inactivity_timeout_minutes", "retention_days", "language",
                   "fact_keys", "followup_template", "followup_template_language",
                   *BOOKING_LIMITS, *REMINDER_FIELDS, *THREAD_FIELDS)
# the grouped sections, each setting with how the form holds it: "yesno" (a Sim/Não select),
# "number" (blank: unchanged), "text" (blank clears it), "choice" (a select of CHOICES),
# "codes" (comma separated), "money" (an amount as typed, storage/tenant_config.parse_price:
# reais, or US dollars for the model budget), "model" (a model name; blank: unchanged)
GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    "privacy": (("keep_cpf", "yesno"), ("holiday_calendar", "text"),
                ("parallel_services", "codes"), ("feed_notes", "yesno"),
                ("no_show_uses_session", "yesno")),
    "waitlist": (("waitlist_hold_minutes", "number"), ("waitlist_template", "text"),
                 ("waitlist_inside_window_only", "yesno")),
    "deposits": (("deposit_cents", "money"), ("deposit_percent", "number"),
                 ("deposit_hold_minutes", "number"), ("deposit_refund", "choice"),
                 ("pix_key", "text"), ("pix_key_type", "choice"), ("deposit_template", "text")),
    "budget": (("model_budget_cents", "money"), ("budget_action", "choice"),
               ("fallback_model", "model")),
}
KINDS = {name: kind for group in GROUPS.values() for name, kind in group}
CHOICES = {"deposit_refund": ("kept_inside_window", "kept", "owed"),
           "pix_key_type": ("", "EVP", "CPF", "CNPJ", "EMAIL", "PHONE"),
           "budget_action": ("fallback", "handoff")}


def settings_page(p: Page) -> PageResult:
    tenant = p.tenant
    form = {name: getattr(tenant, name) for name in SETTINGS_FIELDS}
    form["reminder_lead_minutes"] = ", ".join(str(m) for m in tenant.reminder_lead_minutes)
    form["agent_allowlist"] = "\n".join(str(n) for n in tenant.agent_allowlist or [])
    form["fact_keys"] = "\n".join(k if isinstance(k, str) else json.dumps(k, ensure_ascii=False)
                                  for k in tenant.fact_keys)
    form.update(_grouped_form(tenant))
    errors: dict[str, str] = {}
    if p.request.method == "POST":
        shown = form
        form = {name: str(p.form.get(name, "")) for name in (*SETTINGS_FIELDS, *KINDS)}
        form.update({name: str(shown[name]) for name in (*REMINDER_FIELDS, *THREAD_FIELDS, *KINDS)
                     if name not in p.form})  # a form without them (an older page) keeps them
        changes, errors = _settings_changes(form)
        grouped, grouped_errors = _grouped_changes(form, [n for n in KINDS if n in p.form])
        changes.update(grouped)
        errors.update({name: translate_problem(problem, p.state.get("lang", "pt-BR"))
                       for name, problem in grouped_errors.items()})
        if _save(p, tenant, changes, errors):
            return Redirect("/console/settings", p.t["saved"])
    return "settings.html", {"form": form, "errors": errors, **_preview(tenant, form),
                             "groups": GROUPS, "choices": CHOICES,
                             "models": _models(tenant), "budget_spent": usd_text(
                                 settings_ops.month_model_spend(p.session, tenant, now=p.now),
                                 _language(p)),
                             "st": settings_texts(p.state.get("lang", "pt-BR")),
                             "shown_errors": (*SETTINGS_FIELDS, *KINDS),
                             "status": 422 if errors else 200}


def _models(tenant: Tenant) -> list[str]:
    """The fallback model select's options: the known models, and the tenant's own if it set
    another through the API or the CLI."""
    return list(dict.fromkeys((*KNOWN_MODELS, tenant.fallback_model)))


def _save(p: Page, tenant: Tenant, changes: dict[str, Any], errors: dict[str, str]) -> bool:
    """Validate and apply `changes` as the admin API does (operations/settings.py); fills
    `errors` (field → the problem in the console's language) and rolls back on a refusal, so
    a refused form changes nothing. True when saved."""
    language = p.state.get("lang", "pt-BR")
    try:
        change = settings_ops.settings_change(changes)
        if errors:
            return False
        with p.session.begin_nested():  # a rule broken while applying leaves nothing behind
            settings_ops.apply_settings(p.session, tenant, change, now=p.now)
    except MAPPED as exc:
        problems = admin_error(exc).problems or [str(exc)]
        errors.update({**_field_errors([translate_problem(problem, language)
                                        for problem in problems]), **errors})
        p.session.expire(tenant)
        return False
    log.info("console_settings_saved", tenant_id=tenant.id, fields=sorted(change.settings()))
    return True


def _grouped_form(tenant: Tenant) -> dict[str, str]:
    """The grouped settings as the form shows them (GROUPS' kinds)."""
    form = {}
    for name, kind in KINDS.items():
        value = getattr(tenant, name)
        if kind == "yesno":
            form[name] = "true" if value else "false"
        elif kind == "codes":
            form[name] = ", ".join(str(c) for c in value or [])
        elif kind == "money":
            form[name] = price_text(value, "BRL", language="pt-BR").removeprefix("R$").strip() \
                if value else ""
        else:
            form[name] = str(value)
    return form


def _grouped_changes(form: dict[str, str],
                     names: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The changes of the grouped settings posted (`names`), still to be validated by
    operations/settings.py; a money amount that is not one is an error here."""
    changes: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name in names:
        kind, raw = KINDS[name], form[name].strip()
        if kind in ("number", "model") and not raw:
            continue  # left blank: unchanged
        if kind == "codes":
            changes[name] = [c.strip() for c in raw.replace("\n", ",").split(",") if c.strip()]
        elif kind == "money":
            try:
                changes[name] = parse_price(raw) or 0
            except TenantConfigError as exc:
                errors[name] = str(exc).partition(": ")[2]
        else:
            changes[name] = raw
    return changes, errors


def _settings_changes(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    changes: dict[str, Any] = {k: form[k].strip() if k != "instructions" else form[k]
                               for k in ("instructions", "language", "followup_template",
                                         "followup_template_language")}
    if not changes["followup_template_language"]:
        changes.pop("followup_template_language")
    errors: dict[str, str] = {}
    for name in ("inactivity_timeout_minutes", "retention_days"):
        changes[name] = form[name].strip()  # pydantic reads "60" as 60 and names "abc"
    for name in BOOKING_LIMITS:  # left blank: unchanged
        if form[name].strip():
            changes[name] = form[name].strip()
    for name in ("quiet_hours", "reminder_template", "notice_template", "reminder_text"):
        changes[name] = form[name].strip()
    if form["cancellation_window_minutes"].strip():
        changes["cancellation_window_minutes"] = form["cancellation_window_minutes"].strip()
    leads = [m.strip() for m in form["reminder_lead_minutes"].split(",") if m.strip()]
    if all(m.isdigit() for m in leads):
        changes["reminder_lead_minutes"] = [int(m) for m in leads]
    else:
        errors["reminder_lead_minutes"] = "1440, 120"
    if form["busy_thread_rule"].strip():
        changes["busy_thread_rule"] = form["busy_thread_rule"].strip()
    changes["agent_allowlist"] = [n.strip() for n in form["agent_allowlist"].splitlines()
                                  if n.strip()]
    keys, bad = _fact_keys(form["fact_keys"])
    if bad:
        errors["fact_keys"] = bad
    changes["fact_keys"] = keys
    return changes, errors


def _fact_keys(text: str) -> tuple[list[Any], str]:
    """The fact keys box, one a line: a default key's name, or a key of the tenant's own as a
    JSON object; returns (the keys read, the error of the last unreadable line or "")."""
    keys: list[Any] = []
    error = ""
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                parsed = json.loads(line)
            except (ValueError, RecursionError):
                error = f"{line[:40]}: JSON inválido / invalid JSON"
                continue
            if clean_text(parsed):
                error = f"{line[:40]}: JSON inválido / invalid JSON"
                continue
            keys.append(parsed)
        else:
            keys.append(line)
    return keys, error


def _field_errors(problems: list[str]) -> dict[str, str]:
    errors: dict[str, str] = {}
    for problem in problems:
        where, _, what = problem.partition(": ")
        errors.setdefault(where.split(".")[0], what or where)
    return errors


def _preview(tenant: Tenant, form: dict[str, Any]) -> dict[str, str]:
    prompt = TenantPrompt(name=tenant.name, timezone=tenant.timezone,
                          language=str(form.get("language") or tenant.language),
                          instructions=str(form.get("instructions") or ""),
                          model=tenant.agent_model)
    facts = [("preferred_name", "Ana", "confirmed", None)]  # invented example
    waiting = [("preferred_period", "tarde", f"{clock.now():%Y-%m-%d}")]  # suggested: apart
    example = context_block(render_fact_lines(facts, clock.now()), "",
                            awaiting=render_awaiting_lines(waiting))
    rules = instructions_text(TenantPrompt(name=prompt.name, timezone=prompt.timezone,
                                           language=prompt.language, instructions="",
                                           model=prompt.model))
    return {"preview_rules": rules, "preview_instructions": prompt.instructions.strip(),
            "preview_context": example}
