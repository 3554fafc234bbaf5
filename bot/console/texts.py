"""The console's words, in Brazilian Portuguese (default) and English."""

import re
from collections.abc import Callable

from bot.console.settings_texts import PT_BR_PROBLEMS as SETTINGS_PROBLEMS

LANGUAGES = ("pt-BR", "en")

TEXTS: dict[str, dict[str, str]] = {
    "pt-BR": {
        "title": "Console do agente",
        "sign_in": "Entrar",
        "sign_out": "Sair",
        "token": "Chave de acesso",
        "token_help": "A chave de acesso do seu negócio, fornecida pelo suporte.",
        "bad_token": "Chave inválida ou revogada.",
        "home": "Início",
        "settings": "Configurações",
        "catalog": "Catálogo",
        "review": "Revisão de fatos",
        "conversations": "Conversas",
        "attention": "Atendimento",
        "staff": "Equipe",
        "with_staff": "Com a equipe",
        "with_staff_until": "A equipe atende esta conversa até",
        "handoff_waiting": "Esperando alguém da equipe",
        "reply_box": "Responder como equipe",
        "reply_text": "Mensagem",
        "reply_author": "Seu nome",
        "reply_template": "Modelo aprovado (fora da janela de 24 h)",
        "reply_parameters": "Parâmetros do modelo, um por linha",
        "no_template": "— nenhum (texto livre) —",
        "send": "Enviar",
        "reply_queued": "Resposta enviada para a fila de envio.",
        "hand_back": "Devolver ao agente",
        "handed_back": "A conversa voltou para o agente.",
        # issue 45: beside Meta's agent on the same number
        # issue 49: the monthly model budget (storage/budgets.py)
        "budget_warning_banner": "O custo do agente neste mês passou de 80% do orçamento",
        "budget_warning_detail": "Ao chegar a 100%, o agente passa a responder com o modelo "
                                 "mais barato ou a passar as conversas para a equipe, como "
                                 "definido em Configurações › Orçamento do agente.",
        "budget_reached_banner": "O orçamento do agente para este mês foi atingido",
        "budget_reached_fallback": "Até o fim do mês o agente responde com o modelo mais "
                                   "barato. Para mudar, aumente o orçamento em Configurações.",
        "budget_reached_handoff": "Até o fim do mês as conversas passam para a equipe com a "
                                  "mensagem de transferência. Para mudar, aumente o orçamento "
                                  "em Configurações.",
        "standby_banner": "O agente da Meta está respondendo seus clientes neste número",
        "standby_banner_detail": "Enquanto o agente da Meta tem uma conversa, este produto "
                                 "guarda e mostra tudo o que é dito, mas não responde, e "
                                 "lembretes e avisos seguem a regra das configurações (padrão: "
                                 "não enviar e mostrar aqui). Para atender uma conversa, abra-a "
                                 "e clique em “Assumir conversa”; para devolvê-la, em "
                                 "“Devolver ao agente da Meta”. Para este produto voltar a "
                                 "responder todos, desligue o agente da Meta no WhatsApp "
                                 "Manager.",
        "thread_owner": "Quem responde",
        "other_sender": "Agente da Meta (ou outro aplicativo)",
        "owner_ours": "este agente",
        "owner_meta_agent": "agente da Meta",
        "owner_other_app": "outro aplicativo",
        "owner_idle": "livre",
        "thread_take": "Assumir conversa",
        "thread_pass": "Devolver ao agente da Meta",
        "thread_release": "Liberar conversa",
        "thread_done": "Pedido aceito pela Meta.",
        "meta_agent_settings": "Agente da Meta e lançamento gradual",
        "busy_thread_rule": "Lembrete ou aviso quando o agente da Meta tem a conversa",
        "rule_skip_and_show": "não enviar e mostrar aqui",
        "rule_send_template": "enviar o modelo aprovado",
        "agent_allowlist": "Responder só estes números (um por linha; vazio: todos)",
        "facts_waiting": "Fatos esperando revisão",
        "failed_replies": "Respostas que não chegaram",
        "payments_to_check": "Pagamentos para conferir",
        "payment_late": "Sinal pago depois da liberação: remarcar ou devolver",
        "payment_wrong_amount": "Pix de outro valor: nada foi confirmado",
        "payment_not_paid": "Pagamento não aprovado pelo provedor",
        "payment_fetch_failed": "O provedor não informou este Pix: conferir no Mercado Pago",
        "nothing_needs_you": "Nada precisa de você agora.",
        "not_answered": "O assistente não conseguiu responder",
        "not_answered_waiting": "o cliente recebeu o pedido de desculpas; será respondido "
                                "quando o serviço voltar",
        "not_answered_too_late": "passou do prazo de resposta automática: responda você",
        "apologized_at": "desculpas às",
        "provider_down": "O assistente está com falhas de comunicação com o serviço de IA "
                         "ou com o WhatsApp: clientes podem estar sem resposta.",
        "failures": "Chamadas que falharam",
        "answered_late": "Respondido com atraso, depois da falha, às",
        "failure_kind_rate_limit": "limite de uso atingido",
        "failure_kind_overloaded": "serviço sobrecarregado",
        "failure_kind_server_error": "erro do servidor",
        "failure_kind_connection": "sem conexão",
        "failure_kind_rejected": "pedido recusado",
        "failure_provider_anthropic": "Claude", "failure_provider_graph": "WhatsApp",
        "failure_tries": "tentativas", "failure_try": "tentativa",
        "failure_outcome_retrying": "tentando de novo",
        "failure_outcome_recovered": "respondeu numa nova tentativa",
        "failure_outcome_apology": "cliente recebeu desculpas",
        "failure_outcome_held": "mensagem em espera",
        "failure_outcome_gave_up": "desistiu",
        "failure_outcome_unknown": "não se sabe se chegou",
        "reason_label": "Motivo",
        "appointments": "Agenda", "results": "Resultados",
        "contacts": "Clientes",
        "open_conversations": "Conversas abertas",
        "facts_in_review": "Fatos para revisar",
        "booked_appointments": "Agendamentos marcados",
        "instructions": "Instruções do agente",
        "instructions_help": "Como o agente deve atender: tom, regras, formas de pagamento.",
        "inactivity_timeout_minutes": "Encerrar a conversa após (minutos sem mensagens)",
        "retention_days": "Guardar conversas por (dias)",
        "booking_notice_minutes": "Antecedência mínima de um agendamento (minutos)",
        "booking_horizon_days": "Agendar com até (dias de antecedência)",
        "max_upcoming_bookings": "Agendamentos futuros por cliente (no máximo)",
        "fact_keys": "Fatos que o agente pode lembrar (um por linha)",
        "followup_template": "Modelo de retorno (fora da janela de 24 h)",
        "followup_template_language": "Idioma do modelo",
        "language": "Idioma padrão (respostas e mensagens automáticas)",
        "save": "Salvar",
        "saved": "Alterações salvas. Valem a partir da próxima mensagem.",
        "fix_errors": "Corrija os campos marcados.",
        "preview": "O que o agente vê",
        "preview_help": "As regras do produto e as suas instruções. Depois vem o bloco de "
                        "contexto de cada cliente, cercado como dados (não como instruções); "
                        "por exemplo:",
        "services": "Serviços",
        "professionals": "Profissionais",
        "hours": "Horário de funcionamento",
        "holidays": "Feriados e exceções",
        "code": "Código",
        "name": "Nome",
        "duration": "Duração (min)",
        "price": "Preço",
        "price_from": "a partir de",
        "description": "Descrição",
        "add_or_update": "Adicionar ou alterar",
        "remove": "Remover",
        "does_services": "Serviços que faz",
        "closed": "fechado",
        "day": "Dia",
        "note": "Observação",
        "hours_help": "Intervalos HH:MM-HH:MM separados por vírgula; vazio = fechado.",
        "holiday_hours_help": "Vazio = fechado o dia todo.",
        "public_holidays": "Feriados oficiais",
        "public_holidays_help": "Fechado nesses dias, a menos que você abra. Calendário: "
                                "{calendar} (wagent tenant update {pnid} --set "
                                "holiday_calendar=BR-SP).",
        "no_calendar": "nenhum",
        "holiday_open": "aberto",
        "open_this_day": "Abrir neste dia",
        "close_this_day": "Fechar neste dia",
        "weekday_mon": "Segunda", "weekday_tue": "Terça", "weekday_wed": "Quarta",
        "weekday_thu": "Quinta", "weekday_fri": "Sexta", "weekday_sat": "Sábado",
        "weekday_sun": "Domingo",
        "no_facts": "Nada para revisar.",
        "key": "Fato", "value": "Valor", "state": "Situação", "source": "Mensagem de origem",
        "approve": "Aprovar", "reject": "Rejeitar", "edit": "Corrigir", "reason": "Motivo",
        "approved": "Fato aprovado.", "rejected": "Fato rejeitado; os resumos serão refeitos "
                                                  "sem ele.",
        "edited": "Fato corrigido.",
        "contact": "Cliente", "status": "Situação", "opened": "Aberta em",
        "last_activity": "Última atividade", "filter": "Filtrar", "all": "Todas",
        "open": "aberta", "closed_state": "encerrada",
        "transcript": "Conversa", "customer": "Cliente", "agent": "Agente",
        "deleted_message": "Mensagem apagada pelo cliente",
        "offered_list": "Lista de opções", "offered_buttons": "Botões",
        "picked": "Escolheu",
        "tool_calls": "Ferramentas usadas", "summary": "Resumo", "no_summary": "Sem resumo.",
        "facts_in_context": "Fatos no contexto", "none": "Nenhum.",
        "usage": "Tokens por chamada ao Claude", "cache_read_share": "Leitura de cache",
        "calls": "chamadas", "compactions": "compactações", "peak": "pico",
        "chart_calls": "chamada nº ({n})",
        "no_calls": "Nenhuma chamada ao Claude nesta conversa ainda.",
        "preview_rules": "Regras do produto (o agente as recebe em inglês)",
        "preview_yours": "Suas instruções",
        "preview_example": "Bloco de contexto de um cliente (exemplo)",
        "week_of": "Semana de", "previous_week": "← Semana anterior",
        "next_week": "Semana seguinte →", "no_appointments": "Nenhum agendamento.",
        "cancel": "Cancelar", "cancelled": "Agendamento cancelado. O cliente recebe um aviso "
                                             "(veja a agenda se não pôde ser enviado).",
        "service": "Serviço", "professional": "Profissional", "time": "Horário",
        "not_found": "Não encontrado.", "forbidden": "Formulário expirado. Tente de novo.",
        "language_switch": "English",
        "status_booked": "marcado", "status_cancelled": "cancelado",
        # reminders (issue 25)
        "confirmed": "✓ confirmado", "unconfirmed": "não confirmado",
        "notice_not_sent": "cliente não avisado (janela de 24 h fechada, sem modelo)",
        "reminders": "Lembretes", "reminder_lead_minutes": "Lembretes (minutos antes, até 3)",
        "quiet_hours": "Horário de silêncio (HH:MM-HH:MM)",
        "cancellation_window_minutes": "Cancelar pelo botão até (minutos antes)",
        "reminder_template": "Modelo do lembrete (fora da janela de 24 h)",
        "notice_template": "Modelo do aviso de cancelamento (fora da janela)",
        "reminder_text": "Texto do lembrete dentro da janela (vazio: o do produto)",
        "latest_messages": "Mostrando as últimas {shown} de {total} mensagens.",
        "last_reply": "Última resposta", "not_delivered": "não chegou ao cliente",
        "next_try": "nova tentativa às",
        "unavailable": "O console está fora do ar por alguns instantes. Tente de novo em "
                       "alguns minutos.",
        "too_many_attempts": "Muitas tentativas com chave errada. Tente de novo em "
                             "{minutes} min.",
        "webhooks": "Webhooks",
        "webhooks_help": "Avise os seus sistemas (CRM, planilhas, n8n) quando algo acontece: "
                         "cada aviso é assinado com o segredo do endereço.",
        "webhook_secret_once": "Guarde este segredo agora: ele não será mostrado de novo.",
        "webhook_none": "Nenhum endereço cadastrado.", "webhook_events": "Eventos",
        "webhook_enabled": "ativo",
        "webhook_disabled": "Desativado: as entregas falharam por 24 horas. Corrija o "
                            "endereço e reative.",
        "webhook_enable": "Reativar", "webhook_rotate": "Trocar segredo",
        "webhook_remove": "Remover", "webhook_add": "Adicionar endereço",
        "webhook_removed": "Endereço removido.",
        "webhook_enabled_again": "Endereço reativado; as entregas pendentes serão enviadas.",
        "webhook_no_deliveries": "Nenhuma entrega ainda.", "webhook_event": "Evento",
        "webhook_attempts": "Tentativas", "webhook_last_attempt": "Última tentativa",
        "webhook_next_try": "Próxima tentativa",
        "webhook_status_pending": "aguardando", "webhook_status_sending": "enviando",
        "webhook_status_delivered": "entregue", "webhook_status_failed": "falhou",
        "packages": "Pacotes", "package_used": "{used} de {sessions} usadas",
        "package_until": "válido até", "package_authorisation": "autorização",
        "package_not_usable": "vencido ou esgotado", "package_adjust": "Ajustar usadas",
        "package_sell": "Vender pacote", "package_expires_on": "Vence em (opcional)",
        "package_sold": "Pacote vendido", "package_adjusted": "Sessões usadas ajustadas",
        "packages_none": "Nenhum pacote.",
    },
    "en": {
        "title": "Agent console",
        "sign_in": "Sign in",
        "sign_out": "Sign out",
        "token": "Access key",
        "token_help": "Your business's access key, given by support.",
        "bad_token": "Unknown or revoked key.",
        "home": "Home",
        "settings": "Settings",
        "catalog": "Catalogue",
        "review": "Fact review",
        "conversations": "Conversations",
        "attention": "Needs a person",
        "staff": "Staff",
        "with_staff": "With staff",
        "with_staff_until": "Staff handle this conversation until",
        "handoff_waiting": "Waiting for someone from the team",
        "reply_box": "Reply as staff",
        "reply_text": "Message",
        "reply_author": "Your name",
        "reply_template": "Approved template (outside the 24-hour window)",
        "reply_parameters": "Template parameters, one per line",
        "no_template": "— none (free text) —",
        "send": "Send",
        "reply_queued": "Reply queued for sending.",
        "hand_back": "Hand back to the agent",
        "handed_back": "The conversation is back with the agent.",
        "budget_warning_banner": "The agent's cost this month passed 80% of the budget",
        "budget_warning_detail": "At 100% the agent answers with the cheaper model or passes "
                                 "conversations to staff, as set in Settings › Agent budget.",
        "budget_reached_banner": "The agent's budget for this month is reached",
        "budget_reached_fallback": "Until the month ends the agent answers with the cheaper "
                                   "model. To change that, raise the budget in Settings.",
        "budget_reached_handoff": "Until the month ends conversations pass to staff with the "
                                  "handoff text. To change that, raise the budget in Settings.",
        "standby_banner": "Meta's agent is answering your customers on this number",
        "standby_banner_detail": "While Meta's agent holds a conversation, this product stores "
                                 "and shows everything said but does not answer, and reminders "
                                 "and notices follow the rule in the settings (default: not "
                                 "sent, shown here). To answer a conversation, open it and "
                                 "click “Take the conversation”; to give it back, “Hand back "
                                 "to Meta's agent”. For this product to answer everyone again, "
                                 "switch Meta's agent off in WhatsApp Manager.",
        "thread_owner": "Who answers",
        "other_sender": "Meta's agent (or another app)",
        "owner_ours": "this agent",
        "owner_meta_agent": "Meta's agent",
        "owner_other_app": "another app",
        "owner_idle": "free",
        "thread_take": "Take the conversation",
        "thread_pass": "Hand back to Meta's agent",
        "thread_release": "Release the conversation",
        "thread_done": "Request accepted by Meta.",
        "meta_agent_settings": "Meta's agent and staged launch",
        "busy_thread_rule": "A reminder or notice while Meta's agent holds the conversation",
        "rule_skip_and_show": "do not send; show it here",
        "rule_send_template": "send the approved template",
        "agent_allowlist": "Answer only these numbers (one a line; empty: everyone)",
        "facts_waiting": "Facts awaiting review",
        "failed_replies": "Replies that did not arrive",
        "payments_to_check": "Payments to check",
        "payment_late": "Deposit paid after the release: rebook or refund",
        "payment_wrong_amount": "Pix of another amount: nothing confirmed",
        "payment_not_paid": "Payment not approved by the provider",
        "payment_fetch_failed": "The provider would not report this Pix: check it there",
        "nothing_needs_you": "Nothing needs you right now.",
        "not_answered": "The assistant could not answer",
        "not_answered_waiting": "the customer got the apology; answered when the service is "
                                "back",
        "not_answered_too_late": "past the automatic answer's limit: answer them yourself",
        "apologized_at": "apology at",
        "provider_down": "The assistant is failing to reach the AI service or WhatsApp: "
                         "customers may be left without an answer.",
        "failures": "Failed calls",
        "answered_late": "Answered late, after the failure, at",
        "failure_kind_rate_limit": "rate limit reached",
        "failure_kind_overloaded": "service overloaded",
        "failure_kind_server_error": "server error",
        "failure_kind_connection": "no connection",
        "failure_kind_rejected": "request refused",
        "failure_provider_anthropic": "Claude", "failure_provider_graph": "WhatsApp",
        "failure_tries": "tries", "failure_try": "try",
        "failure_outcome_retrying": "retrying",
        "failure_outcome_recovered": "answered on a later try",
        "failure_outcome_apology": "customer got the apology",
        "failure_outcome_held": "message held",
        "failure_outcome_gave_up": "gave up",
        "failure_outcome_unknown": "unknown whether it arrived",
        "reason_label": "Reason",
        "appointments": "Agenda", "results": "Results",
        "contacts": "Customers",
        "open_conversations": "Open conversations",
        "facts_in_review": "Facts to review",
        "booked_appointments": "Booked appointments",
        "instructions": "Agent instructions",
        "instructions_help": "How the agent should serve customers: tone, rules, payment.",
        "inactivity_timeout_minutes": "Close the conversation after (minutes without messages)",
        "retention_days": "Keep conversations for (days)",
        "booking_notice_minutes": "Minimum notice for a booking (minutes)",
        "booking_horizon_days": "Take bookings up to (days ahead)",
        "max_upcoming_bookings": "Upcoming bookings per customer (at most)",
        "fact_keys": "Facts the agent may remember (one per line)",
        "followup_template": "Follow-up template (outside the 24 h window)",
        "followup_template_language": "Template language",
        "language": "Default language (replies and automatic messages)",
        "save": "Save",
        "saved": "Saved. The changes apply from the next message.",
        "fix_errors": "Fix the marked fields.",
        "preview": "What the agent sees",
        "preview_help": "The product's rules and your instructions. Each customer's context "
                        "block follows, fenced as data (not instructions); for example:",
        "services": "Services",
        "professionals": "Professionals",
        "hours": "Opening hours",
        "holidays": "Holidays and exceptions",
        "code": "Code",
        "name": "Name",
        "duration": "Duration (min)",
        "price": "Price",
        "price_from": "from (minimum)",
        "description": "Description",
        "add_or_update": "Add or change",
        "remove": "Remove",
        "does_services": "Services they do",
        "closed": "closed",
        "day": "Day",
        "note": "Note",
        "hours_help": "HH:MM-HH:MM intervals separated by commas; empty = closed.",
        "holiday_hours_help": "Empty = closed all day.",
        "public_holidays": "Public holidays",
        "public_holidays_help": "Closed on these days unless you open them. Calendar: {calendar} "
                                "(wagent tenant update {pnid} --set holiday_calendar=BR-SP).",
        "no_calendar": "none",
        "holiday_open": "open",
        "open_this_day": "Open this day",
        "close_this_day": "Close this day",
        "weekday_mon": "Monday", "weekday_tue": "Tuesday", "weekday_wed": "Wednesday",
        "weekday_thu": "Thursday", "weekday_fri": "Friday", "weekday_sat": "Saturday",
        "weekday_sun": "Sunday",
        "no_facts": "Nothing to review.",
        "key": "Fact", "value": "Value", "state": "State", "source": "Source message",
        "approve": "Approve", "reject": "Reject", "edit": "Correct", "reason": "Reason",
        "approved": "Fact approved.", "rejected": "Fact rejected; the summaries will be "
                                                  "rewritten without it.",
        "edited": "Fact corrected.",
        "contact": "Customer", "status": "State", "opened": "Opened",
        "last_activity": "Last activity", "filter": "Filter", "all": "All",
        "open": "open", "closed_state": "closed",
        "transcript": "Conversation", "customer": "Customer", "agent": "Agent",
        "deleted_message": "Message deleted by the customer",
        "offered_list": "List of options", "offered_buttons": "Buttons",
        "picked": "Picked",
        "tool_calls": "Tools used", "summary": "Summary", "no_summary": "No summary.",
        "facts_in_context": "Facts in the context", "none": "None.",
        "usage": "Tokens per Claude call", "cache_read_share": "Cache reads",
        "calls": "calls", "compactions": "compactions", "peak": "peak",
        "chart_calls": "call # ({n})",
        "no_calls": "No Claude calls in this conversation yet.",
        "preview_rules": "The product's rules",
        "preview_yours": "Your instructions",
        "preview_example": "A customer's context block (example)",
        "week_of": "Week of", "previous_week": "← Previous week",
        "next_week": "Next week →", "no_appointments": "No appointments.",
        "cancel": "Cancel", "cancelled": "Appointment cancelled. The customer gets a notice (the "
                                          "agenda shows it if it could not be sent).",
        "service": "Service", "professional": "Professional", "time": "Time",
        "not_found": "Not found.", "forbidden": "The form expired. Try again.",
        "language_switch": "Português",
        "status_booked": "booked", "status_cancelled": "cancelled",
        "confirmed": "✓ confirmed", "unconfirmed": "unconfirmed",
        "notice_not_sent": "customer not told (24 h window closed, no template)",
        "reminders": "Reminders", "reminder_lead_minutes": "Reminders (minutes before, up to 3)",
        "quiet_hours": "Quiet hours (HH:MM-HH:MM)",
        "cancellation_window_minutes": "Cancel by button until (minutes before)",
        "reminder_template": "Reminder template (outside the 24 h window)",
        "notice_template": "Cancellation notice template (outside the window)",
        "reminder_text": "Reminder text inside the window (empty: the product's)",
        "latest_messages": "Showing the last {shown} of {total} messages.",
        "last_reply": "Last reply", "not_delivered": "did not reach the customer",
        "next_try": "next try at",
        "unavailable": "The console is down for a moment. Try again in a few minutes.",
        "too_many_attempts": "Too many attempts with a wrong key. Try again in {minutes} min.",
        "webhooks": "Webhooks",
        "webhooks_help": "Tell your own systems (CRM, spreadsheets, n8n) when something "
                         "happens: every call is signed with the endpoint's secret.",
        "webhook_secret_once": "Keep this secret now: it will not be shown again.",
        "webhook_none": "No endpoints yet.", "webhook_events": "Events",
        "webhook_enabled": "enabled",
        "webhook_disabled": "Disabled: deliveries failed for 24 hours. Fix the endpoint and "
                            "enable it again.",
        "webhook_enable": "Enable again", "webhook_rotate": "Rotate secret",
        "webhook_remove": "Remove", "webhook_add": "Add endpoint",
        "webhook_removed": "Endpoint removed.",
        "webhook_enabled_again": "Endpoint enabled; waiting deliveries will be sent.",
        "webhook_no_deliveries": "No deliveries yet.", "webhook_event": "Event",
        "webhook_attempts": "Attempts", "webhook_last_attempt": "Last attempt",
        "webhook_next_try": "Next try",
        "webhook_status_pending": "waiting", "webhook_status_sending": "sending",
        "webhook_status_delivered": "delivered", "webhook_status_failed": "failed",
        "packages": "Packages", "package_used": "{used} of {sessions} used",
        "package_until": "valid until", "package_authorisation": "authorisation",
        "package_not_usable": "expired or used up", "package_adjust": "Adjust used",
        "package_sell": "Sell a package", "package_expires_on": "Expires on (optional)",
        "package_sold": "Package sold", "package_adjusted": "Sessions used adjusted",
        "packages_none": "No packages.",
    },
}


