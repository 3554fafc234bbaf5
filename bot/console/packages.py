"""The console's session packages (issue 46): a customer's packages on their conversation
page, a form to sell one and one to adjust the sessions used of each; the rules are
operations/packages.py's, as for the admin API and the CLI."""

from typing import Any

from bot.console.frame import Page, PageResult, Redirect, _language, path_id
from bot.console.texts import translate_problem
from operations import packages as package_ops
from operations import service
from operations.errors import MAPPED, NotFound, admin_error
from storage.models import Conversation


def packages_context(p: Page, contact_id: int | None) -> dict[str, Any]:
    """`packages` (the contact's, newest first, each with `usable`) and `package_choices`
    (the tenant's definitions) for conversation.html."""
    if contact_id is None:
        return {"packages": [], "package_choices": []}
    return {"packages": package_ops.of_customer(p.session, p.tenant, str(contact_id), p.now),
            "package_choices": package_ops.definitions(p.session, p.tenant)}


def _contact_of(p: Page) -> tuple[int, str]:
    """The conversation's id and its contact's id (as the operations take a contact)."""
    cid = path_id(p, "conversation_id", "conversation")
    conversation = p.session.get(Conversation, cid)
    if conversation is None or conversation.tenant_id != p.tenant.id:
        raise NotFound("no such conversation")  # the 404 page
    return cid, str(conversation.contact_id)


def _refused(p: Page, back: str, exc: Exception) -> Redirect:
    p.session.rollback()
    refused = admin_error(exc)
    return Redirect(back, "; ".join(translate_problem(part, _language(p))
                                    for part in refused.problems or [str(refused)]), bad=True)


def sell_package(p: Page) -> PageResult:
    cid, contact = _contact_of(p)
    back = f"/console/conversations/{cid}#packages"
    fields = {k: str(p.form.get(k) or "").strip() for k in ("package", "authorisation",
                                                           "expires_on")}
    try:
        sale = service.validated(package_ops.Sale, {"contact": contact, **{
            k: v for k, v in fields.items() if v}})
        sold = package_ops.sell(p.session, p.tenant, sale, now=p.now)
    except MAPPED as exc:
        return _refused(p, back, exc)
    return Redirect(back, f"{p.t['package_sold']}: {sold['name']}")


def adjust_package(p: Page) -> PageResult:
    cid, contact = _contact_of(p)
    back = f"/console/conversations/{cid}#packages"
    package_id = path_id(p, "package_id", "record")
    try:
        body = service.validated(package_ops.Adjustment,
                                 {"used": str(p.form.get("used") or "").strip()})
        mine = {row["id"] for row in package_ops.of_customer(p.session, p.tenant, contact,
                                                             p.now)}
        if package_id not in mine:  # another customer's (or tenant's): as if none
            raise NotFound(f"no customer package #{package_id}")
        done = package_ops.adjust(p.session, p.tenant, package_id, used=body.used)
    except MAPPED as exc:
        return _refused(p, back, exc)
    return Redirect(back, f"{p.t['package_adjusted']}: "
                    + p.t["package_used"].format(**done))
