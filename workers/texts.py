"""Product text the customer sees, by language (default Brazilian Portuguese)."""

TEXTS: dict[str, dict[str, str]] = {
    "pt-BR": {
        "apology": "Desculpe, estou com uma instabilidade agora e não consegui responder. "
                   "Pode me mandar a mensagem de novo daqui a pouco?",
        "fallback": "Desculpe, não consegui entender direito. Pode me explicar de outro jeito?",
        "refusal": "Desculpe, não posso ajudar com isso. Posso ajudar com horários e "
                   "agendamentos?",
        # a list of choices (workers/choices.py; Meta: label 20, row title 24, description 72)
        "choices_button": "Ver opções",
        "choices_more": "Outras opções",
        "choices_more_description": "Diga um dia ou período e eu procuro mais",
    },
    "en": {
        "apology": "Sorry, I'm having trouble right now and couldn't answer. Could you send "
                   "your message again in a little while?",
        "fallback": "Sorry, I didn't quite get that. Could you say it another way?",
        "refusal": "Sorry, I can't help with that. Can I help you with a booking?",
        "choices_button": "See options",
        "choices_more": "Other options",
        "choices_more_description": "Tell me a day or time of day and I'll look for more",
    },
}


def text(language: str, key: str) -> str:
    """The customer-facing text `key` in `language`, falling back to pt-BR."""
    return TEXTS.get(language, TEXTS.get(language.split("-")[0], TEXTS["pt-BR"])).get(
        key, TEXTS["pt-BR"][key])
