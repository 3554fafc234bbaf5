"""The 24-hour customer service window: when a free-form reply may still go out.

Sources: WhatsApp §6. Outside the window only an approved template may be sent (Meta answers a
free-form send 131047, `whatsapp.errors.GraphWindowClosed`); the product refuses it locally
first (ARCHITECTURE.md, What holds under failure).
"""

from datetime import datetime, timedelta

SERVICE_WINDOW = timedelta(hours=24)  # free-form replies within 24 h of the last inbound message
# why a free-form message was not answered or sent (stored with it; callers prefix the verb)
SERVICE_WINDOW_CLOSED = "more than 24 hours since the customer's last message"


def window_closed(last_inbound_at: datetime | None, now: datetime) -> bool:
    """True when a free-form message may no longer be sent at `now` to a customer whose last
    message was at `last_inbound_at` (None: never wrote, so no window is open)."""
    return last_inbound_at is None or now - last_inbound_at > SERVICE_WINDOW
