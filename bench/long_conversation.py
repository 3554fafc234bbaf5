"""Benchmark: a long scripted conversation through the real pipeline, against baselines,
cut at every length (issue 41: 10, 25, 50, 100 and 200 customer turns in one run).

Replays 200 customer turns (in every 10: three 20-slot searches answered by a list that
carries its body, a booking and its cancellation each with its reply, five plain answers:
13 model calls) through the real web app, RQ worker, anthropic SDK and the Messages API
double's pinned token and cache model, on the product's clock, with gaps between customer
turns cycling through GAPS (20 seconds to 3 hours); the worker runs what falls due in the
gaps. Then it prices, on the same conversation and the same clock, baselines rebuilt from the
stored history:

* full history: every message every call, with the same cache breakpoints;
* full history pruned: the same, old tool results pruned as the product prunes them, the
  boundary moving every customer turn;
* last N: the last `keep_messages` stored messages, cut with no care for tool pairs (requests
  the API would reject are counted and not priced).

Each length reports billed-equivalent and input against the full histories, the cache-read
share, model calls and WhatsApp messages per customer turn, and US dollars (Sonnet turns,
Haiku summaries, the market's WhatsApp utility rate per message).

It also times building a turn's request with 1,000 and 100,000 stored messages, when all but the
recent ones are summarised and when none is (the hard cap applies).

Usage: python bench/long_conversation.py [--lengths 10,25,50,100,200] [--out FILE.json]
       [--table TABLE_FILE] [--cost-plot FILE.svg] [--no-build-timing]
Prints one JSON object. A script that prints figures, not a timed test.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlmodel import col, select  # noqa: E402

from agent import catalogue, context  # noqa: E402
from agent.context import TenantPrompt, build_request  # noqa: E402
from agent.tools.registry import (
    REGISTRY,  # noqa: E402
    tool_reply,  # noqa: E402
)
from agent.window import (  # noqa: E402
    Stored,
    prune,
    prune_boundary,
    to_api_messages,
    tool_result_text,
)
from core.clock import parse_duration  # noqa: E402
from core.logs import configure_logging  # noqa: E402
from core.settings import Settings  # noqa: E402
from replay.environment import ReplayEnvironment  # noqa: E402
from replay.messages_api import PromptCache, count_tokens, validate_request  # noqa: E402
from storage.db import create_schema, make_engine, session_scope  # noqa: E402
from storage.fact_keys import resolve_keys  # noqa: E402
from storage.models import Contact, Conversation, Message, Tenant, Usage  # noqa: E402
from storage.tenants import upsert_tenant  # noqa: E402
from usage.ledger import CACHE_READ, PRICES, WRITE_1H, WRITE_5M  # noqa: E402
from usage.report import (  # noqa: E402
    WHATSAPP_UTILITY_USD,
    Call,
    render_svg,
    summarize_calls,
)
from workers import compaction  # noqa: E402
from workers.turn_window import prepare_window, turn_request  # noqa: E402
from workers.turns import TurnState  # noqa: E402

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)  # Monday 09:00 in São Paulo
TZ = ZoneInfo("America/Sao_Paulo")
GAPS = [timedelta(seconds=s) for s in
        (20, 35, 50, 60, 120, 180, 240, 420, 1500, 10800)]  # 20 s … 3 h, cycled
CUSTOMER = [
    "oi, tem horário pra corte essa semana?", "pode ser de manhã?", "e à tarde?",
    "quanto tempo demora o corte?", "a Júlia atende sábado?", "tem estacionamento aí?",
    "prefiro mais cedo", "qual o endereço mesmo?", "vocês aceitam pix?",
    "pode marcar pra mim?", "quero desmarcar aquele", "tem outro dia?",
    "e na semana que vem?", "obrigada!", "posso levar minha filha também?",
    "qual o valor da escova?", "tem horário depois das 18h?", "ok, vou pensar",
    "voltei, ainda tem horário?", "perfeito",
]
INSTRUCTIONS = "\n".join([
    "Você é a recepcionista do Salão Exemplo, um salão de beleza no centro de São Paulo.",
    "Atendemos com hora marcada. Serviços: corte feminino (60 min, R$ 90), corte masculino "
    "(30 min, R$ 50), escova (45 min, R$ 60), coloração (120 min, a partir de R$ 180).",
    "Profissionais: Júlia (corte e escova), Marcos (corte masculino e feminino), Ana "
    "(coloração e escova).",
    "Política de cancelamento: pedimos aviso de 4 horas; atrasos de mais de 15 minutos podem "
    "exigir remarcação. Aceitamos pix, débito e crédito; não aceitamos cheque.",
    "Endereço: Rua Fictícia, 123, Centro. Há estacionamento conveniado na Rua Exemplo, 45, "
    "com 1 hora grátis para clientes.",
    "Crianças até 10 anos têm 20% de desconto em cortes. Não fazemos procedimentos químicos em "
    "gestantes sem liberação médica por escrito.",
    "Se a cliente pedir algo fora do catálogo, diga com gentileza que não fazemos e ofereça o "
    "serviço mais próximo. Nunca prometa preços diferentes dos acima.",
    "Em datas comemorativas a agenda lota: sugira reservar com antecedência.",
    "Ao confirmar, repita serviço, profissional, dia da semana, data e horário. Use no máximo "
    "duas frases curtas e um emoji no máximo.",
] * 3)
TENANT = {
    "phone_number_id": "109876543210987", "name": "Salão Exemplo", "timezone": str(TZ),
    "instructions": INSTRUCTIONS,
    # the catalogue the instructions describe, with its prices: since issue 21 it is rendered
    # into the cached system[0] (agent/catalogue.py); --no-catalogue measures the prefix without
    "services": [
        {"code": "corte", "name": "Corte feminino", "duration_minutes": 60, "price_cents": 9000},
        {"code": "corte_masculino", "name": "Corte masculino", "duration_minutes": 30,
         "price_cents": 5000},
        {"code": "escova", "name": "Escova", "duration_minutes": 45, "price_cents": 6000},
        {"code": "coloracao", "name": "Coloração", "duration_minutes": 120,
         "price_cents": 18000, "price_from": True, "description": "inclui lavagem"}],
    "professionals": [
        {"code": "julia", "name": "Júlia", "services": ["corte", "escova"]},
        {"code": "marcos", "name": "Marcos", "services": ["corte", "corte_masculino"]},
        {"code": "ana", "name": "Ana", "services": ["coloracao", "escova"]}],
    "hours": {day: ["09:00-19:30"] for day in ("mon", "tue", "wed", "thu", "fri", "sat", "sun")},
}
SUMMARY = ("The customer Ana has been asking about haircut slots with Júlia over several "
           "days. She prefers mornings, asked about prices (haircut R$ 90), parking and pix. "
           "Bookings made and cancelled so far: see appointment ids in the recent messages. "
           "Open item: she has not confirmed a final slot. ") * 3


def body(n: int, text: str, now: datetime) -> bytes:
    message = {"from": "5511999990001", "from_user_id": "BR.9000000000000000001",
               "id": f"wamid.BENCH{n:06d}", "timestamp": str(int(now.timestamp())),
               "type": "text", "text": {"body": text}}
    value = {"messaging_product": "whatsapp",
             "metadata": {"display_phone_number": "5511999990000",
                          "phone_number_id": "109876543210987"},
             "contacts": [{"profile": {"name": "Ana Teste"}, "wa_id": "5511999990001",
                           "user_id": "BR.9000000000000000001"}],
             "messages": [message]}
    return json.dumps({"object": "whatsapp_business_account", "entry": [
        {"id": "102030405060708", "changes": [{"field": "messages", "value": value}]}]}).encode()


SEARCH_TURNS = (1, 4, 9)  # n % 10: a slot search answered with a list (2 calls)


def script_turn(env: ReplayEnvironment, n: int, booked: list[tuple[int, datetime]]) -> None:
    """The model's side of customer turn `n`, as issue 41's product calls it: in every 10
    turns, 3 slot searches (20 slots) answered by offer_choices with its body (2 calls
    each), a booking and, the turn after, its cancellation, each with its checked reply (1
    call each), and 5 plain answers (1 call each): 13 calls per 10 turns."""
    local = env.clock.now().astimezone(TZ)
    day = (local + timedelta(days=1 + n % 3)).date()
    items: list[dict[str, Any]]
    if n % 10 in SEARCH_TURNS:
        items = [{"tool": "find_available_slots",
                  "input": {"service": "corte", "date": day.isoformat(),
                            "professional": "julia"}},
                 {"tool": "offer_choices", "input": {
                     "body": f"Claro! Para {day:%d/%m} a Júlia tem estes horários. Qual "
                             f"prefere? (resposta {n})",
                     "options": [{"slot": f"{day.isoformat()}T{h}:00", "professional": "julia",
                                  "title": f"{day:%d/%m} {h}:00"} for h in (10, 14, 16)]}}]
    elif n % 10 == 5:
        start = datetime.combine(day, datetime.min.time()).replace(hour=18, minute=30)
        items = [{"tool": "book_appointment", "input": {
            "service": "corte", "start": f"{day.isoformat()}T18:30",
            "reply": f"Agendado! {day:%d/%m} às 18h30 com a Júlia. (resposta {n})"}}]
        booked.append((len(booked) + 1, start))
    elif n % 10 == 6 and booked:
        number, start = booked[-1]
        items = [{"tool": "cancel_appointment", "input": {
            "appointment_id": number,
            "reply": f"Cancelado o horário de {start:%d/%m} às 18h30. (resposta {n})"}}]
    else:
        items = [{"text": f"Claro! A Júlia atende de segunda a domingo, das 9h às 19h30; é só "
                          f"me dizer o dia que prefere. (resposta {n})"}]
    env.messages_api.script("turn", items)
    if env.messages_api.leftover().get("summary", 0) < 2:
        env.messages_api.script("summary", [{"text": SUMMARY}] * 4)


def run_product(turns: int, tenant: dict[str, Any],
                cuts: list[tuple[int, int]] | None = None) -> tuple[dict[str, Any],
                                                                         list[Stored],
                                                                         list[Call]]:
    """The conversation through the product; `cuts` gets, after each customer turn n, (model
    calls made so far, WhatsApp messages sent so far): what a
    conversation of n turns would have cost, the worker having run what fell due while the
    customer was away (a compaction once the cache expired)."""
    env = ReplayEnvironment(start=START)
    try:
        env.add_tenant(tenant)
        booked: list[tuple[int, datetime]] = []
        for n in range(1, turns + 1):
            script_turn(env, n, booked)
            status = env.post_webhook(body(n, CUSTOMER[n % len(CUSTOMER)], env.clock.now()))
            assert status == 200, status
            env.drain()
            env.clock.advance(GAPS[(n - 1) % len(GAPS)])
            env.drain()  # what fell due while the customer was away
            if cuts is not None:
                with session_scope(env.engine) as session:
                    made = len(session.exec(select(Usage.id)).all())
                cuts.append((made, len([s for s in env.graph_api.sends if s.wamid])))
        with session_scope(env.engine) as session:
            conversation = session.exec(select(Conversation)).one()
            rows = session.exec(select(Message).order_by(col(Message.position))).all()
            history = [Stored(m.id or 0, m.role, m.content, m.position or 0) for m in rows
                       if m.position is not None]
            usage = session.exec(select(Usage).order_by(col(Usage.id))).all()
            calls = [Call(u.created_at, u.purpose, u.model, u.input_tokens,
                          u.cache_creation_input_tokens, u.cache_creation_1h_input_tokens,
                          u.cache_read_input_tokens, u.output_tokens) for u in usage]
            compactions = conversation.compactions
        sends = [s for s in env.graph_api.sends if s.wamid]
        result = {**summarize_calls(calls), "compactions": compactions,
                  "requests_rejected": env.messages_api.api_errors,
                  "unscripted_calls": env.messages_api.unscripted_calls,
                  "replies_sent": len(sends)}
        turn_calls = [c.context_tokens for c in calls if c.purpose == "turn"]
        half = len(turn_calls) // 2
        result["peak_context_first_half"] = max(turn_calls[:half], default=0)
        result["peak_context_second_half"] = max(turn_calls[half:], default=0)
        result["mean_context_per_turn_call"] = round(statistics.mean(turn_calls))
        return result, history, calls
    finally:
        env.close()


def call_points(history: list[Stored]) -> list[int]:
    """Indices where the product called the model: the end of every run of user messages,
    except tool results whose round ended the turn with a tool's own reply (issue 41:
    agent/loop.py, the offer's body, a booking's sent reply)."""
    return [i for i, m in enumerate(history)
            if m.role == "user" and (i + 1 == len(history) or history[i + 1].role != "user")
            and not (i > 0 and _ended_by_tool(history[i - 1], m))]


def _ended_by_tool(assistant: Stored, results: Stored) -> bool:
    """The round of `assistant`'s tool calls ended the turn: every result succeeded and one
    carries the customer's reply (as agent/loop.py decides)."""
    uses = [b for b in assistant.content if b.get("type") == "tool_use"]
    texts = {b.get("tool_use_id"): b for b in results.content if b.get("type") == "tool_result"}
    if assistant.role != "assistant" or not uses or any(
            r.get("is_error") for r in texts.values()):
        return False
    return any(tool_reply(u, tool_result_text(texts[u["id"]].get("content"))) for u in uses
               if u["id"] in texts)


