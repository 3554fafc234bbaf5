"""`wagent chat` as a developer runs it: typed lines on standard input, scripted or relayed
replies, slash commands, and a recording that `wagent replay` replays with the same result."""

import asyncio
import io
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp.client_reqrep import ConnectionKey
from sqlmodel import col, select

from cli.chat import key_problem
from cli.main import main
from replay.chat import ChatError, ChatSession, load_script, model_steps, recorded_item
from replay.messages_api import MessagesDouble, RecordedCall
from replay.relay import DEFAULT_BASE_URL, Relay, unreachable, unreachable_message
from replay.runner import _call_cost, run_scenario, run_scenario_file
from storage.db import make_engine, session_scope
from storage.models import Appointment, Conversation, Message, Outbound, ToolCall
from usage.ledger import model_cost_micro_usd

CLOCK = "2026-12-01T13:00:00Z"  # Tue 10:00 in São Paulo
TENANT: dict[str, Any] = {
    "phone_number_id": "109876543210987", "name": "Salão Exemplo",
    "timezone": "America/Sao_Paulo",
    "services": [{"code": "corte", "name": "Corte feminino", "duration_minutes": 60}],
    "professionals": [{"code": "julia", "name": "Júlia", "services": ["corte"]}],
    "hours": {"tue": ["09:00-18:00"], "wed": ["09:00-18:00"]},
    "fact_keys": ["preferred_name", "preferred_period"]}
SCRIPT: list[dict[str, Any]] = [
    {"model": [{"tool": "find_available_slots",
                "input": {"service": "corte", "date": "2026-12-02"}},
               {"text": "Oi! Amanhã a Júlia tem 14h ou 15h. Qual prefere?"}]},
    {"model": [{"text": "Perfeito, vou marcar.", "tool": "book_appointment",
                "input": {"service": "corte", "start": "2026-12-02T14:00"}},
               {"text": "Prontinho! Corte com a Júlia amanhã, quarta, às 14h."}]},
    {"model": [{"text": json.dumps({"facts": [{"key": "preferred_period", "value": "tarde",
                                                "source_message_id": 5, "stated": True}]})}],
     "for": "facts"},
]
TYPED = ("oi, tem horário amanhã pra corte?\n"
         "pode ser às 14h, de tarde é melhor pra mim sempre\n"
         "/appointments\n"
         "/wait 1x\n"
         "/wait 25h\n"
         "/facts\n"
         "/context\n")


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # no .env of the repository's
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "DATABASE_URL", "REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "tenant.json").write_text(json.dumps(TENANT), encoding="utf-8")
    (tmp_path / "script.json").write_text(json.dumps(SCRIPT), encoding="utf-8")
    return tmp_path


def _chat(monkeypatch: pytest.MonkeyPatch, typed: str, *args: str) -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(typed))  # the terminal: the outside world
    return main(["chat", *args])


