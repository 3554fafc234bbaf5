"""Choices as WhatsApp lists and reply buttons (issue 26): Meta's limits (whatsapp/interactive.py)
checked by the product and enforced by the Graph double, the offer_choices tool, the reply
sent through the outbox, the pick parsed on intake, the replay's `tap` step."""

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from sqlmodel import select

from agent.choices import Wording, interactive_reply, shown, style_used
from agent.errors import ToolError
from agent.tools.choices import offer_from_input
from replay.environment import ReplayEnvironment
from replay.graph_api import GraphDouble
from replay.runner import _tap_reply, run_scenario, run_scenario_file
from storage.db import session_scope
from storage.models import Outbound
from tests.conftest import START
from tests.factories import TENANT, scenario, text_body
from whatsapp.choice_ids import describe_choice, slot_id
from whatsapp.errors import GraphError
from whatsapp.graph import GraphClient
from whatsapp.inbound import InboundMessage, parse_update
from whatsapp.interactive import (
    LIMITS,
    Choice,
    InteractiveError,
    buttons_message,
    interactive_problems,
    list_message,
)

SCENARIOS = Path(__file__).parent / "scenarios"
FIXTURES = Path("/work/shared/fixtures/whatsapp")
WORDING = Wording(list_button="Ver opções", more_title="Outras opções",
                  more_description="Diga um dia ou período e eu procuro mais")


def _rows(n: int, **over: Any) -> list[Choice]:
    return [Choice(id=f"slot:2026-06-02T{9 + i:02d}:00", title=f"Ter {9 + i:02d}:00", **over)
            for i in range(n)]


def _slots(hours: list[int]) -> list[dict[str, Any]]:
    return [{"slot": f"2026-06-02T{h:02d}:00", "title": f"Ter {h:02d}:00"} for h in hours]


# -- Meta's limits, one home ------------------------------------------------------------------

@pytest.mark.parametrize(("build", "problem"), [
    (lambda: list_message(body="b", button="Ver", rows=_rows(11)), "11 rows: 1 to 10 in all"),
    (lambda: list_message(body="b", button="Ver", rows=[Choice("x", "t" * 25)]),
     "row 0 title is 25 characters: at most 24"),
    (lambda: list_message(body="b", button="Ver", rows=[Choice("x", "t", "d" * 73)]),
     "row 0 description is 73 characters: at most 72"),
    (lambda: list_message(body="b", button="Ver", rows=[Choice("i" * 201, "t")]),
     "row 0 id is 201 characters: at most 200"),
    (lambda: list_message(body="b", button="Ver", rows=_rows(1), section_title="s" * 25),
     "section 0 title is 25 characters: at most 24"),
    (lambda: list_message(body="b", button="b" * 21, rows=_rows(1)),
     "button is 21 characters: at most 20"),
    (lambda: buttons_message(body="b", buttons=_rows(4)), "4 buttons: 1 to 3"),
    (lambda: buttons_message(body="b", buttons=[Choice("x", "t" * 21)]),
     "button 0 title is 21 characters: at most 20"),
    (lambda: buttons_message(body="b" * 1025, buttons=_rows(1)),
     "body is 1025 characters: at most 1024"),
    (lambda: buttons_message(body="b", buttons=[Choice("x", "t"), Choice("y", "t")]),
     "button titles must be unique"),
])
def test_the_builders_refuse_what_meta_refuses(build: Any, problem: str) -> None:
    with pytest.raises(InteractiveError) as raised:
        build()
    assert problem in raised.value.problems


def test_limits_are_meta_s_and_an_emoji_counts_two() -> None:
    assert (LIMITS.list_rows, LIMITS.row_title, LIMITS.row_description, LIMITS.section_title,
            LIMITS.row_id, LIMITS.buttons, LIMITS.button_title, LIMITS.button_body) == \
        (10, 24, 72, 24, 200, 3, 20, 1024)
    assert list_message(body="b", button="Ver", rows=[Choice("x", "t" * 24)])
    with pytest.raises(InteractiveError):
        list_message(body="b", button="Ver", rows=[Choice("x", "t" * 23 + "👍")])


