"""The pure webhook parser (whatsapp/inbound.py) against the shared fixtures and hand-built shapes.

Rules: Sources: WhatsApp §3 (envelope, per-type bodies, statuses, system messages) and
ARCHITECTURE.md Data flow 1 (each update isolated, one bad item losing nothing else).
"""

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conftest import WHATSAPP
from whatsapp.inbound import (
    BadItem,
    ErrorNotice,
    IdentityChange,
    InboundMessage,
    StatusUpdate,
    UnknownPart,
    parse_update,
)

PHONE_NUMBER_ID = "109876543210987"
ANA_WA, ANA_USER = "5511999990001", "BR.9000000000000000001"
BRUNO_WA, BRUNO_USER = "5511999990002", "BR.9000000000000000002"


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((WHATSAPP / name).read_bytes())
    return loaded


def value_of(payload: dict[str, Any]) -> dict[str, Any]:
    value: dict[str, Any] = payload["entry"][0]["changes"][0]["value"]
    return value


def envelope(value: dict[str, Any], *, field: str = "messages") -> dict[str, Any]:
    """A webhook body around one `value`, in Meta's shape."""
    metadata = {"display_phone_number": "5511999990000", "phone_number_id": PHONE_NUMBER_ID}
    return {"object": "whatsapp_business_account", "entry": [{"id": "102030405060708", "changes": [
        {"value": {"messaging_product": "whatsapp", "metadata": metadata, **value},
         "field": field}]}]}


def text_item(wamid: str, body: str = "oi", **ids: str) -> dict[str, Any]:
    return {"id": wamid, "timestamp": "1780318800", "type": "text", "text": {"body": body}, **ids}


def only_message(payload: Any) -> InboundMessage:
    updates = parse_update(payload)
    assert len(updates) == 1, updates
    assert isinstance(updates[0], InboundMessage), updates[0]
    return updates[0]


# --- messages ----------------------------------------------------------------------------------


def test_text_message_carries_both_ids_profile_and_meta_timestamp() -> None:
    msg = only_message(load("message_text.json"))
    assert msg.phone_number_id == PHONE_NUMBER_ID
    assert msg.wamid == "wamid.HBgNNTUxMTk5OTk5MDAwMRUCABIYFEZBS0UwMDAwMDAwMDAwMDAwMDAxAA=="
    assert (msg.wa_id, msg.user_id, msg.profile_name) == (ANA_WA, ANA_USER, "Ana Teste")
    assert msg.timestamp == datetime(2026, 6, 1, 13, 0, tzinfo=UTC)
    assert msg.wa_type == "text"
    assert msg.text == "Oi! Vocês abrem no sábado? 😊"
    assert msg.starts_turn is True


def test_classic_shape_without_business_scoped_ids() -> None:
    msg = only_message(load("message_text_classic_no_bsuid.json"))
    assert msg.wa_id == ANA_WA
    assert msg.user_id is None


def test_wire_bytes_keep_accents_emoji_at_and_slash() -> None:
    msg = only_message(json.loads((WHATSAPP / "wire_text_unicode.raw.json").read_bytes()))
    assert msg.text == ("Olá! Meu e-mail é ana@example.com e o pedido é 12/34 — café ☕ 👍🏽")


def test_batch_matches_each_message_to_its_contact_by_id_not_position() -> None:
    payload = load("batch_two_messages_two_contacts.json")
    value_of(payload)["contacts"].reverse()  # position must not matter
    first, second = parse_update(payload)
    assert isinstance(first, InboundMessage) and isinstance(second, InboundMessage)
    assert (first.wa_id, first.user_id, first.profile_name) == (ANA_WA, ANA_USER, "Ana Teste")
    assert (second.wa_id, second.user_id, second.profile_name) == (
        BRUNO_WA, BRUNO_USER, "Bruno Exemplo")
    assert second.text == "Qual o endereço?"


def test_contact_matched_by_user_id_when_from_is_missing() -> None:
    payload = envelope({
        "contacts": [{"profile": {"name": "Bruno"}, "wa_id": BRUNO_WA, "user_id": BRUNO_USER},
                     {"profile": {"name": "Hidden"}, "user_id": "BR.77"}],
        "messages": [text_item("wamid.U1", from_user_id="BR.77")],
    })
    msg = only_message(payload)
    assert (msg.wa_id, msg.user_id, msg.profile_name) == (None, "BR.77", "Hidden")


