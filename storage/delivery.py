"""What reached the customer: the delivery vocabulary every view uses (console, admin API,
`wagent conversations show`, `wagent report`, /metrics), the rule that folds the parts of one
reply into one state, and the one-line reasons, in English and Brazilian Portuguese.

A reply is one outbound `Message`; each part sent of it is an `Outbound` row (the outbox,
workers/outbox.py), whose `status` is pending → sending → sent → delivered → read, or failed /
refused, or unknown. The reply's `delivery_status` is `fold` of its parts, written by
`storage.messages.refresh_delivery` whenever a part changes (docs/ARCHITECTURE.md "How a message is
answered"), in SQL (`fold_sql`, the same rule). Pure: no I/O.
"""

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, case, func
from sqlalchemy.orm import Mapped

from storage.models import Outbound

STATES = ("queued", "sending", "sent", "delivered", "read", "failed", "unknown")
NOT_DELIVERED = ("failed", "unknown")  # a conversation whose last reply is one is flagged
_PROGRESS = {"queued": 0, "sending": 1, "sent": 2, "delivered": 3, "read": 4}
_STATE_OF_STATUS = {"pending": "queued", "queued": "queued", "sending": "sending",
                    "sent": "sent", "delivered": "delivered", "read": "read", "played": "read",
                    "failed": "failed", "refused": "failed", "unknown": "unknown"}


def state_of(status: str | None) -> str | None:
    """The view state of an outbox status (pending → queued, refused → failed); also reads
    the aggregate written before this vocabulary ("pending"). None stays None."""
    if status is None:
        return None
    return _STATE_OF_STATUS.get(status, "unknown")


def progress(status: str) -> int:
    """How far along the way to the customer an outbox status is: pending 0, sending 1, sent 2,
    delivered 3, read (and played) 4; -1 off the way (failed, refused, unknown)."""
    return _PROGRESS.get(state_of(status) or "", -1)


# Meta's status webhooks by what they prove, for statuses that arrive in any order (Meta orders
# nothing): failed outranks only sent, since a message the customer's phone acknowledged
# (delivered, read) did arrive, whatever a failed status says before or after it
_STATUS_RANK = {"pending": 0, "sending": 0, "sent": 1, "failed": 2, "delivered": 3, "read": 4,
                "played": 4}


def supersedes(status: str, current: str) -> bool:
    """Whether Meta's status webhook `status` replaces the outbox status `current` of a send
    Meta took: sent < failed < delivered < read (played counts as read). The order of arrival
    does not matter (the final state of any set of statuses is the same in every order), so
    the statuses' timestamps are not needed. Statuses outside this list change nothing."""
    return _STATUS_RANK.get(status, -1) > _STATUS_RANK.get(current, 5)


def fold(statuses: Iterable[str]) -> str:
    """One state for a reply sent in parts: failed when any part failed (the customer did not
    get it whole), else unknown when any part's fate is unknown, else the least advanced part
    (delivered only once every part is)."""
    states = [state_of(s) or "queued" for s in statuses]
    for bad in NOT_DELIVERED:
        if bad in states:
            return bad
    return min(states, key=lambda s: _PROGRESS[s], default="queued")


def fold_sql(status: ColumnElement[str] | Mapped[str]) -> ColumnElement[str]:
    """`fold` as an SQL aggregate over the parts' `status` column (one statement refreshes a
    reply: storage.messages.refresh_delivery); NULL over no rows. Built from the tables `fold`
    reads: failed outranks unknown (any status outside the vocabulary counts as unknown), else
    the least advanced part's state."""
    failed = [s for s, state in _STATE_OF_STATUS.items() if state == "failed"]
    on_the_way = [s for s, state in _STATE_OF_STATUS.items() if state in _PROGRESS]
    worst = func.max(case((status.in_(failed), 2), (status.in_(on_the_way), 0), else_=1))
    step = func.min(case({s: _PROGRESS[state] for s, state in _STATE_OF_STATUS.items()
                          if state in _PROGRESS}, value=status))
    least = case({n: state for state, n in _PROGRESS.items()}, value=step)
    return case((worst == 2, "failed"), (worst == 1, "unknown"), else_=least)


def deciding_part(parts: list[Outbound]) -> Outbound | None:
    """The part that gives a reply its state (the first one in that state)."""
    state = fold(p.status for p in parts)
    return next((p for p in parts if state_of(p.status) == state), parts[0] if parts else None)


