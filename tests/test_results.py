"""Issue 49, the results page's figures (operations/results.py) against hand-built data of two
tenants (nothing of one shows in the other's), the local week/month bucketing in
America/Sao_Paulo (hypothesis), and the console page and admin API that render them."""

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine
from sqlmodel import Session

from bot.console.results_texts import duration_text
from operations import results as results_ops
from operations.results import percentile, window
from storage.db import session_scope
from storage.models import (
    Appointment,
    Contact,
    Conversation,
    Message,
    Outbound,
    Professional,
    Reminder,
    Service,
    Tenant,
    ToolCall,
    Usage,
    WaitlistEntry,
    WhatsAppCharge,
)
from usage.charts import render_bars

SP = ZoneInfo("America/Sao_Paulo")
NOW = datetime(2026, 6, 10, 15, 0, tzinfo=UTC)  # Wednesday 12:00 in São Paulo


def at(day: int, hour: int, minute: int = 0, second: int = 0, month: int = 6) -> datetime:
    return datetime(2026, month, day, hour, minute, second, tzinfo=UTC)


class Builder:
    """Rows of one tenant, written with the fewest fields each needs."""

    def __init__(self, session: Session, name: str, phone_number_id: str) -> None:
        self.session = session
        self.tenant = self.add(Tenant(phone_number_id=phone_number_id, name=name,
                                      created_at=at(1, 0, month=1)))
        self.tid = int(self.tenant.id or 0)
        self.corte = self.add(Service(tenant_id=self.tid, code="corte", name="Corte",
                                      duration_minutes=60, price_cents=9000))
        self.mao = self.add(Service(tenant_id=self.tid, code="mao", name="Manicure",
                                    duration_minutes=30, price_cents=4000))
        self.free = self.add(Service(tenant_id=self.tid, code="aval", name="Avaliação",
                                     duration_minutes=30, price_cents=None))
        self.pro = self.add(Professional(tenant_id=self.tid, code="julia", name="Júlia"))
        self.contact = self.add(Contact(tenant_id=self.tid, wa_id=phone_number_id[-8:],
                                        created_at=at(1, 0, month=1)))
        self.conversation = self.add(Conversation(
            tenant_id=self.tid, contact_id=int(self.contact.id or 0), last_activity_at=NOW,
            due_at=NOW, opened_at=at(1, 0)))
        self.tool_uses = 0

    def add(self, row: Any) -> Any:
        self.session.add(row)
        self.session.flush()
        return row

    def visit(self, *, created: datetime, start: datetime, services: tuple[Service, ...] = (),
              **fields: Any) -> list[Appointment]:
        """One visit: a row per service (default: corte), sharing the first row's id."""
        rows: list[Appointment] = []
        for n, service in enumerate(services or (self.corte,)):
            row = self.add(Appointment(
                tenant_id=self.tid, contact_id=int(self.contact.id or 0),
                service_id=int(service.id or 0), professional_id=int(self.pro.id or 0),
                start_at=start + timedelta(hours=n), end_at=start + timedelta(hours=n + 1),
                created_at=created, visit_id=rows[0].id if rows else None, **fields))
            if not rows:
                row.visit_id = row.id
                self.add(row)
            rows.append(row)
        return rows

    def handoff(self, when: datetime, result: str = "Handed off: staff will answer") -> None:
        self.tool_uses += 1
        self.add(ToolCall(conversation_id=int(self.conversation.id or 0),
                          tool_use_id=f"toolu_{self.tid}_{self.tool_uses}",
                          name="handoff_to_human", input={}, result=result,
                          created_at=when))

    def cost(self, when: datetime, micro_usd: int) -> None:
        self.add(Usage(tenant_id=self.tid, purpose="turn", model="claude-sonnet-5-5",
                       micro_usd=micro_usd, created_at=when))

    def message(self, direction: str, received: datetime, **fields: Any) -> Message:
        return self.add(Message(tenant_id=self.tid,
                                conversation_id=int(self.conversation.id or 0),
                                role="user" if direction == "inbound" else "assistant",
                                direction=direction, content=[], received_at=received,
                                **fields))

    def answered(self, received: datetime, answered: datetime,
                 sent: tuple[datetime | None, ...], reason: str | None = None) -> None:
        """A customer message answered at `answered` by a reply whose parts went out at
        `sent`."""
        self.message("inbound", received, answered_at=answered, status_reason=reason)
        reply = self.message("outbound", answered)
        for part, when in enumerate(sent):
            self.add(Outbound(tenant_id=self.tid, conversation_id=int(self.conversation.id or 0),
                              message_id=int(reply.id or 0), part=part, body="ok",
                              status="sent" if when else "pending", created_at=answered,
                              sent_at=when))


