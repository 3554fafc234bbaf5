"""The console's words, in Brazilian Portuguese (default) and English."""

import re
from collections.abc import Callable

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
        "appointments": "Agenda",
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
        "add_or_update": "Adicionar ou alterar",
        "remove": "Remover",
        "does_services": "Serviços que faz",
        "closed": "fechado",
        "day": "Dia",
        "note": "Observação",
        "hours_help": "Intervalos HH:MM-HH:MM separados por vírgula; vazio = fechado.",
        "holiday_hours_help": "Vazio = fechado o dia todo.",
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
        "cancel": "Cancelar", "cancelled": "Agendamento cancelado. O cliente não é avisado "
                                             "automaticamente.",
        "service": "Serviço", "professional": "Profissional", "time": "Horário",
        "not_found": "Não encontrado.", "forbidden": "Formulário expirado. Tente de novo.",
        "language_switch": "English",
        "status_booked": "marcado", "status_cancelled": "cancelado",
        "latest_messages": "Mostrando as últimas {shown} de {total} mensagens.",
        "last_reply": "Última resposta", "not_delivered": "não chegou ao cliente",
        "next_try": "nova tentativa às",
        "unavailable": "O console está fora do ar por alguns instantes. Tente de novo em "
                       "alguns minutos.",
        "too_many_attempts": "Muitas tentativas com chave errada. Tente de novo em "
                             "{minutes} min.",
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
        "appointments": "Agenda",
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
        "add_or_update": "Add or change",
        "remove": "Remove",
        "does_services": "Services they do",
        "closed": "closed",
        "day": "Day",
        "note": "Note",
        "hours_help": "HH:MM-HH:MM intervals separated by commas; empty = closed.",
        "holiday_hours_help": "Empty = closed all day.",
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
        "cancel": "Cancel", "cancelled": "Appointment cancelled. The customer is not told "
                                          "automatically.",
        "service": "Service", "professional": "Professional", "time": "Time",
        "not_found": "Not found.", "forbidden": "The form expired. Try again.",
        "language_switch": "Português",
        "status_booked": "booked", "status_cancelled": "cancelled",
        "latest_messages": "Showing the last {shown} of {total} messages.",
        "last_reply": "Last reply", "not_delivered": "did not reach the customer",
        "next_try": "next try at",
        "unavailable": "The console is down for a moment. Try again in a few minutes.",
        "too_many_attempts": "Too many attempts with a wrong key. Try again in {minutes} min.",
    },
}


def texts_for(language: str) -> dict[str, str]:
    return TEXTS.get(language, TEXTS["pt-BR"])


# the validator's English, as a business owner reads it in Portuguese (first match wins)
_PT_BR_PROBLEMS: list[tuple[str, str]] = [
    (r"Input should be greater than or equal to (\S+)", r"deve ser no mínimo \1"),
    (r"Input should be less than or equal to (\S+)", r"deve ser no máximo \1"),
    (r"Input should be a valid integer.*", "informe um número inteiro"),
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
# render_text, edit_text; workers/turns.py: the follow-up template), as a business owner reads
# them in Portuguese; the stored text is unchanged (every match is replaced)
_MEDIA_PT_BR = {"voice note": "uma mensagem de voz", "image": "uma imagem", "video": "um vídeo",
                "audio": "um áudio", "document": "um documento", "sticker": "uma figurinha"}
_PT_BR_NOTES: list[tuple[str, str | Callable[[re.Match[str]], str]]] = [
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


def translate_notes(text: str, language: str) -> str:
    """A transcript message's text with the product's bracketed notes in the console's
    language (the customer's and the agent's own words are left as they are)."""
    if language == "en" or "[" not in text:
        return text
    for pattern, replacement in _PT_BR_NOTES:
        text = re.sub(pattern, replacement, text)
    return text
