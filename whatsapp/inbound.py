"""Parse a WhatsApp webhook payload into independent updates, one bad item losing nothing else.

Walks `entry[] → changes[] → value.messages[] / statuses[] / errors[] / message_echoes[]`
(the last: `field` "smb_message_echoes", what the business sent from the WhatsApp Business
app); routes on which arrays are present, not on `field` (Sources: WhatsApp §3.1). Two fields
are read by their name (issue 45; docs/DEPLOY.md section 11 [S14]):
`standby` (the same arrays one level deeper, `value.standby.*`, copies of a thread another
sender holds: Meta Business Agent or another app) and `messaging_handovers` (`control_passed`,
`control_taken`). A field or an item this module does not know is an `UnknownPart`, never
dropped silently. Every field is optional unless Meta guarantees it. Pure: no I/O.
"""

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from core.storable import storable
from whatsapp.choice_ids import describe_choice, is_text
from whatsapp.rate_card import Pricing

MEDIA_TYPES = {"image": "image", "video": "video", "audio": "audio", "document": "document",
               "sticker": "sticker"}
ITEM_KINDS = ("messages", "statuses", "errors", "message_echoes")


@dataclass(frozen=True)
class InboundMessage:
    """A customer's message, rendered as text the agent can use.

    `starts_turn` is False for reactions and deletions: stored, never answered. `refers_to`:
    for an edit or a deletion (`type` edit / revoke), the wamid of the earlier message it
    changes (`edit.original_message_id`, `revoke.original_message_id`); `text` is then the
    edit's new text, or DELETED. `media`: for a photo, document, voice note... the webhook's
    description of the file (`media_descriptor`); the turn fetches it (workers/media.py).
    """

    phone_number_id: str
    wamid: str
    wa_id: str | None
    user_id: str | None
    profile_name: str | None
    timestamp: datetime | None
    wa_type: str
    text: str
    starts_turn: bool
    raw: dict[str, Any] = field(repr=False, compare=False)
    refers_to: str | None = None
    media: dict[str, Any] | None = None  # `media_descriptor`: what a turn downloads
    # a copy from the `standby` field: the thread is another sender's; stored as the
    # customer's message (it opens or refreshes the 24-hour window), never answered
    standby: bool = False


@dataclass(frozen=True)
class StatusUpdate:
    """Delivery state of a message we sent: sent, delivered, read, played or failed."""

    phone_number_id: str
    wamid: str
    status: str
    timestamp: datetime | None
    recipient_id: str | None
    recipient_user_id: str | None
    error_code: int | None
    error_reason: str | None
    pricing: Pricing | None = None  # on `sent` and one of delivered/read (Sources: WhatsApp §3.5)


@dataclass(frozen=True)
class IdentityChange:
    """A `system` message re-keying a contact (`user_changed_number`, `user_changed_user_id`)."""

    phone_number_id: str
    wamid: str
    kind: str
    old_wa_id: str | None
    old_user_id: str | None
    new_wa_id: str | None
    new_user_id: str | None


@dataclass(frozen=True)
class ErrorNotice:
    """An out-of-band error in `value.errors[]` (system, app or account level)."""

    phone_number_id: str | None
    code: int | None
    title: str


@dataclass(frozen=True)
class BadItem:
    """An item that could not be understood; kept whole in the dead-letter table."""

    where: str
    reason: str
    raw: Any = field(repr=False, compare=False)
    phone_number_id: str | None = None  # of the envelope, when the item is inside one