def price_baseline(history: list[Stored], times: list[datetime], *, last_n: int | None,
                   prompt: TenantPrompt, prune_turns: int | None = None) -> dict[str, Any]:
    """The history priced as a naive agent would send it at each of the product's call
    `times`: all of it (`last_n` None) or its last `last_n` messages; with `prune_turns`, the
    tool results before the last `prune_turns` customer turns pruned as the product prunes
    them (agent/window.prune), the boundary moving every turn (no compaction)."""
    now = {"t": times[0]}
    cache = PromptCache(lambda: now["t"], 1024)
    calls, rejected = [], 0
    for point, at in zip(call_points(history), times, strict=False):
        now["t"] = at
        chosen = history[: point + 1] if last_n is None else history[max(0, point + 1 - last_n):
                                                                     point + 1]
        if prune_turns is not None:
            chosen = prune(chosen, pruned_until=prune_boundary(chosen,
                                                               keep_user_turns=prune_turns))
        request = build_request(tenant=prompt, tools=REGISTRY, context="",
                                messages=to_api_messages(chosen), max_tokens=1024,
                                metadata_user_id="bench", tail_before_lookups=False)
        if validate_request(request) is not None:
            rejected += 1
            continue
        usage = cache.account(request)
        calls.append(Call(at, "turn", prompt.model, usage["input_tokens"],
                          usage["cache_creation_input_tokens"],
                          usage["cache_creation"]["ephemeral_1h_input_tokens"],
                          usage["cache_read_input_tokens"], 0))
    return {**summarize_calls(calls), "requests_rejected": rejected}


