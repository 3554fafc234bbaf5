"""`GET /calendar/{token}.ics`: a calendar feed (issue 46; operations/feeds.py builds it).

The token is the only credential (storage/feeds.py): unknown or revoked → 404, the same
answer, so a guess learns nothing. An `If-None-Match` equal to the feed's ETag, or an
`If-Modified-Since` at or after its Last-Modified (without If-None-Match, RFC 9110 13.1.3),
→ 304 without building it. The route template, never the path, is logged (bot/routes.py).
"""

import asyncio
from email.utils import format_datetime, parsedate_to_datetime

from aiohttp import web

from core import clock
from intake.keys import ENGINE
from operations import feeds
from storage.db import session_scope

CONTENT_TYPE = "text/calendar"
CACHE = "private, max-age=300"  # calendar apps poll every few hours; a proxy keeps none


def setup_feeds(app: web.Application) -> None:
    app.router.add_get("/calendar/{token}.ics", calendar_feed)


async def calendar_feed(request: web.Request) -> web.StreamResponse:
    answer = await asyncio.to_thread(_answer, request)
    if answer is None:
        raise web.HTTPNotFound(text="not found")
    return answer


def _answer(request: web.Request) -> web.Response | None:
    now = clock.now()
    with session_scope(request.app[ENGINE]) as session:
        found = feeds.feed_and_tenant(session, request.match_info["token"])
        if found is None:
            return None
        feed, tenant = found
        stamp = feeds.fingerprint(session, tenant, feed, now)
        headers = {"ETag": stamp.etag, "Last-Modified": format_datetime(stamp.last_modified,
                                                                        usegmt=True),
                   "Cache-Control": CACHE}
        if _not_modified(request, stamp):
            return web.Response(status=304, headers=headers)
        body = feeds.build(session, tenant, feed, now)
    return web.Response(body=body, headers=headers, content_type=CONTENT_TYPE,
                        charset="utf-8")


def _not_modified(request: web.Request, stamp: feeds.Stamp) -> bool:
    matches = request.headers.get("If-None-Match")
    if matches is not None:
        return stamp.etag in [m.strip() for m in matches.split(",")] or matches.strip() == "*"
    since = request.headers.get("If-Modified-Since")
    if since is None:
        return False
    try:
        return stamp.last_modified <= parsedate_to_datetime(since)
    except (TypeError, ValueError):
        return False