def reply_delivery(parts: list[Outbound], language: str = "en") -> dict[str, Any]:
    """What a view shows of one reply (its outbox rows, part order): `state` (STATES),
    `meaning` of that state, `error_code` (Meta's, or 131047 for the product's own window
    refusal), `reason` (one line; "" when nothing went wrong), `parts`, `tries` (Graph calls
    made for the deciding part), `retry_at` (ISO, when a queued part waits for a retry),
    `sent_at` (ISO, the first part's acceptance). `language`: "en" or "pt-BR"."""
    texts = TEXTS.get(language, TEXTS["en"])
    part = deciding_part(parts)
    state = fold(p.status for p in parts)
    troubled = part is not None and (state in NOT_DELIVERED or part.error_code is not None
                                     or part.error_cause is not None)
    return {
        "state": state,
        "meaning": texts["meaning"][state],
        "error_code": part.error_code if troubled and part else None,
        "reason": reason_line(part, language) if troubled and part else "",
        "parts": len(parts),
        "tries": part.attempts if part else 0,
        "retry_at": _iso(part.retry_at) if part and state == "queued" else None,
        "sent_at": _iso(parts[0].sent_at) if parts else None,
    }


def label(state: str, language: str) -> str:
    """The state's word in `language` ("falhou", "failed")."""
    return str(TEXTS.get(language, TEXTS["en"])["label"].get(state, state))


def reason_line(part: Outbound, language: str = "en") -> str:
    """Why a part is where it is, in one line: Meta's code and what it means, or the network
    or product cause, and how many tries were made when more than one."""
    texts = TEXTS.get(language, TEXTS["en"])
    code, cause = part.error_code, part.error_cause
    if code is not None:
        text = f"{code} · {_code_text(code, texts, part.error_reason)}"
        if cause in texts["cause"]:
            text += f" ({texts['cause'][cause]})"
    elif cause is not None:
        text = str(texts["cause"].get(cause) or texts["network"].format(cause=cause))
    else:
        text = (part.error_reason or "")[:200]
    if part.attempts > 1 and state_of(part.status) == "failed":
        text += f" · {texts['gave_up'].format(tries=part.attempts)}"
    elif part.attempts and state_of(part.status) == "queued":
        text += f" · {texts['retrying'].format(tries=part.attempts)}"
    return text


def _code_text(code: int, texts: dict[str, Any], detail: str | None) -> str:
    known = texts["code"].get(code)
    if known is None and 132000 <= code <= 132069:
        known = texts["code"][132000]
    if known is not None:
        return str(known)
    title = (detail or "").split(" [http ")[0]  # Meta's own words: its title and details
    return str(texts["code_unknown"].format(title=title[:160]) if title else texts["code_bare"])


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