def test_contact_wa_id_fills_a_missing_from() -> None:
    payload = envelope({"contacts": [{"wa_id": ANA_WA, "user_id": ANA_USER}],
                        "messages": [text_item("wamid.U2", from_user_id=ANA_USER)]})
    assert only_message(payload).wa_id == ANA_WA


def test_reaction_is_stored_but_starts_no_turn() -> None:
    msg = only_message(load("message_reaction.json"))
    assert msg.wa_type == "reaction"
    assert msg.starts_turn is False
    assert "👍" in msg.text


def test_removed_reaction_starts_no_turn() -> None:
    payload = load("message_reaction.json")
    del value_of(payload)["messages"][0]["reaction"]["emoji"]
    msg = only_message(payload)
    assert msg.starts_turn is False
    assert "removed" in msg.text


def test_unsupported_type_asks_politely_for_text_and_starts_a_turn() -> None:
    msg = only_message(load("message_unsupported.json"))
    assert msg.starts_turn is True
    assert "poll_creation" in msg.text
    assert "ask politely" in msg.text


@pytest.mark.parametrize("wa_type", ["request_welcome", "unknown", "gif"])  # edit: test_edits
def test_future_types_take_the_default_branch(wa_type: str) -> None:
    payload = envelope({"messages": [{"from": ANA_WA, "id": "wamid.F", "type": wa_type,
                                      wa_type: {"x": 1}}]})
    msg = only_message(payload)
    assert msg.starts_turn is True
    assert "ask politely" in msg.text


def test_media_with_caption_is_a_placeholder_with_the_caption() -> None:
    msg = only_message(load("message_image_caption.json"))
    assert msg.wa_type == "image"
    assert "image" in msg.text
    assert "Foto do produto com defeito" in msg.text
    assert "lookaside" not in msg.text  # no media URL in the history


def test_voice_note_is_named_as_such() -> None:
    msg = only_message(load("message_audio_voice.json"))
    assert "voice note" in msg.text
    assert msg.starts_turn is True


def test_location_text_has_name_address_and_coordinates() -> None:
    msg = only_message(load("message_location.json"))
    assert "Padaria Exemplo" in msg.text
    assert "Rua Ficticia, 123" in msg.text
    assert "-23.55052" in msg.text and "-46.633308" in msg.text


def test_live_location_with_only_coordinates() -> None:
    payload = envelope({"messages": [{"from": ANA_WA, "id": "wamid.L", "type": "location",
                                      "location": {"latitude": 1.5, "longitude": -2.25}}]})
    assert "1.5, -2.25" in only_message(payload).text


def test_interactive_button_reply_has_title_and_id() -> None:
    msg = only_message(load("message_interactive_button_reply.json"))
    assert "Horários" in msg.text
    assert "menu:hours" in msg.text


def test_interactive_list_reply_has_title_description_and_id() -> None:
    msg = only_message(load("message_interactive_list_reply.json"))
    assert "Ter 02/06 09:00" in msg.text
    assert "Unidade Centro" in msg.text
    assert "slot:2026-06-02T09:00" in msg.text


def test_template_quick_reply_has_text_and_payload() -> None:
    msg = only_message(load("message_button_template_quick_reply.json"))
    assert "Confirmar" in msg.text
    assert "CONFIRM_APPT_123" in msg.text


def test_quoted_reply_is_marked() -> None:
    msg = only_message(load("message_text_reply_context.json"))
    assert msg.text.startswith("Pode ser às 10h?")
    assert "replying" in msg.text


def test_interactive_without_interactive_object_is_still_a_message() -> None:
    payload = envelope({"messages": [{"from": ANA_WA, "id": "wamid.I", "type": "interactive"}],
                        "errors": [{"code": 131000, "title": "Unsupported webhook payload"}]})
    updates = parse_update(payload)
    assert isinstance(updates[0], InboundMessage)
    assert "ask politely" in updates[0].text
    assert isinstance(updates[1], ErrorNotice) and updates[1].code == 131000


def test_empty_text_is_not_an_empty_block() -> None:
    payload = envelope({"messages": [text_item("wamid.E", "   ", **{"from": ANA_WA})]})
    assert only_message(payload).text.strip()


