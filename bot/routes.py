"""What a log line may say about a request's path: the route's template, never the path.

Paths carry customer data (`/admin/tenants/7/contacts/5511987654321`, the console's contact
pages), and no log line at any level may hold it (docs/OPERATE.md, Security). aiohttp resolves the
route before any middleware runs; its resource's `canonical` is the template as registered
(`/admin/tenants/{tenant_id}/contacts/{contact}`).
"""

from aiohttp import web

UNMATCHED = "(no route)"


def route_template(request: web.Request) -> str:
    """The template of the route `request` matched, or UNMATCHED (a 404 or 405: the path is
    whatever the caller typed, so it is not logged either)."""
    match_info = request.match_info
    route = getattr(match_info, "route", None)
    resource = getattr(route, "resource", None)
    if resource is None or getattr(match_info, "http_exception", None) is not None:
        return UNMATCHED
    return str(resource.canonical)
