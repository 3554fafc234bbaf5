"""Product metrics kept in one Redis hash: recorded best-effort by any process, read back as
Prometheus families at scrape time.

Workers run in forked work horses that die after each job, and there may be several web
processes, so nothing is kept in memory: every update is an HINCRBYFLOAT or HSET on
`{redis_prefix}:metrics`, the updates of one event in one MULTI, and a scrape reads the hash
once (HGETALL). A field is `name TAB part TAB labels`, labels as compact sorted JSON; `part` is
empty for counters and gauges, and `le=<bound>`, `sum` or `count` for a histogram (a bucket
field counts the observations that fell in it, not cumulatively; the scrape adds them up and
`count` is the `+Inf` bucket).
"""

import json
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

log = structlog.get_logger(__name__)

Op = tuple[str, str, float]  # (hincrbyfloat | hset, field, value)
Labels = Mapping[str, str]

TOKEN_BUCKETS = (500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 150_000, 200_000,
                 500_000, 1_000_000)
SECONDS_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)


@dataclass(frozen=True)
class Spec:
    """One metric: Prometheus type (counter, gauge or histogram), help, label names, buckets."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


SPECS = {spec.name: spec for spec in (
    Spec("wagent_webhook_updates_total", "counter",
         "Webhook updates by what ingest did with them (message, duplicate, status, "
         "status_unknown, error_notice, identity_change, unknown_tenant, dead_letter, "
         "unparsable).", ("kind",)),
    Spec("wagent_inbox_posts_total", "counter",
         "Webhook POSTs put in the inbox under load (stored later by a worker)."),
    Spec("wagent_turns_total", "counter", "Turn jobs by outcome.", ("outcome",)),
    Spec("wagent_turn_duration_seconds", "histogram",
         "Wall time of a turn job that ran (lock held), any outcome.", (), SECONDS_BUCKETS),
    Spec("wagent_claude_calls_total", "counter",
         "Messages API calls made, failed ones included.", ("purpose",)),
    Spec("wagent_claude_errors_total", "counter",
         "Messages API calls that failed, by class (429, 529, 5xx, 4xx status, timeout, "
         "connection).", ("purpose", "class")),
    Spec("wagent_context_tokens", "histogram",
         "Context size of each call: input + cache read + cache write tokens.", ("purpose",),
         TOKEN_BUCKETS),
    Spec("wagent_context_tokens_last", "gauge",
         "Context size of the last call (scraped over time: the saw-tooth).", ("purpose",)),
    Spec("wagent_input_tokens_total", "counter",
         "Input tokens by kind: uncached, cache_read, cache_write.", ("purpose", "kind")),
    Spec("wagent_output_tokens_total", "counter", "Output tokens.", ("purpose",)),
    Spec("wagent_model_cost_micro_usd_total", "counter",
         "Model cost in µUSD at the prices of record time (usage/ledger.py), by the usage "
         "row's purpose (turn, summary, compaction, facts) and model.", ("purpose", "model")),
    Spec("wagent_whatsapp_cost_micro_usd_total", "counter",
         "WhatsApp cost in µUSD charged once per sent message from its status's pricing at "
         "the rate card (intake/statuses.py), by category.", ("category",)),
    Spec("wagent_compactions_total", "counter", "Compaction jobs by outcome.", ("outcome",)),
    Spec("wagent_sweeps_total", "counter", "Inactivity sweeps run."),
    Spec("wagent_sweep_closed_total", "counter", "Conversations closed by the sweeper."),
    Spec("wagent_graph_sends_total", "counter", "Graph API sends accepted, by kind (text, "
         "template).", ("kind",)),
    Spec("wagent_handoffs_unanswered_total", "counter",
         "Handoffs no staff message answered within the tenant's handoff_alert_minutes "
         "(alerted once each)."),
    Spec("wagent_graph_errors_total", "counter",
         "Graph API sends refused or failed, by Graph error.code (http_<status> when the "
         "answer had none, unreachable when no connection was made: retried, network when "
         "no answer came after the request: unknown).", ("code",)),
)}
CACHE_READ_SHARE = "wagent_cache_read_share"


def inc(name: str, labels: Labels | None = None, amount: float = 1) -> list[Op]:
    """Add `amount` to a counter."""
    return [("hincrbyfloat", _field(name, "counter", labels), amount)]


def set_gauge(name: str, value: float, labels: Labels | None = None) -> list[Op]:
    """Set a last-value gauge (the last writer wins, across processes)."""
    return [("hset", _field(name, "gauge", labels), value)]


def observe(name: str, value: float, labels: Labels | None = None) -> list[Op]:
    """One observation of a histogram: its bucket, `sum` and `count`."""
    spec = SPECS[name]
    ops = [("hincrbyfloat", _field(name, "histogram", labels, "sum"), value),
           ("hincrbyfloat", _field(name, "histogram", labels, "count"), 1)]
    bound = next((b for b in spec.buckets if value <= b), None)
    if bound is not None:  # above the last bound: only in +Inf, which is `count`
        ops.append(("hincrbyfloat", _field(name, "histogram", labels, f"le={bound}"), 1))
    return ops


def record(client: Any, prefix: str, *updates: list[Op]) -> None:
    """Write the updates of one event in one MULTI. Best-effort: a Redis failure is logged at
    debug and swallowed, so a metric never fails a turn or a webhook.
    """
    key = metrics_key(prefix)
    try:
        pipe = client.pipeline(transaction=True)
        for ops in updates:
            for command, field, value in ops:
                getattr(pipe, command)(key, field, value)
        pipe.execute()
    except Exception as exc:
        log.debug("metrics_not_recorded", error=f"{type(exc).__name__}: {exc}"[:200])


def metrics_key(prefix: str) -> str:
    return f"{prefix}:metrics"


def _field(name: str, kind: str, labels: Labels | None, part: str = "") -> str:
    """The hash field; ValueError on an unknown metric, the wrong type or wrong label names (a
    bug in the caller, found by the tests, not a runtime condition)."""
    spec = SPECS.get(name)
    labels = dict(labels or {})
    if spec is None or spec.kind != kind or set(labels) != set(spec.labels):
        raise ValueError(f"metric {name} ({kind}) with labels {sorted(labels)} is not declared")
    encoded = json.dumps({k: str(v) for k, v in labels.items()}, sort_keys=True,
                         separators=(",", ":"))
    return f"{name}\t{part}\t{encoded}"


class RedisCollector(Collector):
    """Every declared metric, read from the hash at each scrape, plus the cache-read share.

    `wagent_cache_read_share` = cache_read / (uncached + cache_read + cache_write) over every
    call since the hash was created; absent until a call was recorded. HGETALL errors
    propagate (the scrape fails visibly rather than reporting zeros).
    """

    def __init__(self, client: Any, prefix: str) -> None:
        self.client, self.prefix = client, prefix

    def collect(self) -> Iterator[Metric]:
        values = parse(self.client.hgetall(metrics_key(self.prefix)))
        for spec in SPECS.values():
            yield _family(spec, values.get(spec.name, {}))
        share = cache_read_share(values.get("wagent_input_tokens_total", {}))
        if share is not None:
            gauge = GaugeMetricFamily(CACHE_READ_SHARE, "Share of input tokens read from the "
                                      "prompt cache, all calls since the metrics began.")
            gauge.add_metric([], share)
            yield gauge


Series = dict[tuple[tuple[str, str], ...], dict[str, float]]  # labels → part → value


def parse(raw: Mapping[Any, Any]) -> dict[str, Series]:
    """HGETALL's answer → metric name → labels → part → value; foreign fields are skipped."""
    out: dict[str, Series] = defaultdict(lambda: defaultdict(dict))
    for field, value in raw.items():
        try:
            name, part, encoded = _text(field).split("\t", 2)
            labels = tuple(sorted(json.loads(encoded).items()))
            out[name][labels][part] = float(_text(value))
        except ValueError:
            log.debug("metrics_field_skipped", field=_text(field)[:100])
    return out