def texts_for(language: str) -> dict[str, str]:
    return TEXTS.get(language, TEXTS["pt-BR"])


# the validator's English, as a business owner reads it in Portuguese (first match wins)
_PT_BR_PROBLEMS: list[tuple[str, str]] = [
    *SETTINGS_PROBLEMS,  # the grouped settings' own (bot/console/settings_texts.py)
    (r"Input should be greater than or equal to (\S+)", r"deve ser no mínimo \1"),
    (r"Input should be less than or equal to (\S+)", r"deve ser no máximo \1"),
    (r"Input should be a valid integer.*", "informe um número inteiro"),
    (r"from 0 to (\d+)", r"de 0 a \1"),  # operations/packages.adjust
    (r"Input should be a valid date.*", "informe uma data (AAAA-MM-DD)"),
    (r"String should have at least 1 character.*", "obrigatório"),
    (r"String should have at most (\d+) characters?", r"no máximo \1 caracteres"),
    (r"String should match pattern.*", "formato inválido"),
    (r"Input should be 'pt-BR' or 'en'", "use pt-BR ou en"),
    (r"Input should be .*", "valor inválido"),
    (r"Field required", "obrigatório"),
    (r"Extra inputs are not permitted", "campo desconhecido"),
    (r"List should have at most (\d+) items?.*", r"no máximo \1 itens"),
    (r"'(\S+)' is not an IANA zone.*", r"'\1' não é um fuso horário (ex.: America/Sao_Paulo)"),
    (r"'(\S+)' and '(\S+)' overlap", r"'\1' e '\2' se sobrepõem"),
    (r"'(\S+)': opens must be before closes", r"'\1': a abertura deve ser antes do fechamento"),
    (r"unknown fact key '(\S+)'.*", r"fato desconhecido '\1'"),
    (r"key '(\S+)' is no longer among the tenant's fact_keys",
     r"o fato '\1' não está mais entre os fatos que o negócio guarda"),
    (r"fact #(\d+) is (\S+), not in review", r"o fato #\1 não está em revisão (\2)"),
    (r"(.*) has (\d+) upcoming appointment\(s\).*",
     r"\1 tem \2 agendamento(s) futuro(s); cancele ou remarque antes"),
    (r"duration_minutes: required for a new service", "duração: obrigatória para um serviço novo"),
    (r"no exception on (\S+)", r"nenhuma exceção em \1"),
    (r"not sent: more than 24 hours since the customer's last message.*",
     "não enviada: passaram mais de 24 horas desde a última mensagem do cliente; fora dessa "
     "janela só um dos modelos aprovados do negócio pode ser enviado"),
    (r"give either text or template", "escreva uma mensagem ou escolha um modelo"),
    (r"no (service|professional) '(\S+)'", r"'\2' não existe"),
]