@dataclass(frozen=True)
class _Echo:
    """A message sent to the customer by someone other than the agent, as its webhook echoes
    it: a recipient (`to`, or `to_user_id`), `text` the body or "[... sent an image]" and so on."""

    phone_number_id: str
    wamid: str
    to: str | None
    to_user_id: str | None
    timestamp: datetime | None
    wa_type: str
    text: str
    raw: dict[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class StaffEcho(_Echo):
    """A message the business sent from the WhatsApp Business app on the same number
    (coexistence; `smb_message_echoes`). Only the wamid and a recipient are needed: `to`, or
    `to_user_id` (not always present); `text` is the body, or "[staff sent an image]" and so
    on for other types."""


@dataclass(frozen=True)
class AgentEcho(_Echo):
    """What another sender holding the thread sent the customer: a `standby.message_echoes[]`
    item, whose `message` is the send request (`to`, `type`, `text`...), with a `template`
    sibling for a template (Meta's standby reference [F2][F3]). `sender`: "meta_agent" (Meta
    Business Agent, the default primary responder) or "other_app" (`biz_opaque_callback_data`
    names no `bizai` originator and the thread is known to be another app's: decided at
    storage, intake/standby.py)."""


@dataclass(frozen=True)
class StandbyStatus:
    """A delivery status of a message another sender sent (`standby.statuses[]`), with its
    `pricing` category when given: never one of our sends."""

    phone_number_id: str
    wamid: str
    status: str
    pricing_category: str | None
    billable: bool | None


@dataclass(frozen=True)
class Handover:
    """A `messaging_handovers` change: `kind` control_passed (the thread is now ours, with
    Meta's `conversation_context.summary` text when given) or control_taken (the escalation
    partner took it from us). The customer is `sender.phone_number` (or `sender.user_id`);
    the number `recipient.phone_number_id` (Meta's reference [F5][F6])."""

    phone_number_id: str
    kind: str
    wa_id: str | None
    user_id: str | None
    previous_owner_role: str | None
    new_owner_role: str | None
    summary: str | None
    timestamp: datetime | None


@dataclass(frozen=True)
class UnknownPart:
    """A webhook field, or an item key inside a known field, this product does not read: its
    name only (never a value: it may hold customer data), logged and counted."""

    field: str
    where: str


Update = (InboundMessage | StatusUpdate | IdentityChange | ErrorNotice | BadItem | StaffEcho
          | AgentEcho | StandbyStatus | Handover | UnknownPart)


def parse_update(payload: Any) -> list[Update]:
    """Every update in a webhook payload, in payload order.

    A payload that is not a WhatsApp envelope gives one BadItem; a bad entry, change or item
    gives a BadItem for that part only.
    """
    if not is_envelope(payload):
        return [BadItem("payload", "not a webhook envelope (no entry[])", payload)]
    updates: list[Update] = []
    for e, entry in enumerate(payload["entry"]):
        changes = entry.get("changes") if isinstance(entry, dict) else None
        if not isinstance(changes, list):
            updates.append(BadItem(f"entry[{e}]", "entry without changes[]", entry))
            continue
        for c, change in enumerate(changes):
            updates += _parse_change(change, f"entry[{e}].changes[{c}]")
    return updates


def is_envelope(payload: Any) -> bool:
    """An object with an `entry[]` list: the shape of every webhook POST (§3.1)."""
    return isinstance(payload, dict) and isinstance(payload.get("entry"), list)


# the keys of a `value` (and of `value.standby`) this module reads or knowingly passes by
KNOWN_VALUE_KEYS = frozenset(("messaging_product", "metadata", "contacts", *ITEM_KINDS,
                              "standby", "conversation_context"))
KNOWN_FIELDS = ("messages", "smb_message_echoes", "standby", "messaging_handovers")
HANDOVER_KINDS = ("control_passed", "control_taken")


def _parse_change(change: Any, where: str) -> list[Update]:
    value = change.get("value") if isinstance(change, dict) else None
    if not isinstance(value, dict):
        return [BadItem(where, "change without value", change)]
    name = _str(change.get("field")) or "messages"
    if name == "messaging_handovers" or value.get("type") in HANDOVER_KINDS:
        return [_parse_handover(value, where, change)]
    phone_number_id = _str(_dict(value.get("metadata")).get("phone_number_id"))
    standby = value.get("standby")
    if name == "standby" or isinstance(standby, dict):
        if not isinstance(standby, dict):
            return [BadItem(f"{where}.standby", "standby is not an object", standby,
                            phone_number_id)]
        if phone_number_id is None:
            return [BadItem(where, "value without metadata.phone_number_id", change)]
        return _unknown_keys("standby", standby, where) + _parse_items(
            standby, phone_number_id, where + ".standby", standby=True)
    unknown = _unknown_keys(name, value, where)
    has_items = any(value.get(k) is not None for k in ITEM_KINDS)
    if not has_items:  # another subscription field (account_update, ...)
        return [UnknownPart(name, where)] if name not in KNOWN_FIELDS else unknown
    if phone_number_id is None:
        return [BadItem(where, "value without metadata.phone_number_id", change)]
    return unknown + _routed_summary(value, phone_number_id) + _parse_items(
        value, phone_number_id, where)


def _routed_summary(value: dict[str, Any], phone_number_id: str) -> list[Update]:
    """A message routed to us after Meta's agent may carry `conversation_context.summary`
    beside `messages` ([F7]): read as a `control_passed` with that summary, before the
    messages (its customer: the first message's `from`, else the change's only contact)."""
    given = _dict(value.get("conversation_context")).get("summary")
    summary = _str(given) if isinstance(given, str) else _str(_dict(given).get("text"))
    if not summary or not summary.strip():
        return []
    messages = value.get("messages")
    first = _dict(messages[0]) if isinstance(messages, list) and messages else {}
    contacts = value.get("contacts")
    sole = _dict(contacts[0]) if isinstance(contacts, list) and len(contacts) == 1 else {}
    wa_id = _str(first.get("from")) or _str(sole.get("wa_id"))
    user_id = _str(first.get("from_user_id")) or _str(sole.get("user_id"))
    if not (wa_id or user_id):
        return []
    return [Handover(phone_number_id, "control_passed", wa_id, user_id, None, None, summary,
                     _timestamp(first.get("timestamp")))]


def _unknown_keys(name: str, value: dict[str, Any], where: str) -> list[Update]:
    """An `UnknownPart` for each key of `value` this module does not read (its name only)."""
    return [UnknownPart(f"{name}.{_str(key)}", where)
            for key in value if key not in KNOWN_VALUE_KEYS]


def _parse_items(value: dict[str, Any], phone_number_id: str, where: str, *,
                 standby: bool = False) -> list[Update]:
    """The item arrays of one `value` (or `value.standby`), each item parsed on its own."""
    raw_contacts = value.get("contacts")
    contacts = [c for c in raw_contacts if isinstance(c, dict)] if isinstance(
        raw_contacts, list) else []
    updates: list[Update] = []
    parsers = (_parse_standby_message, _parse_standby_status, _parse_error,
               _parse_agent_echo) if standby else (_parse_message, _parse_status,
                                                   _parse_error, _parse_echo)
    for kind, parse in zip(ITEM_KINDS, parsers, strict=True):
        items = value.get(kind)
        if items is not None and not isinstance(items, list):
            updates.append(BadItem(f"{where}.{kind}", f"{kind} is not a list", items,
                                   phone_number_id))
            continue
        for i, item in enumerate(items or []):
            try:
                updates.append(parse(item, phone_number_id, contacts))
            except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
                updates.append(BadItem(f"{where}.{kind}[{i}]", f"{type(exc).__name__}: {exc}",
                                       item, phone_number_id))
    return updates


def _parse_message(item: Any, phone_number_id: str, contacts: list[dict[str, Any]]) -> Update:
    wamid = _str(item.get("id"))
    if not wamid:
        raise ValueError("message without id")
    wa_type = _str(item.get("type")) or "unknown"
    if wa_type == "system":
        return _parse_system(item, phone_number_id, wamid)
    wa_id, user_id = _str(item.get("from")), _str(item.get("from_user_id"))
    contact = _match_contact(contacts, wa_id, user_id) if wa_id or user_id else _sole(contacts)
    if not wa_id and not user_id:
        wa_id, user_id = _str(contact.get("wa_id")), _str(contact.get("user_id"))
        if not wa_id and not user_id:
            raise ValueError("message without from or from_user_id, and not exactly one "
                             "contact with an id in its change")
    profile = _dict(contact.get("profile"))
    text, starts_turn = render_text(item, wa_type)
    return InboundMessage(
        phone_number_id=phone_number_id, wamid=wamid,
        wa_id=wa_id or _str(contact.get("wa_id")), user_id=user_id or _str(contact.get("user_id")),
        profile_name=_str(profile.get("name")), timestamp=_timestamp(item.get("timestamp")),
        wa_type=wa_type, text=text, starts_turn=starts_turn, raw=item,
        refers_to=_refers_to(item, wa_type, wamid),
        media=media_descriptor(item, wa_type),
    )


def _parse_standby_message(item: Any, phone_number_id: str,
                           contacts: list[dict[str, Any]]) -> Update:
    """A customer's message copied on `standby`: read as any message, never a turn. A system
    message (a number change) is applied as on `messages`."""
    parsed = _parse_message(item, phone_number_id, contacts)
    if not isinstance(parsed, InboundMessage):
        return parsed
    return InboundMessage(
        phone_number_id=parsed.phone_number_id, wamid=parsed.wamid, wa_id=parsed.wa_id,
        user_id=parsed.user_id, profile_name=parsed.profile_name, timestamp=parsed.timestamp,
        wa_type=parsed.wa_type, text=parsed.text, starts_turn=False, raw=parsed.raw,
        refers_to=parsed.refers_to, media=parsed.media, standby=True)


def _parse_standby_status(item: Any, phone_number_id: str, _: list[dict[str, Any]]) -> Update:
    wamid, status = _str(item.get("id")), _str(item.get("status"))
    if not wamid or not status:
        raise ValueError("status without id or status")
    pricing = _dict(item.get("pricing"))
    billable = pricing.get("billable")
    return StandbyStatus(phone_number_id, wamid, status, _str(pricing.get("category")),
                         billable if isinstance(billable, bool) else None)


def _parse_agent_echo(item: Any, phone_number_id: str, _: list[dict[str, Any]]) -> Update:
    """One `standby.message_echoes[]` item: `id`, `timestamp`, and the send request under
    `message` (`to` or `recipient`, `type`, `text.body`...); a template's name is read from
    `message.template.name` or the `template` sibling. A missing id or recipient is a
    BadItem."""
    if not isinstance(item, dict):
        raise TypeError("echo is not an object")
    message = _dict(item.get("message"))
    wamid = _str(item.get("id"))
    to = _str(message.get("to")) or _str(item.get("to"))
    to_user_id = _str(message.get("recipient")) or _str(item.get("to_user_id"))
    if not wamid or not (to or to_user_id):
        raise ValueError("echo without id or recipient (message.to / message.recipient)")
    wa_type = _str(message.get("type")) or _str(item.get("type")) or "unknown"
    text = _agent_echo_text(item, message, wa_type)
    return AgentEcho(phone_number_id, wamid, to, to_user_id, _timestamp(item.get("timestamp")),
                     wa_type, storable(text), item)


def _agent_echo_text(item: dict[str, Any], message: dict[str, Any], wa_type: str) -> str:
    """What the model and staff read of an echo: the text body; a template's name and the
    body of its definition when the `template` sibling carries one; else its kind."""
    body = _str(_dict(message.get(wa_type)).get("body")) if wa_type == "text" else None
    if body and body.strip():
        return body
    if wa_type == "template":
        name = _str(_dict(message.get("template")).get("name")) \
            or _str(_dict(item.get("template")).get("name")) or "?"
        texts = [_str(c.get("text")) for c in _components(item) if _str(c.get("type")) in
                 ("BODY", "body")]
        shown = f": {texts[0]}" if texts and texts[0] else ""
        return f"[template {name}{shown}]"
    if wa_type == "interactive":
        asked = _str(_dict(_dict(message.get("interactive")).get("body")).get("text"))
        if asked:
            return asked
    return f"[sent {ECHO_KINDS.get(wa_type, 'a message of type ' + wa_type)}]"


def _components(item: dict[str, Any]) -> list[dict[str, Any]]:
    found = _dict(item.get("template")).get("components")
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def _parse_handover(value: dict[str, Any], where: str, change: Any) -> Update:
    """One `messaging_handovers` value ([F5][F6]); an unknown `type` is an UnknownPart, one
    naming no number or customer a BadItem."""
    kind = _str(value.get("type")) or ""
    if kind not in HANDOVER_KINDS:
        return UnknownPart(f"messaging_handovers.{kind or '?'}"[:80], where)
    recipient, sender = _dict(value.get("recipient")), _dict(value.get("sender"))
    phone_number_id = _str(recipient.get("phone_number_id")) or _str(
        _dict(value.get("metadata")).get("phone_number_id"))
    wa_id, user_id = _str(sender.get("phone_number")) or _str(sender.get("wa_id")), \
        _str(sender.get("user_id"))
    if not phone_number_id or not (wa_id or user_id):
        return BadItem(where, "handover without recipient.phone_number_id or sender", change,
                       phone_number_id)
    detail = _dict(value.get(kind))
    given = _dict(detail.get("conversation_context")).get("summary")
    summary = _str(given) if isinstance(given, str) else _str(_dict(given).get("text"))
    return Handover(phone_number_id, kind, wa_id, user_id,
                    _str(detail.get("previous_owner_role")), _str(detail.get("new_owner_role")),
                    summary if summary and summary.strip() else None,
                    _timestamp(value.get("timestamp")))


MEDIA_FIELDS = ("id", "mime_type", "sha256", "caption", "filename")


def media_descriptor(item: dict[str, Any], wa_type: str) -> dict[str, Any] | None:
    """`{"kind", "id", "mime_type", "sha256", "caption"?, "filename"?, "voice"?}` of a media
    message (Sources: WhatsApp §3.3: `image`/`video`/`document`/`audio`/`sticker` carry `id`,
    `mime_type`, `sha256`, `caption?`; `document.filename`; `audio.voice`), None for other
    types or without a media id. The webhook's `url` is left out on purpose: it is never
    followed (whatsapp/media.py fetches the URL from `GET /{media-id}`)."""
    if wa_type not in MEDIA_TYPES:
        return None
    body = _dict(item.get(wa_type))
    media_id = _str(body.get("id"))
    if not media_id:
        return None
    described: dict[str, Any] = {"kind": wa_type}
    for name in MEDIA_FIELDS:
        value = _str(body.get(name))
        if value:
            described[name] = value[:1024]
    if wa_type == "audio" and body.get("voice") is True:
        described["voice"] = True
    return described


FOLLOW_UPS = ("edit", "revoke")  # types that change an earlier message (Sources: WhatsApp)
DELETED = "[the customer deleted a message]"


def _refers_to(item: dict[str, Any], wa_type: str, wamid: str) -> str | None:
    """The earlier message an edit or a deletion changes; None for other types, and for one
    that names none (or itself): it then stands alone."""
    if wa_type not in FOLLOW_UPS:
        return None
    original = _str(_dict(item.get(wa_type)).get("original_message_id"))
    return original if original and original != wamid else None


def edit_text(new_text: str, original_sent: str | None) -> str:
    """What the agent reads for an edit: the new text, marked as an edit of the message sent
    at `original_sent` ("Mon 10:00"), or of "an earlier message" when that one is unknown."""
    which = f"their message of {original_sent}" if original_sent else "an earlier message"
    return f"[the customer edited {which} to:] {new_text}"


def _match_contact(contacts: list[dict[str, Any]], wa_id: str | None,
                   user_id: str | None) -> dict[str, Any]:
    """The contact entry of this sender, by id, never by position (Sources: WhatsApp §3.2)."""
    for contact in contacts:
        if user_id and _str(contact.get("user_id")) == user_id:
            return contact
        if wa_id and _str(contact.get("wa_id")) == wa_id:
            return contact
    return {}


def _sole(contacts: list[dict[str, Any]]) -> dict[str, Any]:
    """The change's only contact: the sender of a message that names none (`from` and
    `from_user_id` both missing). With none or several, the sender is unknown: {}."""
    return contacts[0] if len(contacts) == 1 else {}


def render_text(item: dict[str, Any], wa_type: str) -> tuple[str, bool]:
    """The text the agent reads for a message of any type, and whether it starts a turn."""
    body = _dict(item.get(wa_type))
    quoted = " (replying to an earlier message)" if _quotes(item) else ""
    if wa_type == "text":
        text = _str(body.get("body")) or ""
        return (text + quoted if text.strip() else "[empty text message]"), True
    if wa_type == "reaction":
        emoji = _str(body.get("emoji"))
        return (f"[reaction {emoji} to one of our messages]" if emoji
                else "[reaction removed]"), False
    if wa_type == "revoke":
        return DELETED, False
    if wa_type == "edit":  # the new content is a message of its own: text, or a caption
        new = _dict(body.get("message"))
        new_type = _str(new.get("type")) or "text"
        return render_text(new, "unknown" if new_type in FOLLOW_UPS else new_type)[0], True
    if wa_type == "interactive":
        return _render_interactive(body) + quoted, True
    if wa_type == "button":
        return (f"[tapped quick reply \"{_str(body.get('text')) or ''}\" "
                f"(payload {_str(body.get('payload')) or '-'})]"), True
    if wa_type == "location":
        return _render_location(body), True
    if wa_type in MEDIA_TYPES:
        return _render_media(wa_type, body), True
    if wa_type == "contacts":
        cards = item.get("contacts")
        names = [_str(_dict(c.get("name")).get("formatted_name")) or "?"
                 for c in (cards if isinstance(cards, list) else []) if isinstance(c, dict)]
        return f"[shared contact card: {', '.join(names) or 'no name'}]", True
    if wa_type == "order":
        items = body.get("product_items")
        count = len(items) if isinstance(items, list) else 0
        return f"[sent a catalogue order with {count} item(s)]", True
    inner = body.get("type") if wa_type == "unsupported" else wa_type
    return (f"[sent a message of a type we cannot read ({_str(inner) or 'unknown'}); "
            "ask politely for a text message]"), True


def _render_interactive(body: dict[str, Any]) -> str:
    """A pick of our reply buttons or list; an id this product made (whatsapp/interactive.py)
    also says what it names: "...: the slot 2026-06-02T14:00 with julia"; a free-text option
    comes back as its text: "Sim, pode ser [tapped an option]"."""
    kind = _str(body.get("type"))
    picked = _dict(body.get(kind)) if kind in ("button_reply", "list_reply") else {}
    if is_text(_str(picked.get("id"))):  # a free-text option: its text is the answer
        return f"{_str(picked.get('title')) or ''} [tapped an option]"
    if kind == "button_reply":
        reply = _dict(body.get("button_reply"))
        return (f"[tapped button \"{_str(reply.get('title')) or ''}\" (id "
                f"{_str(reply.get('id'))}){_names(reply)}]")
    if kind == "list_reply":
        reply = _dict(body.get("list_reply"))
        desc = _str(reply.get("description"))
        return (f"[picked list option \"{_str(reply.get('title')) or ''}\""
                f"{' - ' + desc if desc else ''} (id {_str(reply.get('id'))}){_names(reply)}]")
    if kind == "nfm_reply":
        reply = _dict(body.get("nfm_reply"))
        return f"[submitted a form: {_str(reply.get('response_json')) or ''}]"
    return "[sent an interactive reply we cannot read; ask politely for a text message]"


def _names(reply: dict[str, Any]) -> str:
    named = describe_choice(_str(reply.get("id")))
    return f": {named}" if named else ""


def _render_location(body: dict[str, Any]) -> str:
    parts = [p for p in (_str(body.get("name")), _str(body.get("address"))) if p]
    coords = f"{_str(body.get('latitude'))}, {_str(body.get('longitude'))}"
    return f"[shared a location: {' - '.join(parts + [coords])}]"


def _render_media(wa_type: str, body: dict[str, Any]) -> str:
    label = "voice note" if wa_type == "audio" and body.get("voice") else wa_type
    caption = _str(body.get("caption"))
    filename = _str(body.get("filename"))
    detail = f": \"{caption}\"" if caption else (f": {filename}" if filename else "")
    return f"[sent a {label} we cannot open{detail}]"


def _parse_echo(item: Any, phone_number_id: str, _: list[dict[str, Any]]) -> Update:
    """One `message_echoes[]` item, read defensively: a missing id or recipient is a BadItem."""
    if not isinstance(item, dict):
        raise TypeError("echo is not an object")
    wamid = _str(item.get("id"))
    to, to_user_id = _str(item.get("to")), _str(item.get("to_user_id"))
    if not wamid or not (to or to_user_id):
        raise ValueError("echo without id or recipient (to / to_user_id)")
    wa_type = _str(item.get("type")) or "unknown"
    body = _dict(item.get("text")).get("body") if wa_type == "text" else None
    text = _str(body) if body is not None else None
    if not text or not text.strip():
        text = f"[staff sent {ECHO_KINDS.get(wa_type, 'a message of type ' + wa_type)}]"
    return StaffEcho(phone_number_id, wamid, to, to_user_id, _timestamp(item.get("timestamp")),
                     wa_type, storable(text), item)


ECHO_KINDS = {"image": "an image", "video": "a video", "audio": "an audio",
              "document": "a document", "sticker": "a sticker", "location": "a location",
              "contacts": "a contact card", "template": "a template", "text": "an empty text",
              "interactive": "an interactive message", "reaction": "a reaction"}


def _parse_system(item: dict[str, Any], phone_number_id: str, wamid: str) -> Update:
    system = _dict(item.get("system"))
    kind = _str(system.get("type")) or "unknown"
    return IdentityChange(
        phone_number_id=phone_number_id, wamid=wamid, kind=kind,
        old_wa_id=_str(item.get("from")), old_user_id=_str(item.get("from_user_id")),
        new_wa_id=_str(system.get("wa_id")), new_user_id=_str(system.get("user_id")),
    )


def _parse_status(item: Any, phone_number_id: str, _: list[dict[str, Any]]) -> Update:
    wamid, status = _str(item.get("id")), _str(item.get("status"))
    if not wamid or not status:
        raise ValueError("status without id or status")
    raw_errors = item.get("errors")
    errors = [e for e in raw_errors if isinstance(e, dict)] if isinstance(raw_errors, list) else []
    first = errors[0] if errors else {}
    details = _dict(first.get("error_data")).get("details")
    code = first.get("code")
    return StatusUpdate(
        phone_number_id=phone_number_id, wamid=wamid, status=status,
        timestamp=_timestamp(item.get("timestamp")),
        recipient_id=_str(item.get("recipient_id")),
        recipient_user_id=_str(item.get("recipient_user_id")),
        error_code=int(code) if isinstance(code, int | str) and str(code).isdigit() else None,
        error_reason=_str(details) or _str(first.get("title")) if first else None,
        pricing=_pricing(item.get("pricing")),
    )


def _pricing(value: Any) -> Pricing | None:
    """A status's `pricing` (`billable`, `pricing_model`, `category`, `type`), None when
    absent or not an object."""
    if not isinstance(value, dict):
        return None
    billable = value.get("billable")
    return Pricing(billable if isinstance(billable, bool) else None,
                   _str(value.get("pricing_model")) or "", _str(value.get("category")) or "",
                   _str(value.get("type")) or "")


def _parse_error(item: Any, phone_number_id: str, _: list[dict[str, Any]]) -> Update:
    code = item.get("code")
    return ErrorNotice(phone_number_id, code if isinstance(code, int) else None,
                       _str(item.get("title")) or _str(item.get("message")) or "")


def _quotes(item: dict[str, Any]) -> bool:
    context = item.get("context")
    return isinstance(context, dict) and bool(context.get("id"))


EARLIEST_TIMESTAMP = 1_230_768_000  # 2009-01-01: WhatsApp did not exist before
LATEST_TIMESTAMP = 4_102_444_800  # 2100-01-01


def _timestamp(value: Any) -> datetime | None:
    """Meta's `timestamp`: unix seconds as a string. A value no real message can have (year 1,
    year 9999) counts as missing, so it can never break date arithmetic downstream."""
    try:
        seconds = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not EARLIEST_TIMESTAMP <= seconds <= LATEST_TIMESTAMP:
        return None
    return datetime.fromtimestamp(seconds, UTC)


def _dict(value: Any) -> dict[str, Any]:
    """`value` when it is an object, else an empty one: every nested field is optional."""
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    """`value` as storable text (core/storable.py: NUL dropped, a lone surrogate U+FFFD)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    elif isinstance(value, int | float):
        text = str(value)
    else:
        text = json.dumps(value, ensure_ascii=False)
    return storable(text)


def storable_text(text: str) -> str:
    """`text` cleaned as every inbound string is (`_str`: NUL dropped, a lone surrogate made
    U+FFFD), for customer text that reaches a message by another path: a voice note's
    transcript (workers/transcription.py)."""
    return _str(text) or ""
