"""Shared set-up of the console tests: two tenants with tokens, a salon conversation with tool
calls and compactions (so its plot saws), a fact in review and an appointment."""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlmodel import select

from operations import service
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import ContactFact, Conversation, Tenant
from tests.factories import BRUNO, TENANT, text_body

GARAGE = {"phone_number_id": "109876543210999", "name": "Oficina Exemplo",
          "services": [{"code": "revisao", "name": "Revisão", "duration_minutes": 120}],
          "professionals": [{"code": "caio", "name": "Caio", "services": ["revisao"]}],
          "hours": {"mon": ["08:00-17:00"]}}
SALON = {**TENANT, "fact_keys": ["preferred_name", "preferred_period", "allergies"],
         "compaction_threshold_tokens": 700, "compaction_min_gain_tokens": 0,
         "keep_messages": 2, "instructions": "Você é a recepcionista do Salão Exemplo."}


@dataclass
class Seeded:
    salon_token: str
    garage_token: str
    salon_conversation_id: int
    garage_conversation_id: int
    salon_fact_id: int
    garage_fact_id: int


CUSTOMER_TURNS = [
    ("oi! tem horário amanhã à tarde pra corte?", [
        {"tool": "find_available_slots", "input": {"service": "corte", "date": "2026-06-02"}},
        {"text": "Tenho 14h, 15h e 16h amanhã com a Júlia. Qual prefere?"}]),
    ("15h", [
        {"tool": "book_appointment", "input": {"service": "corte", "start": "2026-06-02T15:00"}},
        {"text": "Pronto! Corte com a Júlia amanhã, terça, às 15h."}]),
    ("obrigada! sou alérgica a amônia, tá?",
     [{"text": "Anotado, vamos usar produtos sem amônia."}]),
    ("e quanto custa?", [{"text": "O corte feminino custa R$ 90."}]),
    ("pode ser no pix?", [{"text": "Pode sim! Aceitamos pix, débito e crédito."}]),
]


def seed(env: ReplayEnvironment, answer_delays: Sequence[str] = ()) -> Seeded:
    """`answer_delays`: how long the model "takes" on each customer turn in order (the
    Messages double's `delay`, on the replay's clock), so the agent's answer times are not 0 s;
    none by default."""
    env.add_tenant(SALON)
    env.add_tenant(GARAGE)
    delays = [*answer_delays, *[None] * len(CUSTOMER_TURNS)]
    for n, (text, replies) in enumerate(CUSTOMER_TURNS, start=1):
        delay = delays[n - 1]
        env.messages_api.script("turn", replies if delay is None
                                else [{**replies[0], "delay": delay}, *replies[1:]])
        env.messages_api.script("summary", [{"text": f"Resumo até a mensagem {n}: a cliente "
                                                     "Ana marcou corte com a Júlia."}])
        body = text_body(text, n, sent_at=env.clock.now())
        assert env.post_webhook(json.dumps(body).encode()) == 200
        env.drain()
        env.clock.advance(timedelta(minutes=3))
    garage_body = text_body("minha revisão está marcada?", 90, sent_at=env.clock.now(),
                            phone_number_id=GARAGE["phone_number_id"], who=BRUNO,
                            name="Bruno Teste")
    env.messages_api.script("turn", [{"text": "Está sim."}])
    assert env.post_webhook(json.dumps(garage_body).encode()) == 200
    env.drain()
    with session_scope(env.engine) as session:
        tenants = {t.phone_number_id: t for t in session.exec(select(Tenant))}
        salon, garage = tenants[SALON["phone_number_id"]], tenants[GARAGE["phone_number_id"]]
        conversations = {c.tenant_id: c for c in session.exec(select(Conversation))}
        facts = []
        for tenant, value in ((salon, "amônia"), (garage, "poeira")):
            conversation = conversations[tenant.id]
            fact = ContactFact(tenant_id=tenant.id or 0, contact_id=conversation.contact_id,
                               conversation_id=conversation.id, key="allergies", value=value,
                               state="pending_review", origin="extracted",
                               source_message_id=None, created_at=env.clock.now())
            session.add(fact)
            session.flush()
            facts.append(int(fact.id or 0))
        now = env.clock.now()
        return Seeded(
            salon_token=service.create_token(session, salon, label="dona", now=now)["token"],
            garage_token=service.create_token(session, garage, label="dono", now=now)["token"],
            salon_conversation_id=int(conversations[salon.id].id or 0),
            garage_conversation_id=int(conversations[garage.id].id or 0),
            salon_fact_id=facts[0], garage_fact_id=facts[1])