def translate_problem(text: str, language: str) -> str:
    """A validation problem ("where: what") in the console's language."""
    if language == "en":
        return text
    where, sep, what = text.partition(": ")
    for prefix, part in (("", text), (where + ": " if sep else "", what if sep else "")):
        for pattern, replacement in _PT_BR_PROBLEMS:
            translated, count = re.subn(rf"^{pattern}$", replacement, part)
            if part and count:
                return prefix + translated
    return text


# the notes the product writes into a transcript for the model, in English (whatsapp/inbound.py:
# render_text, edit_text, staff echoes; workers/turns.py: the follow-up template;
# workers/media.py: photos, PDFs and voice notes; operations/staff.py: a staff template;
# storage/rights.py: an erased name), as a business owner
# reads them in Portuguese; the stored text is unchanged (every match is replaced)
_MEDIA_PT_BR = {"voice note": "uma mensagem de voz", "image": "uma imagem", "video": "um vídeo",
                "audio": "um áudio", "document": "um documento", "sticker": "uma figurinha",
                "photo": "uma foto", "audio message": "um áudio"}
_STAFF_SENT_PT_BR = {"an image": "uma imagem", "a video": "um vídeo", "an audio": "um áudio",
                     "a document": "um documento", "a sticker": "uma figurinha",
                     "a location": "uma localização", "a contact card": "um contato",
                     "a template": "um modelo", "an empty text": "um texto vazio",
                     "an interactive message": "uma mensagem interativa",
                     "a reaction": "uma reação"}
