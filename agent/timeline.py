"""One timeline: every message the customer received, as the model reads it (issue 37).

The customer's messages and the agent's own replies and tool rounds go to the model as they
are stored. Every other message the customer received was written by the product or by staff
(`Message.author`, storage/marks.py): a reminder with the buttons it offered, the
acknowledgement of a tap, a business notice, the handoff's "still calling the team" alert, a
staff reply typed in the console, the owner's reply from the WhatsApp Business app, a template
follow-up, the outage apology. `render` labels each as the product's or staff's, and `stored`
puts it on the user side of the request, as context in the place it was sent: never as the
agent's own words, and never as a message the request could end on (the Messages API refuses a
request whose last message is the assistant's: replay/messages_api.py). The labels are the
product's marks: customer text can never carry one (`storage.marks.disarm`).

The same rendering feeds the turn's window, the summary's transcript, facts extraction and the
console's transcript (bot/console/app.py).
"""

from collections.abc import Sequence
from typing import Any, Protocol

from agent.window import Block, Stored
from storage import marks
from storage.staff import staff_label

# kind -> the label that leads the message's first text block (pt-BR, as the staff mark is)
LABELS = {
    "reminder": "lembrete automático enviado",
    "notice": "aviso do negócio enviado",
    "alert": "aviso automático enviado",
    "handoff": "mensagem de transferência enviada",
    "tap_ack": "resposta automática enviada",
    "template": "modelo de mensagem enviado",
    "apology": "mensagem automática enviada",
    # another sender held the thread (issue 45): never ours, never the customer's
    "meta_agent": "agente da Meta respondeu ao cliente",
    "other_app": "outro aplicativo respondeu ao cliente",
    "handover": "resumo do agente da Meta ao nos passar a conversa",
}
BUTTONS = "botões"  # the label of a reminder's buttons: "[botões: Confirmar | Remarcar]"


class Row(Protocol):
    id: int | None
    role: str
    content: list[dict[str, Any]]
    position: int | None
    author: str | None


def buttons_note(titles: Sequence[str]) -> str:
    """`[botões: Confirmar | Remarcar | Cancelar]`: stored as a reminder's second text block."""
    return f"[{BUTTONS}: {' | '.join(titles)}]"


def render(kind: str, texts: Sequence[str], *, name: str = "") -> str:
    """The text the model (and the console) reads for one product or staff message: its first
    text led by the kind's label (`[lembrete automático enviado: …]`), later texts (a
    reminder's buttons) after it; a staff message as stored, led by `[equipe: NAME]`; the
    agent's text as it is."""
    texts = [t.strip() for t in texts if t.strip()]
    if kind in ("agent", "staff") or not texts:
        if kind == "staff" and texts and not texts[0].startswith(staff_label(name)):
            texts[0] = f"{staff_label(name)} {texts[0]}"
        return "\n".join(texts)
    head, *rest = texts
    return " ".join([f"[{LABELS[kind]}: {head}]", *rest])


def stored(row: Row) -> Stored:
    """A stored message as the window reads it: the agent's and the customer's as they are;
    a product or staff message (by its `author`) as user-side context, rendered by `render`."""
    kind, name = marks.author_kind(row.author)
    position = row.position or 0
    if kind == "agent" or row.role != "assistant":
        return Stored(row.id or 0, row.role, row.content, position, row.author)
    texts = [str(b.get("text", "")) for b in row.content if b.get("type") == "text"]
    text = render(kind, texts, name=name)
    content: list[Block] = [{"type": "text", "text": text}] if text else []
    return Stored(row.id or 0, "user", content, position, row.author)


def timeline(rows: Sequence[Row]) -> list[Stored]:
    return [stored(r) for r in rows]


def who(message: Stored) -> str:
    """Who wrote a timeline message, for the summary's transcript and facts extraction:
    Customer, Agent, Staff, Business (a message the product sent) or Other sender (Meta's
    agent or another app holding the thread)."""
    kind, _ = marks.author_kind(message.author)
    if kind == "staff":
        return "Staff"
    if kind in marks.OTHER_KINDS:
        return "Other sender (Meta's agent or another app)"
    if kind != "agent":
        return "Business (automatic)"
    return "Customer" if message.role == "user" else "Agent"
