"""The admin HTTP API under /admin/: tenants, catalogue, conversations, facts, contacts,
appointments. Served by the web process; described by the OpenAPI document at
GET /admin/openapi.json (built from the route table below, so the two cannot drift).

Authentication: `Authorization: Bearer <token>`. The operator token (ADMIN_TOKEN) sees every
tenant; a tenant token (`wagent tenant token`, POST /admin/tenants/{id}/tokens) sees only its
own tenant: another tenant's routes answer 404, operator-only routes 403. Failed attempts
are limited per client address and per tenant (bot/guard.py): 429 with Retry-After.

Errors are JSON: {"error": {"code", "message", "problems": ["where: what", ...]}} with 400
(unreadable JSON), 401, 403, 404, 408 (a body slower than the minimum rate), 409 (conflict
with the state), 413 (a body over 1 MiB), 422 (validation), 429 or 503 (database or Redis
unavailable). Operations are in operations/service.py, shared with the CLI.
"""

import asyncio
import hmac
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, TypeVar

import structlog
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import Session, col, select

from bot import guard
from bot.admin.openapi import openapi_document
from bot.bodies import ADMIN_BODY_BYTES, read_body
from bot.errors import BODY_REFUSALS, http_status
from core import clock
from intake.keys import ENGINE, SETTINGS, TURN_QUEUE
from operations import agenda, service
from operations import staff as staff_ops
from operations import webhooks as hook_ops
from operations.errors import MAPPED, AdminError, Invalid, NotFound, admin_error
from operations.service import clean_text, validated
from storage.catalogue import (
    archive_professional,
    archive_service,
    change_professional,
    change_service,
    delete_hours_exception,
    put_hours_exception,
    set_hours,
)
from storage.db import is_postgres, session_scope
from storage.jobs import enqueue_flush, enqueue_turn, enqueue_webhooks
from storage.models import Tenant
from storage.tenant_config import (
    MAX_PRICE_CENTS,
    HoursExceptionSpec,
    Intervals,
    ProfessionalSpec,
    ServiceSpec,
    TenantConfig,
    TenantSettings,
    TimeOffSpec,
    WeeklyHours,
)
from storage.tenants import resume_sending

log = structlog.get_logger(__name__)
MAX_ID = 2**31 - 1
T = TypeVar("T")
# settings that change cost and behaviour beyond the business's own: the operator's to change
OPERATOR_FIELDS = frozenset({"agent_model", "summary_model", "compaction_threshold_tokens",
                             "compaction_min_gain_tokens", "keep_messages",
                             "prune_after_user_turns"})


# -- request bodies that exist only at the HTTP edge -----------------------------------------

class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class TenantCreate(TenantConfig):
    """A new tenant: as `TenantConfig`, with its name required."""

    name: str = Field(min_length=1, max_length=200)


class TokenCreate(_Body):
    label: str = Field("", max_length=100, description="who or what uses the token")


class Decision(_Body):
    reason: str = Field("", max_length=500, description="kept with the decision")


class ServiceBody(_Body):
    """Fields left out keep their value; a new service needs its duration."""

    name: str | None = Field(None, max_length=200)
    duration_minutes: int | None = Field(None, ge=5, le=1440)
    price_cents: int | None = Field(None, ge=0, le=MAX_PRICE_CENTS,
                                    description="price in cents of the tenant's currency "
                                                "(8000 = R$ 80,00); null clears it")
    price_from: bool | None = Field(None, description='the price is a minimum ("a partir de")')
    description: str | None = Field(None, max_length=300)
    buffer_minutes: int | None = Field(None, ge=0, le=240, description="minutes busy after "
                                       "the visit (clean-up)")


class ProfessionalBody(_Body):
    """Fields left out keep their value (their week: storage/tenant_config.ProfessionalSpec)."""

    name: str | None = Field(None, max_length=200)
    services: list[str] | None = Field(None, max_length=200,
                                       description="codes of the services they do")
    hours: WeeklyHours | None = Field(None, description="their weekly hours; null: the "
                                                        "business's")
    time_off: list[TimeOffSpec] | None = Field(None, max_length=200)
    hours_exceptions: list[HoursExceptionSpec] | None = Field(None, max_length=366)
    durations: dict[str, int] | None = Field(None, description="minutes by service code")


class HoursExceptionBody(_Body):
    hours: Intervals = Field(default_factory=list,
                             description="HH:MM-HH:MM intervals; empty: closed all day")
    note: str = Field("", max_length=200)


