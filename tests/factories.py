"""Builders for webhook bodies and scenarios (invented names and numbers only)."""

from datetime import datetime
from typing import Any

PHONE_NUMBER_ID = "109876543210987"
ANA = ("5511999990001", "BR.9000000000000000001")
BRUNO = ("5511999990002", "BR.9000000000000000002")
BASE_TS = 1780318830

TENANT: dict[str, Any] = {
    "phone_number_id": PHONE_NUMBER_ID, "name": "Salão Exemplo",
    "timezone": "America/Sao_Paulo",
    "services": [{"code": "corte", "name": "Corte feminino", "duration_minutes": 60}],
    "professionals": [{"code": "julia", "name": "Júlia", "services": ["corte"]}],
    "hours": {"mon": ["09:00-18:00"], "tue": ["09:00-18:00"], "sat": ["09:00-13:00"]},
}


def text_body(text: str, n: int, *, who: tuple[str, str] = ANA, name: str = "Ana Teste",
              phone_number_id: str = PHONE_NUMBER_ID,
              sent_at: datetime | None = None) -> dict[str, Any]:
    """A webhook body with one text message; `n` makes the wamid unique. Meta's `timestamp`
    is `sent_at` (when the customer sent it), by default the scenarios' start plus `n` s.
    """
    wa_id, user_id = who
    timestamp = int(sent_at.timestamp()) if sent_at else BASE_TS + n
    return {"object": "whatsapp_business_account", "entry": [{"id": "102030405060708",
            "changes": [{"field": "messages", "value": {
                "messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "5511999990000",
                             "phone_number_id": phone_number_id},
                "contacts": [{"profile": {"name": name}, "wa_id": wa_id, "user_id": user_id}],
                "messages": [{"from": wa_id, "from_user_id": user_id,
                              "id": f"wamid.TEST{wa_id[-4:]}{n:06d}",
                              "timestamp": str(timestamp), "type": "text",
                              "text": {"body": text}}]}}]}]}


def scenario(steps: list[dict[str, Any]], **tenant: Any) -> dict[str, Any]:
    return {"name": "test", "clock": "2026-06-01T13:00:30Z", "tenant": {**TENANT, **tenant},
            "steps": steps}
