"""Benchmark: a long scripted conversation through the real pipeline, against two baselines.

Replays 200 customer turns (two tool rounds each, a 20-slot search result every turn, a booking
and a cancellation now and then) through the real web app, RQ worker, anthropic SDK and the
Messages API double's pinned token and cache model, on the product's clock, with gaps between
customer turns cycling through GAPS (20 seconds to 3 hours). Then it prices, on the same
conversation and the same clock, two baselines rebuilt from the stored history:

* full history: every message every call, with the same cache breakpoints;
* last N: the last `keep_messages` stored messages, cut with no care for tool pairs (requests
  the API would reject are counted and not priced).

It also times building a turn's request with 1,000 and 100,000 stored messages, when all but the
recent ones are summarised and when none is (the hard cap applies).

Usage: python bench/long_conversation.py [--turns 200] [--out FILE.json]
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
from agent.tools.registry import REGISTRY  # noqa: E402
from agent.window import Stored, to_api_messages  # noqa: E402
from core.logs import configure_logging  # noqa: E402
from core.settings import Settings  # noqa: E402
from replay.environment import ReplayEnvironment  # noqa: E402
from replay.messages_api import PromptCache, count_tokens, validate_request  # noqa: E402
from storage.db import create_schema, make_engine, session_scope  # noqa: E402
from storage.fact_keys import resolve_keys  # noqa: E402
from storage.models import Contact, Conversation, Message, Tenant, Usage  # noqa: E402
from storage.tenants import upsert_tenant  # noqa: E402
from usage.report import Call, render_svg, summarize_calls  # noqa: E402
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


def script_turn(env: ReplayEnvironment, n: int, booked: list[int]) -> None:
    day = (env.clock.now().astimezone(TZ) + timedelta(days=1 + n % 3)).date().isoformat()
    items: list[dict[str, Any]] = [
        {"tool": "find_available_slots",
         "input": {"service": "corte", "date": day, "professional": "julia"}},
        {"tool": "list_my_appointments", "input": {}},
    ]
    if n % 10 == 5:
        items.append({"tool": "book_appointment",
                      "input": {"service": "corte", "start": f"{day}T18:30"}})
        booked.append(len(booked) + 1)
    elif n % 10 == 6 and booked:
        items.append({"tool": "cancel_appointment", "input": {"appointment_id": booked[-1]}})
    items.append({"text": f"Claro! Para {day} a Júlia tem vários horários livres, de manhã e à "
                          f"tarde. Quer que eu reserve algum? (resposta {n})"})
    env.messages_api.script("turn", items)
    if env.messages_api.leftover().get("summary", 0) < 2:
        env.messages_api.script("summary", [{"text": SUMMARY}] * 4)


def run_product(turns: int, tenant: dict[str, Any]) -> tuple[dict[str, Any], list[Stored],
                                                              list[Call]]:
    env = ReplayEnvironment(start=START)
    try:
        env.add_tenant(tenant)
        booked: list[int] = []
        for n in range(1, turns + 1):
            script_turn(env, n, booked)
            status = env.post_webhook(body(n, CUSTOMER[n % len(CUSTOMER)], env.clock.now()))
            assert status == 200, status
            env.drain()
            env.clock.advance(GAPS[(n - 1) % len(GAPS)])
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
    """Indices where the product called the model: the end of every run of user messages."""
    return [i for i, m in enumerate(history)
            if m.role == "user" and (i + 1 == len(history) or history[i + 1].role != "user")]


def price_baseline(history: list[Stored], times: list[datetime], *, last_n: int | None,
                   prompt: TenantPrompt) -> dict[str, Any]:
    now = {"t": times[0]}
    cache = PromptCache(lambda: now["t"], 1024)
    calls, rejected = [], 0
    for point, at in zip(call_points(history), times, strict=False):
        now["t"] = at
        chosen = history[: point + 1] if last_n is None else history[max(0, point + 1 - last_n):
                                                                     point + 1]
        request = build_request(tenant=prompt, tools=REGISTRY, context="",
                                messages=to_api_messages(chosen), max_tokens=1024,
                                metadata_user_id="bench")
        if validate_request(request) is not None:
            rejected += 1
            continue
        usage = cache.account(request)
        calls.append(Call(at, "turn", prompt.model, usage["input_tokens"],
                          usage["cache_creation_input_tokens"],
                          usage["cache_creation"]["ephemeral_1h_input_tokens"],
                          usage["cache_read_input_tokens"], 0))
    return {**summarize_calls(calls), "requests_rejected": rejected}


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


def saved_round_estimate(prompt: TenantPrompt) -> dict[str, Any]:
    """What one `list_services` round at a session's start costs, in billed-equivalent input
    tokens (usage/report.py's weights), i.e. what the catalogue in system[0] gives back each
    time it spares one: the extra call reads the cached prefix (tools + system[0], 0.1 each),
    writes the round's tool_use and tool_result at the 1 h price (2.0; each later call of the
    session reads them again at 0.1, `later_calls` of them), and its ~30 output tokens cost 5
    input tokens each (Sonnet: $3 in, $15 out per million)."""
    request = build_request(tenant=prompt, tools=REGISTRY, context="", messages=[],
                            max_tokens=1, metadata_user_id="u")
    prefix = sum(count_tokens(block) for block in [*request["tools"], *request["system"]])
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
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path, help="SVG of context tokens per turn call")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a tenant memory setting (integers), e.g. keep_messages=8")
    parser.add_argument("--tail-ttl", choices=("5m", "1h"), default=None,
                        help="TTL of the breakpoint on the last message (default: the product's)")
    parser.add_argument("--no-catalogue", action="store_true",
                        help="leave the catalogue out of system[0] (the prefix before issue 21)")
    args = parser.parse_args()
    if args.no_catalogue:
        catalogue.catalogue_text = lambda data: ""  # what workers/turns.py renders
    if args.tail_ttl:
        context.TAIL_TTL = args.tail_ttl
    overrides = {k: int(v) for k, v in (item.split("=", 1) for item in args.set)}
    TENANT.update(overrides)
    configure_logging("ERROR", "console")
    product, history, calls = run_product(args.turns, TENANT)
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
    building = {kind: time_request_building((1_000, 100_000), summarized=kind == "summarized")
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
        "tail_ttl": context.TAIL_TTL,
        "catalogue": {"in_system_0": not args.no_catalogue,
                      "chars": len(prompt.catalogue),
                      "tokens": count_tokens({"type": "text", "text": prompt.catalogue})},
        "saved_list_services_round": saved_round_estimate(prompt),
    }
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