def test_the_shared_fixtures_pass_the_product_check() -> None:
    for name in ("send_interactive_buttons_request.json", "send_interactive_list_request.json"):
        body = json.loads((FIXTURES / "graph_api" / name).read_text())["json"]
        assert interactive_problems(body["interactive"]) == []


async def test_the_double_refuses_a_list_past_the_limits_as_meta_does() -> None:
    """The real client against the double: 11 rows (built by hand, past the product's check)
    are refused with Meta's 131009 and a detail naming the limit; nothing is recorded sent."""
    double = GraphDouble()
    await double.start()
    try:
        async def refused(interactive: dict[str, Any]) -> GraphError:
            with httpx2.Client() as http, GraphClient(base_url=double.base_url,
                                                      api_version="v25.0", access_token="t",
                                                      http_client=http) as client:
                with pytest.raises(GraphError) as raised:
                    await _in_thread(client.send_interactive, "109876543210987",
                                     interactive=interactive, to="5511999990001")
            return raised.value
        rows = [{"id": f"r{i}", "title": f"row {i}"} for i in range(11)]
        error = await refused({"type": "list", "body": {"text": "b"},
                               "action": {"button": "Ver", "sections": [{"rows": rows}]}})
        assert (error.code, error.http_status) == (131009, 400)
        assert error.details == "Too many rows: 11. Max rows: 10"
        error = await refused({"type": "button", "body": {"text": "b"}, "action": {"buttons": [
            {"type": "reply", "reply": {"id": "a", "title": "t" * 21}}]}})
        assert error.details == "Button title length invalid. Min length: 1, Max length: 20"
        long_row = [{"id": "a", "title": "ok", "description": "d" * 73}]
        error = await refused({"type": "list", "body": {"text": "b"},
                               "action": {"button": "Ver", "sections": [{"rows": long_row}]}})
        assert "Row description length invalid" in error.details
        error = await refused({"type": "button", "body": {"text": "b"}, "footer": {
            "text": "f" * 61}, "action": {"buttons": [
                {"type": "reply", "reply": {"id": "a", "title": "ok"}}]}})
        assert error.details == "Footer length invalid. Min length: 1, Max length: 60"
        assert double.accepted == []
    finally:
        await double.stop()


async def _in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """The sync client in a thread: it must not block the double's loop."""
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


# -- which options are shown ------------------------------------------------------------------

def test_past_ten_options_the_soonest_nine_and_a_narrower_range_row() -> None:
    offer = offer_from_input({"options": _slots([17, 9, 16, 10, 15, 11, 14, 12, 13, 8, 18,
                                                  7, 19, 6])})
    choices, more = shown(offer)
    assert more and [c.title for c in choices] == [f"Ter {h:02d}:00" for h in range(6, 15)]
    interactive = interactive_reply(offer, "Qual prefere?", WORDING)
    assert interactive is not None
    rows = interactive["action"]["sections"][0]["rows"]
    assert len(rows) == 10 and rows[-1] == {"id": "more", "title": "Outras opções",
                                            "description": WORDING.more_description}
    assert interactive["action"]["button"] == "Ver opções"


def test_ten_options_fit_without_the_extra_row() -> None:
    choices, more = shown(offer_from_input({"options": _slots(list(range(8, 18)))}))
    assert len(choices) == 10 and not more


def test_buttons_fall_back_to_a_list_then_to_text() -> None:
    four = offer_from_input({"style": "buttons", "options": _slots([9, 10, 11, 12])})
    assert style_used(four, "Qual?") == "list"
    three = offer_from_input({"style": "buttons", "options": _slots([9, 10, 11])})
    assert style_used(three, "Qual?") == "buttons"
    assert style_used(three, "x" * 1025) == "list"
    assert style_used(three, "x" * 4097) == "text"
    assert interactive_reply(three, "x" * 4097, WORDING) is None