_FETCHED = r"(photo|document|voice note|audio message)"  # workers/media.py _label
_FILE = r'((?: \([^)]*\))?(?: with the caption: "[^"]*")?)'  # its file name, its caption


def _media(m: re.Match[str], what: str = "") -> str:
    """"[enviou uma foto com a legenda: "..." ...]" from a workers/media.py note's match."""
    named = m.group(2).replace(" with the caption: ", " com a legenda: ")
    return f"[enviou {_MEDIA_PT_BR[m.group(1)]}{named}{what}]"


def _limits(text: str) -> str:
    for english, portuguese in (("at most", "no máximo"), (" and ", " e "),
                                ("pages", "páginas"), ("px a side", "px por lado")):
        text = text.replace(english, portuguese)
    return text


_PT_BR_NOTES: list[tuple[str, str | Callable[[re.Match[str]], str]]] = [
    (r"\[voice note, transcribed automatically \(may contain errors\)\]:",
     "[mensagem de voz, transcrita automaticamente (pode conter erros)]:"),
    (rf"\[sent a {_FETCHED}() that could not be understood \(not transcribed\);[^\]]*\]",
     lambda m: _media(m, " que não conseguimos entender (sem transcrição)")),
    (rf"\[sent a {_FETCHED}{_FILE} too large for us to open \((.*?)\);[^\]]*\]",
     lambda m: _media(m, f" grande demais para abrirmos ({_limits(m.group(3))})")),
    (rf"\[sent a {_FETCHED}{_FILE} we cannot open \(a damaged or unsupported file\);[^\]]*\]",
     lambda m: _media(m, " que não conseguimos abrir (arquivo danificado ou não suportado)")),
    (rf"\[sent a {_FETCHED}{_FILE} that could not be downloaded;[^\]]*\]",
     lambda m: _media(m, " que não conseguimos baixar")),
    (rf"\[sent a {_FETCHED}{_FILE}\]", _media),
    (r"\[staff sent a message of type (.*?)\]", r"[a equipe enviou uma mensagem do tipo \1]"),
    (r"\[staff sent (.*?)\]",
     lambda m: f"[a equipe enviou {_STAFF_SENT_PT_BR.get(m.group(1), m.group(1))}]"),
    (r"\[template (\S+?)(: .*?)?\]", r"[modelo \1\2]"),
    (r"\[erased\]", "[apagado]"),
    (r"\[the customer deleted a message\]", "[o cliente apagou uma mensagem]"),
    (r"\[the customer edited their message of (.+?) to:\]",
     r"[o cliente editou a mensagem de \1 para:]"),
    (r"\[the customer edited an earlier message to:\]",
     "[o cliente editou uma mensagem anterior para:]"),
    (r" \(replying to an earlier message\)", " (respondendo a uma mensagem anterior)"),
    (r"\[empty text message\]", "[mensagem de texto vazia]"),
    (r"\[reaction (.+?) to one of our messages\]", r"[reação \1 a uma das nossas mensagens]"),
    (r"\[reaction removed\]", "[reação removida]"),
    (r'\[tapped quick reply "(.*?)" \(payload (.*?)\)\]',
     r'[tocou na resposta rápida "\1" (payload \2)]'),
    (r'\[tapped button "(.*?)" \(id (.*?)\)\]', r'[tocou no botão "\1" (id \2)]'),
    (r'\[picked list option "(.*?)"(.*?) \(id (.*?)\)\]',
     r'[escolheu a opção da lista "\1"\2 (id \3)]'),
    (r"\[submitted a form: (.*?)\]", r"[enviou um formulário: \1]"),
    (r"\[shared a location: (.*?)\]", r"[compartilhou uma localização: \1]"),
    (r"\[shared contact card: no name\]", "[compartilhou um contato sem nome]"),
    (r"\[shared contact card: (.*?)\]", r"[compartilhou um contato: \1]"),
    (r"\[sent a catalogue order with (\d+) item\(s\)\]",
     r"[enviou um pedido do catálogo com \1 item(ns)]"),
    (r"\[sent a message of a type we cannot read \((.*?)\); ask politely for a text message\]",
     r"[enviou uma mensagem de um tipo que não conseguimos ler (\1)]"),
    (r"\[sent an interactive reply we cannot read; ask politely for a text message\]",
     "[enviou uma resposta interativa que não conseguimos ler]"),
    (r"\[sent a (voice note|image|video|audio|document|sticker) we cannot open(.*?)\]",
     lambda m: f"[enviou {_MEDIA_PT_BR[m.group(1)]} que não conseguimos abrir{m.group(2)}]"),
    (r"\[follow-up template (\S+): the reply window had closed\]",
     r"[modelo de retorno \1: a janela de 24 horas para responder tinha fechado]"),
]


# a customer's pick of a list row, a reply button or a template's quick reply, as the owner
# reads it in either language ("Escolheu: Qua 02/12 15:00"); the id and what it names are
# for the model (whatsapp/inbound.py _render_interactive)
_PICKS = (r'\[picked list option "(.*?)"[^\]]*\]', r'\[tapped button "(.*?)"[^\]]*\]',
          r'\[tapped quick reply "(.*?)"[^\]]*\]')


def translate_notes(text: str, language: str) -> str:
    """A transcript message's text with the product's bracketed notes in the console's
    language (the customer's and the agent's own words are left as they are); a pick of a
    list row or button reads "Escolheu: TITLE" ("Picked: TITLE")."""
    if "[" not in text:
        return text
    picked = texts_for(language)["picked"]
    for pattern in _PICKS:
        text = re.sub(pattern, lambda m: f"{picked}: {m.group(1)}", text)
    if language == "en":
        return text
    for pattern, replacement in _PT_BR_NOTES:
        text = re.sub(pattern, replacement, text)
    return text
