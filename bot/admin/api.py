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

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from functools import partial
from typing import Any

from aiohttp import web
from sqlmodel import col, select

from bot.admin.dispatch import ADMIN_EXECUTOR, Call, Route, make_handler
from bot.admin.openapi import openapi_document
from bot.admin.schemas import (
    CatalogueBody,
    Decision,
    HoursBody,
    HoursExceptionBody,
    MessagesPage,
    Page,
    ProfessionalBody,
    ServiceBody,
    TenantCreate,
    TokenCreate,
)
from intake.keys import SETTINGS, TURN_QUEUE
from operations import agenda, service
from operations import catalogue as catalogue_ops
from operations import costs as cost_ops
from operations import packages as package_ops
from operations import results as results_ops
from operations import settings as settings_ops
from operations import staff as staff_ops
from operations import threads as thread_ops
from operations import webhooks as hook_ops
from operations.service import validated
from storage.jobs import enqueue_flush, enqueue_turn, enqueue_webhooks
from storage.models import Tenant
from storage.tenant_config import TenantSettings

# -- handlers ----------------------------------------------------------------------------------

def list_tenants(call: Call) -> tuple[int, Any]:
    if call.operator:
        tenants = call.session.exec(select(Tenant).order_by(col(Tenant.id))).all()
    else:
        tenants = [call.the_tenant()]
    return 200, [service.tenant_view(t) for t in tenants]


def create_tenant(call: Call) -> tuple[int, Any]:
    validated(TenantCreate, call.body)
    tenant = settings_ops.create_tenant(call.session, call.body, now=call.now)
    return 201, service.tenant_view(tenant)


def get_tenant(call: Call) -> tuple[int, Any]:
    tenant = call.the_tenant()
    return 200, {**service.tenant_view(tenant), "counts": service.counts(call.session, tenant)}


def update_tenant(call: Call) -> tuple[int, Any]:
    change = settings_ops.settings_change(call.body)
    return 200, service.tenant_view(settings_ops.apply_settings(call.session, call.the_tenant(),
                                                                change, now=call.now))


def resume(call: Call) -> tuple[int, Any]:
    waiting = settings_ops.resume_sending(call.session, call.the_tenant())
    app = call.request.app
    for conversation_id in waiting:
        call.after_commit.append(partial(enqueue_flush, app[TURN_QUEUE],
                                         app[SETTINGS].redis_prefix, conversation_id))
    return 200, {"sending_paused_reason": "", "conversations_with_replies_waiting": len(waiting)}


def create_token(call: Call) -> tuple[int, Any]:
    body: TokenCreate = validated(TokenCreate, call.body)
    return 201, service.create_token(call.session, call.the_tenant(), label=body.label,
                                     now=call.now)


def revoke_token(call: Call) -> tuple[int, Any]:
    service.revoke_token(call.session, call.the_tenant(), call.path["token_id"], now=call.now)
    return 204, None


def get_catalogue(call: Call) -> tuple[int, Any]:
    return 200, catalogue_ops.catalogue_view(call.session, call.the_tenant())


def put_catalogue(call: Call) -> tuple[int, Any]:
    validated(CatalogueBody, call.body)
    return 200, catalogue_ops.replace_catalogue(call.session, call.the_tenant(), call.body,
                                                now=call.now)


def put_service_route(call: Call) -> tuple[int, Any]:
    body: ServiceBody = validated(ServiceBody, call.body)
    # a null price clears it; a null flag, description or buffer keeps its value
    change = catalogue_ops.ServiceChange(
        code=call.path["code"], name=body.name, duration_minutes=body.duration_minutes,
        price_cents=body.price_cents if "price_cents" in body.model_fields_set
        else catalogue_ops.KEEP, price_from=body.price_from, description=body.description,
        buffer_minutes=body.buffer_minutes)
    row, created = catalogue_ops.save_service(call.session, call.the_tenant(), change)
    return (201 if created else 200), catalogue_ops.service_view(row)


def delete_service(call: Call) -> tuple[int, Any]:
    catalogue_ops.remove_service(call.session, call.the_tenant(), call.path["code"],
                                 now=call.now)
    return 204, None


def put_professional_route(call: Call) -> tuple[int, Any]:
    keys = catalogue_ops.WEEK_KEYS
    sent = call.body if isinstance(call.body, dict) else {}
    body: ProfessionalBody = validated(ProfessionalBody, {
        k: v for k, v in sent.items() if k not in keys} if sent else call.body)
    change = catalogue_ops.ProfessionalChange(
        code=call.path["code"], name=body.name, services=body.services,
        week={k: v for k, v in sent.items() if k in keys})  # the spec names every problem
    row, created = catalogue_ops.save_professional(call.session, call.the_tenant(), change,
                                                   now=call.now)
    return (201 if created else 200), catalogue_ops.professional_view(row)


