"""The console's settings page: the business's instructions, booking limits, reminders and
fact keys, with a preview of what the agent reads."""

import json
from typing import Any

import structlog

from agent.context import TenantPrompt, context_block, instructions_text
from agent.tools.facts_rules import render_awaiting_lines, render_fact_lines
from bot.console.frame import Page, PageResult, Redirect
from bot.console.texts import translate_problem
from core import clock
from operations import settings as settings_ops
from operations.errors import Invalid
from operations.service import clean_text
from storage.models import Tenant

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


def settings_page(p: Page) -> PageResult:
    tenant = p.tenant
    form = {name: getattr(tenant, name) for name in SETTINGS_FIELDS}
    form["reminder_lead_minutes"] = ", ".join(str(m) for m in tenant.reminder_lead_minutes)
    form["agent_allowlist"] = "\n".join(str(n) for n in tenant.agent_allowlist or [])
    form["fact_keys"] = "\n".join(k if isinstance(k, str) else json.dumps(k, ensure_ascii=False)
                                  for k in tenant.fact_keys)
    errors: dict[str, str] = {}
    if p.request.method == "POST":
        shown = form
        form = {name: str(p.form.get(name, "")) for name in SETTINGS_FIELDS}
        form.update({name: str(shown[name]) for name in (*REMINDER_FIELDS, *THREAD_FIELDS)
                     if name not in p.form})  # a form without them (an older page) keeps them
        changes, errors = _settings_changes(form)
        try:
            change = settings_ops.settings_change(changes)
        except Invalid as exc:
            errors = {**_field_errors([translate_problem(problem, p.state.get("lang", "pt-BR"))
                                       for problem in exc.problems]), **errors}
        else:
            if not errors:
                settings_ops.apply_settings(p.session, tenant, change, now=p.now)
                log.info("console_settings_saved", tenant_id=tenant.id,
                         fields=sorted(change.settings()))
                return Redirect("/console/settings", p.t["saved"])
    return "settings.html", {"form": form, "errors": errors, **_preview(tenant, form),
                             "status": 422 if errors else 200}


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