def salon(session: Session) -> Builder:
    """Tenant A: every measure with known figures (the test's comments give them)."""
    a = Builder(session, "Salão", "109876543210001")
    # this week (Mon 2026-06-08 03:00 UTC onwards): visit 1, by the agent, two services,
    # confirmed, later refilled from the waitlist: 130.00
    one = a.visit(created=at(8, 3, 30), start=at(12, 13), services=(a.corte, a.mao),
                  confirmed_at=at(9, 12))
    a.add(WaitlistEntry(tenant_id=a.tid, contact_id=int(a.contact.id or 0),
                        service_id=int(a.corte.id or 0), day=date(2026, 6, 12),
                        ends_at=at(12, 20), status="booked", created_at=at(1, 0),
                        appointment_id=one[0].id))
    a.add(WaitlistEntry(tenant_id=a.tid, contact_id=int(a.contact.id or 0),
                        service_id=int(a.corte.id or 0), day=date(2026, 6, 12),
                        ends_at=at(12, 20), status="waiting", created_at=at(1, 0)))
    # visit 2, by staff, cancelled since: booked, not revenue, one cancellation
    a.visit(created=at(9, 14), start=at(13, 13), booked_by="business", status="cancelled",
            cancelled_at=at(10, 12))
    # visit 3: Sunday 23:30 in São Paulo, last week's (90.00)
    a.visit(created=at(8, 2, 30), start=at(15, 13))
    # visit 4, moved: its first row counts (90.00), the new row and the move do not
    moved_to = a.visit(created=at(10, 13), start=at(16, 13))
    a.visit(created=at(9, 16), start=at(15, 13), status="cancelled", cancelled_at=at(10, 13),
            moved_to_id=moved_to[0].id)
    # a service without a price: a visit, 0 revenue
    a.visit(created=at(9, 17), start=at(17, 13), services=(a.free,))
    # outcomes of visits starting this week (booked in May): 2 no-shows (one of two rows),
    # 2 completed
    for outcome, day in (("no_show", 8), ("completed", 9), ("completed", 9)):
        a.visit(created=at(20, 12, month=5), start=at(day, 13), outcome=outcome)
    a.visit(created=at(20, 12, month=5), start=at(9, 16), services=(a.corte, a.mao),
            outcome="no_show")
    # before reminders (first queued 2026-06-01 00:00 UTC): 2 no-shows, 1 completed
    for outcome in ("no_show", "no_show", "completed"):
        a.visit(created=at(1, 12, month=5), start=at(20, 13, month=5), outcome=outcome)
    a.add(Reminder(tenant_id=a.tid, appointment_id=one[0].id, lead_minutes=60,
                   status="queued", created_at=at(1, 0), queued_at=at(1, 0)))
    a.add(Reminder(tenant_id=a.tid, appointment_id=one[0].id, lead_minutes=1440,
                   status="scheduled", created_at=at(1, 0)))
    # handoffs: answered in 600 s and 1800 s, one never answered, one a no-op
    a.handoff(at(9, 12))
    a.message("outbound", at(9, 12, 10), author="staff:Ana")
    a.handoff(at(9, 15))
    a.message("outbound", at(9, 15, 30), author="staff:Ana")
    a.handoff(at(9, 16), result="Staff already handle this conversation; nothing changed.")
    a.handoff(at(10, 14))
    # the agent's answers: 7 s, 30 s (its first part), 12 s; staff-handled and unsent left out
    a.answered(at(9, 10), at(9, 10, 0, 5), (at(9, 10, 0, 7),))
    a.answered(at(9, 10, 1), at(9, 10, 1, 20), (at(9, 10, 1, 30), at(9, 10, 1, 31)))
    a.answered(at(9, 10, 5), at(9, 10, 5, 2), (at(9, 10, 5, 12),))
    a.answered(at(9, 11), at(9, 11, 5), (at(9, 11, 5, 1),), reason="handled by staff")
    a.answered(at(9, 11, 30), at(9, 11, 30, 1), (None,))
    # the ledger (usage/ledger.py): US$ 1.00 of model calls and one utility message this
    # week; US$ 0.50 on Sunday 23:00 in São Paulo (last week's)
    a.cost(at(9, 12), 1_000_000)
    a.add(WhatsAppCharge(tenant_id=a.tid, wamid="wamid.A1", category="utility",
                         micro_usd=6_800, charged_at=at(10, 12)))
    a.cost(at(8, 2), 500_000)
    return a


