"""The console's review of facts waiting for a person: approve, reject, correct."""
from bot.console.frame import Page, PageResult, Redirect, path_id
from intake.keys import TURN_QUEUE
from operations import service


def review_page(p: Page) -> PageResult:
    return "review.html", {"facts": service.review_queue(p.session, p.tenant), "error": ""}


def _by(p: Page) -> str:
    return f"console:{p.state.get('token_id')}"


def _fact_id(p: Page) -> int:
    return path_id(p, "fact_id", "fact")


def approve(p: Page) -> PageResult:
    service.approve_fact(p.session, p.tenant, _fact_id(p), by=_by(p),
                         reason=str(p.form.get("reason", ""))[:500], now=p.now)
    return Redirect("/console/review", p.t["approved"])


def reject(p: Page) -> PageResult:
    fact_id, reason = _fact_id(p), str(p.form.get("reason", ""))[:500]
    service.reject_fact(p.session, p.tenant, fact_id, by=_by(p), reason=reason, now=p.now)
    queue = p.request.app[TURN_QUEUE]
    p.after_commit.append(lambda: service.enqueue_rejection(queue, fact_id))
    return Redirect("/console/review", p.t["rejected"])


def edit(p: Page) -> PageResult:
    change = service.validated(service.FactEdit, {"value": p.form.get("value"),
                                                  "reason": p.form.get("reason")})
    service.edit_fact(p.session, p.tenant, _fact_id(p), change, by=_by(p), now=p.now)
    return Redirect("/console/review", p.t["edited"])
