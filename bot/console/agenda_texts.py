"""The texts of the console's day agenda (issue 22), per language, beside texts.py's (the
template reads them as `at`): pt-BR first, the product's default."""

import re

AGENDA_TEXTS: dict[str, dict[str, str]] = {
    "pt-BR": {
        "title": "Agenda do dia", "previous_day": "← Dia anterior", "next_day": "Dia seguinte →",
        "go": "Ver", "not_working": "Não trabalha neste dia", "hours": "Horário",
        "blocked": "Bloqueado", "unblock": "Desbloquear", "completed": "Compareceu",
        "no_show": "Faltou", "outcome_completed": "compareceu", "outcome_no_show": "faltou",
        "move": "Remarcar", "book": "Agendar", "block": "Bloquear horário",
        "anyone": "Qualquer profissional", "time": "Horário (HH:MM)", "until": "Até (HH:MM)",
        "phone": "Telefone do cliente", "or_contact": "ou nº do contato já cadastrado",
        "name": "Nome (cliente novo)", "note": "Observação", "force": "Bloquear mesmo com "
        "agendamentos (eles são mantidos)", "service": "Serviço", "professional": "Profissional",
        "booked": "Agendado", "moved": "Remarcado", "block_saved": "Horário bloqueado",
        "block_removed": "Bloqueio removido", "marked": "Anotado", "kept": "mantidos",
        "day_link": "Ver o dia", "nothing": "Nada marcado.", "new_start": "Novo início",
        "visit": "Visita", "then_service": "Depois, na mesma visita (opcional)",
        "waitlist": "Lista de espera", "waitlist_empty": "Ninguém na lista de espera.",
        "offer": "Oferecer horário", "offered": "Oferecido",
        "status_waiting": "esperando", "status_offered": "horário oferecido",
        "status_booked": "agendado", "status_left": "saiu", "status_expired": "expirou",
        "repeat": "Repetir (RRULE, opcional: FREQ=WEEKLY;BYDAY=TU;COUNT=10)",
        "series": "Série", "cancel_series": "Cancelar daqui em diante",
        "series_cancelled": "Série cancelada daqui em diante; agendamentos cancelados",
        "feeds": "Agenda no celular (calendário)", "feeds_help": "Assine o endereço no Google "
        "Agenda, no Calendário da Apple ou no Outlook. Quem tiver o endereço vê a agenda: "
        "revogue e gere outro se ele vazar.", "feed_none": "sem endereço",
        "feed_issue": "Gerar endereço", "feed_reissue": "Gerar outro",
        "feed_revoke": "Revogar", "feed_issued": "Endereço do calendário gerado",
        "feed_revoked": "Endereço do calendário revogado", "feed_business": "Toda a empresa",
        "deposit_held": "aguardando sinal", "deposit_paid": "sinal pago",
        "deposit_released": "liberado (sinal não pago)",
        "deposit_late_paid": "sinal pago após liberação: remarcar ou devolver",
        "not_sent_window_closed": "pedido do sinal não enviado (janela de 24 h fechada, sem "
                                  "modelo de pedido: deposit_template)",
        "not_sent_no_charge": "pedido do sinal não enviado (sem provedor Pix ou chave Pix)",
        "mark_paid": "Sinal recebido", "deposit_marked": "Sinal registrado",
    },
    "en": {
        "title": "Day agenda", "previous_day": "← Previous day", "next_day": "Next day →",
        "go": "Show", "not_working": "Not working this day", "hours": "Hours",
        "blocked": "Blocked", "unblock": "Unblock", "completed": "Came",
        "no_show": "No-show", "outcome_completed": "came", "outcome_no_show": "no-show",
        "move": "Move", "book": "Book", "block": "Block time",
        "anyone": "Any professional", "time": "Time (HH:MM)", "until": "Until (HH:MM)",
        "phone": "Customer's phone", "or_contact": "or the id of an existing contact",
        "name": "Name (new customer)", "note": "Note", "force": "Block even over bookings "
        "(they are kept)", "service": "Service", "professional": "Professional",
        "booked": "Booked", "moved": "Moved", "block_saved": "Time blocked",
        "block_removed": "Block removed", "marked": "Noted", "kept": "kept",
        "day_link": "See the day", "nothing": "Nothing booked.", "new_start": "New start",
        "visit": "Visit", "then_service": "Then, in the same visit (optional)",
        "waitlist": "Waitlist", "waitlist_empty": "No one on the waitlist.",
        "offer": "Offer a time", "offered": "Offered",
        "status_waiting": "waiting", "status_offered": "time offered",
        "status_booked": "booked", "status_left": "left", "status_expired": "expired",
        "repeat": "Repeat (RRULE, optional: FREQ=WEEKLY;BYDAY=TU;COUNT=10)",
        "series": "Series", "cancel_series": "Cancel from here on",
        "series_cancelled": "Series cancelled from here on; bookings cancelled",
        "feeds": "Agenda on the phone (calendar)", "feeds_help": "Subscribe to the address in "
        "Google Calendar, Apple Calendar or Outlook. Whoever has the address sees the agenda: "
        "revoke it and make another if it leaks.", "feed_none": "no address",
        "feed_issue": "Make address", "feed_reissue": "Make another",
        "feed_revoke": "Revoke", "feed_issued": "Calendar address made",
        "feed_revoked": "Calendar address revoked", "feed_business": "The whole business",
        "deposit_held": "awaiting deposit", "deposit_paid": "deposit paid",
        "deposit_released": "released (deposit not paid)",
        "deposit_late_paid": "deposit paid after release: rebook or refund",
        "not_sent_window_closed": "deposit request not sent (24 h window closed, no "
                                  "deposit_template)",
        "not_sent_no_charge": "deposit request not sent (no Pix provider or Pix key)",
        "mark_paid": "Deposit received", "deposit_marked": "Deposit recorded",
    },
}