@pytest.mark.parametrize(("args", "problem"), [
    ({"options": []}, "options must be a list of 1 to 30"),
    ({"options": [{"slot": "2026-06-02T14:00", "service": "corte", "title": "t"}]},
     "give at most one of slot or service"),
    ({"options": [{"title": "t", "professional": "julia"}]},
     "professional goes with a slot option only"),
    ({"options": [{"slot": "amanhã 14h", "title": "t"}]}, "slot must be YYYY-MM-DDTHH:MM"),
    ({"options": [{"slot": "2026-06-02T14:00", "title": "t" * 25}]}, "title must be 1 to 24"),
    ({"style": "buttons", "options": [{"service": "corte", "title": "t" * 21}]},
     "title must be 1 to 20"),
    ({"options": [{"service": "corte", "title": "t", "description": "d" * 73}]},
     "description must be at most 72"),
    ({"options": _slots([9, 9])}, "two options name the same slot"),
    ({"options": [{"service": "a", "title": "t"}, {"service": "b", "title": "t"}]},
     "option titles must differ"),
    ({"button": "b" * 21, "options": _slots([9])}, "button must be a label of at most 20"),
    ({"style": "carousel", "options": _slots([9])}, "style must be list or buttons"),
    ({"options": [{"slot": "2026-6-2T4:0", "title": "t"}]}, "slot must be YYYY-MM-DDTHH:MM"),
    ({"options": [{"service": "corte", "title": "t", "professional": ["x"]}]},
     "professional goes with a slot option only"),
])
def test_the_tool_names_what_is_wrong(args: dict[str, Any], problem: str) -> None:
    with pytest.raises(ToolError, match=problem):
        offer_from_input(args)


def test_ids_name_the_slot_or_service() -> None:
    assert slot_id("2026-06-02T14:00", "julia") == "slot:2026-06-02T14:00/julia"
    assert describe_choice("slot:2026-06-02T14:00/julia") == "the slot 2026-06-02T14:00 with julia"
    assert describe_choice("service:corte") == "the service corte"
    assert describe_choice("menu:hours") is None


def test_a_pick_is_rendered_with_what_its_id_names() -> None:
    body = json.loads((FIXTURES / "message_interactive_list_reply.json").read_text())
    message = next(u for u in parse_update(body) if isinstance(u, InboundMessage))
    assert "the slot 2026-06-02T09:00" in message.text and "Ter 02/06 09:00" in message.text


# -- through the product ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["choices_pick.json", "choices_narrower_range.json"])
def test_the_scenarios(name: str, database_url: str | None, redis_url: str | None) -> None:
    result = run_scenario_file(SCENARIOS / name, database_url=database_url, redis_url=redis_url)
    assert result.passed, result.failures
    assert result.api_errors == 0 and result.unscripted_calls == 0


def test_the_agent_reads_the_pick_and_the_next_reply_is_plain_text() -> None:
    env = ReplayEnvironment(start=START)
    try:
        env.add_tenant(TENANT)
        env.messages_api.script("turn", [
            {"tool": "offer_choices", "input": {"body": "Qual prefere?",
                                                "options": _slots([14, 15])}},
            {"text": "Anotado."}])
        assert env.post_webhook(json.dumps(text_body("horário?", 1)).encode()) == 200
        env.drain()
        offered = env.graph_api.accepted[0]
        row = offered.body["interactive"]["action"]["sections"][0]["rows"][1]
        pick = text_body("", 2)
        message = pick["entry"][0]["changes"][0]["value"]["messages"][0]
        message.pop("text")
        message.update({"type": "interactive", "context": {"from": "5511999990000",
                                                           "id": offered.wamid},
                        "interactive": {"type": "list_reply", "list_reply": row}})
        assert env.post_webhook(json.dumps(pick).encode()) == 200
        env.drain()
        last = env.messages_api.calls[-1].request["messages"][-1]["content"]
        assert any("the slot 2026-06-02T15:00" in b.get("text", "") for b in last)
        assert env.graph_api.accepted[1].body["type"] == "text"  # no offer in that turn
    finally:
        env.close()