class HoursBody(_Body):
    hours: WeeklyHours = Field(description='{"mon": ["09:00-18:00"], ...}; days left out '
                                           "are closed")


class CatalogueBody(_Body):
    services: list[ServiceSpec] | None = None
    professionals: list[ProfessionalSpec] | None = None
    hours: WeeklyHours | None = None
    hours_exceptions: list[HoursExceptionSpec] | None = None
    slot_granularity_minutes: int | None = Field(None, ge=5, le=1440)


class Page(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(50, ge=1, le=service.MAX_PAGE)
    after_id: int = Field(0, ge=0, le=MAX_ID)


class MessagesPage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(service.MAX_PAGE, ge=1, le=service.MAX_PAGE)
    after_id: int = Field(0, ge=0, le=MAX_ID, description="messages after this id")


# -- the call context --------------------------------------------------------------------------

@dataclass
class Call:
    """What a handler gets: an open transaction, the tenant it acts on, parsed input."""

    request: web.Request
    session: Session
    tenant: Tenant | None
    operator: bool
    path: dict[str, Any]
    query: Any
    body: Any
    now: datetime
    after_commit: list[Callable[[], None]] = field(default_factory=list)

    @property
    def by(self) -> str:
        return "operator" if self.operator else f"tenant:{self.tenant.id if self.tenant else 0}"

    def the_tenant(self) -> Tenant:
        assert self.tenant is not None
        return self.tenant


Handler = Callable[[Call], tuple[int, Any]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # OpenAPI form: /admin/tenants/{tenant_id}
    handler: Handler
    summary: str
    tag: str
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    operator_only: bool = False
    ok: int = 200
    path_types: tuple[tuple[str, str], ...] = ()  # (name, "integer" | "string" | "date")
    returns: str | None = None  # the answer's schema in bot/admin/openapi.py, when described


# -- handlers ----------------------------------------------------------------------------------

def list_tenants(call: Call) -> tuple[int, Any]:
    if call.operator:
        tenants = call.session.exec(select(Tenant).order_by(col(Tenant.id))).all()
    else:
        tenants = [call.the_tenant()]
    return 200, [service.tenant_view(t) for t in tenants]


def create_tenant(call: Call) -> tuple[int, Any]:
    validated(TenantCreate, call.body)
    tenant = service.create_tenant(call.session, call.body, now=call.now)
    return 201, service.tenant_view(tenant)


def get_tenant(call: Call) -> tuple[int, Any]:
    tenant = call.the_tenant()
    return 200, {**service.tenant_view(tenant), "counts": service.counts(call.session, tenant)}


def update_tenant(call: Call) -> tuple[int, Any]:
    return 200, service.tenant_view(service.update_tenant(call.session, call.the_tenant(),
                                                          call.body))


def resume(call: Call) -> tuple[int, Any]:
    tenant = call.the_tenant()
    waiting = resume_sending(call.session, tenant.id or 0)
    app = call.request.app
    for conversation_id in waiting:
        call.after_commit.append(lambda c=conversation_id: enqueue_flush(
            app[TURN_QUEUE], app[SETTINGS].redis_prefix, c))
    return 200, {"sending_paused_reason": "", "conversations_with_replies_waiting": len(waiting)}


def create_token(call: Call) -> tuple[int, Any]:
    body: TokenCreate = validated(TokenCreate, call.body)
    return 201, service.create_token(call.session, call.the_tenant(), label=body.label,
                                     now=call.now)


def revoke_token(call: Call) -> tuple[int, Any]:
    service.revoke_token(call.session, call.the_tenant(), call.path["token_id"], now=call.now)
    return 204, None


def get_catalogue(call: Call) -> tuple[int, Any]:
    return 200, service.catalogue_view(call.session, call.the_tenant())


def put_catalogue(call: Call) -> tuple[int, Any]:
    validated(CatalogueBody, call.body)
    return 200, service.replace_catalogue(call.session, call.the_tenant(), call.body,
                                          now=call.now)


def put_service_route(call: Call) -> tuple[int, Any]:
    body: ServiceBody = validated(ServiceBody, call.body)
    validated(ServiceSpec, {"code": call.path["code"], "duration_minutes": 5})
    given = body.model_dump(include={"price_cents", "price_from", "description",
                                     "buffer_minutes"}, exclude_unset=True)
    # a null price clears it; a null flag or description keeps its value
    fields = {k: v for k, v in given.items() if v is not None or k == "price_cents"}
    row, created = change_service(call.session, call.the_tenant().id or 0, call.path["code"],
                                  name=body.name, duration_minutes=body.duration_minutes,
                                  **fields)
    return (201 if created else 200), service.service_view(row)


def delete_service(call: Call) -> tuple[int, Any]:
    archive_service(call.session, call.the_tenant().id or 0, call.path["code"], now=call.now)
    return 204, None


def put_professional_route(call: Call) -> tuple[int, Any]:
    keys = ("hours", "time_off", "hours_exceptions", "durations")
    sent = call.body if isinstance(call.body, dict) else {}
    body: ProfessionalBody = validated(ProfessionalBody, {
        k: v for k, v in sent.items() if k not in keys} if sent else call.body)
    validated(ProfessionalSpec, {"code": call.path["code"]})
    week = {k: v for k, v in sent.items() if k in keys}  # the spec names every problem
    row, created = change_professional(call.session, call.the_tenant().id or 0,
                                       call.path["code"], name=body.name,
                                       services=body.services, now=call.now, **week)
    return (201 if created else 200), service.professional_view(row)


def delete_professional(call: Call) -> tuple[int, Any]:
    archive_professional(call.session, call.the_tenant().id or 0, call.path["code"],
                         now=call.now)
    return 204, None


def put_hours(call: Call) -> tuple[int, Any]:
    body: HoursBody = validated(HoursBody, call.body)
    return 200, set_hours(call.session, call.the_tenant().id or 0, body.hours)


def put_exception(call: Call) -> tuple[int, Any]:
    body: HoursExceptionBody = validated(HoursExceptionBody, call.body)
    spec = validated(HoursExceptionSpec, {"day": call.path["day"], **body.model_dump()})
    row, created = put_hours_exception(call.session, call.the_tenant().id or 0, spec)
    return (201 if created else 200), {"day": row.day.isoformat(), "hours": row.hours,
                                       "note": row.note}


def delete_exception(call: Call) -> tuple[int, Any]:
    delete_hours_exception(call.session, call.the_tenant().id or 0, call.path["day"])
    return 204, None


def list_conversations(call: Call) -> tuple[int, Any]:
    return 200, service.list_conversations(call.session, call.the_tenant(), call.query)


def get_conversation(call: Call) -> tuple[int, Any]:
    page: MessagesPage = call.query
    return 200, service.conversation_view(call.session, call.the_tenant(),
                                          call.path["conversation_id"], now=call.now,
                                          after_id=page.after_id, limit=page.limit)


def staff_reply(call: Call) -> tuple[int, Any]:
    """A staff reply (operations/staff.py), sent by the outbox flush after the commit."""
    conversation_id = call.path["conversation_id"]
    sent = staff_ops.reply(call.session, call.the_tenant(), conversation_id, call.body,
                           author="operator" if call.operator else "admin API", now=call.now)
    app = call.request.app
    call.after_commit.append(lambda: enqueue_flush(app[TURN_QUEUE], app[SETTINGS].redis_prefix,
                                                   conversation_id))
    return 202, sent


def hand_back(call: Call) -> tuple[int, Any]:
    """Back to the agent; a turn is enqueued after the commit for what still waits (the
    reconciler would find it within a minute otherwise)."""
    conversation_id = call.path["conversation_id"]
    back = staff_ops.hand_back(call.session, call.the_tenant(), conversation_id, now=call.now)
    app = call.request.app
    if back["changed"]:
        call.after_commit.append(lambda: enqueue_turn(app[TURN_QUEUE],
                                                      app[SETTINGS].redis_prefix,
                                                      conversation_id))
    return 200, back


def attention(call: Call) -> tuple[int, Any]:
    return 200, staff_ops.attention(call.session, call.the_tenant(), now=call.now)


def list_contacts(call: Call) -> tuple[int, Any]:
    page: Page = call.query
    return 200, service.list_contacts(call.session, call.the_tenant(), limit=page.limit,
                                      after_id=page.after_id)


def export_contact(call: Call) -> tuple[int, Any]:
    return 200, service.export(call.session, call.the_tenant(), call.path["contact"])


def forget_contact(call: Call) -> tuple[int, Any]:
    return 200, service.forget(call.session, call.the_tenant(), call.path["contact"],
                               now=call.now)


def review_queue(call: Call) -> tuple[int, Any]:
    return 200, service.review_queue(call.session, call.the_tenant())


def approve_fact(call: Call) -> tuple[int, Any]:
    body: Decision = validated(Decision, call.body)
    return 200, service.approve_fact(call.session, call.the_tenant(), call.path["fact_id"],
                                     by=call.by, reason=body.reason, now=call.now)


def reject_fact(call: Call) -> tuple[int, Any]:
    """Rejected at once; the summaries are re-derived without it by a job (it calls Claude)."""
    body: Decision = validated(Decision, call.body)
    fact_id = call.path["fact_id"]
    fact = service.reject_fact(call.session, call.the_tenant(), fact_id, by=call.by,
                               reason=body.reason, now=call.now)
    queue = call.request.app[TURN_QUEUE]
    call.after_commit.append(lambda: service.enqueue_rejection(queue, fact_id))
    return 202, {**fact, "summaries": "re-deriving"}


def edit_fact(call: Call) -> tuple[int, Any]:
    body: service.FactEdit = validated(service.FactEdit, call.body)
    return 200, service.edit_fact(call.session, call.the_tenant(), call.path["fact_id"], body,
                                  by=call.by, now=call.now)


def list_appointments(call: Call) -> tuple[int, Any]:
    return 200, service.list_appointments(call.session, call.the_tenant(), call.query)


def cancel_appointment(call: Call) -> tuple[int, Any]:
    validated(Decision, call.body)
    return 200, service.cancel_appointment(call.session, call.the_tenant(),
                                           call.path["appointment_id"], now=call.now)


def book_appointment(call: Call) -> tuple[int, Any]:
    body: agenda.StaffBooking = validated(agenda.StaffBooking, call.body)
    return 201, agenda.book(call.session, call.the_tenant(), body, now=call.now)


def move_appointment(call: Call) -> tuple[int, Any]:
    body: agenda.Move = validated(agenda.Move, call.body)
    return 200, agenda.move(call.session, call.the_tenant(), call.path["appointment_id"], body,
                            now=call.now)


def appointment_outcome(call: Call) -> tuple[int, Any]:
    body: agenda.Outcome = validated(agenda.Outcome, call.body)
    return 200, agenda.set_outcome(call.session, call.the_tenant(),
                                   call.path["appointment_id"], body.outcome, now=call.now,
                                   note=body.note)


def add_block(call: Call) -> tuple[int, Any]:
    body: agenda.Block = validated(agenda.Block, call.body)
    return 201, agenda.block(call.session, call.the_tenant(), body, now=call.now)


def remove_block(call: Call) -> tuple[int, Any]:
    agenda.unblock(call.session, call.the_tenant(), call.path["block_id"])
    return 204, None


def agenda_day(call: Call) -> tuple[int, Any]:
    return 200, agenda.day_view(call.session, call.the_tenant(), call.path["day"])


def list_webhooks(call: Call) -> tuple[int, Any]:
    return 200, hook_ops.list_endpoints(call.session, call.the_tenant(), now=call.now)


def add_webhook(call: Call) -> tuple[int, Any]:
    body: hook_ops.EndpointCreate = validated(hook_ops.EndpointCreate, call.body)
    return 201, hook_ops.add_endpoint(call.session, call.the_tenant(), body, now=call.now)


def remove_webhook(call: Call) -> tuple[int, Any]:
    hook_ops.remove_endpoint(call.session, call.the_tenant(), call.path["endpoint_id"])
    return 204, None


def rotate_webhook_secret(call: Call) -> tuple[int, Any]:
    body: hook_ops.SecretRotation = validated(hook_ops.SecretRotation, call.body or {})
    return 200, hook_ops.rotate_secret(call.session, call.the_tenant(),
                                       call.path["endpoint_id"],
                                       grace=timedelta(hours=body.grace_hours), now=call.now)


def enable_webhook(call: Call) -> tuple[int, Any]:
    view, due = hook_ops.enable_endpoint(call.session, call.the_tenant(),
                                         call.path["endpoint_id"], now=call.now)
    queue = call.request.app[TURN_QUEUE]
    call.after_commit.append(lambda: enqueue_webhooks(queue, due))
    return 200, view


def webhook_deliveries(call: Call) -> tuple[int, Any]:
    return 200, hook_ops.delivery_log(call.session, call.the_tenant(), call.path["endpoint_id"],
                                      now=call.now)


TP = "/admin/tenants/{tenant_id}"
WH = TP + "/webhooks/{endpoint_id}"
WID = (("tenant_id", "integer"), ("endpoint_id", "integer"))
TID = (("tenant_id", "integer"),)
ROUTES: tuple[Route, ...] = (
    Route("GET", "/admin/tenants", list_tenants, "List tenants (a tenant token: its own)",
          "tenants"),
    Route("POST", "/admin/tenants", create_tenant, "Create a tenant, optionally with its "
          "catalogue", "tenants", body=TenantCreate, operator_only=True, ok=201),
    Route("GET", TP, get_tenant, "Read a tenant's settings and counts", "tenants",
          path_types=TID),
    Route("PATCH", TP, update_tenant, "Change settings; the next turn uses them", "tenants",
          body=TenantSettings, path_types=TID),
    Route("POST", TP + "/resume-sending", resume, "Resume sending after the access token was "
          "fixed (a Graph API 190 paused it)", "tenants", path_types=TID),
    Route("POST", TP + "/tokens", create_token, "Create a token that sees only this tenant "
          "(shown once)", "tenants", body=TokenCreate, operator_only=True, ok=201,
          path_types=TID),
    Route("DELETE", TP + "/tokens/{token_id}", revoke_token, "Revoke a token of this tenant "
          "(a tenant token may revoke its own tenant's)", "tenants", ok=204,
          path_types=(*TID, ("token_id", "integer"))),
    Route("GET", TP + "/catalog", get_catalogue, "Services, professionals, hours, exceptions",
          "catalog", path_types=TID),
    Route("PUT", TP + "/catalog", put_catalogue, "Replace the parts of the catalogue given",
          "catalog", body=CatalogueBody, path_types=TID),
    Route("PUT", TP + "/services/{code}", put_service_route, "Create or change a service",
          "catalog", body=ServiceBody, path_types=(*TID, ("code", "string"))),
    Route("DELETE", TP + "/services/{code}", delete_service, "Remove a service (409 while it "
          "has upcoming appointments)", "catalog", ok=204,
          path_types=(*TID, ("code", "string"))),
    Route("PUT", TP + "/professionals/{code}", put_professional_route, "Create or change a "
          "professional and the services they do", "catalog", body=ProfessionalBody,
          path_types=(*TID, ("code", "string"))),
    Route("DELETE", TP + "/professionals/{code}", delete_professional, "Remove a professional "
          "(409 while they have upcoming appointments)", "catalog", ok=204,
          path_types=(*TID, ("code", "string"))),
    Route("PUT", TP + "/hours", put_hours, "Replace the weekly opening hours", "catalog",
          body=HoursBody, path_types=TID),
    Route("PUT", TP + "/hours-exceptions/{day}", put_exception, "Set one date's hours (a "
          "holiday: none)", "catalog", body=HoursExceptionBody,
          path_types=(*TID, ("day", "date"))),
    Route("DELETE", TP + "/hours-exceptions/{day}", delete_exception, "Remove a date's "
          "exception", "catalog", ok=204, path_types=(*TID, ("day", "date"))),
    Route("GET", TP + "/conversations", list_conversations, "Conversations, newest first, "
          "each with its last reply's delivery", "conversations",
          query=service.ConversationQuery, path_types=TID, returns="ConversationList"),
    Route("GET", TP + "/conversations/{conversation_id}", get_conversation, "One conversation: "
          "messages (each reply with its delivery), summary, facts in context, usage per call",
          "conversations", query=MessagesPage, path_types=(*TID, ("conversation_id", "integer")),
          returns="Conversation"),
    Route("POST", TP + "/conversations/{conversation_id}/messages", staff_reply, "A staff "
          "reply: text inside the 24-hour window, else one of the tenant's templates; staff "
          "keep the conversation for staff_timeout_minutes", "conversations",
          body=staff_ops.StaffReply, ok=202,
          path_types=(*TID, ("conversation_id", "integer"))),
    Route("POST", TP + "/conversations/{conversation_id}/hand-back", hand_back, "Back to the "
          "agent now (a no-op when staff did not handle it)", "conversations",
          path_types=(*TID, ("conversation_id", "integer"))),
    Route("GET", TP + "/attention", attention, "What needs a person: conversations with "
          "staff, handoffs waiting, facts to review, failed replies, with counts",
          "conversations", path_types=TID),
    Route("GET", TP + "/contacts", list_contacts, "Contacts by id", "contacts", query=Page,
          path_types=TID),
    Route("GET", TP + "/contacts/{contact}/export", export_contact, "Everything stored about "
          "a contact (phone, user id or contact id)", "contacts",
          path_types=(*TID, ("contact", "string"))),
    Route("DELETE", TP + "/contacts/{contact}", forget_contact, "Erase a contact from every "
          "layer; returns the receipt's counts", "contacts",
          path_types=(*TID, ("contact", "string"))),
    Route("GET", TP + "/facts/review", review_queue, "Facts waiting for a person, with their "
          "source message", "facts", path_types=TID),
    Route("POST", TP + "/facts/{fact_id}/approve", approve_fact, "Confirm a fact in review",
          "facts", body=Decision, path_types=(*TID, ("fact_id", "integer"))),
    Route("POST", TP + "/facts/{fact_id}/reject", reject_fact, "Reject a fact; its summaries "
          "are re-derived without it by a job", "facts", body=Decision, ok=202,
          path_types=(*TID, ("fact_id", "integer"))),
    Route("POST", TP + "/facts/{fact_id}/edit", edit_fact, "Correct a fact's value, with a "
          "reason", "facts", body=service.FactEdit, path_types=(*TID, ("fact_id", "integer"))),
    Route("GET", TP + "/appointments", list_appointments, "Appointments by start time",
          "appointments", query=service.AppointmentQuery, path_types=TID),
    Route("POST", TP + "/appointments/{appointment_id}/cancel", cancel_appointment, "Cancel a "
          "booking (the slot becomes free)", "appointments", body=Decision,
          path_types=(*TID, ("appointment_id", "integer"))),
    Route("POST", TP + "/appointments", book_appointment, "A booking by the business for a "
          "contact (existing, or new by phone); emits appointment.booked by business",
          "appointments", body=agenda.StaffBooking, ok=201, path_types=TID),
    Route("POST", TP + "/appointments/{appointment_id}/move", move_appointment, "Move an "
          "upcoming booking to another start or professional", "appointments", body=agenda.Move,
          path_types=(*TID, ("appointment_id", "integer"))),
    Route("POST", TP + "/appointments/{appointment_id}/outcome", appointment_outcome, "Mark a "
          "visit that started completed or no_show (status unchanged)", "appointments",
          body=agenda.Outcome, path_types=(*TID, ("appointment_id", "integer"))),
    Route("POST", TP + "/blocks", add_block, "Block a professional's time (hides slots; over "
          "bookings only with force, which keeps them)", "appointments", body=agenda.Block,
          ok=201, path_types=TID),
    Route("DELETE", TP + "/blocks/{block_id}", remove_block, "Remove a block", "appointments",
          ok=204, path_types=(*TID, ("block_id", "integer"))),
    Route("GET", TP + "/agenda/{day}", agenda_day, "One local day: each professional's hours, "
          "bookings and blocks", "appointments", path_types=(*TID, ("day", "date"))),
    Route("GET", TP + "/webhooks", list_webhooks, "Webhook endpoints (no secrets)", "webhooks",
          path_types=TID),
    Route("POST", TP + "/webhooks", add_webhook, "Add a webhook endpoint; its secret is in "
          "this answer only", "webhooks", body=hook_ops.EndpointCreate, ok=201,
          path_types=TID, returns="WebhookEndpoint"),
    Route("DELETE", WH, remove_webhook, "Remove a webhook endpoint and its deliveries",
          "webhooks", ok=204, path_types=WID),
    Route("POST", WH + "/rotate-secret", rotate_webhook_secret, "A new secret (in this answer "
          "only); the old one signs beside it for the grace period", "webhooks",
          body=hook_ops.SecretRotation, path_types=WID, returns="WebhookEndpoint"),
    Route("POST", WH + "/enable", enable_webhook, "Enable a disabled endpoint; its waiting "
          "deliveries are sent", "webhooks", path_types=WID, returns="WebhookEndpoint"),
    Route("GET", WH + "/deliveries", webhook_deliveries, "The delivery log: latest attempts, "
          "status, next try", "webhooks", path_types=WID, returns="WebhookDeliveryLog"),
)


# -- dispatch ----------------------------------------------------------------------------------

def error(status: int, code: str, message: str, problems: list[str] | None = None,
          headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message,
                                        "problems": problems or []}},
                             status=status, headers=headers)


