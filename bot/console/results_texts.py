"""The texts of the console's results page (issue 49), per language, beside texts.py's (the
template reads them as `rt`): pt-BR first, the product's default; and the page's ways of
writing a duration, a rate and a cost."""

from operations.costs import cents_of
from storage.budgets import MICRO_USD_PER_CENT

RESULTS_TEXTS: dict[str, dict[str, str]] = {
    "pt-BR": {
        "title": "Resultados", "week": "Semanal", "month": "Mensal",
        "current_week": "Esta semana", "current_month": "Este mês",
        "previous_week": "semana anterior", "previous_month": "mês anterior",
        "visits_agent": "Visitas agendadas pelo assistente",
        "visits_staff": "Visitas agendadas pela equipe",
        "revenue": "Receita agendada (preços do catálogo)", "confirmed": "Confirmações",
        "cancelled": "Cancelamentos", "no_shows": "Faltas", "no_show_rate": "Taxa de faltas",
        "no_show_before": "Faltas antes dos lembretes", "no_show_after": "Faltas com lembretes",
        "reminders_on": "Lembretes considerados ligados desde {day}: o primeiro lembrete "
                        "enviado. A taxa de faltas conta as visitas marcadas como "
                        "compareceu ou faltou.",
        "reminders_never": "Nenhum lembrete enviado ainda: a taxa de faltas é a de todas as "
                           "visitas marcadas como compareceu ou faltou.",
        "refilled": "Horários preenchidos pela lista de espera",
        "handoffs": "Conversas passadas para a equipe",
        "handoffs_answered": "{n} respondidas",
        "staff_answer": "Tempo até a equipe responder (mediana)",
        "agent_answer": "Tempo de resposta do assistente",
        "agent_answer_value": "metade das respostas em até {p50}; 9 em 10 em até {p90}",
        "cost": "Custo do assistente (modelo + WhatsApp)",
        "cost_per_visit": "Custo por visita agendada",
        "none": "—", "chart_visits_week": "Visitas agendadas por semana",
        "chart_visits_month": "Visitas agendadas por mês",
        "chart_no_show_week": "Taxa de faltas por semana",
        "chart_no_show_month": "Taxa de faltas por mês",
        "chart_figures": "Os números do gráfico", "period": "Período",
        "figures": "Números do período",
        "costs": "Custo do assistente", "cost_month": "Este mês (modelo + WhatsApp)",
        "cost_today": "Hoje (modelo + WhatsApp)",
        "budget_used": "Orçamento do mês (só o modelo): {spent} de {budget} — {percent}%",
        "budget_scope": "O orçamento conta só o modelo de IA; o custo mostrado soma o modelo "
                        "e as mensagens do WhatsApp.",
    },
    "en": {
        "title": "Results", "week": "Weekly", "month": "Monthly",
        "current_week": "This week", "current_month": "This month",
        "previous_week": "previous week", "previous_month": "previous month",
        "visits_agent": "Visits booked by the assistant",
        "visits_staff": "Visits booked by staff",
        "revenue": "Revenue booked (catalogue prices)", "confirmed": "Confirmations",
        "cancelled": "Cancellations", "no_shows": "No-shows", "no_show_rate": "No-show rate",
        "no_show_before": "No-shows before reminders", "no_show_after": "No-shows with reminders",
        "reminders_on": "Reminders counted as on since {day}: the first reminder sent. The "
                        "no-show rate counts visits marked completed or no-show.",
        "reminders_never": "No reminder sent yet: the no-show rate is that of every visit "
                           "marked completed or no-show.",
        "refilled": "Slots refilled from the waitlist",
        "handoffs": "Conversations handed to staff",
        "handoffs_answered": "{n} answered",
        "staff_answer": "Time until staff answered (median)",
        "agent_answer": "Assistant's answer time",
        "agent_answer_value": "half the answers within {p50}; 9 in 10 within {p90}",
        "cost": "Assistant's cost (model + WhatsApp)",
        "cost_per_visit": "Cost per booked visit",
        "none": "—", "chart_visits_week": "Visits booked per week",
        "chart_visits_month": "Visits booked per month",
        "chart_no_show_week": "No-show rate per week",
        "chart_no_show_month": "No-show rate per month",
        "chart_figures": "The chart's figures", "period": "Period",
        "figures": "The period's figures",
        "costs": "The assistant's cost", "cost_month": "This month (model + WhatsApp)",
        "cost_today": "Today (model + WhatsApp)",
        "budget_used": "This month's budget (model only): {spent} of {budget} — {percent}%",
        "budget_scope": "The budget counts the AI model only; the cost shown adds the model "
                        "and the WhatsApp messages.",
    },
}


def results_texts(language: str) -> dict[str, str]:
    return RESULTS_TEXTS.get(language, RESULTS_TEXTS["pt-BR"])


def duration_text(seconds: float | None, none: str = "—") -> str:
    """"45 s", "3 min", "2 h 5 min" (the same in both languages); `none` for None. A
    no-break space joins each number to its unit, so a narrow card never parts them."""
    if seconds is None:
        return none
    whole = round(seconds)
    if whole < 60:
        return f"{whole}\u00a0s"
    minutes = round(whole / 60)
    if minutes < 60:
        return f"{minutes}\u00a0min"
    hours, rest = divmod(minutes, 60)
    return f"{hours}\u00a0h {rest}\u00a0min" if rest else f"{hours}\u00a0h"


def rate_text(value: float | None, language: str, none: str = "—") -> str:
    """A share as a percentage with one decimal: "12,5%" (pt-BR), "12.5%" (en)."""
    if value is None:
        return none
    text = f"{value * 100:.1f}%"
    return text.replace(".", ",") if language == "pt-BR" else text


def usd_text(musd: int | None, language: str, none: str = "—") -> str:
    """Micro-dollars as US$ to the cent, halves up (operations/costs.usd_cents): "US$ 0,19"
    (pt-BR), "US$ 0.19" (en); a cost above zero but under a cent is "< US$ 0,01", so a
    small cost never reads as nothing. The API and CLI JSON keep the exact µUSD."""
    if musd is None:
        return none
    if 0 < musd < MICRO_USD_PER_CENT:
        return _decimal_marks("< US$ 0.01", language)
    sign, cents = ("-" if musd < 0 else ""), cents_of(abs(musd))
    return _decimal_marks(f"{sign}US$ {cents // 100:,}.{cents % 100:02d}", language)


def _decimal_marks(text: str, language: str) -> str:
    if language == "pt-BR":
        return text.replace(",", "_").replace(".", ",").replace("_", ".")
    return text