def test_a_body_too_long_for_one_list_is_refused_and_the_model_writes_again() -> None:
    """Issue 41: one message per reply; a body past the list's 4096 is a tool error (nothing
    sent), the model is called again, and its fitting offer goes out as the one list."""
    result = run_scenario(scenario([
        {"model": [{"tool": "offer_choices", "input": {"body": "Olá! " * 1000,
                                                       "options": _slots([14, 15])}},
                   {"tool": "offer_choices", "input": {"body": "Qual prefere?",
                                                       "options": _slots([14, 15])}}]},
        {"webhook": text_body("oi", 1)}, {"drain": True},
        {"expect": {"sent_count": 1, "sent": [{"type": "interactive"}], "tool_errors": 1,
                    "requests": {"calls": 2}}}]))
    assert result.passed, result.failures


def test_no_choices_outside_the_window_and_the_outbox_refuses_a_late_list() -> None:
    env = ReplayEnvironment(start=START)
    try:
        env.add_tenant(TENANT)
        env.messages_api.script("turn", [
            {"tool": "offer_choices", "input": {"body": "Qual?", "options": _slots([14])}}])
        env.graph_api.fail(130429)  # the list waits for a retry...
        assert env.post_webhook(json.dumps(text_body("oi", 1)).encode()) == 200
        env.drain()
        env.clock.advance(timedelta(hours=25))  # ...past the window
        env.drain()
        assert env.graph_api.accepted == []
        with session_scope(env.engine) as session:
            row = session.exec(select(Outbound)).one()
        assert (row.kind, row.status, row.error_code) == ("interactive", "refused", 131047)
    finally:
        env.close()


def test_tap_needs_a_message_that_offered_the_title() -> None:
    result = run_scenario(scenario([{"tap": "Ter 15:00"}]))
    assert result.failures == ["step 0: no message sent so far offers 'Ter 15:00'"]


def test_tap_answers_a_template_quick_reply_as_a_button_message() -> None:
    """Issue 25 reuses `tap` on templates: the reply is Meta's `button` type with the payload."""
    template = {"type": "template", "template": {"name": "lembrete", "components": [
        {"type": "button", "sub_type": "quick_reply", "index": "0",
         "parameters": [{"type": "payload", "payload": "Confirmar"}]}]}}
    assert _tap_reply(template, "Confirmar") == {
        "type": "button", "button": {"payload": "Confirmar", "text": "Confirmar"}}


def test_free_text_options_come_back_as_their_text() -> None:
    """Issue 38: any short choice (3 buttons or 10 rows of free text); the tap reaches the
    model as the option's text."""
    options = [{"title": "Deixo o carro"}, {"title": "Espero na loja"},
               {"title": "Outro dia"}]
    offer = offer_from_input({"style": "buttons", "options": options})
    assert [c.id for c in offer.choices] == ["text:1", "text:2", "text:3"]
    rows = offer_from_input({"options": [{"title": f"Opção {n}"} for n in range(10)]})
    assert shown(rows) == (list(rows.choices), False)  # ten rows: no "narrower range" row
    result = run_scenario(scenario([
        {"model": [{"tool": "offer_choices", "input": {"style": "buttons",
                                                       "body": "Como prefere?",
                                                       "options": options}}]},
        {"webhook": text_body("oi", 1), "timestamp": "clock"}, {"drain": True},
        {"expect": {"sent": [{"type": "interactive",
                              "options": ["Deixo o carro", "Espero na loja", "Outro dia"]}]}},
        {"model": [{"text": "Certo, qual dia?"}]},
        {"tap": "Outro dia"}, {"drain": True},
        {"expect": {"last_request_contains": ["Outro dia [tapped an option]"],
                    "tool_errors": 0}}]))
    assert result.passed, "\n".join(result.failures + result.transcript)