def billed_split(calls: list[Call], prefix_tokens: int) -> dict[str, int]:
    """Where the product's billed-equivalent input goes (usage/report.py's weights): turn
    calls' cache reads, 1 h and 5 min writes and uncached input, the summaries' input; the
    reads and writes split into the fixed prefix's (tools + system[0], `prefix_tokens`: read
    at 0.1 by every call that reads the cache, written at its TTL's price by every cold call,
    one that reads nothing) and the rest's (the context block and the window); and
    `prefix_floor`, their sum for the prefix, which no window can go under."""
    turns = [c for c in calls if c.purpose == "turn"]
    cold = sum(1 for c in turns if c.cache_read_input_tokens == 0)
    reads = round(sum(c.cache_read_input_tokens for c in turns) * CACHE_READ)
    writes_1h = round(sum(c.cache_creation_1h_input_tokens for c in turns) * WRITE_1H)
    writes_5m = round(sum(c.cache_creation_input_tokens - c.cache_creation_1h_input_tokens
                          for c in turns) * WRITE_5M)
    prefix_reads = round(prefix_tokens * CACHE_READ * (len(turns) - cold))
    prefix_writes = round(prefix_tokens * cold
                          * (WRITE_1H if context.INSTRUCTIONS_TTL == "1h" else WRITE_5M))
    return {
        "cache_reads": reads, "writes_1h": writes_1h, "writes_5m": writes_5m,
        "uncached": sum(c.input_tokens for c in turns),
        "summaries": sum(c.context_tokens for c in calls if c.purpose != "turn"),
        "cold_calls": cold, "turn_calls": len(turns),
        "prefix_reads": prefix_reads, "prefix_writes": prefix_writes,
        "window_reads": reads - prefix_reads,
        "window_writes": writes_1h + writes_5m - prefix_writes,
        "prefix_floor": prefix_reads + prefix_writes}


