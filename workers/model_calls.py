"""One Messages API call, counted (wagent_claude_calls_total, wagent_claude_errors_total by
`error_class`) and, for a tenant, inside one of its call slots (workers/call_slots.py): the
layer under workers/jobs.call_model and the outage probe (workers/outages.py), which both then
tell workers/outages.py the provider answered."""

from typing import Any

import anthropic

from core import metrics
from workers.call_slots import LEASE_MARGIN_SECONDS, call_slot
from workers.runtime import Runtime


def create_counted(runtime: Runtime, purpose: str, *, tenant_id: int | None = None,
                   **request: Any) -> Any:
    """`messages.create(**request)` with the purpose header, holding one of `tenant_id`'s
    `TENANT_MODEL_CALLS` slots (none for the probe: `tenant_id` None); counts the call, and a
    failure by class (`error_class`) before re-raising it unchanged. Raises
    workers.call_slots.TenantCallsBusy, before any call, when the tenant's slots stay taken."""
    settings = runtime.settings
    with call_slot(runtime.redis, settings.redis_prefix, tenant_id,
                   cap=settings.tenant_model_calls,
                   lease_seconds=settings.anthropic_timeout + LEASE_MARGIN_SECONDS):
        return _create(runtime, purpose, request)


def _create(runtime: Runtime, purpose: str, request: dict[str, Any]) -> Any:
    try:
        return runtime.anthropic.messages.create(
            **request, extra_headers={"x-wagent-purpose": purpose})
    except anthropic.APIError as exc:
        record(runtime, metrics.inc("wagent_claude_errors_total",
                                    {"purpose": purpose, "class": error_class(exc)}))
        raise
    finally:
        record(runtime, metrics.inc("wagent_claude_calls_total", {"purpose": purpose}))


def error_class(exc: anthropic.APIError) -> str:
    """429, 529 (overloaded), 5xx, the 4xx status itself (400 is our bug), timeout, connection."""
    if isinstance(exc, anthropic.APITimeoutError):
        return "timeout"
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        return "5xx" if status >= 500 and status != 529 else str(status)
    if isinstance(exc, anthropic.APIConnectionError):
        return "connection"
    return "other"


def record(runtime: Runtime, *updates: list[metrics.Op]) -> None:
    metrics.record(runtime.redis, runtime.settings.redis_prefix, *updates)