@pytest.mark.parametrize("bad", ["\x00", "\ud83d", "a\udc4db"])
def test_text_is_storable_nul_and_lone_surrogates_replaced(bad: str) -> None:
    """PostgreSQL rejects NUL and lone surrogates in text and JSONB: the parser cleans them."""
    payload = envelope({"contacts": [{"profile": {"name": "A" + bad}, "wa_id": ANA_WA}],
                        "messages": [text_item("wamid.S", "oi" + bad, **{"from": ANA_WA})]})
    msg = only_message(payload)
    for value in (msg.text, msg.profile_name or ""):
        assert "\x00" not in value
        value.encode("utf-8")  # raises on a lone surrogate


def test_unix_timestamp_string_and_garbage_timestamp() -> None:
    payload = envelope({"messages": [
        text_item("wamid.T1", **{"from": ANA_WA}),
        {**text_item("wamid.T2", **{"from": ANA_WA}), "timestamp": "yesterday"},
    ]})
    first, second = parse_update(payload)
    assert isinstance(first, InboundMessage) and isinstance(second, InboundMessage)
    assert first.timestamp == datetime(2026, 6, 1, 13, 0, tzinfo=UTC)
    assert second.timestamp is None


# --- isolation of bad items ------------------------------------------------------------------


def test_message_without_sender_is_a_bad_item_and_the_next_one_survives() -> None:
    payload = load("batch_two_messages_two_contacts.json")
    first = value_of(payload)["messages"][0]
    del first["from"], first["from_user_id"]
    bad, good = parse_update(payload)
    assert isinstance(bad, BadItem)
    assert bad.where == "entry[0].changes[0].messages[0]"
    assert bad.raw == first
    assert isinstance(good, InboundMessage) and good.wa_id == BRUNO_WA


def test_a_message_without_sender_belongs_to_the_only_contact_of_its_change() -> None:
    payload = load("message_text.json")
    del value_of(payload)["messages"][0]["from"], value_of(payload)["messages"][0]["from_user_id"]
    msg = only_message(payload)
    assert (msg.wa_id, msg.user_id, msg.profile_name) == (ANA_WA, ANA_USER, "Ana Teste")
    assert msg.starts_turn is True


@pytest.mark.parametrize("contacts", [
    [], [{"profile": {"name": "Sem id"}}], "not a list",
    [{"wa_id": ANA_WA, "user_id": ANA_USER}, {"wa_id": BRUNO_WA, "user_id": BRUNO_USER}]])
def test_a_message_without_sender_stays_a_bad_item_when_the_sender_is_ambiguous(
        contacts: Any) -> None:
    (bad,) = parse_update(envelope({"contacts": contacts, "messages": [text_item("wamid.N")]}))
    assert isinstance(bad, BadItem) and "from_user_id" in bad.reason


@pytest.mark.parametrize("item", [None, 7, "text", [], {"from": ANA_WA, "type": "text"}])
def test_malformed_message_items_are_bad_items(item: Any) -> None:
    payload = envelope({"messages": [item, text_item("wamid.OK", **{"from": ANA_WA})]})
    bad, good = parse_update(payload)
    assert isinstance(bad, BadItem)
    assert isinstance(good, InboundMessage) and good.wamid == "wamid.OK"


@pytest.mark.parametrize("contacts", [5, "x", None, [None, 3, "y"], {"wa_id": ANA_WA}, True])
def test_malformed_contacts_never_sink_the_messages(contacts: Any) -> None:
    payload = envelope({"contacts": contacts,
                        "messages": [text_item("wamid.C", **{"from": ANA_WA})]})
    msg = only_message(payload)
    assert msg.wa_id == ANA_WA


@pytest.mark.parametrize("messages", ["abc", {"id": "x"}, 5])
def test_a_non_list_messages_field_is_one_bad_item(messages: Any) -> None:
    payload = envelope({"messages": messages, "statuses": []})
    updates = parse_update(payload)
    assert len(updates) == 1
    assert isinstance(updates[0], BadItem)


@pytest.mark.parametrize("payload", [None, [], "x", 3, {}, {"entry": {}}, {"entry": "x"}])
def test_not_an_envelope_is_one_bad_item(payload: Any) -> None:
    updates = parse_update(payload)
    assert len(updates) == 1 and isinstance(updates[0], BadItem)
    assert updates[0].where == "payload"


