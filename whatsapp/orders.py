"""Orders of Meta's Payments API for Brazil (issue 48): the `order_details` message that asks
for a Pix payment and the `order_status` message that updates it, and the rules Meta checks on
both (the product builds with them; the Graph API double refuses a body that breaks them).

Source: Meta, "Payments API - Brazil" (Orders API; Offsite Pix payments): `interactive.type`
order_details, `action.name` review_and_pay, `parameters` {reference_id (unique per order),
type (digital-goods | physical-goods), payment_type "br", currency "BRL", total_amount
{value, offset}, payment_settings [{type pix_dynamic_code, pix_dynamic_code {code,
merchant_name, key, key_type}}], order {status pending, items [{retailer_id, name, amount,
quantity}], subtotal}}; amounts are integer `value` with `offset` 100 (value 1000 = R$ 10,00);
total = subtotal (+ tax + shipping - discount, none here). `order_status`: action.name
review_order, parameters {reference_id, order {status, description?}}; both only inside the
24-hour customer service window (outside it, a declared order-details template).

Outside the window: a template approved with an ORDER_DETAILS button (Meta, "Payments API -
Brazil", order details template messages) carries the same `parameters` in its button
component: {"type": "button", "sub_type": "order_details", "index": "0", "parameters":
[{"type": "action", "action": {"order_details": parameters}}]} (`order_details_button`).
"""

from typing import Any

OFFSET = 100  # amounts in cents: value / 100
ORDER_STATUSES = ("pending", "processing", "partially_shipped", "shipped", "completed",
                  "canceled")
KEY_TYPES = ("CPF", "CNPJ", "EMAIL", "PHONE", "EVP")
MAX_REFERENCE = 35  # Meta: reference_id at most 35 characters
MAX_BODY = 1024


def _amount(cents: int) -> dict[str, int]:
    return {"value": cents, "offset": OFFSET}


def order_details(*, reference: str, amount_cents: int, item: str, body: str, code: str,
                  merchant_name: str, key: str, key_type: str) -> dict[str, Any]:
    """The `interactive` object asking for a Pix payment of `amount_cents` (BRL) for `item`,
    with the dynamic Pix `code`. Raises ValueError naming every rule broken."""
    interactive = {
        "type": "order_details", "body": {"text": body},
        "action": {"name": "review_and_pay", "parameters": {
            "reference_id": reference, "type": "digital-goods", "payment_type": "br",
            "currency": "BRL", "total_amount": _amount(amount_cents),
            "payment_settings": [{"type": "pix_dynamic_code", "pix_dynamic_code": {
                "code": code, "merchant_name": merchant_name[:100], "key": key,
                "key_type": key_type}}],
            "order": {"status": "pending", "subtotal": _amount(amount_cents), "items": [
                {"retailer_id": reference, "name": item[:60], "amount": _amount(amount_cents),
                 "quantity": 1}]}}}}
    _raise(order_problems(interactive))
    return interactive


def order_status(*, reference: str, status: str, body: str,
                 description: str = "") -> dict[str, Any]:
    """The `interactive` object updating order `reference` to `status` (ORDER_STATUSES)."""
    order: dict[str, Any] = {"status": status}
    if description:
        order["description"] = description[:120]
    interactive = {"type": "order_status", "body": {"text": body},
                   "action": {"name": "review_order",
                              "parameters": {"reference_id": reference, "order": order}}}
    _raise(order_problems(interactive))
    return interactive


def order_details_button(interactive: dict[str, Any]) -> dict[str, Any]:
    """The template button component carrying the payment of an `order_details` object (as
    `order_details` builds it) in an order-details template (module docstring)."""
    return {"type": "button", "sub_type": "order_details", "index": "0", "parameters": [
        {"type": "action", "action": {"order_details": interactive["action"]["parameters"]}}]}


