"""The OpenAPI 3.1 document of the admin API, built from its route table and the pydantic
models that validate each body and query (so the document and the checks are the same rules).
"""

from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from storage import delivery
from storage.webhooks import EVENT_TYPES


class Route(Protocol):
    """What the document reads of a route (`bot.admin.dispatch.Route`, whose table it describes)."""

    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def handler(self) -> Callable[..., Any]: ...
    @property
    def summary(self) -> str: ...
    @property
    def tag(self) -> str: ...
    @property
    def body(self) -> type[BaseModel] | None: ...
    @property
    def query(self) -> type[BaseModel] | None: ...
    @property
    def ok(self) -> int: ...
    @property
    def path_types(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def returns(self) -> str | None: ...


REF = "#/components/schemas/{model}"
CODE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["code", "message", "problems"],
        "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                       "problems": {"type": "array", "items": {"type": "string"},
                                    "description": '"where: what" lines'}}}},
}
_NULLABLE_TEXT = {"type": ["string", "null"]}
DELIVERY = {
    "type": "object",
    "description": "What became of a reply (storage/delivery.py; docs/ARCHITECTURE.md "
                   "\"How a message is answered\"). A reply sent in parts is failed when any "
                   "part failed, unknown when any part's fate is, else its least advanced "
                   "part's state. "
                   "States: " + "; ".join(f"{state}: {delivery.TEXTS['en']['meaning'][state]}"
                                         for state in delivery.STATES),
    "required": ["state", "meaning", "error_code", "reason", "parts", "tries", "retry_at",
                 "sent_at"],
    "properties": {
        "state": {"type": "string", "enum": list(delivery.STATES)},
        "meaning": {"type": "string", "description": "the state in one line"},
        "error_code": {"type": ["integer", "null"],
                       "description": "Meta's error.code (131047 also for the product's own "
                                      "24-hour refusal)"},
        "reason": {"type": "string", "description": "one line: the code or cause and what it "
                                                    "means; empty when nothing went wrong"},
        "parts": {"type": "integer", "description": "outbox parts of the reply"},
        "tries": {"type": "integer", "description": "Graph calls made for the deciding part"},
        "retry_at": {**_NULLABLE_TEXT, "format": "date-time",
                     "description": "when a queued part is tried next"},
        "sent_at": {**_NULLABLE_TEXT, "format": "date-time"},
    },
}
LAST_REPLY = {"oneOf": [{"type": "null"}, {"allOf": [{"$ref": REF.format(model="Delivery")}, {
    "type": "object", "required": ["message_id", "at", "not_delivered"], "properties": {
        "message_id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
        "not_delivered": {"type": "boolean",
                          "description": "failed or unknown: the console flags it"}}}]}]}
RESPONSE_SCHEMAS = {
    "Delivery": DELIVERY,
    "ConversationList": {"type": "array", "items": {
        "type": "object", "required": ["id", "status", "last_reply"],
        "properties": {"id": {"type": "integer"}, "status": {"type": "string"},
                       "last_reply": LAST_REPLY}}},
    "Conversation": {"type": "object", "required": ["id", "messages"], "properties": {
        "id": {"type": "integer"},
        "messages": {"type": "array", "items": {"type": "object", "properties": {
            "delivery_status": {"type": ["string", "null"], "enum": [*delivery.STATES, None]},
            "delivery": {"oneOf": [{"type": "null"},
                                   {"$ref": REF.format(model="Delivery")}]}}}}}},
    # outbound webhooks (operations/webhooks.py): `secret` only in the answers that make one
    "WebhookEndpoint": {"type": "object", "required": ["id", "url", "events", "state"],
                        "properties": {
        "id": {"type": "integer"}, "url": {"type": "string"},
        "events": {"type": "array", "items": {"type": "string", "enum": list(EVENT_TYPES)}},
        "state": {"type": "string", "enum": ["enabled", "disabled"],
                  "description": "disabled after 24 h of failed deliveries"},
        "disabled_reason": _NULLABLE_TEXT, "rotating_until": _NULLABLE_TEXT,
        "secret": {"type": "string", "description": "shown once: on creation and rotation"}}},
    "WebhookDeliveryLog": {"type": "object", "required": ["endpoint", "deliveries"],
                           "properties": {
        "endpoint": {"$ref": REF.format(model="WebhookEndpoint")},
        "deliveries": {"type": "array", "items": {"type": "object", "properties": {
            "event_id": {"type": "string"}, "type": {"type": "string"},
            "status": {"type": "string", "enum": ["pending", "sending", "delivered", "failed"]},
            "attempts": {"type": "integer"}, "last_status_code": {"type": ["integer", "null"]},
            "last_error": _NULLABLE_TEXT, "next_attempt_at": _NULLABLE_TEXT}}}}},
}
ERRORS = {
    "400": "The body is not valid JSON",
    "401": "No, unknown or revoked bearer token",
    "403": "A tenant token on an operator-only operation",
    "404": "Unknown id, or one that belongs to another tenant",
    "408": "The body arrived slower than the minimum rate",
    "409": "The change clashes with the current state",
    "413": "The body is over 1 MiB",
    "422": "Validation failed; `problems` lists each field",
    "429": "Too many failed attempts from this address or for this tenant; retry after "
           "`Retry-After` seconds",
    "503": "The database or Redis is unavailable, or too many uploads are in progress; retry",
}


