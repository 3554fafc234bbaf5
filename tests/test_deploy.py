"""The deployment files in deploy/ agree with the product (docs/DEPLOY.md).

Every metric an alert rule reads is one `GET /metrics` serves, with those labels; the systemd
units run commands the `wagent` CLI has, from the directory whose `.env` it reads, and stop the
way the processes need; the Caddy and Prometheus examples point at the web process's port and
route; each alert has its annotations and promtool tests both firing and silent. Pure Python, no
service and none of the external tools: `.ci/check-deploy` runs systemd-analyze, promtool and
Caddy on the same files.
"""

import re
import shlex
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fakeredis
import pytest
import yaml
from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rq import Queue

from bot import metrics as web_metrics
from cli import main as cli
from cli.cron import JOBS
from cli.environment import settings_or_exit
from core import clock, metrics
from core.settings import Settings
from intake.keys import ENGINE, REDIS, SETTINGS, TURN_QUEUE
from storage import inbox

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "wagent.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "wagent.rules.test.yml"
SCRAPE = DEPLOY / "prometheus" / "prometheus.yml"
CADDYFILE = DEPLOY / "caddy" / "Caddyfile"
UNITS = DEPLOY / "systemd"
GUIDE = ROOT / "docs" / "DEPLOY.md"
INSTALL_DIR = "/opt/wagent"  # where the units expect the clone (docs/DEPLOY.md, .ci/check-deploy)

# Metrics the rules read that a parallel branch adds; each entry goes once /metrics serves it
# (the test below fails then, to say so).
PROMETHEUS_LABELS = {"job", "instance"}  # added by the scrape
PROMETHEUS_SERIES = {"up": {"job", "instance"}}


# --- what GET /metrics serves -------------------------------------------------------------