def delete_professional(call: Call) -> tuple[int, Any]:
    catalogue_ops.remove_professional(call.session, call.the_tenant(), call.path["code"],
                                      now=call.now)
    return 204, None


def put_hours(call: Call) -> tuple[int, Any]:
    body: HoursBody = validated(HoursBody, call.body)
    week = {str(day): intervals for day, intervals in body.hours.items()}
    return 200, catalogue_ops.set_opening_hours(call.session, call.the_tenant(),
                                                catalogue_ops.OpeningHoursChange(week))


def put_exception(call: Call) -> tuple[int, Any]:
    body: HoursExceptionBody = validated(HoursExceptionBody, call.body)
    change = catalogue_ops.HoursExceptionChange(day=call.path["day"], hours=body.hours,
                                                note=body.note)
    view, created = catalogue_ops.save_hours_exception(call.session, call.the_tenant(), change,
                                                       now=call.now)
    return (201 if created else 200), view


def delete_exception(call: Call) -> tuple[int, Any]:
    catalogue_ops.remove_hours_exception(call.session, call.the_tenant(), call.path["day"])
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
        tenant_id = call.the_tenant().id
        call.after_commit.append(lambda: enqueue_turn(app[TURN_QUEUE],
                                                      app[SETTINGS].redis_prefix,
                                                      conversation_id, tenant_id=tenant_id))
    return 200, back


def thread_control(call: Call) -> tuple[int, Any]:
    """Take, pass back to Meta's agent, or release a conversation's WhatsApp thread
    (operations/threads.py): a Graph call, then the owner recorded; 409 when Meta refuses."""
    with thread_ops.graph_client(call.request.app[SETTINGS]) as graph:
        return 200, thread_ops.thread_control(call.session, call.the_tenant(),
                                              call.path["conversation_id"], call.body,
                                              graph=graph, now=call.now)


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


def get_costs(call: Call) -> tuple[int, Any]:
    return 200, cost_ops.cost_report(call.session, call.the_tenant(), call.query, now=call.now)


def list_appointments(call: Call) -> tuple[int, Any]:
    return 200, service.list_appointments(call.session, call.the_tenant(), call.query)


def cancel_appointment(call: Call) -> tuple[int, Any]:
    validated(Decision, call.body)
    return 200, service.cancel_appointment(call.session, call.the_tenant(),
                                           call.path["appointment_id"], now=call.now)