def garage(session: Session) -> Builder:
    """Tenant B: one of each, with figures unlike A's (a leak changes A's or B's)."""
    b = Builder(session, "Oficina", "109876543210002")
    mine = b.visit(created=at(9, 12), start=at(11, 12), services=(b.mao,),
                   confirmed_at=at(9, 13), booked_by="business")
    b.visit(created=at(1, 12, month=5), start=at(9, 12), outcome="no_show",
            status="cancelled", cancelled_at=at(9, 20))
    b.add(Reminder(tenant_id=b.tid, appointment_id=mine[0].id, lead_minutes=60, status="queued",
                   created_at=at(1, 0, month=5), queued_at=at(1, 0, month=5)))
    b.handoff(at(9, 12, 1))
    b.message("outbound", at(9, 12, 2), author="staff:Caio")
    b.answered(at(9, 10, 0, 1), at(9, 10, 0, 50), (at(9, 10, 1, 41),))
    b.cost(at(9, 12), 123)
    return b


@pytest.fixture
def built(engine: Engine) -> Iterator[tuple[Engine, int, int]]:
    with session_scope(engine) as session:
        a, b = salon(session), garage(session)
        ids = (a.tid, b.tid)
    yield engine, *ids


def results_of(engine: Engine, tenant_id: int, kind: str = "week") -> results_ops.Results:
    with session_scope(engine) as session:
        tenant = session.get(Tenant, tenant_id)
        assert tenant is not None
        return results_ops.results(session, tenant, kind, now=NOW)


def test_each_measure_matches_the_hand_built_week_of_each_tenant(
        built: tuple[Engine, int, int]) -> None:
    engine, a_id, b_id = built
    a = results_of(engine, a_id)
    week = a.current
    assert (week.window.start, week.window.end) == (date(2026, 6, 8), date(2026, 6, 15))
    assert (week.visits_by_agent, week.visits_by_staff) == (3, 1)  # 1, 4 (first row), free
    assert week.revenue_cents == 13000 + 9000
    assert (week.confirmed, week.cancelled, week.refilled) == (1, 1, 1)
    assert (week.no_shows, week.completed, week.no_show_rate) == (2, 2, 0.5)
    assert (week.handoffs, week.handoffs_answered, week.staff_answer_median_s) == (3, 2, 1200)
    assert (week.agent_answer_p50_s, week.agent_answer_p90_s) == (12, 30)
    assert (week.cost_musd, week.cost_per_visit_musd) == (1_006_800, 251_700)
    assert a.previous.visits_by_agent == 1 and a.previous.revenue_cents == 9000
    assert (a.previous.cost_musd, a.previous.cost_per_visit_musd) == (500_000, 500_000)
    assert a.reminders_on == at(1, 0)
    assert (a.no_show_before, a.no_show_after) == (2 / 3, 0.5)
    assert [m.visits for m in a.series] == [0, 3, 0, 0, 4, 0, 1, 4]  # May 1st, 20th (UTC)

    b = results_of(engine, b_id).current
    assert (b.visits_by_agent, b.visits_by_staff, b.revenue_cents) == (0, 1, 4000)
    assert (b.confirmed, b.cancelled, b.refilled, b.no_shows, b.completed) == (1, 1, 0, 1, 0)
    assert (b.handoffs, b.handoffs_answered, b.staff_answer_median_s) == (1, 1, 60)
    assert (b.agent_answer_p50_s, b.agent_answer_p90_s) == (100, 100)
    assert (b.cost_musd, b.cost_per_visit_musd) == (123, 123)
    assert results_of(engine, b_id).reminders_on == at(1, 0, month=5)