@pytest.fixture(scope="module")
def exported() -> dict[str, dict[str, set[str]]]:
    """Sample name → label name → values seen, from the web process's own registry
    (`bot.metrics.make_registry`) after one update of every declared metric, and the inbox
    gauges as PostgreSQL serves them, and the open conversations whose last reply failed."""
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    settings = Settings()
    updates = [_one_update(spec) for spec in metrics.SPECS.values()]
    updates.append(metrics.inc("wagent_input_tokens_total",  # a call's usage: the cache share
                               {"purpose": "turn", "kind": "cache_read"}, 100))
    metrics.record(client, settings.redis_prefix, *updates)
    app = web.Application()
    app[SETTINGS], app[REDIS] = settings, client
    app[TURN_QUEUE] = Queue(settings.queue_name, connection=client)
    app[ENGINE] = SimpleNamespace(dialect=SimpleNamespace(name="postgresql"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inbox, "backlog", lambda _: (1, clock.now() - timedelta(seconds=5)))
        patch.setattr(web_metrics, "undelivered_open_conversations",
                      lambda _: {"failed": 1, "unknown": 0})
        text = generate_latest(web_metrics.make_registry(app)).decode()
    found: dict[str, dict[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = found.setdefault(sample.name, {})
            for name, value in sample.labels.items():
                labels.setdefault(name, set()).add(value)
    return found


def _one_update(spec: metrics.Spec) -> list[metrics.Op]:
    labels = {name: "x" for name in spec.labels}
    if spec.kind == "counter":
        return metrics.inc(spec.name, labels)
    if spec.kind == "gauge":
        return metrics.set_gauge(spec.name, 1, labels)
    return metrics.observe(spec.name, 1, labels)


def test_the_exposition_covers_every_declared_metric_and_collector(
        exported: dict[str, dict[str, set[str]]]) -> None:
    for spec in metrics.SPECS.values():
        names = [spec.name] if spec.kind != "histogram" else \
            [f"{spec.name}_{part}" for part in ("bucket", "sum", "count")]
        for name in names:
            assert set(exported[name]) - {"le"} == set(spec.labels), name
    assert exported["wagent_queue_depth"]["state"] == {"queued", "scheduled", "started", "failed",
                                                       "parked"}
    assert {"wagent_inbox_entries", "wagent_inbox_oldest_seconds",
            metrics.CACHE_READ_SHARE} <= set(exported)


# --- the alert rules ------------------------------------------------------------------------

SELECTOR = re.compile(r"\b(wagent_\w+|up)\b\s*(\{[^}]*\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"]
            for rule in group["rules"]]


def selectors(expr: str) -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    """(metric, [(label, op, value)]) of every wagent_* and `up` selector in a PromQL text."""
    for match in SELECTOR.finditer(expr):
        yield match.group(1), MATCHER.findall(match.group(2) or "")


def test_every_metric_an_alert_reads_is_served_with_those_labels(
        exported: dict[str, dict[str, set[str]]]) -> None:
    served = {name: set(labels) | PROMETHEUS_LABELS for name, labels in exported.items()}
    served |= PROMETHEUS_SERIES
    problems = []
    for rule in alert_rules():
        for name, matchers in selectors(rule["expr"]):
            if name not in served:
                problems.append(f"{rule['alert']}: {name} is not served by /metrics")
                continue
            problems += [f"{rule['alert']}: {name} has no label {label}"
                         for label, _, _ in matchers if label not in served[name]]
    assert problems == []


def test_queue_states_in_the_rules_are_the_ones_served(
        exported: dict[str, dict[str, set[str]]]) -> None:
    states = {value for rule in alert_rules() for name, matchers in selectors(rule["expr"])
              if name == "wagent_queue_depth" for label, op, value in matchers if label == "state"}
    assert states and states <= exported["wagent_queue_depth"]["state"]


def test_every_alert_says_what_is_wrong_and_what_to_do() -> None:
    rules = alert_rules()
    assert len({rule["alert"] for rule in rules}) == len(rules)
    for rule in rules:
        assert rule["labels"]["severity"] in ("page", "ticket"), rule["alert"]
        assert set(rule["annotations"]) == {"summary", "what_to_do"}, rule["alert"]
        for text in rule["annotations"].values():
            assert text.strip() and "\n" not in text, rule["alert"]


def test_the_alerts_cover_the_signals_of_issue_29() -> None:
    read = {name for rule in alert_rules() for name, _ in selectors(rule["expr"])}
    assert {"wagent_inbox_oldest_seconds", "wagent_turns_total", "wagent_graph_errors_total",
            "wagent_queue_depth", "wagent_scheduled_overdue_seconds",
            "wagent_compactions_total"} <= read
    exprs = " ".join(rule["expr"] for rule in alert_rules())
    assert 'outcome=~"apology|error"' in exprs and 'outcome="failed"' in exprs


def test_every_alert_has_a_promtool_test_that_fires_and_one_that_stays_silent() -> None:
    document = yaml.safe_load(RULE_TESTS.read_text())
    assert document["rule_files"] == [RULES.name]
    firing: set[str] = set()
    silent: set[str] = set()
    for test in document["tests"]:
        for case in test["alert_rule_test"]:
            (firing if case["exp_alerts"] else silent).add(case["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert firing == names
    assert silent == names


def test_the_scrape_example_reads_the_web_process_route_and_the_rules() -> None:
    config = yaml.safe_load(SCRAPE.read_text())
    assert [(SCRAPE.parent / path).is_file() for path in config["rule_files"]] == [True]
    (job,) = config["scrape_configs"]
    app = web.Application()
    web_metrics.setup_metrics(app)
    assert job["metrics_path"] in {r.canonical for r in app.router.resources()}
    ports = {target.rsplit(":", 1)[1] for static in job["static_configs"]
             for target in static["targets"]}
    assert ports == {str(Settings().web_port)}
    jobs = {value for rule in alert_rules() for name, matchers in selectors(rule["expr"])
            if name == "up" for label, _, value in matchers if label == "job"}
    assert jobs == {job["job_name"]}


# --- the systemd units ----------------------------------------------------------------------

def unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file as section → key → values (systemd allows a key more than once)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


def services() -> dict[str, dict[str, dict[str, list[str]]]]:
    found = {path.name: unit(path) for path in sorted(UNITS.glob("*.service"))}
    assert set(found) == {"wagent-web.service", "wagent-worker@.service", "wagent-cron.service"}
    return found


def test_the_units_run_the_procfile_processes_with_commands_the_cli_has() -> None:
    procfile = {line.split(":", 1)[0]: shlex.split(line.split(":", 1)[1])
                for line in (ROOT / "Procfile").read_text().splitlines() if line.strip()}
    wagent = f"{INSTALL_DIR}/.venv/bin/wagent"
    run: dict[str, list[str]] = {}
    for name, sections in services().items():
        (exec_start,) = sections["Service"]["ExecStart"]
        program, *argv = shlex.split(exec_start)
        assert program == wagent, name
        args = cli._parser().parse_args(argv)  # argparse exits on an unknown command or flag
        assert getattr(args, "run", None) is not None, name
        run[argv[0]] = argv
        # `wagent` reads the .env of the directory it runs in (cli/main.py main)
        assert sections["Service"]["WorkingDirectory"] == [INSTALL_DIR], name
    assert {argv[1] for argv in procfile.values()} == set(run)


def test_the_cron_unit_names_every_job_cron_runs() -> None:
    (description,) = services()["wagent-cron.service"]["Unit"]["Description"]
    named = description.partition("(")[2].rstrip(")").split(", ")
    assert named == [name for name, _, _ in JOBS]


def test_the_units_belong_to_the_target_that_restarts_them_together() -> None:
    assert (UNITS / "wagent.target").is_file()
    for name, sections in services().items():
        assert sections["Unit"]["PartOf"] == ["wagent.target"], name
        assert sections["Install"]["WantedBy"] == ["wagent.target"], name


def test_a_stopped_worker_finishes_its_job_before_it_is_killed() -> None:
    """RQ's work horse dies at once on SIGTERM: only the worker may get it (KillMode=mixed),
    and systemd waits longer than a turn may take before SIGKILL."""
    worker = services()["wagent-worker@.service"]["Service"]
    assert worker["KillMode"] == ["mixed"]
    assert int(worker["TimeoutStopSec"][0]) > Settings().turn_job_timeout
    assert services()["wagent-web.service"]["Service"]["KillMode"] == ["mixed"]


def test_the_units_do_not_restart_on_the_clis_configuration_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in Settings.REQUIRED_IN_PRODUCTION:
        monkeypatch.delenv(name.upper(), raising=False)
    with pytest.raises(SystemExit) as exit_info:
        settings_or_exit()
    for name, sections in services().items():
        assert sections["Service"]["RestartPreventExitStatus"] == [str(exit_info.value.code)], \
            name


# --- the Caddy example --------------------------------------------------------------------

def test_the_proxy_reaches_the_web_port_keeps_metrics_private_and_takes_meta_bodies() -> None:
    text = CADDYFILE.read_text()
    settings = Settings()
    assert re.search(rf"^\s*reverse_proxy 127\.0\.0\.1:{settings.web_port}\b", text, re.M)
    matcher = re.search(r"^\s*@(\w+) path ([^\n]+)$", text, re.M)
    assert matcher and "/metrics" in matcher.group(2).split()
    assert re.search(rf"^\s*respond @{matcher.group(1)} 404$", text, re.M)
    size = re.search(r"^\s*max_size (\d+)(MB|MiB)$", text, re.M)
    assert size is not None
    assert int(size.group(1)) * {"MB": 10**6, "MiB": 2**20}[size.group(2)] >= \
        settings.max_body_bytes


# --- the guide ------------------------------------------------------------------------------

def test_the_readme_links_the_guide_from_its_first_screen() -> None:
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:30])
    assert "(docs/DEPLOY.md)" in first_screen


def test_the_guides_links_and_settings_exist() -> None:
    text = GUIDE.read_text()
    links = re.findall(r"\]\(((?!https?:|#)[^)#\s]+)", text)
    assert links and [link for link in links if not (GUIDE.parent / link).exists()] == []
    for path in [*UNITS.iterdir(), RULES, RULE_TESTS, SCRAPE, CADDYFILE]:
        assert str(path.relative_to(ROOT)) in text or path.name in text, path
    settings = set(re.findall(r"^([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assigned = set(re.findall(r"^\s*([A-Z][A-Z0-9_]+)=", text, re.M))
    assert assigned and assigned <= settings


# --- a real number: templates, messaging limits, costs (issue 44) ---------------------------

def _check_guide(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / ".ci" / "check-deploy"), "guide", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_check_deploy_finds_the_sections_a_real_number_needs(tmp_path: Path) -> None:
    assert _check_guide().returncode == 0
    cut = tmp_path / "DEPLOY.md"
    cut.write_text(GUIDE.read_text().replace("### Messaging limits and quality rating\n", "")
                   .replace("sending_paused_reason", "the pause"))
    done = _check_guide(str(cut))
    assert done.returncode == 1
    assert "heading '### Messaging limits and quality rating'" in done.stderr
    assert "'sending_paused_reason'" in done.stderr


def _guide_templates() -> dict[str, Any]:
    block = re.search(r"```yaml\n(templates:.*?)```", GUIDE.read_text(), re.S)
    assert block is not None
    declared: dict[str, Any] = yaml.safe_load(block.group(1))
    return declared


def test_the_guides_template_declarations_are_what_the_product_takes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/wagent.db")
    assert cli.main(["db", "upgrade"]) == 0
    tenant = {**yaml.safe_load((ROOT / "examples" / "tenant.yaml").read_text()),
              **_guide_templates()}
    good = tmp_path / "tenant.yaml"
    good.write_text(yaml.safe_dump(tenant, allow_unicode=True))
    assert cli.main(["tenant", "create", str(good)]) == 0
    capsys.readouterr()
    assert cli.main(["tenant", "show", tenant["phone_number_id"]]) == 0
    shown = capsys.readouterr().out
    assert '"reminder_template": "lembrete_horario"' in shown
    assert '"notice_template": "aviso_alteracao"' in shown
    # the same check refuses a reminder template with a variable the product cannot fill
    tenant["templates"][0]["parameters"].append("price")
    good.write_text(yaml.safe_dump(tenant, allow_unicode=True))
    assert cli.main(["tenant", "create", str(good)]) == 2
    assert "price" in capsys.readouterr().err