def agenda_texts(language: str) -> dict[str, str]:
    return AGENDA_TEXTS.get(language, AGENDA_TEXTS["pt-BR"])


# operations/agenda.py's and availability.place's refusals, as an owner reads them in
# Portuguese (first match wins; texts.translate_problem handles the validator's own)
_PT_BR: list[tuple[str, str]] = [
    (r"(?:start: )?(\S+) does not work at \S+ (\S+) (\S+) for (\S+) \(\S+ \S+: (.*)\); use "
     r"find_available_slots", r"\1 não trabalha em \2 às \3 (\4); horário do dia: \5"),
    (r"(?:start: )?that time is no longer free.*", "este horário já está ocupado (um "
     "agendamento, o intervalo depois dele ou um bloqueio)"),
    (r"(?:start: )?that time is outside the opening hours of everyone who does (\S+);.*",
     r"ninguém que faz \1 trabalha neste horário"),
    (r"(?:start: )?(\S+) is not a start time.*", r"\1 não é um horário de início"),
    (r"(\S+) has (\d+) booking\(s\) in that time \((.*?)\);.*",
     r"\1 tem \2 agendamento(s) neste horário (\3); remarque ou cancele, ou marque "
     "“bloquear mesmo com agendamentos” (eles são mantidos)"),
    (r"appointment #(\d+) has not started yet", r"o agendamento #\1 ainda não começou"),
    (r"appointment #(\d+) is not an upcoming booking",
     r"o agendamento #\1 não é um agendamento futuro"),
    (r"contact #(\d+) has (\d+), the same number.*",
     r"o contato #\1 tem o número \2 (o mesmo, com ou sem o nono dígito); para usar esse "
     r"contato, informe \1 no campo do contato, ou corrija o telefone"),
    (r"phone: (.*) is not a phone number.*", r"telefone: \1 não é um número (8 a 15 dígitos)"),
    (r"start: that visit would already be over", "esse atendimento já teria terminado"),
    (r"(?:start|end): (\S+) does not exist in \S+ .*",
     r"\1 não existe neste fuso (o relógio é adiantado nesse dia)"),
    (r"end: (\S+) is not after start (\S+)", r"o fim (\1) deve ser depois do início (\2)"),
    (r"contact or phone is required", "informe o telefone ou o contato"),
    (r"appointment #(\d+) is no upcoming visit of a series",
     r"o agendamento #\1 não é uma visita futura de uma série"),
]


def agenda_problem(text: str, language: str) -> str | None:
    """`text` in the owner's language when it is one of the agenda's refusals, else None."""
    if language != "pt-BR":
        return None
    for pattern, replacement in _PT_BR:
        if re.fullmatch(pattern, text, re.S):
            return re.sub(pattern, replacement, text, flags=re.S)
    return None
