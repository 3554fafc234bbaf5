"""The texts of the settings page's grouped sections (privacy and calendar, waitlist, deposits,
the model budget), per language, beside texts.py's (the template reads them as `st`): each
setting's label and its short help (`<name>_help`), pt-BR first, the product's default; and
the Portuguese of the refusals these settings can meet (texts.translate_problem handles the
validator's own)."""

SETTINGS_TEXTS: dict[str, dict[str, str]] = {
    "pt-BR": {
        "group_privacy": "Privacidade e agenda", "group_waitlist": "Lista de espera",
        "group_deposits": "Sinal por Pix", "yes": "Sim", "no": "Não",
        "keep_cpf": "Guardar CPF", "keep_cpf_help": "Não: o CPF que o cliente envia é "
        "mascarado antes de ser guardado.",
        "holiday_calendar": "Feriados", "holiday_calendar_help": "BR, BR-SP (estado ou "
        "cidade); vazio: os do país do fuso; none: nenhum.",
        "parallel_services": "Serviços simultâneos", "parallel_services_help": "Códigos, "
        "separados por vírgula, que podem ser feitos ao mesmo tempo que o anterior da visita, "
        "com outro profissional.",
        "feed_notes": "Observações na agenda do celular", "feed_notes_help": "Não: só o "
        "serviço e o primeiro nome do cliente.",
        "no_show_uses_session": "Falta consome sessão do pacote", "no_show_uses_session_help":
        "Sim: quem falta perde a sessão do pacote daquele serviço.",
        "waitlist_hold_minutes": "Reserva da vaga (minutos)", "waitlist_hold_minutes_help":
        "Quanto tempo a vaga oferecida fica guardada para o cliente.",
        "waitlist_template": "Modelo da oferta (fora da janela de 24 h)",
        "waitlist_template_help": "Um dos modelos aprovados; vazio: a vaga vai para o próximo.",
        "waitlist_inside_window_only": "Oferecer só dentro da janela de 24 h",
        "waitlist_inside_window_only_help": "Sim: nunca envia o modelo pago.",
        "deposit_cents": "Sinal fixo (R$)", "deposit_cents_help": "Ex.: 50,00; vazio ou 0: "
        "sem sinal fixo (o do serviço vale mais).",
        "deposit_percent": "Sinal em % do preço", "deposit_percent_help": "Quando não há "
        "valor fixo; 0: sem sinal.",
        "deposit_hold_minutes": "Prazo para pagar (minutos)", "deposit_hold_minutes_help":
        "Depois disso o horário é liberado (5 a 1440).",
        "deposit_refund": "Sinal de visita cancelada", "deposit_refund_help": "Fica com o negócio "
        "só quando o cliente cancela em cima da hora (ou sempre, ou nunca). Devoluções são "
        "feitas pela equipe; aqui fica registrado o que se deve.",
        "refund_kept_inside_window": "fica só se cancelar tarde",
        "refund_kept": "fica com o negócio", "refund_owed": "é devolvido",
        "pix_key": "Chave Pix", "pix_key_help": "Aparece com o código Pix; nunca vai para os "
        "registros.",
        "pix_key_type": "Tipo da chave Pix", "key_type_": "—", "key_type_EVP": "aleatória",
        "key_type_CPF": "CPF", "key_type_CNPJ": "CNPJ", "key_type_EMAIL": "e-mail",
        "key_type_PHONE": "telefone",
        "deposit_template": "Modelo do pedido de sinal (fora da janela de 24 h)",
        "deposit_template_help": "Um modelo aprovado com botão ORDER_DETAILS; vazio: fora da "
        "janela o pedido não é enviado.",
        "group_budget": "Orçamento do agente",
        "model_budget_cents": "Orçamento mensal do modelo (US$)", "model_budget_cents_help":
        "Custo do modelo de IA por mês (a partir do dia 1, no seu fuso). Aos 80% aparece um "
        "aviso no topo do painel e os sistemas ligados em Webhooks são avisados; vazio ou 0: "
        "sem limite.",
        "budget_spent": "Gasto do modelo neste mês até agora: {spent}",
        "budget_action": "Ao atingir 100% do orçamento", "budget_action_help": "Um modelo mais "
        "barato responde, ou a equipe assume as conversas, até o fim do mês.",
        "budget_action_fallback": "usar um modelo mais barato",
        "budget_action_handoff": "passar para a equipe",
        "fallback_model": "Modelo usado depois de atingir o orçamento",
        "fallback_model_help": "Um modelo mais barato responde até o fim do mês (padrão: "
        "claude-haiku-4-5, o mais barato).",
    },
    "en": {
        "group_privacy": "Privacy and calendar", "group_waitlist": "Waitlist",
        "group_deposits": "Pix deposit", "yes": "Yes", "no": "No",
        "keep_cpf": "Keep CPF numbers", "keep_cpf_help": "No: a CPF a customer sends is masked "
        "before it is stored.",
        "holiday_calendar": "Public holidays", "holiday_calendar_help": "BR, BR-SP (a state or "
        "city); empty: the timezone's country; none: no holidays.",
        "parallel_services": "Services at once", "parallel_services_help": "Codes, comma "
        "separated, that may run beside the visit's previous service with another "
        "professional.",
        "feed_notes": "Notes in the phone calendar", "feed_notes_help": "No: the service and "
        "the customer's first name only.",
        "no_show_uses_session": "A no-show uses a package session",
        "no_show_uses_session_help": "Yes: a no-show loses the session of that service's "
        "package.",
        "waitlist_hold_minutes": "Slot hold (minutes)", "waitlist_hold_minutes_help": "How "
        "long an offered slot is kept for the customer.",
        "waitlist_template": "Offer template (outside the 24 h window)",
        "waitlist_template_help": "One of the approved templates; empty: the slot goes to the "
        "next customer.",
        "waitlist_inside_window_only": "Offer only inside the 24 h window",
        "waitlist_inside_window_only_help": "Yes: never sends the paid template.",
        "deposit_cents": "Fixed deposit (R$)", "deposit_cents_help": "E.g. 50,00; empty or 0: "
        "none (a service's own wins).",
        "deposit_percent": "Deposit as % of the price", "deposit_percent_help": "When no fixed "
        "amount; 0: none.",
        "deposit_hold_minutes": "Time to pay (minutes)", "deposit_hold_minutes_help": "Then the "
        "slot is released (5 to 1440).",
        "deposit_refund": "Deposit of a cancelled visit", "deposit_refund_help": "Staff do "
        "refunds; what is owed is recorded here.",
        "refund_kept_inside_window": "kept only when cancelled late",
        "refund_kept": "kept", "refund_owed": "refunded",
        "pix_key": "Pix key", "pix_key_help": "Shown with the Pix code; never logged.",
        "pix_key_type": "Pix key type", "key_type_": "—", "key_type_EVP": "random",
        "key_type_CPF": "CPF", "key_type_CNPJ": "CNPJ", "key_type_EMAIL": "email",
        "key_type_PHONE": "phone",
        "deposit_template": "Deposit request template (outside the 24 h window)",
        "deposit_template_help": "An approved template with an ORDER_DETAILS button; empty: "
        "outside the window the request is not sent.",
        "group_budget": "Agent budget",
        "model_budget_cents": "Monthly model budget (US$)", "model_budget_cents_help":
        "The AI model's cost per month (from the 1st, your timezone). At 80% a notice shows at "
        "the top of the console and the systems set up under Webhooks are told; empty or 0: "
        "no limit.",
        "budget_spent": "Model spend this month so far: {spent}",
        "budget_action": "At 100% of the budget", "budget_action_help": "The warning and the "
        "switch last until the month ends.",
        "budget_action_fallback": "answer with the cheaper model",
        "budget_action_handoff": "pass the conversation to staff",
        "fallback_model": "Model used once the budget is reached",
        "fallback_model_help": "A cheaper model answers until the month ends (default: "
        "claude-haiku-4-5, the cheapest).",
    },
}