def cache_read_share(series: Series) -> float | None:
    totals: dict[str, float] = defaultdict(float)
    for labels, parts in series.items():
        totals[dict(labels).get("kind", "")] += parts.get("", 0.0)
    whole = totals["uncached"] + totals["cache_read"] + totals["cache_write"]
    return totals["cache_read"] / whole if whole > 0 else None


def _family(spec: Spec, series: Series) -> Metric:
    names = list(spec.labels)
    if spec.kind == "histogram":
        histogram = HistogramMetricFamily(spec.name, spec.help, labels=names)
        for labels, parts in sorted(series.items()):
            histogram.add_metric(_values(names, labels), _buckets(spec, parts),
                                 parts.get("sum", 0.0))
        return histogram
    family_class = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
    family = family_class(spec.name, spec.help, labels=names)
    for labels, parts in sorted(series.items()):
        family.add_metric(_values(names, labels), parts.get("", 0.0))
    return family


def _buckets(spec: Spec, parts: dict[str, float]) -> list[tuple[str, float]]:
    running, buckets = 0.0, []
    for bound in spec.buckets:
        running += parts.get(f"le={bound}", 0.0)
        buckets.append((_le(bound), running))
    buckets.append(("+Inf", max(parts.get("count", 0.0), running)))
    return buckets


def _le(bound: float) -> str:
    """A bucket bound as the `le` label: "500.0", "0.25" (the client library's own form)."""
    return repr(float(bound))


def _values(names: list[str], labels: tuple[tuple[str, str], ...]) -> list[str]:
    found = dict(labels)
    return [found.get(name, "") for name in names]


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