def cancel_series(call: Call) -> tuple[int, Any]:
    validated(Decision, call.body)
    return 200, agenda.cancel_series(call.session, call.the_tenant(),
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


def deposit_paid(call: Call) -> tuple[int, Any]:
    body: agenda.DepositPaid = validated(agenda.DepositPaid, call.body)
    return 200, agenda.mark_paid(call.session, call.the_tenant(), call.path["appointment_id"],
                                 now=call.now, amount_cents=body.amount_cents)


def add_block(call: Call) -> tuple[int, Any]:
    body: agenda.Block = validated(agenda.Block, call.body)
    return 201, agenda.block(call.session, call.the_tenant(), body, now=call.now)


def remove_block(call: Call) -> tuple[int, Any]:
    agenda.unblock(call.session, call.the_tenant(), call.path["block_id"])
    return 204, None


def agenda_day(call: Call) -> tuple[int, Any]:
    return 200, agenda.day_view(call.session, call.the_tenant(), call.path["day"])


def waitlist_offer(call: Call) -> tuple[int, Any]:
    body: agenda.WaitlistOffer = validated(agenda.WaitlistOffer, call.body)
    return 200, agenda.offer_slot(call.session, call.the_tenant(), call.path["entry_id"], body,
                                  now=call.now)


def list_packages(call: Call) -> tuple[int, Any]:
    return 200, package_ops.definitions(call.session, call.the_tenant())


def define_package(call: Call) -> tuple[int, Any]:
    body: package_ops.PackageSpec = validated(package_ops.PackageSpec, call.body)
    return 200, package_ops.define(call.session, call.the_tenant(), body)


def contact_packages(call: Call) -> tuple[int, Any]:
    return 200, package_ops.of_customer(call.session, call.the_tenant(), call.path["contact"],
                                        call.now)


def sell_package(call: Call) -> tuple[int, Any]:
    body: package_ops.Sale = validated(package_ops.Sale, call.body)
    return 201, package_ops.sell(call.session, call.the_tenant(), body, now=call.now)


def adjust_package(call: Call) -> tuple[int, Any]:
    body: package_ops.Adjustment = validated(package_ops.Adjustment, call.body)
    return 200, package_ops.adjust(call.session, call.the_tenant(), call.path["package_id"],
                                   used=body.used)


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


def get_results(call: Call) -> tuple[int, Any]:
    found = results_ops.results(call.session, call.the_tenant(), call.query.period,
                                now=call.now)
    return 200, results_ops.results_view(found)


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
    Route("GET", TP + "/results", get_results, "What the agent brought in this week or month "
          "and the one before (issue 49; docs/OPERATE.md \"Resultados\")", "tenants",
          query=results_ops.ResultsQuery, path_types=TID),
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
    Route("POST", TP + "/conversations/{conversation_id}/thread", thread_control, "Thread "
          "control beside Meta's agent: take, pass (back to Meta's agent) or release; 409 "
          "with the reason when Meta refuses (2494191: not the escalation partner)",
          "conversations", body=thread_ops.ThreadAction,
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
    Route("GET", TP + "/costs", get_costs, "Model and WhatsApp costs per local day, µUSD "
          "(docs/OPERATE.md, Costs)", "tenants", query=cost_ops.CostQuery, path_types=TID),
    Route("GET", TP + "/appointments", list_appointments, "Appointments by start time",
          "appointments", query=service.AppointmentQuery, path_types=TID),
    Route("POST", TP + "/appointments/{appointment_id}/cancel", cancel_appointment, "Cancel a "
          "booking (the slot becomes free)", "appointments", body=Decision,
          path_types=(*TID, ("appointment_id", "integer"))),
    Route("POST", TP + "/appointments/{appointment_id}/cancel-series", cancel_series, "Cancel "
          "a recurring series from this visit on (it and the later ones)", "appointments",
          body=Decision, path_types=(*TID, ("appointment_id", "integer"))),
    Route("POST", TP + "/appointments", book_appointment, "A booking by the business for a "
          "contact (existing, or new by phone; `repeat`: a recurring series); emits "
          "appointment.booked by business",
          "appointments", body=agenda.StaffBooking, ok=201, path_types=TID),
    Route("POST", TP + "/appointments/{appointment_id}/move", move_appointment, "Move an "
          "upcoming booking to another start or professional", "appointments", body=agenda.Move,
          path_types=(*TID, ("appointment_id", "integer"))),
    Route("POST", TP + "/appointments/{appointment_id}/outcome", appointment_outcome, "Mark a "
          "visit that started completed or no_show (status unchanged)", "appointments",
          body=agenda.Outcome, path_types=(*TID, ("appointment_id", "integer"))),
    Route("POST", TP + "/appointments/{appointment_id}/deposit-paid", deposit_paid, "Staff "
          "saw the visit's Pix deposit paid: books a held visit (`payment` booked; late after "
          "a release; wrong_amount books nothing)", "appointments", body=agenda.DepositPaid,
          path_types=(*TID, ("appointment_id", "integer"))),
    Route("POST", TP + "/blocks", add_block, "Block a professional's time (hides slots; over "
          "bookings only with force, which keeps them)", "appointments", body=agenda.Block,
          ok=201, path_types=TID),
    Route("DELETE", TP + "/blocks/{block_id}", remove_block, "Remove a block", "appointments",
          ok=204, path_types=(*TID, ("block_id", "integer"))),
    Route("GET", TP + "/agenda/{day}", agenda_day, "One local day: each professional's hours, "
          "bookings, blocks and waitlist", "appointments", path_types=(*TID, ("day", "date"))),
    Route("POST", TP + "/waitlist/{entry_id}/offer", waitlist_offer, "Hold a free slot for a "
          "waiting customer; the offer with its buttons goes out within 30 s", "appointments",
          body=agenda.WaitlistOffer, path_types=(*TID, ("entry_id", "integer"))),
    Route("GET", TP + "/packages", list_packages, "The session packages the tenant sells "
          "(issue 46)", "packages", path_types=TID),
    Route("POST", TP + "/packages", define_package, "Create or change a package by its code "
          "(a service, sessions, validity, price)", "packages", body=package_ops.PackageSpec,
          path_types=TID),
    Route("GET", TP + "/contacts/{contact}/packages", contact_packages, "A customer's "
          "packages, newest first, each with sessions used and left and `usable` (not expired, "
          "sessions left)", "packages", path_types=(*TID, ("contact", "string"))),
    Route("POST", TP + "/customer-packages", sell_package, "Sell a package to a customer, "
          "with an optional health plan authorisation and expiry", "packages",
          body=package_ops.Sale, ok=201, path_types=TID),
    Route("POST", TP + "/customer-packages/{package_id}/adjust", adjust_package, "Set the "
          "sessions used of a customer's package (0 to its sessions)", "packages",
          body=package_ops.Adjustment, path_types=(*TID, ("package_id", "integer"))),
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
