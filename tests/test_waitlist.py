"""The waitlist (issue 47): the replay scenarios of "How to show it", the entries' rules, the
offer's channel, the refusals told, the signed button ids, and the race on PostgreSQL."""

import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlmodel import Session, select

from replay.runner import run_scenario
from storage import waitlist
from storage.models import Tenant, WaitlistEntry
from tests.factories import ANA, BRUNO, scenario, text_body

CARLA = ("5511999990003", "BR.9000000000000000003")
SATURDAY = "2026-06-06"
# one slot on Saturday (09:00-10:00): Carla's booking fills it
HOURS = {"mon": ["09:00-18:00"], "sat": ["09:00-10:00"]}
JOIN = {"tool": "find_available_slots",
        "input": {"service": "corte", "date": SATURDAY, "waitlist": "join"}}


def _say(text: str, n: int, who: tuple[str, str], name: str) -> list[dict[str, Any]]:
    return [{"webhook": text_body(text, n, who=who, name=name), "timestamp": "clock"},
            {"drain": True}]


def _full_saturday_two_waiting() -> list[dict[str, Any]]:
    """Carla fills Saturday; Ana, then Bruno, join its waitlist; Carla cancels."""
    return [
        {"model": [{"tool": "book_appointment", "input": {"service": "corte",
                                                          "start": f"{SATURDAY}T09:00"}},
                   {"text": "Marcado!"}]},
        *_say("quero sábado 9h", 1, CARLA, "Carla Teste"),
        {"model": [{"tool": "find_available_slots",
                    "input": {"service": "corte", "date": SATURDAY}}, JOIN,
                   {"text": "Sábado está cheio; anotei você na lista de espera."}]},
        *_say("tem horário sábado?", 2, ANA, "Ana Teste"),
        {"model": [JOIN, {"text": "Anotei você na lista de espera de sábado."}]},
        *_say("e sábado, tem?", 3, BRUNO, "Bruno Teste"),
        {"expect": {"tool_errors": 0, "sent_count": 3,
                    "requests": {"messages_contain": ["No free slots", "Joined the waitlist"]}}},
        {"model": [{"tool": "cancel_appointment", "input": {"appointment_id": 1}},
                   {"text": "Cancelado."}]},
        *_say("preciso cancelar o de sábado", 4, CARLA, "Carla Teste"),
        {"expect": {"sent_count": 1}},
    ]


def _run(steps: list[dict[str, Any]], tmp_path: Path) -> None:
    result = run_scenario(scenario(steps, hours=HOURS), base=tmp_path)
    assert result.passed, "\n".join(result.failures + result.transcript)
    assert result.api_errors == 0 and result.unscripted_calls == 0 and not result.leftover


def test_a_cancelled_saturday_goes_to_the_first_waiting_who_taps_quero(tmp_path: Path) -> None:
    """The first waiting customer gets the freed slot with buttons and books it with one tap,
    no model call; the second is not offered a slot that is taken."""
    _run([
        *_full_saturday_two_waiting(),
        {"cron": True},
        {"expect": {"sent": [{"to": ANA[0], "type": "interactive",
                              "text_contains": "Abriu um horário"}],
                    "sent_count": 1, "requests": {"calls": 0}}},
        {"tap": "Quero", "contact": ANA[0]}, {"drain": True},
        {"expect": {"sent": [{"to": ANA[0], "text_contains": "Pronto! Marquei"}],
                    "sent_count": 1, "requests": {"calls": 0},
                    "appointments": [{"start": f"{SATURDAY}T09:00", "status": "booked"},
                                     {"start": f"{SATURDAY}T09:00", "status": "cancelled"}]}},
        {"cron": True}, {"expect": {"sent_count": 0}},
    ], tmp_path)


def test_a_hold_that_expires_goes_to_the_next_and_a_late_quero_is_told_taken(
        tmp_path: Path) -> None:
    """Ana lets her 15-minute hold expire: Bruno is offered the slot and takes it; Ana's
    Quero afterwards is told the time was taken. No model call in any of it."""
    _run([
        *_full_saturday_two_waiting(),
        {"cron": True},
        {"expect": {"sent": [{"to": ANA[0], "type": "interactive"}], "sent_count": 1}},
        {"advance": "10m"}, {"cron": True}, {"expect": {"sent_count": 0}},  # still held
        {"advance": "6m"}, {"cron": True},
        {"expect": {"sent": [{"to": BRUNO[0], "type": "interactive",
                              "text_contains": "Abriu um horário"}], "sent_count": 1}},
        {"tap": "Quero", "contact": BRUNO[0]}, {"drain": True},
        {"tap": "Quero", "contact": ANA[0]}, {"drain": True},
        {"expect": {"sent": [{"to": BRUNO[0], "text_contains": "Pronto! Marquei"},
                             {"to": ANA[0], "text_contains": "já foi preenchido"}],
                    "sent_count": 2, "requests": {"calls": 0},
                    "appointments": [{"start": f"{SATURDAY}T09:00", "status": "booked"},
                                     {"start": f"{SATURDAY}T09:00", "status": "cancelled"}]}},
    ], tmp_path)


def test_nao_posso_offers_the_slot_to_the_next(tmp_path: Path) -> None:
    _run([
        *_full_saturday_two_waiting(),
        {"cron": True},
        {"tap": "Não posso", "contact": ANA[0]}, {"drain": True},
        {"expect": {"sent": [{"to": ANA[0], "type": "interactive"},
                             {"to": ANA[0], "text_contains": "continua na lista"}],
                    "requests": {"calls": 0}}},
        {"cron": True},
        {"expect": {"sent": [{"to": BRUNO[0], "type": "interactive"}], "sent_count": 1}},
        {"advance": "20m"}, {"cron": True},  # Bruno lets it expire: Ana passed it, no one
        {"expect": {"sent_count": 0}},
    ], tmp_path)
