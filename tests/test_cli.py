"""The `wagent` command as a user runs it: replay, demo, report, tenant create, db upgrade."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli.main import main
from core.errors import SettingsError

ROOT = Path(__file__).resolve().parent.parent

SCENARIOS = Path(__file__).parent / "scenarios"


def test_replay_json_reports_the_contract_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--json", str(SCENARIOS / "readme_example.json")]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"name", "passed", "failures", "sent", "requests", "api_errors", "unscripted_calls",
            "tool_errors", "usage"} <= line.keys()
    assert line["passed"] is True and line["api_errors"] == 0
    assert set(line["usage"]) == {"input_tokens", "cache_creation_input_tokens",
                                  "cache_read_input_tokens", "output_tokens"}


def test_a_bad_scenario_fails_cleanly_and_the_batch_goes_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "bad", "steps": [{"advance": "2 minutes"},
                                                        {"webhook": "missing.json"}]}))
    code = main(["replay", "--json", str(bad), str(tmp_path / "absent.json"),
                 str(SCENARIOS / "readme_book.json")])
    lines = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert code == 1
    assert [x["passed"] for x in lines] == [False, False, True]
    assert any("bad duration" in f for f in lines[0]["failures"])
    assert any("missing.json" in f for f in lines[0]["failures"])


def test_demo_prints_a_transcript_with_a_confirmed_booking(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "customer ▸" in out and "agent    ◂ Prontinho" in out and "PASSED" in out
    assert "tool book_appointment" in out
    # both readers (issue 44): the conversation in Portuguese first, the trace in English below
    salon = out[out.index("== salon_book_move_cancel.json"):]
    assert salon.index("Conversa (português)") < salon.index("   cliente ▸ oi, tem horário") \
        < salon.index("   agente  ◂ Prontinho") < salon.index("Developer's trace (English)") \
        < salon.index("customer ▸ oi, tem horário") < salon.index("PASSED")
    conversation = salon[:salon.index("Developer's trace")]
    assert "tool " not in conversation and "· 3 h depois (seg 01/06 13:02)" in conversation
    assert '"delivered N times": WhatsApp (Meta) sent the same webhook N times' in salon
    # the per-message figure counts turn calls only, unlike "N Claude call(s)" beside it
    assert re.search(r"per customer message \(\d+\): \d+\.\d\d turn call\(s\) \(facts and "
                     r"summaries apart\)", salon)
    assert "model call(s)" not in salon
    # the return visit: the last one was cancelled and "à tarde" only suggested, so it asks
    assert "Quer marcar com a Júlia de novo? Prefere à tarde?" in conversation
    assert "da última vez" not in salon


def test_tenant_create_refuses_a_bad_file_and_accepts_a_good_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/wagent.db")
    assert main(["db", "upgrade"]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"phone_number_id": "1", "name": "X", "timezone": "Sao Paulo"}))
    assert main(["tenant", "create", str(bad)]) == 2
    assert "IANA" in capsys.readouterr().err
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"phone_number_id": "1", "name": "Oficina Exemplo",
                                "timezone": "America/Sao_Paulo",
                                "services": [{"code": "revisao", "name": "Revisão",
                                              "duration_minutes": 120}],
                                "hours": {"mon": ["08:00-17:00"]}}))
    assert main(["tenant", "create", str(good)]) == 0
    assert "Oficina Exemplo" in capsys.readouterr().out


def test_report_shows_the_calls_and_writes_a_plot(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import UTC, datetime

    from storage.db import make_engine, session_scope
    from storage.models import Contact, Conversation, Usage
    from storage.tenants import upsert_tenant

    url = f"sqlite:///{tmp_path}/wagent.db"
    monkeypatch.setenv("DATABASE_URL", url)
    assert main(["db", "upgrade"]) == 0
    now = datetime(2026, 6, 1, 13, tzinfo=UTC)
    with session_scope(make_engine(url)) as session:
        tenant = upsert_tenant(session, {"phone_number_id": "1", "name": "X"}, now=now)
        contact = Contact(tenant_id=tenant.id, wa_id="5511999990001", created_at=now)
        session.add(contact)
        session.flush()
        conversation = Conversation(tenant_id=tenant.id, contact_id=contact.id,
                                    last_activity_at=now, due_at=now, opened_at=now)
        session.add(conversation)
        session.flush()
        for read, write in [(0, 3000), (3000, 200), (3200, 150)]:
            session.add(Usage(tenant_id=tenant.id, conversation_id=conversation.id,
                              purpose="turn", model="claude-sonnet-5-5", input_tokens=50,
                              cache_creation_input_tokens=write, cache_read_input_tokens=read,
                              output_tokens=40, created_at=now))
    plot = tmp_path / "plot.svg"
    assert main(["report", "1", "1", "--json", "--plot", str(plot)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["context_per_call"] == [3050, 3250, 3400]
    assert report["cache_read_share"] == round(6200 / 9700, 4)
    assert plot.read_text().startswith("<svg") and "polyline" in plot.read_text()
    assert main(["report", "1", "99"]) == 2
    assert "no conversation 99 of tenant 1" in capsys.readouterr().err
    assert main(["report", "2", "1"]) == 2  # another tenant's number: not its conversation
    assert "no tenant with phone_number_id 2" in capsys.readouterr().err
    assert main(["facts", "extract", "1", "99"]) == 2
    assert "no conversation 99 of tenant 1" in capsys.readouterr().err
    assert main(["report", "99"]) == 2


def test_the_one_argument_forms_still_work_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import UTC, datetime

    from storage.db import make_engine, session_scope
    from storage.models import Contact, Conversation
    from storage.tenants import upsert_tenant

    url = f"sqlite:///{tmp_path}/wagent.db"
    monkeypatch.setenv("DATABASE_URL", url)
    assert main(["db", "upgrade"]) == 0
    now = datetime(2026, 6, 1, 13, tzinfo=UTC)
    with session_scope(make_engine(url)) as session:
        tenant = upsert_tenant(session, {"phone_number_id": "1", "name": "X"}, now=now)
        contact = Contact(tenant_id=tenant.id, wa_id="5511999990001", created_at=now)
        session.add(contact)
        session.flush()
        session.add(Conversation(tenant_id=tenant.id, contact_id=contact.id,
                                 last_activity_at=now, due_at=now, opened_at=now))
    assert main(["report", "1", "--json", "--plot", str(tmp_path / "p.svg")]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1])["calls"] == 0
    assert "warning: `wagent report CONVERSATION_ID` is deprecated" in captured.err
    assert "wagent report PHONE_NUMBER_ID CONVERSATION_ID" in captured.err
    assert main(["report", "x1"]) == 2
    assert "'x1' is not a conversation id" in capsys.readouterr().err


def test_report_shows_what_reached_the_customer(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import UTC, datetime

    from storage import messages
    from storage.db import make_engine, session_scope
    from storage.models import Contact, Conversation
    from storage.tenants import upsert_tenant

    url = f"sqlite:///{tmp_path}/wagent.db"
    monkeypatch.setenv("DATABASE_URL", url)
    assert main(["db", "upgrade"]) == 0
    now = datetime(2026, 6, 1, 13, tzinfo=UTC)
    with session_scope(make_engine(url)) as session:
        tenant = upsert_tenant(session, {"phone_number_id": "1", "name": "X"}, now=now)
        contact = Contact(tenant_id=tenant.id, wa_id="5511999990001", created_at=now)
        session.add(contact)
        session.flush()
        conversation = Conversation(tenant_id=tenant.id, contact_id=contact.id,
                                    last_activity_at=now, due_at=now, opened_at=now)
        session.add(conversation)
        session.flush()
        for text, status, code in (("Olá!", "sent", None), ("Tudo bem?", "failed", 131030)):
            reply = messages.append(session, tenant_id=tenant.id or 0,
                                    conversation_id=conversation.id or 0, role="assistant",
                                    direction="outbound",
                                    content=[{"type": "text", "text": text}], now=now)
            (part,) = messages.add_outbound(session, message=reply, parts=[text],
                                            to="5511999990001", recipient=None, now=now)
            messages.mark_outbound(session, part.id or 0, status=status, now=now, code=code,
                                   attempts=1, wamid=f"wamid.{text}" if code is None else None)
    assert main(["report", "1", "1", "--plot", str(tmp_path / "plot.svg")]) == 0
    out = capsys.readouterr().out
    assert "replies 2 · sent 1 · failed 1" in out
    assert "failed · 131030 · the customer's number is not in the test number's allowed " \
           "list" in out
    assert main(["report", "1", "1", "--json", "--plot", str(tmp_path / "plot.svg")]) == 0
    replies = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["replies"]
    assert replies["by_state"]["failed"] == 1 and replies["not_delivered"][0]["error_code"] \
        == 131030


# -- issue 35 item 9: one check of "is this a real secret" -----------------------------------

REAL_ANTHROPIC_KEY = "sk-ant-api03-" + "a1B2_c3-" * 12
REAL_GRAPH_TOKEN = "EAAGm0PX4ZCpsBA" + "Zb7x9Qk2LmNpR4sT" * 10


@pytest.mark.parametrize(("name", "value", "real"), [
    ("ANTHROPIC_API_KEY", REAL_ANTHROPIC_KEY, True),
    ("ANTHROPIC_API_KEY", "", False),
    ("ANTHROPIC_API_KEY", "sk-ant-placeholder", False),
    ("ANTHROPIC_API_KEY", "sk-ant-placeholder-0123456789abcdefghij", False),
    ("ANTHROPIC_API_KEY", "sk-ant-...", False),
    ("ANTHROPIC_API_KEY", "sk-ant-your-key-here-0123456789abcdef", False),
    ("ANTHROPIC_API_KEY", "sk-ant-xxxxxxxxxxxxxxxxxxxxxxxxxxxx", False),
    ("ANTHROPIC_API_KEY", "sk-test-upstream", False),
    ("WHATSAPP_ACCESS_TOKEN", REAL_GRAPH_TOKEN, True),
    ("WHATSAPP_ACCESS_TOKEN", "placeholder", False),
    ("WHATSAPP_ACCESS_TOKEN", "EAA-placeholder-token", False),
    ("WHATSAPP_ACCESS_TOKEN", "<your system-user token>", False),
    ("WHATSAPP_ACCESS_TOKEN", "changeme", False),
    ("WHATSAPP_VERIFY_TOKEN", "minha-senha-do-salao-2026", True),  # no form: any real word
    ("WHATSAPP_VERIFY_TOKEN", "CHANGE_ME", False),
])
def test_is_real_secret(name: str, value: str, real: bool) -> None:
    from core.credentials import is_real_secret
    assert is_real_secret(name, value) is real


def _listening(port: int) -> bool:
    with socket.socket() as client:
        return client.connect_ex(("127.0.0.1", port)) == 0


def _placeholder_env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    env = {"WHATSAPP_APP_SECRET": "a3f1c9e07b5d42e8a6c1f0b9d7e5c3a1",
           "WHATSAPP_VERIFY_TOKEN": "minha-senha-do-salao-2026",
           "WHATSAPP_ACCESS_TOKEN": REAL_GRAPH_TOKEN, "ANTHROPIC_API_KEY": REAL_ANTHROPIC_KEY,
           "ANTHROPIC_BASE_URL": "https://api.anthropic.com",
           "GRAPH_API_BASE_URL": "https://graph.facebook.com",
           "REDIS_URL": "redis://127.0.0.1:1/0", "DATABASE_URL": "sqlite:///:memory:"}
    for name, value in {**env, **values}.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("placeholder", [
    {"ANTHROPIC_API_KEY": "sk-ant-placeholder"},
    {"WHATSAPP_ACCESS_TOKEN": "placeholder"},
    {"ANTHROPIC_API_KEY": "sk-ant-placeholder", "WHATSAPP_ACCESS_TOKEN": "EAA-placeholder"}])
def test_the_worker_refuses_to_start_with_a_placeholder_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, placeholder: dict[str, str]) -> None:
    """The real command, in a process of its own: a worker that got past the check would
    build its clients and wait for Redis (port 1), and the timeout fails the test."""
    _placeholder_env(monkeypatch, **placeholder)
    done = subprocess.run([sys.executable, "-m", "cli.main", "worker", "--burst"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr
    assert "not started" in done.stderr
    agreement = ("are empty or placeholders, and the worker would send with them"
                 if len(placeholder) > 1 else
                 "is empty or a placeholder, and the worker would send with it")
    assert agreement in done.stderr
    for name, value in placeholder.items():
        assert name in done.stderr
        assert value == "placeholder" or value not in done.stderr  # the value is never printed


def test_a_placeholder_for_a_base_url_of_your_own_is_not_refused() -> None:
    from core.settings import Settings
    settings = Settings(anthropic_api_key="replay-api-key", whatsapp_access_token="x",
                        anthropic_base_url="http://127.0.0.1:9",
                        graph_api_base_url="http://127.0.0.1:9")
    assert settings.placeholder_secrets() == []
    assert Settings(anthropic_api_key="sk-ant-placeholder",
                    whatsapp_access_token=REAL_GRAPH_TOKEN).placeholder_secrets() == [
        "ANTHROPIC_API_KEY"]


def test_the_web_needs_no_model_key_and_the_worker_and_cron_do() -> None:
    from core.settings import Settings
    whatsapp = {"WHATSAPP_APP_SECRET": "s", "WHATSAPP_VERIFY_TOKEN": "v",
                "WHATSAPP_ACCESS_TOKEN": "t"}
    assert Settings.from_env(whatsapp, require=Settings.REQUIRED_BY_WEB).anthropic_api_key == ""
    # an empty key reads as a placeholder does: what a real one looks like (SECRET_EXAMPLES)
    with pytest.raises(SettingsError, match=r"^ANTHROPIC_API_KEY is required: a real one looks "
                       r"like sk-ant-api03-… \(about 100 letters.*\)$"):
        Settings.from_env(whatsapp)  # `wagent worker`, `wagent cron`, `wagent dev`
    with pytest.raises(SettingsError, match=r"^WHATSAPP_APP_SECRET is required; "):
        Settings.from_env({})  # a secret without a known form: just named
    with pytest.raises(SettingsError, match="WHATSAPP_APP_SECRET is required"):
        Settings.from_env({}, require=Settings.REQUIRED_BY_WEB)


@pytest.mark.parametrize("anthropic_key", ["sk-ant-placeholder", ""])  # "": not set
def test_the_web_process_starts_with_placeholders_and_names_them(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, anthropic_key: str) -> None:
    """The real `wagent web`, in a process of its own: it serves (the console works with
    placeholders, and without ANTHROPIC_API_KEY: the web never calls the model), and stops on
    SIGINT with status 0."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    _placeholder_env(monkeypatch, ANTHROPIC_API_KEY=anthropic_key,
                     WEB_HOST="127.0.0.1", WEB_PORT=str(port))
    web = subprocess.Popen([sys.executable, "-m", "cli.main", "web"], cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            assert web.poll() is None and time.monotonic() < deadline, "not serving"
            time.sleep(0.2)
    finally:
        web.send_signal(signal.SIGINT)
        _, err = web.communicate(timeout=30)
    assert web.returncode == 0, err
    assert "ANTHROPIC_API_KEY: missing or a placeholder" in err and "wagent worker" in err
    assert "sk-ant-placeholder" not in err


def test_the_demo_view_keeps_only_the_words_and_their_times_in_portuguese() -> None:
    from cli.demo_view import conversation, notes
    trace = ["   (clock: Sun 2026-06-07 09:00 -03, America/Sao_Paulo; scripted)",
             "customer ▸ oi", "   tool list_services({}) → ...", "   (delivered 3 times)",
             "agent    ◂ Olá!", "   ... 2d later (Tue 2026-06-09 09:00 local)",
             "   [sweeper closed 1 conversation(s)]"]
    assert conversation(trace) == [
        "   (dom 07/06 09:00)", "   cliente ▸ oi", "   agente  ◂ Olá!",
        "   · 2 dia(s) depois (ter 09/06 09:00): atendimento encerrado por inatividade"]
    shown = notes(trace)
    assert len(shown) == 2 and "delivered N times" in shown[0] and "sweeper" in shown[1]


def test_the_demo_view_says_in_one_line_what_happened_while_nobody_wrote() -> None:
    from cli.demo_view import conversation
    trace = ["agent    ◂ Cancelei.", "   ... 25h later (Tue 2026-06-02 15:02 local)",
             "   [sweeper closed 1 conversation(s)]",
             "   [fact preferred_professional = julia (confirmed, extracted)]",
             "   [fact preferred_period = tarde (suggested, extracted)]",
             "   ... 44h later (Thu 2026-06-04 11:02 local)", "customer ▸ oi de novo",
             "   ... 5m later (Thu 2026-06-04 11:07 local)",
             "   [sweeper closed 0 conversation(s)]",  # nothing happened: nothing shown
             "   ... 1m later (Thu 2026-06-04 11:08 local)", "agent    ◂ Oi!",
             "   ... 3m later (Thu 2026-06-04 11:11 local)"]  # time after the last words
    assert conversation(trace) == [
        "   agente  ◂ Cancelei.",
        "   · 25 h depois (ter 02/06 15:02): atendimento encerrado por inatividade; "
        "2 preferência(s) do cliente guardada(s)",
        "   · 44 h depois (qui 04/06 11:02)", "   cliente ▸ oi de novo",
        "   · 1 min depois (qui 04/06 11:08)", "   agente  ◂ Oi!"]
