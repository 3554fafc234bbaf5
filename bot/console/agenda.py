"""The console's appointments: the week, cancelling, and the day agenda (issue 22;
operations/agenda.py) with its forms to book, move, block and mark a visit."""

from collections.abc import Callable
from datetime import date, timedelta
from zoneinfo import ZoneInfo

from bot.console.agenda_texts import agenda_problem, agenda_texts
from bot.console.frame import Page, PageResult, Redirect, _language, path_id
from bot.console.texts import translate_problem
from operations import agenda as agenda_ops
from operations import catalogue as catalogue_ops
from operations import feeds as feed_ops
from operations import service
from operations.errors import MAPPED, Conflict, admin_error
from storage.tenant_config import WEEKDAYS


def appointments_page(p: Page) -> PageResult:
    tz = ZoneInfo(p.tenant.timezone)
    today = p.now.astimezone(tz).date()
    try:
        anchor = date.fromisoformat(p.request.query.get("week", "")) \
            if p.request.query.get("week") else today
    except ValueError:
        anchor = today
    if not 2001 <= anchor.year <= 2099:
        anchor = today
    monday = anchor - timedelta(days=anchor.weekday())
    query = service.validated(service.AppointmentQuery, {
        "from": monday.isoformat(), "to": (monday + timedelta(days=6)).isoformat()})
    rows = service.list_appointments(p.session, p.tenant, query)
    days = []
    for offset in range(7):
        day = monday + timedelta(days=offset)
        label = f"{p.t['weekday_' + WEEKDAYS[offset]]} {day:%d/%m}"
        days.append((label, [a for a in rows if a["start"].startswith(day.isoformat())]))
    return "appointments.html", {"days": days, "week_start": f"{monday:%d/%m/%Y}",
                                 "iso_days": [(monday + timedelta(days=n)).isoformat()
                                              for n in range(7)],
                                 "day_link": agenda_texts(_language(p))["day_link"],
                                 "previous_week": (monday - timedelta(days=7)).isoformat(),
                                 "next_week": (monday + timedelta(days=7)).isoformat()}


def cancel(p: Page) -> PageResult:
    appointment = service.cancel_appointment(
        p.session, p.tenant, path_id(p, "appointment_id", "appointment"), now=p.now)
    return Redirect(f"/console/appointments?week={appointment['start'][:10]}",
                    p.t["cancelled"])


# -- the day agenda (issue 22; operations/agenda.py) -------------------------------------------

def _agenda_day(p: Page, raw: str) -> date:
    today = p.now.astimezone(ZoneInfo(p.tenant.timezone)).date()
    try:
        day = date.fromisoformat(raw) if raw else today
    except ValueError:
        return today
    return day if 2001 <= day.year <= 2099 else today


def agenda_page(p: Page) -> PageResult:
    """Each professional's day (hours, bookings and blocks by start), with the forms to book,
    move, block and mark a visit; one column, usable on a phone."""
    day = _agenda_day(p, p.request.query.get("day", ""))
    view = agenda_ops.day_view(p.session, p.tenant, day)
    for pro in view["professionals"]:
        entries = [{**a, "kind": "appointment",
                    "started": a["start_at"] <= p.now.isoformat()} for a in pro["appointments"]]
        entries += [{**b, "kind": "block"} for b in pro["blocks"]]
        pro["entries"] = sorted(entries, key=lambda e: e["start"])
    label = f"{p.t['weekday_' + WEEKDAYS[day.weekday()]]} {day:%d/%m/%Y}"
    return "agenda.html", {"agenda": view, "day": day.isoformat(), "day_label": label,
                           "previous_day": (day - timedelta(days=1)).isoformat(),
                           "next_day": (day + timedelta(days=1)).isoformat(),
                           "services": catalogue_ops.active_services(p.session, p.tenant),
                           "feeds": feed_ops.feed_views(p.session, p.tenant,
                                                        str(p.request.url.origin())),
                           "at": agenda_texts(_language(p))}


def _agenda_action(p: Page, action: Callable[[str], str]) -> PageResult:
    """Run `action(day)` → a flash; a refusal comes back to the same day with its reasons."""
    day = _agenda_day(p, str(p.form.get("day", ""))).isoformat()
    try:
        flash = action(day)
    except MAPPED as exc:
        p.session.rollback()
        refused = admin_error(exc)
        said = str(refused)  # the reason, then the problems that add to it (the bookings)
        parts = [said] if not refused.problems or isinstance(refused, Conflict) else [
            part for part in refused.problems if said not in part] or refused.problems
        message = "; ".join(agenda_problem(part, _language(p))
                            or translate_problem(part, _language(p)) for part in parts)
        return Redirect(f"/console/agenda?day={day}", message, bad=True)
    return Redirect(f"/console/agenda?day={day}", flash)


def _form(p: Page, name: str) -> str:
    return str(p.form.get(name, "") or "").strip()


