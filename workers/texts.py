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
        # reminders and their buttons (workers/reminders.py; fields: {customer_name},
        # {service}, {professional}, {date}, {time}, {address})
        "reminder": "Olá, {customer_name}! Lembrete do seu horário: {service} com "
                    "{professional}, {date} às {time}. Podemos confirmar?",
        # a visit in parts or with several professionals: {time} says who does what when
        "reminder_visit": "Olá, {customer_name}! Lembrete do seu horário{for_whom}: {date} "
                          "às {time}. Podemos confirmar?",
        "with": "{service} com {professional}",
        "for_whom": " (para {name})",
        "button_confirm": "Confirmar",
        "button_reschedule": "Remarcar",
        "button_cancel": "Cancelar",
        "reminder_confirmed": "Confirmado! Te esperamos {date} às {time}.",
        "reminder_cancelled": "Pronto, cancelei seu horário de {service} de {date} às {time}. "
                              "Se quiser marcar outro, é só me chamar.",
        "tap_cancelled": "Esse horário ({service}, {date} às {time}) já foi cancelado.",
        "tap_moved": "Esse horário foi remarcado; vale o novo horário que combinamos.",
        "tap_past": "Esse horário ({date} às {time}) já passou.",
        "tap_unknown": "Não encontrei esse agendamento. Posso ajudar com outro horário?",
        "notice_cancelled": "Olá, {customer_name}. Precisamos cancelar seu horário de "
                            "{service} com {professional}, {date} às {time}. Desculpe o "
                            "transtorno! Quer que eu procure outro horário?",
        "notice_moved": "Olá, {customer_name}. Seu horário de {service} com {professional} "
                        "mudou para {date} às {time}. Se não puder, me avise.",
        # the waitlist (issue 47, workers/waitlist.py; the reminder fields and {hold}, minutes)
        "waitlist_offer": "Olá, {customer_name}! Abriu um horário na lista de espera: "
                          "{service} com {professional}, {date} às {time}. Está guardado "
                          "para você por {hold} minutos. Quer?",
        "button_want": "Quero",
        "button_cannot": "Não posso",
        "waitlist_booked": "Pronto! Marquei {service} com {professional}, {date} às {time}.",
        "waitlist_declined": "Tudo bem! Você continua na lista de espera.",
        "waitlist_taken": "Que pena: o horário de {date} às {time} já foi preenchido. Você "
                          "continua na lista de espera.",
        "waitlist_refused": "Não consegui marcar o horário de {date} às {time}: {reason}.",
        "refused_limit": "você já tem o máximo de horários marcados ao mesmo tempo",
        "refused_clash": "você já tem um horário nesse momento",
        "refused_rules": "ele não está mais dentro das regras de agendamento",
        "deposit_request": "Para confirmar seu horário, pague o sinal de {amount} por Pix "
                           "até {time}: copie o código abaixo no app do seu banco.",
        "deposit_received": "Sinal recebido. Obrigado!",
        "notice_deposit_paid": "Recebemos seu sinal, {customer_name}! Seu horário de {service} "
                               "com {professional}, {date} às {time}, está confirmado.",
        "notice_deposit_released": "Olá, {customer_name}. O sinal do horário de {service}, "
                                   "{date} às {time}, não foi pago a tempo e o horário foi "
                                   "liberado. Se quiser, procuro outro horário.",
        "notice_deposit_late": "Olá, {customer_name}. Recebemos seu Pix, mas o horário de "
                               "{service}, {date} às {time}, já tinha sido liberado. Nossa "
                               "equipe vai falar com você para remarcar ou devolver o valor.",
        "weekdays": "seg,ter,qua,qui,sex,sáb,dom",
        "and": "e",
    },
    "en": {
        "apology": "Sorry, I'm having trouble right now and couldn't answer. Could you send "
                   "your message again in a little while?",
        "fallback": "Sorry, I didn't quite get that. Could you say it another way?",
        "refusal": "Sorry, I can't help with that. Can I help you with a booking?",
        "choices_button": "See options",
        "choices_more": "Other options",
        "choices_more_description": "Tell me a day or time of day and I'll look for more",
        "reminder": "Hi {customer_name}! A reminder of your appointment: {service} with "
                    "{professional}, {date} at {time}. Can we confirm?",
        "reminder_visit": "Hi {customer_name}! A reminder of your appointment{for_whom}: "
                          "{date} at {time}. Can we confirm?",
        "with": "{service} with {professional}",
        "for_whom": " (for {name})",
        "button_confirm": "Confirm",
        "button_reschedule": "Reschedule",
        "button_cancel": "Cancel",
        "reminder_confirmed": "Confirmed! See you {date} at {time}.",
        "reminder_cancelled": "Done, I cancelled your {service} of {date} at {time}. Write "
                              "to me if you want another time.",
        "tap_cancelled": "That appointment ({service}, {date} at {time}) was already "
                         "cancelled.",
        "tap_moved": "That appointment was moved; the new time we agreed stands.",
        "tap_past": "That appointment ({date} at {time}) is already past.",
        "tap_unknown": "I couldn't find that appointment. Can I help with another time?",
        "notice_cancelled": "Hi {customer_name}. We have to cancel your {service} with "
                            "{professional}, {date} at {time}. Sorry! Shall I look for "
                            "another time?",
        "notice_moved": "Hi {customer_name}. Your {service} with {professional} moved to "
                        "{date} at {time}. Let me know if that does not suit you.",
        "waitlist_offer": "Hi {customer_name}! A time opened on the waitlist: {service} "
                          "with {professional}, {date} at {time}. It is held for you for "
                          "{hold} minutes. Do you want it?",
        "button_want": "I want it",
        "button_cannot": "I can't",
        "waitlist_booked": "Done! I booked {service} with {professional}, {date} at {time}.",
        "waitlist_declined": "All right! You stay on the waitlist.",
        "waitlist_taken": "Sorry: the time of {date} at {time} was already taken. You stay on "
                          "the waitlist.",
        "waitlist_refused": "I couldn't book the time of {date} at {time}: {reason}.",
        "refused_limit": "you already hold the most bookings allowed at once",
        "refused_clash": "you already have a booking at that time",
        "refused_rules": "it is no longer within the booking rules",
        "deposit_request": "To confirm your appointment, pay the {amount} deposit by Pix "
                           "by {time}: copy the code below into your bank app.",
        "deposit_received": "Deposit received. Thank you!",
        "notice_deposit_paid": "We received your deposit, {customer_name}! Your {service} "
                               "with {professional}, {date} at {time}, is confirmed.",
        "notice_deposit_released": "Hi {customer_name}. The deposit for your {service}, "
                                   "{date} at {time}, was not paid in time and the slot was "
                                   "released. Shall I look for another time?",
        "notice_deposit_late": "Hi {customer_name}. We received your Pix, but your {service}, "
                               "{date} at {time}, had already been released. Our team will "
                               "contact you to rebook or refund it.",
        "weekdays": "Mon,Tue,Wed,Thu,Fri,Sat,Sun",
        "and": "and",
    },
}


def text(language: str, key: str) -> str:
    """The customer-facing text `key` in `language`, falling back to pt-BR."""
    return TEXTS.get(language, TEXTS.get(language.split("-")[0], TEXTS["pt-BR"])).get(
        key, TEXTS["pt-BR"][key])
