"""The interface every payment provider implements, and its errors (issue 48).

```
PaymentError            the provider refused or could not be reached (`retryable` says whether
                        trying again later may succeed)
```
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

# the shortest life a dynamic Pix charge may have (Mercado Pago: 30 minutes to 30 days): a
# charge made for a shorter hold lives this long, and a payment after the release is "late"
MIN_CHARGE_LIFE = timedelta(minutes=30)


class PaymentError(Exception):
    """A provider call failed; `retryable`: a later try may succeed (network, 5xx, 429)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class Charge:
    """A dynamic Pix charge: the provider's id, the copy-and-paste code (BR Code, EMV), its
    expiry (aware UTC). The code is a secret of the customer's payment: never logged."""

    charge_id: str
    code: str
    expires_at: datetime


@dataclass(frozen=True)
class PaymentStatus:
    """A payment as the provider reports it when fetched: `paid` only when settled
    (Mercado Pago `approved`), the amount in integer cents, the external reference."""

    charge_id: str
    reference: str
    amount_cents: int
    paid: bool


@dataclass(frozen=True)
class Notification:
    """A verified webhook: the provider's event id (idempotence key) and the resource to
    fetch (`charge_id`; "" for a signed notification that is no payment's: ignored); the
    webhook body itself is never trusted for the amount."""

    event_id: str
    charge_id: str


class PixProvider(Protocol):
    """create_charge → a code to send; verify_webhook → a Notification or None (forged);
    fetch → the payment's status (the only source of "paid")."""

    name: str

    def create_charge(self, amount_cents: int, expires_at: datetime,
                      reference: str, description: str) -> Charge: ...

    def verify_webhook(self, body: bytes, headers: dict[str, str],
                       query: dict[str, str]) -> Notification | None: ...

    def fetch(self, charge_id: str) -> PaymentStatus: ...
