"""`wagent dev` (cli/dev.py): the Procfile's three processes side by side, stopped together."""

import io
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from cli.dev import PROCESSES, run_side_by_side
from tests.conftest import REDIS_URL

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def test_dev_runs_the_processes_of_the_procfile() -> None:
    lines = re.findall(r"^(\w+): wagent (\w+)$", (ROOT / "Procfile").read_text(), re.M)
    assert [name for name, _ in lines] == list(PROCESSES)
    assert all(name == command for name, command in lines)


def test_one_process_exiting_stops_the_others_and_gives_its_status() -> None:
    out = io.StringIO()
    started = time.monotonic()
    status = run_side_by_side({
        "sleeper": [PY, "-c", "import signal, sys, time\n"
                              "signal.signal(signal.SIGTERM, lambda *_: (print('stopped'), "
                              "sys.exit(0)))\nprint('up', flush=True)\ntime.sleep(60)"],
        "quitter": [PY, "-c", "import time; time.sleep(1); print('bye'); raise SystemExit(3)"]},
        out=out)
    assert status == 3
    assert time.monotonic() - started < 30
    shown = out.getvalue().splitlines()
    assert "sleeper | up" in shown and "quitter | bye" in shown and "sleeper | stopped" in shown


class _SlowTerminal(io.StringIO):
    """A terminal that takes 0.2 s to show each line."""

    def write(self, text: str) -> int:
        time.sleep(0.2)
        return super().write(text)


def test_a_stopped_processs_last_lines_are_shown_before_dev_returns() -> None:
    out = _SlowTerminal()
    status = run_side_by_side({
        "talker": [PY, "-c", "import sys\nfor n in range(3): print(f'line {n}')\n"
                             "sys.exit(2)"]}, out=out)
    assert status == 2
    assert out.getvalue().splitlines() == [f"talker | line {n}" for n in range(3)]


def _environment(tmp_path: Path, port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "ANTHROPIC_"))}
    return {**env, "PYTHONPATH": str(ROOT), "DATABASE_URL": f"sqlite:///{tmp_path}/wagent.db",
            "REDIS_URL": REDIS_URL, "REDIS_PREFIX": f"dev{port}", "QUEUE_NAME": f"dev{port}",
            "WHATSAPP_APP_SECRET": "dev-secret", "WHATSAPP_VERIFY_TOKEN": "dev-verify",
            "WHATSAPP_ACCESS_TOKEN": "dev-token", "GRAPH_API_BASE_URL": "http://127.0.0.1:9",
            "ANTHROPIC_API_KEY": "dev-key", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
            "WEB_HOST": "127.0.0.1", "WEB_PORT": str(port), "LOG_FORMAT": "console", **extra}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def test_wagent_dev_serves_and_ctrl_c_stops_all_three(tmp_path: Path) -> None:
    port = _free_port()
    env = _environment(tmp_path, port)
    subprocess.run([PY, "-m", "cli.main", "db", "upgrade"], env=env, cwd=tmp_path, check=True,
                   capture_output=True, timeout=120)
    dev = subprocess.Popen([PY, "-m", "cli.main", "dev"], env=env, cwd=tmp_path, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert dev.poll() is None and time.monotonic() < deadline, "not serving"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.3)
        children = _children(dev.pid)
        assert len(children) == 3
    finally:
        dev.send_signal(signal.SIGINT)
        out, _ = dev.communicate(timeout=60)
    assert dev.returncode == 0, out
    assert f"web    | ======== Running on http://127.0.0.1:{port}" in out
    assert [pid for pid in children if Path(f"/proc/{pid}").exists()
            and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()] == []


def test_a_process_that_refuses_to_start_stops_the_other_two(tmp_path: Path) -> None:
    """The worker refuses a placeholder key (exit 2): web and cron are stopped with it."""
    port = _free_port()
    env = _environment(tmp_path, port, ANTHROPIC_API_KEY="sk-ant-placeholder",
                       ANTHROPIC_BASE_URL="https://api.anthropic.com")
    done = subprocess.run([PY, "-m", "cli.main", "dev"], env=env, cwd=tmp_path, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "worker | wagent worker: not started: ANTHROPIC_API_KEY" in done.stdout
    assert "worker exited with status 2; stopping the others" in done.stderr


def test_a_missing_variable_is_named_before_anything_starts(tmp_path: Path) -> None:
    missing = "WHATSAPP_APP_SECRET"
    env = _environment(tmp_path, _free_port())
    del env[missing]
    done = subprocess.run([PY, "-m", "cli.main", "dev"], env=env, cwd=tmp_path, text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 2 and f"{missing} is required" in done.stderr
    assert done.stdout == ""
