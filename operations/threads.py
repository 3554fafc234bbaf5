"""Thread control by staff (issue 45), shared by the admin API, the console and the CLI: take a
conversation's WhatsApp thread from Meta's agent, pass it back to Meta's agent (`pass` with
`target_role` ai_agent), or release it (idle: the next customer message is routed by the
number's entry-point settings). Meta's thread-control reference, through
docs/DEPLOY.md section 11 [S14]; the owner kept is storage/threads.py's.

Same contract as `operations.staff`: an open session and the caller's tenant in, JSON-ready
data out; NotFound for a conversation of another tenant, Invalid for an unknown action,
Conflict when Meta refuses (its reason explained to staff in the tenant's language: 2494191,
this app is not the number's escalation partner).
"""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlmodel import Session

from core.settings import Settings
from operations.errors import Conflict
from operations.service import validated
from operations.staff import conversation_of
from storage import contacts as contact_repo
from storage import threads
from storage.models import Contact, Tenant
from whatsapp.errors import GraphError
from whatsapp.graph import THREAD_TAKE_REFUSED, GraphClient

# what each action makes of the thread (storage/threads.py)
NEW_OWNER = {"take": threads.OURS, "pass": threads.META_AGENT, "release": threads.IDLE}

REFUSALS = {
    "pt-BR": {
        THREAD_TAKE_REFUSED: (
            "A Meta recusou: este aplicativo não é o parceiro de escalonamento do número, e só "
            "ele pode assumir uma conversa do agente da Meta. No Meta Business Suite, em "
            "Roteamento de conversas, escolha este aplicativo como parceiro de escalonamento "
            "(escalation partner) e tente de novo. Enquanto isso, a conversa continua com o "
            "agente da Meta (erro 2494191)."),
        None: "A Meta recusou o pedido ({detail}). A conversa continua com quem a tinha.",
    },
    "en": {
        THREAD_TAKE_REFUSED: (
            "Meta refused: this app is not the number's escalation partner, the only app "
            "that may take a conversation from Meta's agent. In Meta Business Suite, "
            "Conversation routing, choose this app as the escalation partner and try again. "
            "Meanwhile the conversation stays with Meta's agent (error 2494191)."),
        None: "Meta refused the request ({detail}). The conversation stays with its holder.",
    },
}


class ThreadAction(BaseModel):
    """`action`: take (the thread becomes ours), pass (back to Meta's agent) or release
    (idle)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    action: Literal["take", "pass", "release"]


def graph_client(settings: Settings) -> GraphClient:
    """A Graph client of the process's settings (the web process has none of its own)."""
    return GraphClient(base_url=settings.graph_api_base_url,
                       api_version=settings.graph_api_version,
                       access_token=settings.whatsapp_access_token)


def thread_control(session: Session, tenant: Tenant, conversation_id: int, body: Any, *,
                   graph: GraphClient, now: datetime) -> dict[str, Any]:
    """Ask Meta to `take`, `pass` (to ai_agent) or `release` the thread of a conversation's
    customer, then record its new owner. Returns {conversation_id, action, thread_owner,
    request_id}."""
    action = validated(ThreadAction, body).action
    conversation = conversation_of(session, tenant, conversation_id)
    contact = session.get(Contact, conversation.contact_id)
    assert contact is not None and contact.id is not None
    to, recipient = contact_repo.address(contact)
    try:
        request_id = graph.thread_control(
            tenant.phone_number_id, action, to=to, recipient=recipient,
            target_role=threads.META_AGENT_ROLE if action == "pass" else None)
    except GraphError as exc:
        raise Conflict("thread control refused", [refusal_text(exc, tenant.language)]) from exc
    threads.set_owner(session, [contact.id], NEW_OWNER[action], now=now)
    return {"conversation_id": conversation_id, "action": action,
            "thread_owner": NEW_OWNER[action], "request_id": request_id}


def refusal_text(exc: GraphError, language: str) -> str:
    """What staff read when Meta refuses a thread-control request, in `language`."""
    texts = REFUSALS.get(language, REFUSALS["pt-BR"])
    if exc.code == THREAD_TAKE_REFUSED:
        return texts[THREAD_TAKE_REFUSED]
    detail = f"{exc.code or exc.http_status or 'network'}: {exc.title}"[:200]
    return str(texts[None]).format(detail=detail)