TEXTS: dict[str, dict[str, Any]] = {
    "en": {
        "label": {"queued": "queued", "sending": "sending", "sent": "sent",
                  "delivered": "delivered", "read": "read", "failed": "failed",
                  "unknown": "unknown"},
        "meaning": {
            "queued": "waiting in the outbox to be sent (or for its next try)",
            "sending": "being sent to WhatsApp now",
            "sent": "WhatsApp accepted it; not yet on the customer's phone",
            "delivered": "on the customer's phone",
            "read": "the customer read it",
            "failed": "it did not reach the customer and will not be sent again",
            "unknown": "the request left but no answer came back, so WhatsApp may or may not "
                       "have delivered it; it is not sent again (it could arrive twice)",
        },
        "code": {
            0: "WhatsApp rejected the access token; sending is paused",
            190: "WhatsApp rejected the access token; sending is paused",
            1: "WhatsApp API error",
            2: "WhatsApp's service was temporarily down",
            4: "the app's request limit at WhatsApp was reached",
            80007: "the WhatsApp account's rate limit was reached",
            100: "WhatsApp refused the message's format (invalid parameter)",
            130429: "the number's sending rate limit at WhatsApp was reached",
            131000: "something went wrong at WhatsApp",
            131016: "WhatsApp's service was unavailable",
            131021: "sender and recipient are the same number",
            131026: "WhatsApp could not deliver to this number (not on WhatsApp, an old app, "
                    "or it blocked the business)",
            131030: "the customer's number is not in the test number's allowed list",
            131047: "more than 24 hours since the customer's last message: only an approved "
                    "template may be sent",
            131048: "WhatsApp's spam limit (the number's quality rating)",
            131049: "WhatsApp held it back to protect engagement (marketing limits)",
            131050: "the customer opted out of marketing messages",
            131051: "WhatsApp does not support this message type",
            131056: "too many messages to this customer in a short time (WhatsApp's "
                    "per-customer limit)",
            131057: "the WhatsApp account was in maintenance",
            132000: "WhatsApp refused the template (parameters, approval or paused)",
        },
        "code_unknown": "WhatsApp refused it: {title}",
        "code_bare": "WhatsApp refused it",
        "cause": {
            "window_closed": "refused by this product before sending",
            "thread_held": "not sent: Meta's agent or another app holds the conversation",
            "previous_part": "not sent: an earlier part of this reply failed",
            "crashed": "the worker stopped during the send",
            "no_wamid": "WhatsApp answered without the message's id",
            "gateway": "a gateway in front of WhatsApp answered with an error page (HTTP 5xx), "
                       "not WhatsApp's own error",
            "dns": "WhatsApp's address did not resolve (DNS)",
            "refused": "the connection to WhatsApp was refused",
            "tls": "the secure connection to WhatsApp failed (TLS)",
            "timeout": "WhatsApp did not answer in time",
            "unreachable": "no route to WhatsApp's network",
            "reset": "the connection to WhatsApp was cut",
            "closed": "WhatsApp closed the connection without answering",
            "protocol": "WhatsApp's answer was malformed",
        },
        "network": "network error ({cause})",
        "gave_up": "after {tries} tries",
        "retrying": "tries so far: {tries}",
    },
    "pt-BR": {
        "label": {"queued": "na fila", "sending": "enviando", "sent": "enviada",
                  "delivered": "entregue", "read": "lida", "failed": "falhou",
                  "unknown": "incerta"},
        "meaning": {
            "queued": "aguardando envio (ou a próxima tentativa)",
            "sending": "sendo enviada ao WhatsApp agora",
            "sent": "o WhatsApp aceitou; ainda não chegou ao celular do cliente",
            "delivered": "chegou ao celular do cliente",
            "read": "o cliente leu",
            "failed": "não chegou ao cliente e não será reenviada",
            "unknown": "o pedido saiu, mas o WhatsApp não respondeu: pode ter chegado ou não; "
                       "não é reenviada (poderia chegar duas vezes)",
        },
        "code": {
            0: "o WhatsApp recusou a chave de acesso; os envios estão pausados",
            190: "o WhatsApp recusou a chave de acesso; os envios estão pausados",
            1: "erro na API do WhatsApp",
            2: "o serviço do WhatsApp estava fora do ar",
            4: "limite de chamadas do aplicativo no WhatsApp atingido",
            80007: "limite de envios da conta do WhatsApp atingido",
            100: "o WhatsApp recusou o formato da mensagem (parâmetro inválido)",
            130429: "limite de envios do número no WhatsApp atingido",
            131000: "erro desconhecido no WhatsApp",
            131016: "serviço do WhatsApp indisponível",
            131021: "remetente e destinatário são o mesmo número",
            131026: "o WhatsApp não conseguiu entregar neste número (sem WhatsApp, aplicativo "
                    "antigo ou bloqueou a empresa)",
            131030: "o número do cliente não está na lista permitida do número de teste",
            131047: "mais de 24 horas desde a última mensagem do cliente: só um modelo "
                    "aprovado pode ser enviado",
            131048: "limite de spam do WhatsApp (qualidade do número)",
            131049: "o WhatsApp segurou a mensagem para preservar o engajamento (limite de "
                    "marketing)",
            131050: "o cliente recusou mensagens de marketing",
            131051: "o WhatsApp não aceita este tipo de mensagem",
            131056: "mensagens demais para este cliente em pouco tempo (limite do WhatsApp "
                    "por cliente)",
            131057: "a conta do WhatsApp estava em manutenção",
            132000: "o WhatsApp recusou o modelo (parâmetros, aprovação ou pausado)",
        },
        "code_unknown": "o WhatsApp recusou: {title}",
        "code_bare": "o WhatsApp recusou",
        "cause": {
            "window_closed": "recusada pelo próprio sistema, sem enviar",
            "thread_held": "não enviada: o agente da Meta ou outro aplicativo tem a conversa",
            "previous_part": "não enviada: uma parte anterior desta resposta falhou",
            "crashed": "o processo parou durante o envio",
            "no_wamid": "o WhatsApp respondeu sem o identificador da mensagem",
            "gateway": "um gateway na frente do WhatsApp respondeu com uma página de erro "
                       "(HTTP 5xx), não com um erro do próprio WhatsApp",
            "dns": "o endereço do WhatsApp não foi encontrado (DNS)",
            "refused": "a conexão com o WhatsApp foi recusada",
            "tls": "a conexão segura com o WhatsApp falhou (TLS)",
            "timeout": "o WhatsApp não respondeu a tempo",
            "unreachable": "sem rota até a rede do WhatsApp",
            "reset": "a conexão com o WhatsApp caiu",
            "closed": "o WhatsApp fechou a conexão sem responder",
            "protocol": "a resposta do WhatsApp veio malformada",
        },
        "network": "erro de rede ({cause})",
        "gave_up": "após {tries} tentativas",
        "retrying": "tentativas até agora: {tries}",
    },
}