def at_length(turns: int, calls: list[Call], cuts: list[tuple[int, int]],
              history: list[Stored], prompt: TenantPrompt, *, prune_turns: int,
              whatsapp_rate: float) -> dict[str, Any]:
    """The conversation cut after `turns` customer turns: the product's calls and WhatsApp
    messages so far, against the full history and the full history pruned as the product
    prunes, priced at the same call times on a cold cache; US dollars at the list prices of
    the models used (usage/ledger.PRICES: Sonnet turns, Haiku summaries and facts) and
    `whatsapp_rate` per message (the baselines send the same replies, and their model writes
    the same output as the product's turns)."""
    made, sends = cuts[turns - 1]
    mine = calls[:made]
    prefix = prefix_tokens(prompt)
    times = [c.at for c in mine if c.purpose == "turn"]
    product = summarize_calls(mine)
    full = price_baseline(history, times, last_n=None, prompt=prompt)
    pruned = price_baseline(history, times, last_n=None, prompt=prompt, prune_turns=prune_turns)
    output = sum(c.output_tokens for c in mine if c.purpose == "turn")
    price_in, price_out = PRICES["sonnet"]
    whatsapp = round(sends * whatsapp_rate, 4)

    def usd(figures: dict[str, Any]) -> float:
        return round((figures["billed_equivalent_input"] * price_in + output * price_out)
                     / 1_000_000 + whatsapp, 4)

    def ratios(base: dict[str, Any]) -> dict[str, float]:
        return {"input": round(product["input_tokens_total"] / base["input_tokens_total"], 4),
                "billed_equivalent": round(product["billed_equivalent_input"]
                                           / base["billed_equivalent_input"], 4)}
    return {"turns": turns, "model_calls": len(times),
            "model_calls_per_turn": round(len(times) / turns, 2),
            "summary_calls": sum(1 for c in mine if c.purpose == "summary"),
            "whatsapp_messages": sends, "whatsapp_per_turn": round(sends / turns, 2),
            "cache_read_share": product["cache_read_share"],
            "billed_equivalent_input": {"product": product["billed_equivalent_input"],
                                        "full": full["billed_equivalent_input"],
                                        "full_pruned": pruned["billed_equivalent_input"]},
            "input_tokens": {"product": product["input_tokens_total"],
                             "full": full["input_tokens_total"],
                             "full_pruned": pruned["input_tokens_total"]},
            "vs_full": ratios(full), "vs_full_pruned": ratios(pruned),
            "usd": {"product": round(product["cost_usd"] + whatsapp, 4), "full": usd(full),
                    "full_pruned": usd(pruned), "whatsapp": whatsapp},
            "requests_rejected": {"full": full["requests_rejected"],
                                  "full_pruned": pruned["requests_rejected"]},
            "billed_split": billed_split(mine, prefix),
            # the fixed prefix alone, every turn call, against the full history's input
            "prefix_share_of_full_input": round(prefix * len(times)
                                                / full["input_tokens_total"], 4)}