def test_bad_entry_and_bad_change_lose_nothing_else() -> None:
    good = load("message_text.json")
    payload = copy.deepcopy(good)
    payload["entry"].insert(0, "garbage")
    payload["entry"].insert(0, {"id": "1"})  # no changes
    payload["entry"][-1]["changes"].insert(0, {"field": "messages", "value": 3})
    updates = parse_update(payload)
    assert [type(u).__name__ for u in updates] == [
        "BadItem", "BadItem", "BadItem", "InboundMessage"]


def test_other_subscription_fields_are_named_never_dropped_silently() -> None:
    """issue 45: a field the product does not read is an UnknownPart (logged by name and
    counted in wagent_webhook_updates_total{kind="unknown_field"} by intake/ingest.py)."""
    payload = envelope({"event": "VERIFIED_ACCOUNT"}, field="account_update")
    assert parse_update(payload) == [UnknownPart("account_update", "entry[0].changes[0]")]


def test_missing_phone_number_id_is_a_bad_item() -> None:
    payload = load("message_text.json")
    del value_of(payload)["metadata"]
    updates = parse_update(payload)
    assert len(updates) == 1 and isinstance(updates[0], BadItem)


def test_deep_nesting_inside_an_item_is_a_bad_item_not_a_crash() -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    payload = envelope({"messages": [
        {"from": ANA_WA, "id": "wamid.D", "type": "text", "text": {"body": deep}},
        text_item("wamid.OK", **{"from": ANA_WA}),
    ]})
    updates = parse_update(payload)
    assert isinstance(updates[-1], InboundMessage) and updates[-1].wamid == "wamid.OK"
    assert len(updates) == 2


# --- statuses, errors, system messages -------------------------------------------------------


@pytest.mark.parametrize("name, status", [("status_sent.json", "sent"),
                                          ("status_delivered.json", "delivered"),
                                          ("status_read.json", "read")])
def test_statuses(name: str, status: str) -> None:
    (update,) = parse_update(load(name))
    assert isinstance(update, StatusUpdate)
    assert update.status == status
    assert update.wamid == "wamid.HBgNNTUxMTk5OTk5MDAwMRUCABEYEkZBS0UwMDAwMDAwMDAwMDEwNAA="
    assert update.error_code is None and update.error_reason is None


def test_failed_status_has_code_and_reason() -> None:
    (update,) = parse_update(load("status_failed_131047_outside_window.json"))
    assert isinstance(update, StatusUpdate)
    assert update.status == "failed"
    assert update.error_code == 131047
    assert update.error_reason and "24 hours" in update.error_reason


def test_failed_status_with_odd_error_shapes_is_still_a_status() -> None:
    payload = envelope({"statuses": [
        {"id": "wamid.X", "status": "failed", "errors": [{"code": "131026", "title": "t",
                                                          "error_data": "not a dict"}]},
    ]})
    (update,) = parse_update(payload)
    assert isinstance(update, StatusUpdate)
    assert update.error_code == 131026
    assert update.error_reason == "t"


def test_value_errors_are_error_notices() -> None:
    payload = envelope({"errors": [{"code": 130429, "title": "Rate limit hit"}]})
    (update,) = parse_update(payload)
    assert update == ErrorNotice(PHONE_NUMBER_ID, 130429, "Rate limit hit")


def test_user_changed_number_is_an_identity_change() -> None:
    payload = envelope({"messages": [{
        "from": ANA_WA, "id": "wamid.SYS", "timestamp": "1780318800", "type": "system",
        "system": {"body": "\u200eAna changed from 5511999990001 to 5511999990009",
                   "wa_id": "5511999990009", "type": "user_changed_number"},
    }]})
    (update,) = parse_update(payload)
    assert isinstance(update, IdentityChange)
    assert update.kind == "user_changed_number"
    assert (update.old_wa_id, update.new_wa_id) == (ANA_WA, "5511999990009")
    assert update.new_user_id is None


def test_every_fixture_webhook_parses_without_bad_items() -> None:
    for path in sorted(WHATSAPP.glob("*.json")):
        payload = json.loads(path.read_bytes())
        if "entry" not in payload:
            continue
        updates = parse_update(payload)
        assert updates, path.name
        assert not [u for u in updates if isinstance(u, BadItem)], path.name