def test_the_month_holds_the_weeks_and_may_is_the_one_before(
        built: tuple[Engine, int, int]) -> None:
    engine, a_id, _ = built
    month = results_of(engine, a_id, "month")
    assert (month.current.window.start, month.current.window.end) == (date(2026, 6, 1),
                                                                      date(2026, 7, 1))
    assert month.current.visits == 5 and month.current.revenue_cents == 31000
    assert month.previous.window.start == date(2026, 5, 1)
    assert (month.previous.no_shows, month.previous.completed) == (2, 1)
    assert len(month.series) == 6


def test_an_empty_tenant_has_zeros_and_nothing_to_measure(engine: Engine) -> None:
    with session_scope(engine) as session:
        tid = Builder(session, "Vazio", "109876543210003").tid
    found = results_of(engine, tid)
    assert found.current.visits == 0 and found.current.no_show_rate is None
    assert found.current.agent_answer_p50_s is None and found.reminders_on is None
    assert (found.no_show_before, found.no_show_after) == (None, None)
    assert found.current.cost_musd == 0 and found.current.cost_per_visit_musd is None


def test_an_unknown_period_is_refused(engine: Engine) -> None:
    with session_scope(engine) as session:
        tenant = Builder(session, "X", "109876543210004").tenant
        with pytest.raises(ValueError, match="week, month"):
            results_ops.results(session, tenant, "year", now=NOW)


LOCAL = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2035, 12, 31),
                     timezones=st.just(UTC))


@settings(max_examples=300, deadline=None)
@given(now=LOCAL, kind=st.sampled_from(results_ops.PERIODS),
       zone=st.sampled_from(["America/Sao_Paulo", "America/New_York", "UTC", "Asia/Kolkata"]))
def test_a_period_holds_now_starts_at_local_midnight_and_follows_the_one_before(
        now: datetime, kind: str, zone: str) -> None:
    tz = ZoneInfo(zone)
    w, before = window(kind, now, tz), window(kind, now, tz, back=1)
    assert w.start_at <= now < w.end_at
    assert before.end == w.start and before.end_at == w.start_at
    assert w.start.weekday() == 0 if kind == "week" else w.start.day == 1
    local = w.start_at.astimezone(tz)
    assert local.date() == w.start or local.hour == 1  # a midnight DST skipped: 01:00
    days = (w.end - w.start).days
    assert days == 7 if kind == "week" else 28 <= days <= 31
    assert abs((w.end_at - w.start_at) - timedelta(days=days)) <= timedelta(hours=1)


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=50))
def test_percentiles_are_values_in_order(values: list[float]) -> None:
    p50, p90 = percentile(values, 0.5), percentile(values, 0.9)
    assert p50 in values and p90 in values
    assert min(values) <= p50 <= p90 <= max(values)  # type: ignore[operator]


def test_a_chart_carries_its_text_alternative_escaped() -> None:
    svg = render_bars([1, 3], ["01/06", "08/06"], title="Visitas <por> semana",
                      desc="01/06: 1; 08/06: 3", key="k")
    assert '<title id="k-title">Visitas &lt;por&gt; semana</title>' in svg
    assert 'aria-labelledby="k-title k-desc"' in svg and ">3</text>" in svg
    with pytest.raises(ValueError):
        render_bars([1], ["a", "b"], title="t", desc="d", key="k")


def test_a_duration_keeps_each_number_with_its_unit() -> None:
    """A no-break space: "14 s" never breaks into "14" and "s" on a narrow card."""
    assert duration_text(14.4) == "14\u00a0s"
    assert duration_text(180) == "3\u00a0min"
    assert duration_text(7500) == "2\u00a0h 5\u00a0min"
    assert duration_text(None) == "—"