# the refusals of these settings' rules (storage/tenants.py, operations/settings.py,
# storage/tenant_config.parse_price, core/holidays.py) as an owner reads them in Portuguese
PT_BR_PROBLEMS: list[tuple[str, str]] = [
    (r"'(\S+)' is not one of the tenant's templates",
     r"'\1' não é um dos modelos aprovados declarados"),
    (r"parameters (.*) are not (?:reminder|deposit) fields \((.*)\)",
     r"os parâmetros \1 não são aceitos (use: \2)"),
    (r"no quick-reply buttons.*", "o modelo não pode ter botões de resposta rápida (o único "
                                  "botão é ORDER_DETAILS)"),
    (r"'(\S+)' is not one of the tenant's service codes.*",
     r"'\1' não é o código de um serviço do negócio"),
    (r"'(\S+)' is not an amount.*", r"'\1' não é um valor (ex.: 50 ou 50,00)"),
    (r"at most (\d+)", r"no máximo \1"),  # parse_price's MAX_PRICE_CENTS, in units
    (r"'(\S+)' is not a (?:country|subdivision).*",
     r"'\1' não é um calendário de feriados conhecido (ex.: BR, BR-SP, none)"),
    (r"Input should be a valid boolean.*", "use sim ou não"),
    (r"Input should be 'fallback' or 'handoff'",
     "use fallback (modelo mais barato) ou handoff (passar para a equipe)"),
]


def settings_texts(language: str) -> dict[str, str]:
    return SETTINGS_TEXTS.get(language, SETTINGS_TEXTS["pt-BR"])