def lengths_svg(rows: list[dict[str, Any]], *, width: int = 640, height: int = 320) -> str:
    """US dollars against customer turns, product and the two baselines, as a standalone
    SVG (no plotting dependency; usage/report.render_svg draws one series)."""
    pad, top = 60, 30
    series = (("product", "#1f77b4"), ("full", "#d62728"), ("full_pruned", "#ff7f0e"))
    peak = max(r["usd"][k] for r in rows for k, _ in series) or 1.0
    last = max(r["turns"] for r in rows)

    def xy(turns: int, usd: float) -> str:
        return (f"{pad + turns / last * (width - 2 * pad):.1f},"
                f"{height - pad - usd / peak * (height - pad - top):.1f}")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" '
             'fill="white"/><text x="60" y="18">US dollars per conversation against its '
             'customer turns</text>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
             f'stroke="#999"/><line x1="{pad}" y1="{top}" x2="{pad}" y2="{height - pad}" '
             f'stroke="#999"/><text x="4" y="{top + 4}">${peak:.2f}</text>'
             f'<text x="4" y="{height - pad}">$0</text>']
    for r in rows:
        x = xy(r["turns"], 0).split(",")[0]
        parts.append(f'<text x="{float(x) - 8:.1f}" y="{height - pad + 16}">{r["turns"]}</text>')
    for n, (key, colour) in enumerate(series):
        points = " ".join(xy(r["turns"], r["usd"][key]) for r in rows)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                     f'points="{points}"/><text x="{width - pad - 150}" y="{top + 16 * n + 10}" '
                     f'fill="{colour}">{key.replace("_", " ")}</text>')
    return "".join(parts) + "</svg>"


