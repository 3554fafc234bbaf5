"""The levels of a tenant's monthly model budget (issue 49 item 3): the calendar month in the
tenant's timezone (`month_of`), the level a month-to-date cost is at (`level_of`), and
the once-per-month record of a level reached (`record_level`), which the console's banner
reads (`banner_level`). The turn-side switch is workers/budgets.py.

Money: the budget is in US cents (`Tenant.model_budget_cents`), costs in integer µUSD
(micro-dollars, the ledger's unit: usage/ledger.py); 1 cent = 10,000 µUSD.
"""

from datetime import date, datetime
from zoneinfo import ZoneInfo

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from storage import webhooks
from storage.models import BudgetAlert, Tenant

MICRO_USD_PER_CENT = 10_000
WARNING, REACHED = "warning", "reached"
WARNING_PERCENT = 80  # the owner is told at 80 % of the budget (issue 49)
# their webhook events (storage/webhooks.EVENT_TYPES)
EVENTS = {WARNING: "budget.warning", REACHED: "budget.reached"}


def month_of(tenant: Tenant, now: datetime) -> date:
    """The first day of the calendar month `now` falls in, in the tenant's timezone: the key
    of its alerts and the month the ledger sums (usage/ledger.month_model_micro_usd)."""
    local = now.astimezone(ZoneInfo(tenant.timezone))
    return date(local.year, local.month, 1)


def budget_micro_usd(tenant: Tenant) -> int | None:
    """The tenant's monthly budget in µUSD; None when it has none (unset or 0)."""
    cents = tenant.model_budget_cents or 0
    return cents * MICRO_USD_PER_CENT if cents > 0 else None


def level_of(tenant: Tenant, spent_micro_usd: int) -> str | None:
    """REACHED at or past 100 % of the budget, WARNING at or past WARNING_PERCENT, else None
    (and None without a budget). Integer arithmetic: no rounding at the edges."""
    budget = budget_micro_usd(tenant)
    if budget is None:
        return None
    if spent_micro_usd >= budget:
        return REACHED
    if spent_micro_usd * 100 >= budget * WARNING_PERCENT:
        return WARNING
    return None


def record_level(session: Session, tenant: Tenant, level: str, *, spent_micro_usd: int,
                 now: datetime) -> list[str]:
    """Record that the tenant's month reached `level` (and, for REACHED, WARNING too: a month
    that jumps past both is told both), each with its webhook event (`budget.warning`,
    `budget.reached`: data {"month", "level", "budget_cents", "spent_micro_usd"}) in one
    savepoint. Once per tenant, month, level and budget: a second caller, even a concurrent
    one, meets the unique key and records nothing; a caller measuring against a budget the
    owner changed since moves the row to it and emits the event again. Returns the levels
    this call recorded."""
    levels = (WARNING, REACHED) if level == REACHED else (WARNING,)
    return [each for each in levels
            if _record_once(session, tenant, each, spent_micro_usd, now)]


def _record_once(session: Session, tenant: Tenant, level: str, spent: int,
                 now: datetime) -> bool:
    assert tenant.id is not None
    month = month_of(tenant, now)
    budget_cents = tenant.model_budget_cents or 0
    try:
        with session.begin_nested():
            session.add(BudgetAlert(tenant_id=tenant.id, month=month, level=level,
                                    spent_micro_usd=spent, budget_cents=budget_cents,
                                    created_at=now))
            session.flush()
            _emit(session, tenant, level, spent, now)
    except IntegrityError:  # recorded before: again only when measured against another budget
        return _record_again(session, tenant, level, spent, now)
    return True


def _record_again(session: Session, tenant: Tenant, level: str, spent: int,
                  now: datetime) -> bool:
    """The month's `level` row, recorded against another budget (the owner changed it since),
    moved to the current budget with its webhook event again: a raised budget reached again
    is told again (never silently). One UPDATE guarded by the old budget, so of concurrent
    callers one wins."""
    assert tenant.id is not None
    budget_cents = tenant.model_budget_cents or 0
    with session.begin_nested():
        moved = session.execute(
            update(BudgetAlert).where(
                col(BudgetAlert.tenant_id) == tenant.id,
                col(BudgetAlert.month) == month_of(tenant, now),
                col(BudgetAlert.level) == level,
                col(BudgetAlert.budget_cents) != budget_cents)
            .values(spent_micro_usd=spent, budget_cents=budget_cents, created_at=now))
        if moved.rowcount != 1:  # type: ignore[attr-defined]
            return False
        _emit(session, tenant, level, spent, now)
    return True


def _emit(session: Session, tenant: Tenant, level: str, spent: int, now: datetime) -> None:
    """The level's webhook event (EVENTS), data {"month", "level", "budget_cents",
    "spent_micro_usd"}."""
    assert tenant.id is not None
    webhooks.emit(session, tenant.id, EVENTS[level],
                  {"month": month_of(tenant, now).isoformat(), "level": level,
                   "budget_cents": tenant.model_budget_cents or 0, "spent_micro_usd": spent},
                  now=now)


def banner_level(session: Session, tenant: Tenant, now: datetime) -> str | None:
    """What the console's banner says this month: REACHED, WARNING or None. A budget raised
    (or removed) since the alert takes the banner down: only a level the current budget
    still reaches by the recorded cost is shown."""
    if budget_micro_usd(tenant) is None:
        return None
    rows = session.exec(select(BudgetAlert).where(
        BudgetAlert.tenant_id == tenant.id, BudgetAlert.month == month_of(tenant, now))
        .order_by(col(BudgetAlert.spent_micro_usd).desc())).all()
    levels = [level_of(tenant, row.spent_micro_usd) for row in rows]
    return REACHED if REACHED in levels else WARNING if WARNING in levels else None