def test_chat_with_a_script_through_standard_input_books_and_records(
        files: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code = _chat(monkeypatch, TYPED, str(files / "tenant.json"), "--script",
                 str(files / "script.json"), "--clock", CLOCK, "--record",
                 str(files / "trial.json"))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "customer ▸ oi, tem horário amanhã pra corte?" in out
    assert "agent    ◂ Oi! Amanhã a Júlia tem 14h ou 15h. Qual prefere?" in out
    assert "agent    ◂ Prontinho! Corte com a Júlia amanhã, quarta, às 14h." in out
    assert "#1 02/12/2026 14:00  Corte feminino (Júlia)  marcado" in out  # /appointments, one time
    assert "/wait takes a duration" in out  # a bad argument: said, nothing ran
    assert "[sweeper closed 1 conversation(s)]" in out
    assert "preferred_period = tarde (confirmed)" in out  # /facts after the session ended
    assert "last call: purpose facts" in out  # /context: the extraction call
    assert "Customer: [Tue 2026-12-01 10:00] oi, tem horário amanhã pra corte?" in out
    recorded = json.loads((files / "trial.json").read_text(encoding="utf-8"))
    assert recorded["clock"] == CLOCK
    webhooks = [s["webhook"] for s in recorded["steps"] if "webhook" in s]
    assert len(webhooks) == 2
    timestamp = webhooks[0]["entry"][0]["changes"][0]["value"]["messages"][0]["timestamp"]
    assert int(timestamp) == 1796130000  # the scenario's clock: inside the 24-hour window
    purposes = [s["for"] for s in recorded["steps"] if "model" in s]
    assert purposes == ["turn", "turn", "facts"]
    final = recorded["steps"][-1]["expect"]
    assert final["appointments"] == [{"service": "corte", "status": "booked",
                                      "start": "2026-12-02T14:00"}]
    assert {"key": "preferred_period", "value": "tarde", "state": "confirmed",
            "contact": "5511999990099"} in final["facts"]

    assert main(["replay", str(files / "trial.json")]) == 0  # same result, no key
    replayed = capsys.readouterr().out
    assert "PASSED" in replayed
    assert "agent    ◂ Prontinho! Corte com a Júlia amanhã, quarta, às 14h." in replayed
    result = run_scenario_file(files / "trial.json")
    assert result.passed and result.leftover == {} and result.unscripted_calls == 0
    assert [s["text"] for s in result.sent] == [  # the text beside a tool_use is not sent
        "Oi! Amanhã a Júlia tem 14h ou 15h. Qual prefere?",
        "Prontinho! Corte com a Júlia amanhã, quarta, às 14h."]


def test_recording_a_chat_whose_script_ran_out_says_it_will_fail_on_replay(
        files: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (files / "short.json").write_text(json.dumps(SCRIPT[:1]), encoding="utf-8")
    assert _chat(monkeypatch, TYPED, str(files / "tenant.json"), "--script",
                 str(files / "short.json"), "--clock", CLOCK, "--record",
                 str(files / "short_rec.json")) == 0
    out = capsys.readouterr().out
    assert "will fail on replay; record the chat again without them" in out
    assert not run_scenario_file(files / "short_rec.json").passed  # as it said
    assert _chat(monkeypatch, TYPED, str(files / "tenant.json"), "--script",
                 str(files / "script.json"), "--clock", CLOCK, "--record",
                 str(files / "whole.json")) == 0
    assert "will fail on replay" not in capsys.readouterr().out  # a whole script: no warning


def test_a_recording_whose_product_changed_fails_its_replay(
        files: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _chat(monkeypatch, TYPED, str(files / "tenant.json"), "--script",
                 str(files / "script.json"), "--clock", CLOCK, "--record",
                 str(files / "trial.json")) == 0
    recorded = json.loads((files / "trial.json").read_text(encoding="utf-8"))
    recorded["tenant"]["hours"] = {"wed": ["09:00-12:00"]}  # 14:00 is closed now
    (files / "changed.json").write_text(json.dumps(recorded), encoding="utf-8")
    result = run_scenario_file(files / "changed.json")
    assert not result.passed
    assert any("appointments [], expected" in f for f in result.failures)


def test_without_a_key_or_a_script_chat_says_so_and_points_at_the_demo(
        files: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _chat(monkeypatch, "oi\n", str(files / "tenant.json")) == 2
    err = capsys.readouterr().err
    assert "ANTHROPIC_API_KEY" in err and "--script" in err and "wagent demo" in err
    (files / "rec.json").write_text(json.dumps({"name": "x", "steps": []}), encoding="utf-8")
    assert main(["replay", "--live", str(files / "rec.json")]) == 2
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err


# what `wagent chat` must not import before it says there is no model (issue 44 item 6: 4-10 s)
HEAVY = ("replay", "storage", "workers", "operations", "anthropic", "sqlalchemy", "sqlmodel",
         "aiohttp", "redis", "rq")
PROBE = ("import sys\nfrom cli.main import main\ncode = main(['chat', *sys.argv[1:]])\n"
         f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))\n"
         "raise SystemExit(code)")


@pytest.mark.parametrize("key", [None, "sk-ant-..."])
def test_without_a_usable_key_chat_answers_before_importing_the_product(
        files: Path, key: str | None) -> None:
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
    if key is not None:
        environment["ANTHROPIC_API_KEY"] = key
    done = subprocess.run([sys.executable, "-c", PROBE, str(files / "tenant.json")],
                          cwd=files, env=environment,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "ANTHROPIC_API_KEY" in done.stderr and "wagent demo" in done.stderr
    assert ("no model to talk to" if key is None else "is a placeholder") in done.stderr
    assert done.stdout.strip() == "[]", f"imported before answering: {done.stdout}"


def test_bad_input_is_refused_with_a_clear_error(
        files: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (files / "bad_script.json").write_text(json.dumps(
        [{"model": [{"txt": "oi"}]}, {"webhook": "x.json"}]), encoding="utf-8")
    assert _chat(monkeypatch, "", str(files / "tenant.json"), "--script",
                 str(files / "bad_script.json")) == 2
    err = capsys.readouterr().err
    assert "step 0" in err and "txt" in err and "step 1: a script holds only model steps" in err
    (files / "bad_tenant.json").write_text(json.dumps({**TENANT, "timezone": "Sao Paulo"}))
    assert _chat(monkeypatch, "", str(files / "bad_tenant.json"), "--script",
                 str(files / "script.json")) == 2
    assert "IANA" in capsys.readouterr().err
    assert _chat(monkeypatch, "", str(files / "tenant.json"), "--script",
                 str(files / "script.json"), "--clock", "tomorrow") == 2
    assert "--clock" in capsys.readouterr().err


def test_unknown_commands_and_reset_keep_the_unused_script(files: Path) -> None:
    session = ChatSession(TENANT, script=load_script(SCRIPT), start=_start())
    try:
        with pytest.raises(ChatError, match="unknown command /book"):
            session.handle("/book")
        assert any("Qual prefere" in line for line in session.handle("oi"))
        assert session.handle("/reset")[0].startswith("(reset: an empty database")
        assert session.appointments() == []
        assert session.steps[-1] == {"reset": True}  # the recording goes on
        kept = len(session.steps)
        session.handle("/reset")  # nothing since the last reset: nothing more recorded
        assert len(session.steps) == kept
        lines = session.handle("às 14h")  # the second scripted turn answers now
        assert any("Prontinho" in line for line in lines)
        assert session.appointments()[0]["start"] == "2026-12-02T14:00"
        assert session.scenario()["clock"] == CLOCK
    finally:
        session.close()


def test_a_recording_keeps_what_came_before_a_reset_and_replays_it(
        files: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The newcomer trial of issue 28: book, /wait 25h, /reset, /quit kept only an empty
    expect; the recording now spans the reset and replays PASSED with the booking."""
    typed = ("oi, tem horário amanhã pra corte?\n"
             "pode ser às 14h, de tarde é melhor pra mim sempre\n"
             "/wait 25h\n/reset\n/quit\n")
    assert _chat(monkeypatch, typed, str(files / "tenant.json"), "--script",
                 str(files / "script.json"), "--clock", CLOCK, "--record",
                 str(files / "trial.json")) == 0
    capsys.readouterr()
    recorded = json.loads((files / "trial.json").read_text(encoding="utf-8"))
    steps = recorded["steps"]
    reset = steps.index({"reset": True})
    before = steps[reset - 1]["expect"]
    assert before["appointments"] == [{"service": "corte", "status": "booked",
                                       "start": "2026-12-02T14:00"}]
    assert any(f["key"] == "preferred_period" for f in before["facts"])
    assert len([s for s in steps if "webhook" in s]) == 2
    assert steps[-1]["expect"]["appointments"] == []  # after the reset: an empty database
    assert main(["replay", str(files / "trial.json")]) == 0
    replayed = capsys.readouterr().out
    assert "PASSED" in replayed and "[reset: an empty database" in replayed
    result = run_scenario_file(files / "trial.json")
    assert result.passed and result.requests == 5 and len(result.sent) == 2

    broken = {**recorded, "steps": [*steps[:reset], {"reset": "yes"}]}
    (files / "broken.json").write_text(json.dumps(broken), encoding="utf-8")
    refused = run_scenario_file(files / "broken.json")
    assert not refused.passed and "reset takes true" in refused.failures[0]


CHOICES: list[dict[str, Any]] = [
    {"model": [{"tool": "offer_choices", "input": {
        "button": "Ver horários", "body": "Amanhã tenho estes horários. Qual prefere?",
        "options": [{"slot": f"2026-12-02T{hour}:00", "professional": "julia",
                     "title": f"Qua 02/12 {hour}:00", "description": "com a Júlia"}
                    for hour in ("14", "15")]}}]},
    {"model": [{"tool": "book_appointment", "input": {"service": "corte",
                                                      "start": "2026-12-02T15:00"}},
               {"text": "Prontinho! Quarta às 15h com a Júlia."}]},
]


def test_the_customer_taps_a_list_row_and_the_recording_replays_it(
        files: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (files / "choices.json").write_text(json.dumps(CHOICES), encoding="utf-8")
    typed = "/help\n/tap Qua 02/12 15:00\noi, tem horário amanhã?\n/tap Sex 04/12 9:00\n" \
            "/tap Qua 02/12 15:00\n/appointments\n"
    assert _chat(monkeypatch, typed, str(files / "tenant.json"), "--script",
                 str(files / "choices.json"), "--clock", CLOCK, "--record",
                 str(files / "tapped.json")) == 0
    out = capsys.readouterr().out
    assert "/tap TITLE" in out  # /help lists it
    assert "(no message the agent sent offers 'Qua 02/12 15:00')" in out  # before any list
    assert ('agent    ◂ Amanhã tenho estes horários. Qual prefere? [list "Ver horários": '
            "Qua 02/12 14:00 (com a Júlia) | Qua 02/12 15:00 (com a Júlia)]") in out
    assert "offered so far: Qua 02/12 14:00, Qua 02/12 15:00" in out  # a title not offered
    assert "customer ▸ [picked list option \"Qua 02/12 15:00\"" in out
    assert "#1 02/12/2026 15:00  Corte feminino (Júlia)  marcado" in out
    recorded = json.loads((files / "tapped.json").read_text(encoding="utf-8"))
    assert [s["tap"] for s in recorded["steps"] if "tap" in s] == ["Qua 02/12 15:00"]
    result = run_scenario_file(files / "tapped.json")
    assert result.passed, result.failures


def test_database_url_keeps_the_chat_in_the_configured_database_for_the_console(
        files: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{files / 'local.db'}"
    (files / ".env").write_text(f"DATABASE_URL={url}\n")  # as the README's set-up writes it
    assert _chat(monkeypatch, "oi\n", str(files / "tenant.json"), "--script",
                 str(files / "script.json"), "--database-url") == 2  # not migrated yet
    assert "run `wagent db upgrade` first" in capsys.readouterr().err
    assert main(["db", "upgrade"]) == 0
    monkeypatch.delenv("DATABASE_URL")  # the .env names it again for the chat
    assert _chat(monkeypatch, "oi, tem horário amanhã pra corte?\npode ser às 14h\n/reset\n",
                 str(files / "tenant.json"), "--script", str(files / "script.json"),
                 "--clock", CLOCK, "--database-url") == 0
    out = capsys.readouterr().out
    assert "kept in your database" in out and "Prontinho!" in out
    assert "/reset would empty your database" in out
    (files / "again.json").write_text(json.dumps([{"model": [{"text": "De novo, oi!"}]}]))
    assert _chat(monkeypatch, "oi\n", str(files / "tenant.json"), "--script",  # same clock
                 str(files / "again.json"), "--clock", CLOCK, "--database-url") == 0
    again = capsys.readouterr().out
    assert "agent    ◂ De novo, oi!" in again  # not taken as a redelivery
    # issue 35 item 8: the first run's tool calls are not this run's, and no reply of either
    # run is left `sending` or taken for `unknown` (the double's wamids differ between runs)
    assert "   tool " not in again and "não chegaram" not in again
    assert "Respostas que não chegaram" not in again
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            sends = session.exec(select(Outbound)).all()
            assert len(sends) >= 3 and {o.status for o in sends} == {"sent"}
            assert len({o.wamid for o in sends}) == len(sends)
            texts = [m.content[0].get("text", "") for m in session.exec(
                select(Message).order_by(col(Message.id))).all() if m.content]
            assert any("oi, tem horário amanhã pra corte?" in t for t in texts)
            assert [a.status for a in session.exec(select(Appointment)).all()] == ["booked"]
    finally:
        engine.dispose()
    # newcomer trial item 1: a later run's tool_use ids are not an earlier run's, so its
    # handoff takes effect instead of coming back with run 1's booking result
    (files / "handoff.json").write_text(json.dumps([{"model": [
        {"tool": "handoff_to_human", "input": {"reason": "pediu uma pessoa",
                                               "summary": "quer falar com alguém"}}]}]))
    assert _chat(monkeypatch, "quero falar com uma pessoa\n", str(files / "tenant.json"),
                 "--script", str(files / "handoff.json"), "--clock", CLOCK,
                 "--database-url") == 0
    assert "(held by staff: no reply)" not in capsys.readouterr().out
    assert _chat(monkeypatch, "alô?\n", str(files / "tenant.json"), "--script",  # item 5
                 str(files / "again.json"), "--clock", CLOCK, "--database-url") == 0
    assert "(held by staff: no reply)" in capsys.readouterr().out
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            calls = session.exec(select(ToolCall).order_by(col(ToolCall.id))).all()
            assert [c.name for c in calls] == [
                "find_available_slots", "book_appointment", "handoff_to_human"]
            assert calls[-1].result.startswith("Handed off")
            assert any(c.handoff_at for c in session.exec(select(Conversation)).all())
    finally:
        engine.dispose()
    assert _chat(monkeypatch, "oi\n", str(files / "tenant.json"), "--script",
                 str(files / "script.json"), "--database-url", url, "--record",
                 str(files / "x.json")) == 2
    assert "use one or the other" in capsys.readouterr().err


def test_the_product_clock_follows_the_wall_clock_between_messages(files: Path) -> None:
    wall = iter([100.0, 100.2, 190.7, 190.9])
    session = ChatSession(TENANT, script=load_script(SCRIPT), start=_start(),
                          wall=lambda: next(wall))
    try:
        session.handle("oi")
        session.handle("às 14h")  # 90 s later
        advances = [s["advance"] for s in session.steps if "advance" in s]
        assert advances == ["90s"]
        body = [s["webhook"] for s in session.steps if "webhook" in s][1]
        sent_at = body["entry"][0]["changes"][0]["value"]["messages"][0]["timestamp"]
        assert int(sent_at) == 1796130000 + 90
    finally:
        session.close()


def test_a_script_that_ran_out_says_so_once_and_wait_retries_nothing(files: Path) -> None:
    session = ChatSession(TENANT, script=load_script(SCRIPT[:1]), start=_start())
    try:
        session.handle("oi")
        lines = session.handle("às 14h")  # no second turn reply in the script
        assert any("the script has no turn reply left" in line for line in lines)
        assert not any("a retry is due" in line for line in lines)
        calls = len(session.env.messages_api.calls)
        for duration in ("1m", "10m", "2h"):
            waited = session.handle(f"/wait {duration}")
            assert not any("answered 500" in line or "◂" in line for line in waited), waited
        assert len(session.env.messages_api.calls) == calls  # no retry called the model again
        assert session.handle("/appointments")  # the chat goes on
    finally:
        session.close()


def test_recorded_responses_use_the_shorthand_only_when_it_says_everything() -> None:
    tool = {"type": "tool_use", "id": "toolu_01", "name": "list_services", "input": {}}
    text = {"type": "text", "text": "Vou ver."}
    assert recorded_item({"content": [text, tool], "stop_reason": "tool_use"}) == {
        "text": "Vou ver.", "tool": "list_services", "input": {}}
    assert recorded_item({"content": [text], "stop_reason": "end_turn"}) == {"text": "Vou ver."}
    assert recorded_item({"content": [tool, dict(tool, id="toolu_02")],
                          "stop_reason": "tool_use"})["tools"][1]["tool"] == "list_services"
    odd = {"content": [text, text], "stop_reason": "end_turn"}
    assert recorded_item(odd) == odd  # two text blocks: kept as they came
    cut = {"content": [text], "stop_reason": "max_tokens"}
    assert recorded_item(cut) == cut
    calls = [RecordedCall("turn", {}, 200, {"content": [text], "stop_reason": "end_turn"}),
             RecordedCall("turn", {}, 529, {"type": "error"}),
             RecordedCall("summary", {}, 200, {"content": [text], "stop_reason": "end_turn"})]
    assert model_steps(calls) == [
        {"model": [{"text": "Vou ver."}], "for": "turn"},
        {"model_fail": {"status": 529, "times": 1, "recorded": "{'type': 'error'}"},
         "for": "turn"},
        {"model": [{"text": "Vou ver."}], "for": "summary"}]


class _Upstream:
    """A second Messages API double standing in for the real API (no network in tests)."""

    def __init__(self) -> None:
        self.double = MessagesDouble(api_key="sk-test-upstream")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self.double.start(), self.loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.double.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream()
    yield server
    server.close()


def test_with_a_key_chat_talks_to_the_messages_api_and_replay_live_again(
        files: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        upstream: _Upstream) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-upstream")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", upstream.url)
    for step in SCRIPT:
        upstream.double.script(step.get("for", "turn"), step["model"])
    code = _chat(monkeypatch, TYPED, str(files / "tenant.json"), "--clock", CLOCK,
                 "--record", str(files / "live.json"))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "agent    ◂ Prontinho! Corte com a Júlia amanhã, quarta, às 14h." in out
    assert len(upstream.double.calls) == 5 and upstream.double.api_errors == 0
    assert [c.status for c in upstream.double.calls] == [200] * 5  # the real key reached it
    assert "sk-test-upstream" not in (files / "live.json").read_text(encoding="utf-8")

    monkeypatch.delenv("ANTHROPIC_API_KEY")  # the recording replays without a key
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    assert main(["replay", str(files / "live.json")]) == 0
    assert len(upstream.double.calls) == 5

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-upstream")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", upstream.url)
    for step in SCRIPT:  # the "model" answers the same again: the expectations hold
        upstream.double.script(step.get("for", "turn"), step["model"])
    assert main(["replay", "--live", str(files / "live.json")]) == 0
    assert "replies are live" in capsys.readouterr().out
    assert len(upstream.double.calls) == 10
    first, again = upstream.double.calls[0].request, upstream.double.calls[5].request
    assert first["messages"] == again["messages"]  # the same customer message, re-sent


def test_a_wrong_key_is_shown_plainly(files: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str],
                                      upstream: _Upstream) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-wrong")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", upstream.url)
    assert _chat(monkeypatch, "oi\n", str(files / "tenant.json"), "--clock", CLOCK) == 0
    out = capsys.readouterr().out
    assert "[the Messages API answered 401 (turn): invalid x-api-key]" in out
    assert "a retry" not in out and "/wait 1m" not in out  # a 401 is not retried
    assert "sk-wrong" not in out


@pytest.mark.parametrize("key", ["", "sk-ant-...", "changeme-123", "sk-test-upstream",
                                 "sk-ant-placeholder"])
def test_a_placeholder_key_for_the_real_api_is_said_plainly_and_nothing_is_sent(
        files: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        key: str) -> None:
    (files / ".env").write_text(f"ANTHROPIC_API_KEY={key}\n"  # the README's console set-up
                                "ANTHROPIC_BASE_URL=https://api.anthropic.com\n")
    assert _chat(monkeypatch, "oi\n", str(files / "tenant.json")) == 2
    err = capsys.readouterr().err
    assert "ANTHROPIC_API_KEY (from the environment or .env)" in err
    assert "nothing was sent to https://api.anthropic.com" in err and "--script" in err
    assert "it looks like sk-ant-api03-" in err  # what a key looks like (issue 35 item 9)
    assert not key or key not in err  # the value itself is never printed
    (files / "rec.json").write_text(json.dumps({"name": "x", "steps": []}), encoding="utf-8")
    assert main(["replay", "--live", str(files / "rec.json")]) == 2
    assert "nothing was sent" in capsys.readouterr().err


def test_a_key_of_the_real_form_passes_the_placeholder_check() -> None:
    assert key_problem(Relay(api_key="sk-ant-api03-" + "a1B2_c3-" * 6)) is None
    assert key_problem(Relay(api_key="sk-ant-...")) is not None
    assert key_problem(Relay(base_url="http://127.0.0.1:9", api_key="")) is None  # your own


def test_an_unreachable_api_is_named_with_its_cause_and_the_hint_follows_retries_only(
        files: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on: refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-upstream")
    typed = "oi\n/wait 1m\n/wait 1m\n/wait 3m\n"  # TURN_MAX_ATTEMPTS=4: 10 s, 40 s, 120 s
    assert _chat(monkeypatch, typed, str(files / "tenant.json"), "--clock", CLOCK) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "answered 529" not in out
    assert out.count("[turn call: could not reach the Messages API at http://127.0.0.1:") == 4
    assert "the connection was refused (nothing listens there) (ClientConnectorError)]" in out
    hints = [line for line in out.splitlines() if "a retry is due at" in line]
    assert len(hints) == 3 and "(in 10 s)" in hints[0] and "(in 120 s)" in hints[2]
    tail = out.split(hints[-1])[1]
    assert "agent    ◂" in tail and "a retry" not in tail  # the apology; no retry follows
    for leaked in ("turn_provider_failed", "[error", "OverloadedError", "retry_scheduled"):
        assert leaked not in out and leaked not in captured.err  # logs off by default


def test_a_dns_failure_is_named_as_one() -> None:
    key = ConnectionKey("api.anthropic.com", 443, True, True, None, None, None)
    try:
        try:
            raise socket.gaierror(-3, "Temporary failure in name resolution")
        except socket.gaierror as cause:
            raise aiohttp.ClientConnectorDNSError(key, cause) from cause
    except aiohttp.ClientConnectorDNSError as exc:
        text = unreachable_message(DEFAULT_BASE_URL, exc)
    assert text == ("could not reach the Messages API at https://api.anthropic.com: the host "
                    "name did not resolve (DNS: offline, or no name server?) "
                    "(ClientConnectorDNSError)")
    assert unreachable({"type": "error", "error": {"message": text}})
    assert not unreachable({"type": "error", "error": {"message": "Overloaded"}})


def _start() -> datetime:
    return datetime.fromisoformat(CLOCK)


BUNDLED = Path(__file__).resolve().parent.parent / "replay" / "scenarios"


@pytest.mark.parametrize(("option", "sent"), [({"timestamp": "clock"}, 1), ({}, 0)])
def test_a_bundled_message_is_sent_at_the_scenario_clock(option: dict[str, str],
                                                         sent: int) -> None:
    """ana_01.json is dated June 2026; on 1 December it is a day-old redelivery unless the
    step stamps it at the clock (the demo's scenarios all do)."""
    scenario = {"name": "today", "clock": CLOCK, "tenant": TENANT, "steps": [
        {"model": [{"text": "Oi! Tem sim."}]},
        {"webhook": "webhooks/ana_01.json", **option},
        {"drain": True},
        {"expect": {"sent_count": sent}}]}
    result = run_scenario(scenario, base=BUNDLED)
    assert result.passed, result.failures
    demo = [json.loads(p.read_text(encoding="utf-8")) for p in BUNDLED.glob("*.json")]
    assert demo and all(s.get("timestamp") == "clock" for d in demo for s in d["steps"]
                        if "webhook" in s)


def test_a_recording_that_met_an_api_error_fails_and_names_it(
        capsys: pytest.CaptureFixture[str], files: Path) -> None:
    """A chat whose script ran out met the double's 500 (`unscripted call`): its recording
    replays FAILED naming the error, never "PASSED · 0 API error(s)"; a hand-written
    `model_fail` (a test of the product's fallback) still passes, named in the verdict."""
    def steps(spec: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"model_fail": spec, "for": "turn"},
                {"webhook": "webhooks/ana_01.json", "timestamp": "clock"}, {"drain": True},
                {"expect": {"api_errors": 0}}]

    recorded = {"status": 500, "times": 1, "recorded": "unscripted call for purpose turn"}
    result = run_scenario({"name": "rec", "clock": CLOCK, "tenant": TENANT,
                           "steps": steps(recorded)}, base=BUNDLED)
    assert not result.passed and result.scripted_errors == ["turn 500"]
    assert result.failures == ["the recording holds a Messages API error: turn answered 500 "
                               "(unscripted call for purpose turn); the replay answers it "
                               "again, so record the chat again without it"]
    written = {"name": "outage", "clock": CLOCK, "tenant": TENANT,
               "steps": steps({"status": 529, "times": 1})}
    (files / "outage.json").write_text(json.dumps(written))
    (files / "webhooks").mkdir(exist_ok=True)
    (files / "webhooks" / "ana_01.json").write_bytes((BUNDLED / "webhooks/ana_01.json")
                                                     .read_bytes())
    capsys.readouterr()
    assert main(["replay", str(files / "outage.json")]) == 0
    verdict = [line for line in capsys.readouterr().out.splitlines() if "-- outage" in line]
    assert verdict and "PASSED" in verdict[0] and "+ 1 scripted error(s) (turn 529)" in \
        verdict[0]


def test_the_verdict_prices_the_calls_as_the_ledger_does() -> None:
    """The demo's and replay's summary line gives the model's cost in US$ (issue 49): each
    call's usage at usage/ledger.model_cost_micro_usd, the product's one pricing function
    (1-hour cache writes at their own price; a failed call costs nothing)."""
    usage = {"input_tokens": 100, "cache_creation_input_tokens": 1572,
             "cache_creation": {"ephemeral_1h_input_tokens": 1572},
             "cache_read_input_tokens": 40, "output_tokens": 10}
    call = RecordedCall("turn", {"model": "claude-haiku-4-5"}, 200, {}, usage)
    assert _call_cost(call) == model_cost_micro_usd("claude-haiku-4-5", 100, 1572, 1572, 40,
                                                    10)
    assert _call_cost(RecordedCall("turn", {"model": "claude-haiku-4-5"}, 529, {})) == 0
    scenario = {"name": "priced", "clock": CLOCK, "tenant": TENANT, "steps": [
        {"model": [{"text": "Oi! Tem sim."}]},
        {"webhook": "webhooks/ana_01.json", "timestamp": "clock"}, {"drain": True}]}
    result = run_scenario(scenario, base=BUNDLED)
    assert result.passed and result.requests == 1 and result.model_micro_usd > 0
    assert result.to_json()["model_micro_usd"] == result.model_micro_usd


def test_a_bad_timestamp_option_is_refused_before_the_scenario_runs() -> None:
    result = run_scenario({"name": "x", "steps": [
        {"webhook": "webhooks/ana_01.json", "timestamp": "now"}]}, base=BUNDLED)
    assert not result.passed and 'webhook timestamp takes "clock"' in result.failures[0]


def test_the_example_tenant_names_no_template_a_new_business_cannot_have(
        files: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    examples = Path(__file__).resolve().parent.parent / "examples"
    as_yaml = yaml.safe_load((examples / "tenant.yaml").read_text(encoding="utf-8"))
    as_json = json.loads((examples / "tenant.json").read_text(encoding="utf-8"))
    for tenant in (as_yaml, as_json):
        assert "followup_template" not in tenant
    assert set(as_yaml) - {"hours_exceptions"} == set(as_json)  # twins
    (files / "one.json").write_text(json.dumps([{"model": [{"text": "Oi! Tudo bem?"}]}]))
    assert _chat(monkeypatch, "oi\n", "--script", str(files / "one.json")) == 0  # the example
    out = capsys.readouterr().out
    assert "chat with Salão Exemplo" in out and "agent    ◂ Oi! Tudo bem?" in out


def test_the_readmes_first_screen_says_how_to_try_test_and_deploy_in_that_order() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    first_screen = "\n".join(readme.splitlines()[:30])
    places = [first_screen.find(word) for word in ("wagent chat", "pytest", "docs/DEPLOY.md")]
    assert -1 not in places and places == sorted(places), places
    assert "wagent demo" in first_screen


def test_appointments_shows_one_line_per_visit_in_the_tenants_language() -> None:
    tenant = {**TENANT, "services": [*TENANT["services"], {"code": "escova", "name": "Escova",
                                                           "duration_minutes": 30}],
              "professionals": [{"code": "julia", "name": "Júlia",
                                 "services": ["corte", "escova"]}]}
    script = load_script([{"model": [
        {"tool": "book_appointment", "input": {"services": ["corte", "escova"],
                                               "start": "2026-12-02T14:00"}},
        {"text": "Marcado!"}]}])
    session = ChatSession(tenant, script=script, start=_start())
    try:
        assert session.handle("/appointments") == ["   (Nenhum agendamento)"]  # pt-BR too
        session.handle("corte e escova amanhã às 14h")
        assert session.handle("/appointments") == [
            "   #1 02/12/2026 14:00  Corte feminino (Júlia) 14:00, Escova (Júlia) 15:00  marcado"]
    finally:
        session.close()