def lengths_table(rows: list[dict[str, Any]]) -> str:
    """The `by_length` figures as the Markdown table of bench/README.md."""
    lines = ["| customer turns | billed-eq. vs full | vs full pruned | input vs full | "
             "cache reads | model calls / turn | WhatsApp / turn | USD product | USD full | "
             "USD full pruned | prefix alone vs full input |", "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['turns']} | {r['vs_full']['billed_equivalent']:.1%} | "
            f"{r['vs_full_pruned']['billed_equivalent']:.1%} | {r['vs_full']['input']:.1%} | "
            f"{r['cache_read_share']:.1%} | {r['model_calls_per_turn']:.2f} | "
            f"{r['whatsapp_per_turn']:.2f} | {r['usd']['product']:.4f} | {r['usd']['full']:.4f}"
            f" | {r['usd']['full_pruned']:.4f} | {r['prefix_share_of_full_input']:.1%} |")
    return "\n".join(lines) + "\n"


def _conversation_with(count: int, *, summarized: bool, directory: str) -> tuple[Any, Any]:
    """A fresh SQLite database holding one conversation of `count` stored messages."""
    engine = make_engine(f"sqlite:///{directory}/bench-{count}-{summarized}.db")
    create_schema(engine)
    now = START
    with session_scope(engine) as session:
        tenant = upsert_tenant(session, TENANT, now=now)
        contact = Contact(tenant_id=tenant.id, wa_id="5511999990001", created_at=now)
        session.add(contact)
        session.flush()
        conversation = Conversation(tenant_id=tenant.id, contact_id=contact.id,
                                    last_activity_at=now, due_at=now, opened_at=now)
        session.add(conversation)
        session.flush()
        rows = [Message(tenant_id=tenant.id, conversation_id=conversation.id,
                        role="user" if i % 2 == 0 else "assistant",
                        direction="inbound" if i % 2 == 0 else "outbound",
                        content=[{"type": "text", "text": f"mensagem número {i}"}],
                        received_at=now, position=i + 1, answered_at=now)
                for i in range(count)]
        session.add_all(rows)
        session.flush()
        conversation.summarized_until_id = (rows[-41].id or 0) if summarized else 0
        conversation.summary = SUMMARY if summarized else ""
        conversation.last_input_tokens = 10_000 if summarized else 500_000
        session.add(conversation)
        state = TurnState(tenant=session.get(Tenant, tenant.id), contact=contact,
                          conversation=conversation)
    raw = engine.raw_connection()  # a steady state, as auto-checkpointing leaves it
    raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    return engine, state


def _build_once(engine: Any, state: TurnState) -> float:
    runtime = SimpleNamespace(settings=Settings(), engine=engine)
    began = time.perf_counter()
    window = prepare_window(runtime, state)  # type: ignore[arg-type]
    turn_request(runtime, state, window.context_block)(  # type: ignore[arg-type]
        to_api_messages(window.messages))
    return (time.perf_counter() - began) * 1000


def time_request_building(sizes: tuple[int, ...], *, summarized: bool,
                          rounds: int = 300) -> dict[str, float]:
    """Median milliseconds to build a turn's request per stored-message count. The sizes are
    timed alternately, so background load on the machine hits each of them alike.
    """
    with tempfile.TemporaryDirectory() as tmp:
        setups = {n: _conversation_with(n, summarized=summarized, directory=tmp) for n in sizes}
        timings: dict[int, list[float]] = {n: [] for n in sizes}
        for round_number in range(rounds + 50):
            for n, (engine, state) in setups.items():
                elapsed = _build_once(engine, state)
                if round_number >= 50:  # the first 50 rounds warm the caches
                    timings[n].append(elapsed)
        for engine, _ in setups.values():
            engine.dispose()
    return {str(n): round(statistics.median(values), 3) for n, values in timings.items()}


