"""The console's results page, "Resultados" (issue 49): what the agent brought the business
this week or month and the one before, for the owner on a phone. The figures are
operations/results.py's; this module only writes them in the page's language, with two
small bar charts drawn server-side (usage/charts.py: SVG, no script, no external request)."""

from datetime import timedelta
from typing import Any

from bot.console.frame import Page, PageResult, _language
from bot.console.results_texts import duration_text, rate_text, results_texts, usd_text
from operations import results as results_ops
from operations.costs import cost_block
from storage import budgets
from storage.tenant_config import price_text
from usage.charts import render_bars


def results_page(p: Page) -> PageResult:
    """GET /console/results?period=week|month (anything else: week)."""
    kind = p.request.query.get("period", "week")
    kind = kind if kind in results_ops.PERIODS else "week"
    found = results_ops.results(p.session, p.tenant, kind, now=p.now)
    language = _language(p)
    return "results.html", {"rt": results_texts(language), "kind": kind,
                            **results_view(found, currency=p.tenant.currency,
                                           language=language)}


def cost_view(p: Page) -> dict[str, Any]:
    """The home page's cost block (operations/costs.cost_block): this local month's and
    today's cost, model + WhatsApp, as text; with a budget, `budget` the month's model
    spend against it ("US$ 3,20 de US$ 10,00 — 32%", the percentage rounded down)."""
    rt, language = results_texts(_language(p)), _language(p)
    block = cost_block(p.session, p.tenant, now=p.now)
    view: dict[str, Any] = {
        "month": usd_text(block["month_to_date"]["total_micro_usd"], language),
        "today": usd_text(block["today_costs"]["total_micro_usd"], language), "budget": None}
    budget = budgets.budget_micro_usd(p.tenant)
    if budget is not None:
        spent = block["month_to_date"]["model_micro_usd"]
        view["budget"] = rt["budget_used"].format(
            spent=usd_text(spent, language), budget=usd_text(budget, language),
            percent=spent * 100 // budget)
    return view


def results_view(found: results_ops.Results, *, currency: str,
                 language: str) -> dict[str, Any]:
    """The page's figures as text: `cards` [{key, label, value, previous, note}], the
    reminders' line, `charts` [{key, svg, title, figures}]."""
    rt = results_texts(language)
    now, before = found.current, found.previous
    cards = [_card(rt, key, now, before, currency, language)
             for key in ("visits_agent", "visits_staff", "revenue", "confirmed", "cancelled",
                         "no_shows", "no_show_rate", "refilled", "handoffs", "staff_answer",
                         "agent_answer", "cost", "cost_per_visit")]
    cards[7:7] = [{"key": key, "label": rt[key], "value": rate_text(rate, language),
                   "previous": "", "note": ""}  # over all visits: no period to compare
                  for key, rate in (("no_show_before", found.no_show_before),
                                    ("no_show_after", found.no_show_after))]
    reminders = rt["reminders_never"] if found.reminders_on is None else \
        rt["reminders_on"].format(day=found.reminders_on.strftime("%d/%m/%Y"))
    return {"cards": cards, "reminders_line": reminders, "period_text": _span(now.window),
            "charts": _charts(found, rt, language)}


def _figure(key: str, m: results_ops.Measures, currency: str, language: str) -> str:
    if key == "visits_agent":
        return str(m.visits_by_agent)
    if key == "visits_staff":
        return str(m.visits_by_staff)
    if key == "revenue":
        return price_text(m.revenue_cents, currency, language=language)
    if key == "no_show_rate":
        return rate_text(m.no_show_rate, language)
    if key == "staff_answer":
        return duration_text(m.staff_answer_median_s)
    if key == "agent_answer":  # the median and the 90th percentile, in plain words
        if m.agent_answer_p50_s is None:
            return duration_text(None)
        return results_texts(language)["agent_answer_value"].format(
            p50=duration_text(m.agent_answer_p50_s), p90=duration_text(m.agent_answer_p90_s))
    if key == "cost":
        return usd_text(m.cost_musd, language)
    if key == "cost_per_visit":
        return usd_text(m.cost_per_visit_musd, language)
    return str(getattr(m, key))


def _card(rt: dict[str, str], key: str, now: results_ops.Measures,
          before: results_ops.Measures, currency: str, language: str) -> dict[str, str]:
    note = rt["handoffs_answered"].format(n=now.handoffs_answered) if key == "handoffs" else ""
    return {"key": key, "label": rt[key], "value": _figure(key, now, currency, language),
            "previous": f'{rt["previous_" + now.window.kind]}: '
                        f'{_figure(key, before, currency, language)}', "note": note}


def _span(w: results_ops.Window) -> str:
    return f"{w.start:%d/%m} – {w.end - timedelta(days=1):%d/%m/%Y}"


def _charts(found: results_ops.Results, rt: dict[str, str],
            language: str) -> list[dict[str, Any]]:
    labels = [f"{m.window.start:%d/%m}" if found.kind == "week" else f"{m.window.start:%m/%y}"
              for m in found.series]
    visits = [m.visits for m in found.series]
    rates = [m.no_show_rate for m in found.series]
    charts = []
    for key, values, captions in (
            ("visits", [float(v) for v in visits], [str(v) for v in visits]),
            ("no_show", [r or 0.0 for r in rates],
             [rate_text(r, language, "") for r in rates])):
        title = rt[f"chart_{key}_{found.kind}"]
        figures = "; ".join(f"{label}: {caption or rt['none']}"
                            for label, caption in zip(labels, captions, strict=True))
        charts.append({"key": key, "title": title, "figures": figures,
                       "svg": render_bars(values, labels, title=title, desc=figures,
                                          key=f"chart-{key}", value_text=captions, height=120,
                                          color="#0f7b5f" if key == "visits" else "#b3261e")})
    return charts
