"""The console's webhook endpoints: add, rotate a secret, remove, enable again, the delivery
log."""

from zoneinfo import ZoneInfo

from bot.console.frame import Page, PageResult, Redirect, path_id
from intake.keys import TURN_QUEUE
from operations import webhooks as hook_ops
from storage.jobs import enqueue_webhooks
from storage.webhooks import DEFAULT_GRACE, EVENT_TYPES


def webhooks_page(p: Page, *, new_secret: str = "") -> PageResult:
    """The tenant's webhook endpoints (a disabled one says so) and the form to add one; a
    secret just made is shown here once, never stored in the console session."""
    return "webhooks.html", {"endpoints": hook_ops.list_endpoints(p.session, p.tenant,
                                                                  now=p.now),
                             "event_types": EVENT_TYPES, "new_secret": new_secret,
                             "tz": ZoneInfo(p.tenant.timezone), "log": None}


def webhook_log(p: Page) -> PageResult:
    log_view = hook_ops.delivery_log(p.session, p.tenant, _endpoint_id(p), now=p.now)
    return "webhooks.html", {"endpoints": [], "event_types": EVENT_TYPES, "new_secret": "",
                             "tz": ZoneInfo(p.tenant.timezone), "log": log_view}


def _endpoint_id(p: Page) -> int:
    return path_id(p, "endpoint_id", "webhook endpoint")


def add_webhook(p: Page) -> PageResult:
    events = p.form.get("events") or []
    body = hook_ops.validated_create({"url": (p.form.get("url") or "").strip(),
                                      "events": list(events)})
    made = hook_ops.add_endpoint(p.session, p.tenant, body, now=p.now)
    return webhooks_page(p, new_secret=made["secret"])


def rotate_webhook(p: Page) -> PageResult:
    made = hook_ops.rotate_secret(p.session, p.tenant, _endpoint_id(p),
                                  grace=DEFAULT_GRACE, now=p.now)
    return webhooks_page(p, new_secret=made["secret"])


def remove_webhook(p: Page) -> PageResult:
    hook_ops.remove_endpoint(p.session, p.tenant, _endpoint_id(p))
    return Redirect("/console/webhooks", p.t["webhook_removed"])


def enable_webhook(p: Page) -> PageResult:
    _, due = hook_ops.enable_endpoint(p.session, p.tenant, _endpoint_id(p), now=p.now)
    queue = p.request.app[TURN_QUEUE]
    p.after_commit.append(lambda: enqueue_webhooks(queue, due))
    return Redirect("/console/webhooks", p.t["webhook_enabled_again"])