def order_button_problems(component: Any) -> list[str]:
    """Every rule an order-details template's button component breaks: its one `action`
    parameter's `order_details` follows the order_details message's rules."""
    params = _dict(component).get("parameters")
    if not isinstance(params, list) or len(params) != 1 or _dict(params[0]).get("type") \
            != "action":
        return ["order_details button: parameters must be one {type: action}"]
    details = _dict(_dict(_dict(params[0]).get("action")).get("order_details"))
    reference = details.get("reference_id")
    problems = [] if isinstance(reference, str) and 1 <= len(reference) <= MAX_REFERENCE \
        else [f"reference_id: 1 to {MAX_REFERENCE} characters"]
    return problems + _details_problems({"name": "review_and_pay"}, details)


def order_problems(interactive: Any) -> list[str]:
    """Every rule of the module docstring an order_details or order_status object breaks."""
    if not isinstance(interactive, dict):
        return ["interactive must be an object"]
    kind = interactive.get("type")
    action = _dict(interactive.get("action"))
    params = _dict(action.get("parameters"))
    body = _dict(interactive.get("body")).get("text")
    problems = [] if isinstance(body, str) and body.strip() and len(body) <= MAX_BODY \
        else [f"body.text: 1 to {MAX_BODY} characters"]
    reference = params.get("reference_id")
    if not isinstance(reference, str) or not 1 <= len(reference) <= MAX_REFERENCE:
        problems.append(f"reference_id: 1 to {MAX_REFERENCE} characters")
    if kind == "order_status":
        if action.get("name") != "review_order":
            problems.append("order_status action.name must be review_order")
        if _dict(params.get("order")).get("status") not in ORDER_STATUSES:
            problems.append(f"order.status must be one of {', '.join(ORDER_STATUSES)}")
        return problems
    if kind != "order_details":
        return problems + ["interactive.type must be order_details or order_status"]
    return problems + _details_problems(action, params)


def _details_problems(action: dict[str, Any], params: dict[str, Any]) -> list[str]:
    problems = []
    if action.get("name") != "review_and_pay":
        problems.append("order_details action.name must be review_and_pay")
    if params.get("payment_type") != "br" or params.get("currency") != "BRL":
        problems.append("payment_type must be br and currency BRL")
    if params.get("type") not in ("digital-goods", "physical-goods"):
        problems.append("type must be digital-goods or physical-goods")
    total = _value(params.get("total_amount"))
    order = _dict(params.get("order"))
    items = order.get("items") if isinstance(order.get("items"), list) else []
    subtotal = _value(order.get("subtotal"))
    if total is None or subtotal is None or total != subtotal or total <= 0:
        problems.append("total_amount must equal order.subtotal, value > 0, offset 100")
    if not items or subtotal != sum((_value(_dict(i).get("amount")) or 0)
                                    * int(_dict(i).get("quantity") or 0) for i in items):
        problems.append("order.subtotal must be the sum of items' amount × quantity")
    settings = params.get("payment_settings")
    pix = [_dict(_dict(s).get("pix_dynamic_code")) for s in settings or []
           if _dict(s).get("type") == "pix_dynamic_code"] if isinstance(settings, list) else []
    if not pix or not all(isinstance(p.get(f), str) and p.get(f)
                          for p in pix for f in ("code", "merchant_name", "key")):
        problems.append("payment_settings needs a pix_dynamic_code with code, merchant_name "
                        "and key")
    elif any(p.get("key_type") not in KEY_TYPES for p in pix):
        problems.append(f"pix_dynamic_code.key_type must be one of {', '.join(KEY_TYPES)}")
    return problems


def _value(amount: Any) -> int | None:
    amount = _dict(amount)
    value = amount.get("value")
    if not isinstance(value, int) or isinstance(value, bool) or amount.get("offset") != OFFSET:
        return None
    return value


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _raise(problems: list[str]) -> None:
    if problems:
        raise ValueError("; ".join(problems))