def openapi_document(routes: tuple[Route, ...]) -> dict[str, Any]:
    models = sorted({m for r in routes for m in (r.body,) if m is not None},
                    key=lambda m: m.__name__)
    _, top = models_json_schema([(m, "validation") for m in models], ref_template=REF)
    schemas: dict[str, Any] = {**top.get("$defs", {}), **RESPONSE_SCHEMAS, "Error": ERROR}
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        operation: dict[str, Any] = {
            "operationId": route.handler.__name__,
            "summary": route.summary,
            "tags": [route.tag],
            "security": [{"bearer": []}],
            "parameters": _path_parameters(route) + _query_parameters(route.query),
            "responses": _responses(route),
        }
        if route.body is not None:
            operation["requestBody"] = {
                "required": route.body.__name__ not in ("Decision", "TokenCreate"),
                "content": {"application/json": {
                    "schema": {"$ref": REF.format(model=route.body.__name__)}}}}
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    paths["/admin/openapi.json"] = {"get": {
        "operationId": "openapi", "summary": "This document", "tags": ["meta"], "security": [],
        "responses": {"200": {"description": "The OpenAPI document",
                              "content": {"application/json": {"schema": {"type": "object"}}}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "wagent admin API", "version": "1",
                 "description": "Tenant administration of the WhatsApp booking agent: "
                                "settings, catalogue, conversations, facts, contacts, "
                                "appointments. Changes take effect on the next turn."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "The operator token (ADMIN_TOKEN) or a tenant token"}}},
    }


def _path_parameters(route: Route) -> list[dict[str, Any]]:
    parameters = []
    for name, kind in route.path_types:
        schema: dict[str, Any]
        if kind == "integer":
            schema = {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}
        elif kind == "date":
            schema = {"type": "string", "format": "date"}
        elif name == "code":
            schema = {"type": "string", "pattern": CODE_PATTERN}
        else:
            schema = {"type": "string", "minLength": 1, "maxLength": 160}
        parameters.append({"name": name, "in": "path", "required": True, "schema": schema})
    return parameters


def _query_parameters(model: type[BaseModel] | None) -> list[dict[str, Any]]:
    if model is None:
        return []
    schema = model.model_json_schema(ref_template=REF)
    required = set(schema.get("required", []))
    return [{"name": name, "in": "query", "required": name in required,
             "description": prop.pop("description", ""), "schema": prop}
            for name, prop in schema.get("properties", {}).items()]


def _responses(route: Route) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    if route.ok == 204:
        responses["204"] = {"description": "Done"}
    else:
        schema = {"$ref": REF.format(model=route.returns)} if route.returns \
            else {"type": ["object", "array"]}
        responses[str(route.ok)] = {"description": "OK", "content": {
            "application/json": {"schema": schema}}}
    for status, text in ERRORS.items():
        responses[status] = {"description": text, "content": {"application/json": {
            "schema": {"$ref": REF.format(model="Error")}}}}
    return responses
