"""How long the results page's figures take (operations/results.py, issue 49) for a busy
tenant: VISITS visits and MESSAGES answered customer messages spread over 26 weeks, beside
a second tenant as big (so every query must pick its tenant's rows). Prints the time of
`results()` for a week and a month (8 and 6 periods) and the number of SQL statements.

    .venv/bin/python bench/results_page.py [--url postgresql://...] [--visits 20000]
"""

import argparse
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import event
from sqlmodel import Session

from operations import results as results_ops
from storage.db import create_schema, make_engine, session_scope
from storage.models import (
    Appointment,
    Contact,
    Conversation,
    Message,
    Outbound,
    Professional,
    Service,
    Tenant,
)

NOW = datetime(2026, 6, 10, 15, tzinfo=UTC)


def fill(session: Session, n: int, visits: int, messages: int) -> Tenant:
    tenant = Tenant(phone_number_id=f"10987654321{n:04d}", name=f"T{n}", created_at=NOW)
    session.add(tenant)
    session.flush()
    tid = int(tenant.id or 0)
    service = Service(tenant_id=tid, code="corte", name="Corte", duration_minutes=60,
                      price_cents=9000)
    pro = Professional(tenant_id=tid, code="p", name="P")
    contact = Contact(tenant_id=tid, wa_id=f"55119{n:07d}", created_at=NOW)
    session.add_all([service, pro, contact])
    session.flush()
    conversation = Conversation(tenant_id=tid, contact_id=int(contact.id or 0),
                                last_activity_at=NOW, due_at=NOW, opened_at=NOW)
    session.add(conversation)
    session.flush()
    span = timedelta(weeks=26).total_seconds()
    for i in range(visits):
        at = NOW - timedelta(seconds=span * i / visits)
        session.add(Appointment(
            tenant_id=tid, contact_id=int(contact.id or 0), service_id=int(service.id or 0),
            professional_id=int(pro.id or 0), start_at=at + timedelta(days=3),
            end_at=at + timedelta(days=3, hours=1), created_at=at,
            booked_by="business" if i % 4 == 0 else "customer",
            outcome=("no_show", "completed", "completed", "")[i % 4],
            confirmed_at=at if i % 2 else None))
    session.flush()
    for i in range(messages):
        at = NOW - timedelta(seconds=span * i / messages)
        answered = at + timedelta(seconds=5 + i % 30)
        inbound = Message(tenant_id=tid, conversation_id=int(conversation.id or 0), role="user",
                          direction="inbound", content=[], received_at=at, answered_at=answered)
        reply = Message(tenant_id=tid, conversation_id=int(conversation.id or 0),
                        role="assistant", direction="outbound", content=[],
                        received_at=answered)
        session.add_all([inbound, reply])
        session.flush()
        session.add(Outbound(tenant_id=tid, conversation_id=int(conversation.id or 0),
                             message_id=int(reply.id or 0), body="ok", status="sent",
                             created_at=answered, sent_at=answered + timedelta(seconds=1)))
    return tenant


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="sqlite:////tmp/wagent-results-bench.db")
    parser.add_argument("--visits", type=int, default=20_000)
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    engine = make_engine(args.url)
    create_schema(engine)
    with session_scope(engine) as session:
        tenants = [int(fill(session, n, args.visits, args.messages).id or 0) for n in (1, 2)]
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute",
                 lambda *a, **k: statements.append(a[2]))
    for kind in results_ops.PERIODS:
        statements.clear()
        with session_scope(engine) as session:
            tenant = session.get(Tenant, tenants[0])
            assert tenant is not None
            started = time.perf_counter()
            found = results_ops.results(session, tenant, kind, now=NOW)
            took = time.perf_counter() - started
        print(f"{kind}: {took * 1000:.0f} ms, {len(statements)} SQL statements, "
              f"{found.current.visits} visits this {kind}, agent p50 "
              f"{found.current.agent_answer_p50_s} s")


if __name__ == "__main__":
    main()