def _authenticate(request: web.Request) -> tuple[bool, str] | None:
    """(is_operator, token) from the Authorization header, or None."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 512:
        return None
    operator_token = request.app[SETTINGS].admin_token
    is_operator = bool(operator_token) and hmac.compare_digest(
        token.encode("utf-8", "surrogatepass"), operator_token.encode())
    return is_operator, token


def _path_params(request: web.Request, route: Route) -> dict[str, Any]:
    """Typed path parameters; an impossible id is simply not found."""
    values: dict[str, Any] = {}
    for name, kind in route.path_types:
        raw = request.match_info[name]
        if clean_text(raw):
            raise NotFound(f"no {name} {raw!r}")
        if kind == "integer":
            if not raw.isascii() or not raw.isdigit() or not 0 < int(raw) <= MAX_ID:
                raise NotFound(f"no {name.removesuffix('_id')} {raw!r}")
            values[name] = int(raw)
        elif kind == "date":
            try:
                values[name] = date.fromisoformat(raw)
            except ValueError:
                raise Invalid(f"{name}: {raw!r} is not a YYYY-MM-DD date",
                              [f"{name}: not a YYYY-MM-DD date"]) from None
        else:
            if len(raw) > 160:
                raise NotFound(f"no {name} {raw[:40]!r}…")
            values[name] = raw
    return values


def make_handler(route: Route) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.StreamResponse:
        auth = _authenticate(request)
        if auth is None:
            return error(401, "unauthorized", "send Authorization: Bearer <token>",
                         headers={"WWW-Authenticate": 'Bearer realm="wagent-admin"'})
        refused = await _checked_token(request, *auth)
        if isinstance(refused, web.Response):
            return refused
        known = refused
        try:
            path = _path_params(request, route)
            query = None
            if route.query is not None:
                problems = clean_text(dict(request.query), "query")
                if problems:
                    raise Invalid(problems[0], problems)
                query = validated(route.query, dict(request.query))
            elif request.query:
                raise Invalid(f"unknown query parameter(s): {', '.join(request.query)}")
            body = None
            if route.method in ("POST", "PUT", "PATCH"):
                try:
                    raw = await read_body(request, ADMIN_BODY_BYTES)
                except web.HTTPException as exc:  # 408, 413, 503: said in JSON
                    return _as_json(exc)
                if raw.strip():
                    try:
                        body = json.loads(raw)
                    except (ValueError, RecursionError):
                        return error(400, "bad_json", "the body is not valid JSON")
                    problems = clean_text(body)
                    if problems:
                        raise Invalid(problems[0], problems)
                if route.body is not None and not isinstance(body, dict) and not (
                        body is None and route.body in (Decision, TokenCreate,
                                                        hook_ops.SecretRotation)):
                    raise Invalid("the body must be a JSON object",
                                  ["body: must be a JSON object"])
            return await run_admin(request.app, _run, request, route, auth[0], known, path,
                                   query, body)
        except AdminError as exc:
            return error(*http_status(exc), str(exc), exc.problems)

    handle.__name__ = route.handler.__name__
    return handle



def _as_json(refusal: web.HTTPException) -> web.Response:
    """bot/bodies.py's refusal of a body as the API's JSON error (the connection still
    closes after it)."""
    headers = {k: v for k, v in refusal.headers.items() if k == "Retry-After"}
    response = error(refusal.status, BODY_REFUSALS.get(refusal.status, "refused"),
                     refusal.text or refusal.reason, headers=headers)
    response.force_close()
    return response


async def _checked_token(request: web.Request, operator: bool,
                         token: str) -> int | None | web.Response:
    """Before anything is read or validated: 429 while the client or the tenant the token
    names used up its failed attempts (bot/guard.py), 401 for an unknown token (a failure
    counted), 503 when Redis or the database cannot say. Else the tenant id of a tenant
    token, None for the operator's."""
    address = guard.client_address(request)
    try:
        wait = await run_admin(request.app, guard.wait_seconds, request.app, address, token)
    except RedisError as exc:
        return error(*http_status(exc), "the attempt limits cannot be checked; try again")
    if wait:
        log.warning("admin_attempts_refused", retry_after=wait)
        return error(429, "too_many_attempts", f"too many failed attempts; try again in "
                     f"{wait} s", headers={"Retry-After": str(wait)})
    if operator:
        return None
    try:
        known = await run_admin(request.app, _tenant_of_token, request.app, token)
    except OperationalError as exc:
        return error(*http_status(exc), "the database is unavailable; try again")
    if known is not None:
        return known
    try:
        await run_admin(request.app, guard.count_failure, request.app, address, token)
    except RedisError:
        log.warning("admin_failure_not_counted")
    log.info("admin_token_refused")
    return error(401, "unauthorized", "unknown or revoked token",
                 headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


ADMIN_EXECUTOR = web.AppKey("admin_executor", ThreadPoolExecutor)


async def run_admin(app: web.Application, func: Callable[..., T], *args: Any) -> T:
    """Run blocking admin or console work on their own small thread pool, so a heavy admin
    request never takes the threads the webhook stores Meta's updates with."""
    return await asyncio.get_running_loop().run_in_executor(app[ADMIN_EXECUTOR], func, *args)


def _tenant_of_token(app: web.Application, token: str) -> int | None:
    with session_scope(app[ENGINE]) as session:
        return service.tenant_for_token(session, token)


def lock_tenant(session: Session, tenant_id: int) -> None:
    """Serialise the changes of one tenant (PostgreSQL row lock; SQLite writes are already
    serial): two concurrent PUTs of the hours end as one of them, never both merged."""
    if is_postgres(session.get_bind()):  # type: ignore[arg-type]
        session.exec(select(Tenant).where(Tenant.id == tenant_id).with_for_update()).first()


def _run(request: web.Request, route: Route, operator: bool, tenant_token_id: int | None,
         path: dict[str, Any], query: Any, body: Any) -> web.StreamResponse:
    """The route's handler in one transaction; `tenant_token_id`: the tenant of the (already
    checked) tenant token, None for the operator."""
    engine = request.app[ENGINE]
    call: Call | None = None
    try:
        with session_scope(engine) as session:
            tenant = None
            if not operator:
                if route.operator_only:
                    return error(403, "forbidden", "this operation needs the operator token")
            if "tenant_id" in path:
                tenant = session.get(Tenant, path["tenant_id"])
                if tenant is None or (not operator and tenant.id != tenant_token_id):
                    raise NotFound(f"no tenant #{path['tenant_id']}")
                if route.method != "GET":
                    lock_tenant(session, path["tenant_id"])
                    session.refresh(tenant)
            elif not operator:
                tenant = session.get(Tenant, tenant_token_id)
            if not operator and route.body is TenantSettings and isinstance(body, dict):
                held = sorted(OPERATOR_FIELDS & body.keys())
                if held:
                    return error(403, "forbidden", f"{', '.join(held)}: only the operator "
                                 "changes these (models and memory tuning)")
            call = Call(request=request, session=session, tenant=tenant, operator=operator,
                        path=path, query=query, body=body, now=clock.now())
            status, payload = route.handler(call)
    except MAPPED as exc:
        refused = admin_error(exc)
        return error(*http_status(refused), str(refused), refused.problems)
    except IntegrityError as exc:
        log.warning("admin_integrity_conflict", route=route.path)
        return error(*http_status(exc), "the change clashes with a concurrent one; try again")
    except OperationalError as exc:
        log.error("admin_database_unavailable", error=str(exc).splitlines()[0][:200])
        return error(*http_status(exc), "the database is unavailable; try again")
    for action in call.after_commit:
        try:
            action()
        except Exception as exc:  # the change is committed; the job is retried by the reconciler
            log.error("admin_after_commit_failed", route=route.path, error=str(exc)[:200])
    log.info("admin_call", method=route.method, route=route.path, status=status,
             operator=operator)
    if status == 204:
        return web.Response(status=204)
    return web.json_response(payload, status=status)


def setup_admin(app: web.Application) -> None:
    """Add the /admin routes and the OpenAPI document to `app`, and the admin thread pool."""
    app[ADMIN_EXECUTOR] = ThreadPoolExecutor(max_workers=2, thread_name_prefix="admin")

    async def close_executor(app: web.Application) -> None:
        app[ADMIN_EXECUTOR].shutdown(wait=False)

    app.on_cleanup.append(close_executor)

    document = openapi_document(ROUTES)

    async def openapi(request: web.Request) -> web.Response:
        return web.json_response(document)

    app.router.add_get("/admin/openapi.json", openapi)
    for route in ROUTES:
        app.router.add_route(route.method, route.path, make_handler(route))

