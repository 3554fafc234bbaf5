"""Metrics: recorded in Redis by the real code paths (webhook, turn, Claude calls, compaction,
sweeper, Graph sends), read back by `GET /metrics` in Prometheus text format. Real worker, real
Redis when reachable, SQLite and PostgreSQL.
"""

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import func, select

from core import metrics
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import Usage
from tests.conftest import START
from tests.factories import TENANT, text_body
from workers.compaction import CACHE_LIFETIME
from workers.sweeper import sweep_inactive

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
SUMMARY = "The customer Ana asked about haircuts; nothing booked yet (record)."
COMPACTING = {"compaction_threshold_tokens": 1500, "keep_messages": 4,
              "compaction_min_gain_tokens": 300, "prune_after_user_turns": 1}
FILLER = "Temos horários na terça e no sábado de manhã; " * 6  # a reply of about 100 tokens


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    yield environment
    environment.close()


def scrape(env: ReplayEnvironment) -> Samples:
    """GET /metrics, parsed by prometheus_client's own parser: (sample name, labels) → value."""
    with urllib.request.urlopen(f"{env.web_url}/metrics", timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def turn(env: ReplayEnvironment, n: int, reply: str = "ok") -> None:
    env.messages_api.script("turn", [{"text": f"{reply} {n}"}])
    assert env.post_webhook(json.dumps(text_body(f"mensagem {n}", n)).encode()) == 200
    env.drain()
    env.clock.advance(timedelta(seconds=30))


def usage_totals(env: ReplayEnvironment, purpose: str | None = None) -> tuple[int, int, int]:
    """(uncached, cache_read, cache_write) summed over the Usage table."""
    query = select(func.sum(Usage.input_tokens), func.sum(Usage.cache_read_input_tokens),
                   func.sum(Usage.cache_creation_input_tokens))
    if purpose is not None:
        query = query.where(Usage.purpose == purpose)
    with session_scope(env.engine) as session:
        uncached, read, write = session.exec(query).one()
    return int(uncached or 0), int(read or 0), int(write or 0)


def test_one_answered_message_moves_every_counter_of_its_path(env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    turn(env, 1, reply="Oi")
    assert env.post_webhook(json.dumps(text_body("mensagem 1", 1)).encode()) == 200  # redelivery
    env.drain()
    samples = scrape(env)
    assert value(samples, "wagent_webhook_updates_total", kind="message") == 1
    assert value(samples, "wagent_webhook_updates_total", kind="duplicate") == 1
    assert value(samples, "wagent_turns_total", outcome="answered") == 1
    assert value(samples, "wagent_turn_duration_seconds_count") == 1
    assert value(samples, "wagent_turn_duration_seconds_sum") > 0
    assert value(samples, "wagent_claude_calls_total", purpose="turn") == 1
    assert value(samples, "wagent_graph_sends_total", kind="text") == 1
    uncached, read, write = usage_totals(env, "turn")
    assert value(samples, "wagent_input_tokens_total", purpose="turn", kind="uncached") == uncached
    assert value(samples, "wagent_input_tokens_total", purpose="turn",
                 kind="cache_write") == write
    context = uncached + read + write
    assert value(samples, "wagent_context_tokens_last", purpose="turn") == context
    assert value(samples, "wagent_context_tokens_count", purpose="turn") == 1
    assert value(samples, "wagent_context_tokens_sum", purpose="turn") == context
    assert value(samples, "wagent_queue_depth", state="queued") == 0
    assert ("wagent_queue_depth", frozenset({("state", "failed")})) in samples


def test_claude_and_graph_errors_are_counted_by_class_and_code(env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    env.messages_api.fail("turn", 529, times=1)
    env.graph_api.fail(130429, times=1)
    turn(env, 1)
    samples = scrape(env)
    assert value(samples, "wagent_claude_errors_total", purpose="turn", **{"class": "529"}) == 1
    assert value(samples, "wagent_turns_total", outcome="retry_scheduled") == 1
    assert value(samples, "wagent_queue_depth", state="scheduled") == 1, "the retry waits"
    env.clock.advance(timedelta(seconds=10))
    env.drain()  # the retried turn answers; its send meets the rate limit
    env.clock.advance(timedelta(seconds=30))
    env.drain()
    samples = scrape(env)
    assert value(samples, "wagent_claude_calls_total", purpose="turn") == 2
    assert value(samples, "wagent_graph_errors_total", code="130429") == 1
    assert value(samples, "wagent_graph_sends_total", kind="text") == 1
    env.messages_api.fail("turn", 400, times=1)
    assert env.post_webhook(json.dumps(text_body("outra", 2)).encode()) == 200
    env.drain()
    samples = scrape(env)
    assert value(samples, "wagent_claude_errors_total", purpose="turn", **{"class": "400"}) == 1
    assert value(samples, "wagent_turns_total", outcome="apology") == 1


def test_a_sweep_counts_itself_and_the_conversations_it_closed(env: ReplayEnvironment) -> None:
    env.add_tenant({**TENANT, "inactivity_timeout_minutes": 30})
    turn(env, 1)
    env.clock.advance(timedelta(minutes=31))
    assert sweep_inactive() == 1
    samples = scrape(env)
    assert value(samples, "wagent_sweeps_total") == 1
    assert value(samples, "wagent_sweep_closed_total") == 1


def test_a_redis_failure_while_recording_does_not_break_a_turn(env: ReplayEnvironment) -> None:
    env.add_tenant(TENANT)
    env.redis.set(metrics.metrics_key(env.settings.redis_prefix), "not a hash")  # WRONGTYPE
    turn(env, 1, reply="Oi")
    assert [s.body["text"]["body"] for s in env.graph_api.accepted] == ["Oi 1"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape(env)
    assert refused.value.code == 503, "a scrape that cannot read Redis says so, never zeros"
    refused.value.close()
    env.redis.delete(metrics.metrics_key(env.settings.redis_prefix))
    turn(env, 2, reply="De novo")
    assert value(scrape(env), "wagent_turns_total", outcome="answered") == 1


def test_metrics_show_the_saw_tooth_of_a_compacted_conversation_and_the_cache_read_share(
        env: ReplayEnvironment) -> None:
    env.add_tenant({**TENANT, **COMPACTING})
    env.messages_api.script("summary", [{"text": f"{SUMMARY} ({n})"} for n in range(10)])
    series: list[float] = []  # wagent_context_tokens_last{purpose="turn"}, one scrape a turn
    compactions: list[float] = []
    for n in range(1, 17):
        turn(env, n, reply=FILLER)
        if n % 4 == 0:  # the customer pauses past the cache's lifetime: it compacts (issue 41)
            env.clock.advance(CACHE_LIFETIME)
            env.drain()
        samples = scrape(env)
        series.append(value(samples, "wagent_context_tokens_last", purpose="turn"))
        compactions.append(value(samples, "wagent_compactions_total", outcome="compacted"))
    teeth = [i for i in range(1, len(series)) if compactions[i - 1] < compactions[i]]
    assert len(teeth) >= 2, (series, compactions)
    for i in range(1, len(series)):
        if i - 1 in teeth:  # the turn after a compaction sends a shorter context
            assert series[i] < series[i - 1] - 200, f"the drop at {i}: {series}"
        else:
            assert series[i] > series[i - 1], f"the rise at {i}: {series}"
    assert value(samples, "wagent_claude_calls_total", purpose="summary") == compactions[-1]
    uncached, read, write = usage_totals(env)
    assert read > 0
    assert value(samples, "wagent_cache_read_share") == pytest.approx(
        read / (uncached + read + write))


def test_histograms_counters_and_gauges_round_trip_through_one_hash(
        redis_client: redis.Redis) -> None:
    for tokens in (400, 1500, 3_000_000):
        metrics.record(redis_client, "t", metrics.observe("wagent_context_tokens", tokens,
                                                          {"purpose": "turn"}))
    metrics.record(redis_client, "t", metrics.inc("wagent_turns_total", {"outcome": "answered"}),
                   metrics.set_gauge("wagent_context_tokens_last", 7, {"purpose": "turn"}),
                   metrics.set_gauge("wagent_context_tokens_last", 9, {"purpose": "turn"}))
    collected = {s.name: s for family in metrics.RedisCollector(redis_client, "t").collect()
                 for s in family.samples if s.labels.get("le") in (None, "500.0", "2000.0",
                                                                    "1000000.0", "+Inf")}
    buckets = {s.labels["le"]: s.value for family in
               metrics.RedisCollector(redis_client, "t").collect()
               if family.name == "wagent_context_tokens" for s in family.samples
               if s.name.endswith("_bucket")}
    assert (buckets["500.0"], buckets["2000.0"], buckets["1000000.0"], buckets["+Inf"]) == \
        (1, 2, 2, 3), "cumulative, the largest only in +Inf"
    assert collected["wagent_context_tokens_sum"].value == 400 + 1500 + 3_000_000
    assert collected["wagent_context_tokens_count"].value == 3
    assert collected["wagent_turns_total"].value == 1
    assert collected["wagent_context_tokens_last"].value == 9, "a gauge keeps the last value"
    assert "wagent_cache_read_share" not in collected, "no share before any token"


def test_an_undeclared_metric_or_label_is_refused_at_the_call_site() -> None:
    with pytest.raises(ValueError):
        metrics.inc("wagent_nope_total")
    with pytest.raises(ValueError):
        metrics.inc("wagent_turns_total", {"kind": "answered"})
    with pytest.raises(ValueError):
        metrics.set_gauge("wagent_turns_total", 1, {"outcome": "answered"})


def test_recording_to_an_unreachable_redis_returns_quietly() -> None:
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    metrics.record(unreachable, "t", metrics.inc("wagent_sweeps_total"))
    unreachable.close()
