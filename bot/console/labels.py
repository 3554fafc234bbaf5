"""The console's words for the product's own names (issue 36: no English and no snake_case in a
pt-BR page): fact keys, fact states and origins, and tools, in the console's language.

`label(kind, name, language)` → the word; a name with no entry (a tenant's own fact key) is
shown with its underscores as spaces, never as a raw identifier.
"""

LABELS: dict[str, dict[str, dict[str, str]]] = {
    "pt-BR": {
        "fact_key": {
            "preferred_name": "como prefere ser chamado(a)", "usual_service": "serviço de sempre",
            "preferred_professional": "profissional preferido(a)",
            "preferred_period": "período preferido", "preferred_weekday": "dia preferido",
            "communication_preference": "como prefere ser contatado(a)",
            "allergies": "alergias", "accessibility_needs": "acessibilidade"},
        "fact_state": {
            "suggested": "sugerido", "confirmed": "confirmado",
            "pending_review": "aguardando revisão", "contested": "contestado",
            "superseded": "substituído", "archived": "arquivado", "rejected": "rejeitado"},
        "fact_origin": {"extracted": "tirado da conversa", "tool": "anotado pelo agente",
                        "admin": "anotado pela equipe"},
        "tool": {
            "list_services": "consultou os serviços", "find_available_slots": "buscou horários",
            "book_appointment": "agendou", "list_my_appointments": "consultou os agendamentos",
            "cancel_appointment": "cancelou", "reschedule_appointment": "remarcou",
            "remember_fact": "anotou um fato", "offer_choices": "ofereceu opções",
            "handoff_to_human": "passou para a equipe",
            "add_appointment_note": "anotou no agendamento"},
    },
    "en": {
        "fact_key": {
            "preferred_name": "preferred name", "usual_service": "usual service",
            "preferred_professional": "preferred professional",
            "preferred_period": "preferred period", "preferred_weekday": "preferred weekday",
            "communication_preference": "communication preference",
            "allergies": "allergies", "accessibility_needs": "accessibility needs"},
        "fact_state": {
            "suggested": "suggested", "confirmed": "confirmed",
            "pending_review": "awaiting review", "contested": "contested",
            "superseded": "superseded", "archived": "archived", "rejected": "rejected"},
        "fact_origin": {"extracted": "from the conversation", "tool": "noted by the agent",
                        "admin": "noted by staff"},
        "tool": {
            "list_services": "listed the services", "find_available_slots": "looked for times",
            "book_appointment": "booked", "list_my_appointments": "listed the appointments",
            "cancel_appointment": "cancelled", "reschedule_appointment": "rescheduled",
            "remember_fact": "noted a fact", "offer_choices": "offered choices",
            "handoff_to_human": "handed off to staff",
            "add_appointment_note": "noted on the appointment"},
    },
}


def label(kind: str, name: str | None, language: str = "pt-BR") -> str:
    """The word for `name` of `kind` (fact_key, fact_state, fact_origin, tool) in `language`
    (pt-BR, en); an unknown name with its underscores as spaces."""
    words = LABELS.get(language, LABELS["pt-BR"]).get(kind, {})
    return words.get(name or "", (name or "").replace("_", " "))