def agenda_book(p: Page) -> PageResult:
    def act(day: str) -> str:
        then = [str(c).strip() for c in p.form.get("services") or [] if str(c).strip()]
        body = service.validated(agenda_ops.StaffBooking, {
            "service": _form(p, "service"), "start": f"{day}T{_form(p, 'time')}",
            "then": then,  # the visit's next services, in order (issue 38)
            **{k: _form(p, k) for k in ("professional", "contact", "phone", "name", "note",
                                        "repeat") if _form(p, k)}})
        booked = agenda_ops.book(p.session, p.tenant, body, now=p.now)
        said = f"{booked['start'][11:]} {booked['professional_name']}" if "visit" not in \
            booked else ", ".join(f"{row['start'][11:]} {row['service_name']} "
                                  f"({row['professional_name']})" for row in booked["visit"])
        if "series" in booked:  # issue 46: the series, with what needs a new time
            said += f" ({booked['series']['summary']})"
        return f"{agenda_texts(_language(p))['booked']}: {said}"
    return _agenda_action(p, act)


def agenda_block(p: Page) -> PageResult:
    def act(day: str) -> str:
        body = service.validated(agenda_ops.Block, {
            "professional": _form(p, "professional"), "start": f"{day}T{_form(p, 'time')}",
            "end": f"{day}T{_form(p, 'until')}", "note": _form(p, "note"),
            "force": bool(p.form.get("force"))})
        done = agenda_ops.block(p.session, p.tenant, body, now=p.now)
        at = agenda_texts(_language(p))
        kept = ", ".join(f"#{a['id']}" for a in done["kept"])
        return at["block_saved"] + (f" ({kept} {at['kept']})" if kept else "")
    return _agenda_action(p, act)


def _record(p: Page, key: str) -> int:
    return path_id(p, key, "record")


def agenda_unblock(p: Page) -> PageResult:
    def act(day: str) -> str:
        agenda_ops.unblock(p.session, p.tenant, _record(p, "block_id"))
        return agenda_texts(_language(p))["block_removed"]
    return _agenda_action(p, act)


def agenda_outcome(p: Page) -> PageResult:
    def act(day: str) -> str:
        agenda_ops.set_outcome(p.session, p.tenant, _record(p, "appointment_id"),
                               _form(p, "outcome"), now=p.now)
        return agenda_texts(_language(p))["marked"]
    return _agenda_action(p, act)


def agenda_feed(p: Page) -> PageResult:
    """Issue (or reissue) or revoke a calendar feed URL (issue 46; operations/feeds.py)."""
    def act(day: str) -> str:
        texts = agenda_texts(_language(p))
        if _form(p, "action") == "revoke":
            feed_ops.revoke(p.session, p.tenant, _form(p, "professional"), now=p.now)
            return texts["feed_revoked"]
        feed_ops.reissue(p.session, p.tenant, _form(p, "professional"), now=p.now)
        return texts["feed_issued"]
    return _agenda_action(p, act)


def agenda_cancel_series(p: Page) -> PageResult:
    """Cancel a series from this visit on (issue 46; operations/agenda.cancel_series)."""
    def act(day: str) -> str:
        done = agenda_ops.cancel_series(p.session, p.tenant, _record(p, "appointment_id"),
                                        now=p.now)
        return f"{agenda_texts(_language(p))['series_cancelled']}: {len(done['cancelled'])}"
    return _agenda_action(p, act)


def agenda_deposit_paid(p: Page) -> PageResult:
    """Staff saw the visit's Pix deposit in their bank app (issue 48)."""
    def act(day: str) -> str:
        done = agenda_ops.mark_paid(p.session, p.tenant, _record(p, "appointment_id"),
                                    now=p.now)
        return f"{agenda_texts(_language(p))['deposit_marked']}: {done['payment']}"
    return _agenda_action(p, act)


def agenda_move(p: Page) -> PageResult:
    def act(day: str) -> str:
        start = _form(p, "start") or f"{_form(p, 'move_date')}T{_form(p, 'move_time')}"
        body = service.validated(agenda_ops.Move, {"start": start})  # the date and time inputs
        moved = agenda_ops.move(p.session, p.tenant, _record(p, "appointment_id"), body,
                                now=p.now)
        return f"{agenda_texts(_language(p))['moved']}: {moved['start'].replace('T', ' ')}"
    return _agenda_action(p, act)


def agenda_waitlist_offer(p: Page) -> PageResult:
    """Staff offer a slot by hand to a waiting customer (issue 47; operations/agenda.py)."""
    def act(day: str) -> str:
        body = service.validated(agenda_ops.WaitlistOffer, {
            "professional": _form(p, "professional"), "start": f"{day}T{_form(p, 'time')}"})
        held = agenda_ops.offer_slot(p.session, p.tenant, _record(p, "entry_id"), body,
                                     now=p.now)
        return f"{agenda_texts(_language(p))['offered']}: {held['offered']['start'][11:]}"
    return _agenda_action(p, act)