RENDER_CATALOGUE = catalogue.catalogue_text  # kept: --no-catalogue replaces the product's


def catalogue_text_of(tenant: dict[str, Any], render: Any = None) -> str:
    """The catalogue the product renders for `tenant` (as workers/turns.py does), on a fresh
    database ("" under --no-catalogue)."""
    engine = make_engine("sqlite://")
    create_schema(engine)
    with session_scope(engine) as session:
        row = upsert_tenant(session, tenant, now=START)
        data = catalogue.load(session, row, START.astimezone(TZ).date())
        return str((render or catalogue.catalogue_text)(data))


def prefix_tokens(prompt: TenantPrompt) -> int:
    """Tokens of the cached fixed prefix (tools + system[0]) by the double's counter."""
    request = build_request(tenant=prompt, tools=REGISTRY, context="", messages=[],
                            max_tokens=1, metadata_user_id="u")
    return sum(count_tokens(block) for block in [*request["tools"], *request["system"]])


def saved_round_estimate(prompt: TenantPrompt) -> dict[str, Any]:
    """What one `list_services` round at a session's start costs, in billed-equivalent input
    tokens (usage/report.py's weights), i.e. what the catalogue in system[0] gives back each
    time it spares one: the extra call reads the cached prefix (tools + system[0], 0.1 each),
    writes the round's tool_use and tool_result at the 1 h price (2.0; each later call of the
    session reads them again at 0.1, `later_calls` of them), and its ~30 output tokens cost 5
    input tokens each (Sonnet: $3 in, $15 out per million)."""
    prefix = prefix_tokens(prompt)
    lines = [line for line in catalogue_text_of(TENANT, RENDER_CATALOGUE).splitlines()
             if line.startswith("- ")]
    result = "Services:\n" + "\n".join(lines)
    round_tokens = count_tokens({"type": "text", "text": result}) + 40  # + the tool_use block
    later_calls = 2 * 4  # the rest of a short session: four customer turns, two calls each
    output = 30
    billed = prefix * 0.1 + round_tokens * 2.0 + round_tokens * 0.1 * later_calls + output * 5
    return {"prefix_tokens": prefix, "round_tokens": round_tokens,
            "later_calls_assumed": later_calls,
            "billed_equivalent_input_saved_per_session": round(billed),
            "model_calls_saved_per_session": 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path, help="SVG of context tokens per turn call")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a tenant memory setting (integers), e.g. keep_messages=8")
    parser.add_argument("--tail-ttl", choices=("5m", "1h"), default=None,
                        help="TTL of the breakpoint on the last message (default: the product's)")
    parser.add_argument("--prefix-ttl", choices=("5m", "1h"), default=None,
                        help="TTL of the breakpoint on system[0] (default: the product's; "
                             "5m needs --tail-ttl 5m: a 1 h entry may not follow a 5 min one)")
    parser.add_argument("--ceiling-factor", type=float, default=None,
                        help="compact at once past this many times the threshold (default: "
                             "workers/compaction.HARD_CEILING_FACTOR)")
    parser.add_argument("--no-catalogue", action="store_true",
                        help="leave the catalogue out of system[0] (the prefix before issue 21)")
    parser.add_argument("--lengths", default="10,25,50,100,200",
                        help="customer turns to cut the conversation at (issue 41)")
    parser.add_argument("--market", default="BR", choices=sorted(WHATSAPP_UTILITY_USD),
                        help="WhatsApp utility rate of this market (USD per message)")
    parser.add_argument("--cost-plot", type=Path, help="SVG of USD against customer turns")
    parser.add_argument("--table", type=Path, help="the lengths as a Markdown table")
    parser.add_argument("--no-build-timing", action="store_true",
                        help="skip timing the request building (minutes on a loaded machine)")
    args = parser.parse_args()
    lengths = sorted({int(n) for n in args.lengths.split(",")})
    args.turns = lengths[-1]  # one run of the longest, cut at each length
    if args.no_catalogue:
        catalogue.catalogue_text = lambda data: ""  # what workers/turns.py renders
    if args.tail_ttl:  # the compaction rule follows the cache's lifetime, as the product's
        context.TAIL_TTL = args.tail_ttl
        compaction.CACHE_LIFETIME = parse_duration(args.tail_ttl)
    if args.prefix_ttl:
        context.INSTRUCTIONS_TTL = args.prefix_ttl
    if args.ceiling_factor:
        compaction.HARD_CEILING_FACTOR = args.ceiling_factor  # type: ignore[assignment]
    overrides = {k: int(v) for k, v in (item.split("=", 1) for item in args.set)}
    TENANT.update(overrides)
    configure_logging("ERROR", "console")
    cuts: list[tuple[int, int]] = []
    product, history, calls = run_product(args.turns, TENANT, cuts)
    prompt = TenantPrompt(name=TENANT["name"], timezone=TENANT["timezone"], language="pt-BR",
                          instructions=INSTRUCTIONS, model=Tenant.model_fields[
                              "agent_model"].default, fact_keys=tuple(sorted(resolve_keys(
                                  Tenant.model_fields["fact_keys"].default_factory()))),
                          catalogue=catalogue_text_of(TENANT))
    times = [c.at for c in calls if c.purpose == "turn"]
    points = call_points(history)
    full = price_baseline(history, times, last_n=None, prompt=prompt)
    keep = int(TENANT.get("keep_messages", Tenant.model_fields["keep_messages"].default))
    naive = price_baseline(history, times, last_n=keep, prompt=prompt)
    prune_turns = int(TENANT.get("prune_after_user_turns",
                                 Tenant.model_fields["prune_after_user_turns"].default))
    by_length = [at_length(n, calls, cuts, history, prompt, prune_turns=prune_turns,
                           whatsapp_rate=WHATSAPP_UTILITY_USD[args.market])
                 for n in lengths if n <= args.turns]
    building: dict[str, Any] = {}
    if not args.no_build_timing:
        building = {kind: time_request_building((1_000, 100_000),
                                                summarized=kind == "summarized")
                    for kind in ("summarized", "hard_cap")}
    for figures in building.values():
        figures["ratio_100k_vs_1k"] = round(figures["100000"] / figures["1000"], 3)
    report = {
        "turns": args.turns, "gaps_seconds": [int(g.total_seconds()) for g in GAPS],
        "turn_calls": len(times), "history_call_points": len(points),
        "tenant": {key: TENANT.get(key, Tenant.model_fields[key].default) for key in (
            "compaction_threshold_tokens", "compaction_min_gain_tokens", "keep_messages",
            "prune_after_user_turns")},
        "product": product, "full_history_same_breakpoints": full,
        f"last_{keep}_messages_naive": naive,
        "ratios": {
            "input_tokens_vs_full": round(product["input_tokens_total"]
                                          / full["input_tokens_total"], 4),
            "billed_equivalent_vs_full": round(product["billed_equivalent_input"]
                                               / full["billed_equivalent_input"], 4)},
        "request_build_ms": building,
        "tail_ttl": context.TAIL_TTL, "prefix_ttl": context.INSTRUCTIONS_TTL,
        "hard_ceiling_factor": compaction.HARD_CEILING_FACTOR,
        "catalogue": {"in_system_0": not args.no_catalogue,
                      "chars": len(prompt.catalogue),
                      "tokens": count_tokens({"type": "text", "text": prompt.catalogue})},
        "saved_list_services_round": saved_round_estimate(prompt),
        "by_length": by_length, "whatsapp_market": args.market,
    }
    if args.cost_plot:
        args.cost_plot.write_text(lengths_svg(by_length), encoding="utf-8")
    if args.table:
        args.table.write_text(lengths_table(by_length), encoding="utf-8")
    if args.plot:
        args.plot.write_text(render_svg([c.context_tokens for c in calls if c.purpose == "turn"],
                                        title=f"{args.turns} turns: context tokens per call"),
                             encoding="utf-8")
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
