"""The turn's side of a tenant's monthly model budget (issue 49 item 3): before the model
call, the month-to-date model cost decides the turn's model, or that it hands off.

    no budget (None or 0)        → nothing read, the tenant's agent_model
    cost < 80 % of the budget    → the tenant's agent_model
    cost ≥ 80 %                  → the owner is told once this month (storage/budgets.py:
                                   the console's banner, the `budget.warning` webhook event)
    cost ≥ 100 %                 → `budget.reached` once; the turn uses the tenant's
                                   `fallback_model` (budget_action "fallback", the default)
                                   or hands off (budget_action "handoff": the customer gets
                                   the handoff text, staff take over as after the
                                   handoff_to_human tool, `handoff.requested` included)

Never silently: every turn over budget logs `turn_over_budget` (the action and ids, no
customer data) and counts `wagent_budget_turns_total{action}`; each level reached logs
`budget_level_reached` and counts `wagent_budget_alerts_total{level}`.

The cost is the ledger's (usage/ledger.month_model_micro_usd: µUSD of every call of the
tenant since the month's start, turns, summaries and facts alike; the month is the calendar
month in the tenant's timezone). It is read at most once per CACHE_SECONDS per tenant and
process (a tenant without a budget: never), so most turns add no round trip; a process may
thus run over the budget by what its turns spend in CACHE_SECONDS. Summaries and fact
extraction are not switched: they run on the tenant's `summary_model` (the small model by
default) and keep the turns' context, and so their cost, small.
"""

import time
from dataclasses import dataclass
from datetime import date, datetime

import structlog
from sqlalchemy import Engine

from core import metrics
from storage import budgets
from storage.db import session_scope
from storage.models import Tenant
from usage.ledger import month_model_micro_usd
from workers.runtime import Runtime

log = structlog.get_logger(__name__)

CACHE_SECONDS = 30.0  # wall clock (time.monotonic): the product's clock stands still in replays
_spent: dict[tuple[int, date], tuple[float, int]] = {}  # (tenant, month) → (read at, µUSD)
_told: set[tuple[int, date, str, int]] = set()  # levels (and budget) this process saw recorded


@dataclass(frozen=True)
class Decision:
    """What the turn does: `model` the model of its calls (None: the tenant's agent_model),
    `handoff` True when it stops with the handoff text instead of calling the model."""

    model: str | None = None
    handoff: bool = False


UNDER_BUDGET = Decision()


def decide(runtime: Runtime, tenant: Tenant, *, now: datetime,
           conversation_id: int | None = None) -> Decision:
    """The turn's `Decision` for `tenant` at `now` (see the module docstring); records a
    level reached the first time this month (once, whatever turns race for it)."""
    if budgets.budget_micro_usd(tenant) is None:
        return UNDER_BUDGET
    assert tenant.id is not None
    month = budgets.month_of(tenant, now)
    spent = month_spent(runtime.engine, tenant.id, month)
    level = budgets.level_of(tenant, spent)
    if level is None:
        return UNDER_BUDGET
    _tell_once(runtime, tenant, level, spent=spent, month=month, now=now)
    if level != budgets.REACHED:
        return UNDER_BUDGET
    action = "handoff" if tenant.budget_action == "handoff" else "fallback"
    log.warning("turn_over_budget", tenant_id=tenant.id, conversation_id=conversation_id,
                action=action, spent_micro_usd=spent, budget_cents=tenant.model_budget_cents,
                model=tenant.fallback_model if action == "fallback" else None)
    metrics.record(runtime.redis, runtime.settings.redis_prefix,
                   metrics.inc("wagent_budget_turns_total", {"action": action}))
    if action == "handoff":
        return Decision(handoff=True)
    return Decision(model=tenant.fallback_model)


def month_spent(engine: Engine, tenant_id: int, month: date) -> int:
    """The tenant's model cost in µUSD in its local calendar month `month` (the ledger's: one
    short transaction), read again once older than CACHE_SECONDS in this process."""
    key, wall = (tenant_id, month), time.monotonic()
    cached = _spent.get(key)
    if cached is not None and wall - cached[0] < CACHE_SECONDS:
        return cached[1]
    spent = month_model_micro_usd(engine, tenant_id, month)
    _spent[key] = (wall, spent)
    return spent


def forget() -> None:
    """Drop what this process remembers (the cached costs, the levels seen): a test, or a
    budget just changed by an operator in the same process."""
    _spent.clear()
    _told.clear()


def _tell_once(runtime: Runtime, tenant: Tenant, level: str, *, spent: int, month: date,
               now: datetime) -> None:
    """Record `level` (storage/budgets.record_level: the banner and the webhook event) unless
    this process already saw it recorded this month; log and count it when this call did."""
    assert tenant.id is not None
    key = (tenant.id, month, level, tenant.model_budget_cents or 0)  # a new budget: again
    if key in _told:
        return
    with session_scope(runtime.engine) as session:
        recorded = budgets.record_level(session, tenant, level, spent_micro_usd=spent, now=now)
    _told.add(key)
    for each in recorded:
        log.warning("budget_level_reached", tenant_id=tenant.id, level=each,
                    spent_micro_usd=spent, budget_cents=tenant.model_budget_cents)
        metrics.record(runtime.redis, runtime.settings.redis_prefix,
                       metrics.inc("wagent_budget_alerts_total", {"level": each}))
