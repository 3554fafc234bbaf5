"""The console's conversations: the list, one conversation's transcript and usage, the staff
reply box, handing back to the agent, and what needs a person ("Atendimento")."""

import json
from typing import Any
from zoneinfo import ZoneInfo

from agent import timeline
from agent.window import tool_result_text
from bot.console.frame import Page, PageResult, Redirect, _language, path_id
from bot.console.packages import packages_context
from bot.console.texts import translate_notes, translate_problem
from intake.ingest import unstamp
from intake.keys import SETTINGS, TURN_QUEUE
from operations import service
from operations import staff as staff_ops
from operations import threads as thread_ops
from operations.errors import Conflict, Invalid, NotFound
from storage.jobs import enqueue_flush, enqueue_turn
from storage.marks import OTHER_KINDS, author_kind
from usage.report import render_svg

TRANSCRIPT_MESSAGES = 500  # a conversation page shows its latest messages


def conversations_page(p: Page) -> PageResult:
    raw = {k: v for k, v in p.request.query.items() if k in ("contact", "state") and v}
    query = service.validated(service.ConversationQuery, raw)
    try:
        rows = service.list_conversations(p.session, p.tenant, query, language=_language(p))
        error = ""
    except NotFound as exc:
        rows, error = [], str(exc)
    return "conversations.html", {"conversations": rows, "query": query, "error": error,
                                  "tz": ZoneInfo(p.tenant.timezone)}


def conversation_page(p: Page) -> PageResult:
    view = service.conversation_view(p.session, p.tenant, _conversation_id(p), now=p.now,
                                     latest=True, limit=TRANSCRIPT_MESSAGES,
                                     language=_language(p))
    turn_calls = [c["context_tokens"] for c in view["usage"]["calls"] if c["purpose"] == "turn"]
    plot = render_svg(turn_calls, title=f"{p.t['usage']} · #{view['id']}",
                      axis_label=p.t["chart_calls"]) if turn_calls else ""  # no calls: no chart
    contact_id = view["contact"]["id"] if view["contact"] else None
    return "conversation.html", {"c": view, "plot": plot, **packages_context(p, contact_id),
                                 "transcript": _transcript(view, _language(p)),
                                 "tz": ZoneInfo(p.tenant.timezone),
                                 "templates": p.tenant.templates or []}


def _transcript(view: dict[str, Any], language: str = "pt-BR") -> list[dict[str, Any]]:
    """Customer and agent bubbles (a message the customer deleted says so; the product's notes
    in the console's language: texts.translate_notes; a reply sent as a list or buttons with
    what it offered: service.offered_view); tool rounds folded between them."""
    items: list[dict[str, Any]] = []
    for m in view["messages"]:
        blocks = [b for b in m["content"] if isinstance(b, dict)]
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
        tools = [b for b in blocks if b.get("type") in ("tool_use", "tool_result")]
        if tools:
            lines = [f"→ {b['name']}({json.dumps(b.get('input', {}), ensure_ascii=False)})"
                     if b["type"] == "tool_use"
                     else f"← {tool_result_text(b.get('content'))[:2000]}" for b in tools]
            names = [str(b["name"]) for b in tools if b["type"] == "tool_use"]
            if items and items[-1]["kind"] == "tools":
                items[-1]["text"] += "\n" + "\n".join(lines)
                items[-1]["names"] += names
            else:
                items.append({"kind": "tools", "names": names, "text": "\n".join(lines)})
        text = "\n".join(t for t in texts if t.strip())
        if m.get("deleted_at") and m["direction"] == "inbound":  # the text is gone
            items.append({"kind": "customer", "deleted": True, "text": "",
                          "at": m["received_at"], "delivery": None})
            continue
        if text and m["direction"] in ("inbound", "outbound"):
            kind = "customer" if m["direction"] == "inbound" else "agent"
            author, _ = author_kind(m.get("author"))
            if author == "staff":  # without its "[equipe: NAME]" mark
                kind, text = "staff", text.split("] ", 1)[-1]
            elif author != "agent":  # a product message: as the model reads it
                text = timeline.render(author, texts)
                if author in OTHER_KINDS:  # Meta's agent or another app (issue 45)
                    kind = "other_sender"
            if kind == "customer":  # the received-time stamp is for the model (intake/ingest.py)
                text = unstamp(text)
            items.append({"kind": kind, "text": translate_notes(text, language),
                          "at": m["received_at"],
                          "delivery": m.get("delivery"), "offered": m.get("offered")})
    return items


def _conversation_id(p: Page) -> int:
    return path_id(p, "conversation_id", "conversation")


def staff_reply(p: Page) -> PageResult:
    """The reply box: free text, or one of the tenant's templates with its parameters (one
    per line); refused replies come back to the conversation with the reason."""
    cid = _conversation_id(p)
    back = f"/console/conversations/{cid}"
    template = str(p.form.get("template") or "").strip()
    author = str(p.form.get("author") or "").strip() or "console"
    body: dict[str, Any] = {"author": author[:100]}
    if template:
        params = [line.strip() for line in str(p.form.get("parameters") or "").splitlines()
                  if line.strip()]
        body["template"] = {"name": template, "parameters": params}
    else:
        body["text"] = str(p.form.get("text") or "").strip() or None
    try:
        staff_ops.reply(p.session, p.tenant, cid, body, author="console", now=p.now)
    except (Invalid, Conflict) as exc:
        message = "; ".join(translate_problem(part, _language(p))
                            for part in exc.problems or [str(exc)])
        return Redirect(back, message, bad=True)
    queue, prefix = p.request.app[TURN_QUEUE], p.request.app[SETTINGS].redis_prefix
    p.after_commit.append(lambda: enqueue_flush(queue, prefix, cid))
    return Redirect(back, p.t["reply_queued"])


def hand_back(p: Page) -> PageResult:
    cid = _conversation_id(p)
    if staff_ops.hand_back(p.session, p.tenant, cid, now=p.now)["changed"]:
        queue, prefix = p.request.app[TURN_QUEUE], p.request.app[SETTINGS].redis_prefix
        tenant_id = p.tenant.id  # the fair move's tag (storage/jobs.job_id_for)
        p.after_commit.append(lambda: enqueue_turn(queue, prefix, cid,  # what still waits
                                                   tenant_id=tenant_id))
    return Redirect(f"/console/conversations/{cid}", p.t["handed_back"])


def thread_control(p: Page) -> PageResult:
    """Take, pass back to Meta's agent, or release the thread (operations/threads.py); Meta's
    refusal is shown with what to do (2494191: not the escalation partner)."""
    cid = _conversation_id(p)
    back = f"/console/conversations/{cid}"
    try:
        with thread_ops.graph_client(p.request.app[SETTINGS]) as graph:
            thread_ops.thread_control(p.session, p.tenant, cid,
                                      {"action": str(p.form.get("action") or "")},
                                      graph=graph, now=p.now)
    except (Invalid, Conflict) as exc:
        return Redirect(back, "; ".join(translate_problem(part, _language(p))
                                        for part in exc.problems or [str(exc)]), bad=True)
    return Redirect(back, p.t["thread_done"])


def attention_page(p: Page) -> PageResult:
    """What needs a person ("Atendimento"), newest first."""
    return "attention.html", {"a": staff_ops.attention(p.session, p.tenant, now=p.now),
                              "tz": ZoneInfo(p.tenant.timezone)}
