"""Storing delivery statuses of our sends (sent, delivered, read, failed): a run of them in
one transaction, set-based; and what Meta bills for each sent message, from the status's
`pricing` at the rate card (one `whatsapp_charge` row per (tenant, wamid): the cost ledger,
usage/ledger.py)."""

from datetime import datetime

import structlog
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from storage import messages
from storage.db import session_scope
from storage.models import Outbound, Tenant, WhatsAppCharge
from whatsapp.inbound import StatusUpdate
from whatsapp.rate_card import RateCard, active_rate_card

log = structlog.get_logger(__name__)
WAMID_LENGTH = WhatsAppCharge.__table__.c.wamid.type.length  # type: ignore[attr-defined]


def store_statuses(engine: Engine, statuses: list[StatusUpdate], now: datetime,
                   costs: dict[str, int] | None = None) -> list[str]:
    """Store a run of statuses of one POST in one transaction (a status costs a few indexed
    statements; a commit of its own cost more than those); returns each one's outcome
    (`apply_statuses`). Raises on any database error: nothing is then stored (the caller,
    `intake.ingest`, stores each again alone)."""
    with session_scope(engine) as session:
        return apply_statuses(session, statuses, now, costs)


def apply_statuses(session: Session, statuses: list[StatusUpdate], now: datetime,
                   costs: dict[str, int] | None = None) -> list[str]:
    """Advance the delivery state of our sends by `statuses`, each only under the tenant that
    sent it (the status names its `phone_number_id`); an unknown wamid or number changes
    nothing. Returns each status's outcome ("status" or "status_unknown"), in order; they
    are applied reply by reply (`_in_lock_order`), so that runs at once never deadlock.

    Set-based: one query for the run's tenants and one for which of its wamids are our sends,
    whatever its length (at most UPDATES_PER_TRANSACTION); only a status of one of our sends
    costs statements of its own (messages.apply_status). Unknown ones are logged once per run.
    The run's charges are recorded by `record_charges` (new ones added to `costs`, µUSD by
    category, for the metrics).
    """
    numbers = {status.phone_number_id for status in statuses}
    tenant_of = dict(session.exec(select(Tenant.phone_number_id, Tenant.id).where(
        col(Tenant.phone_number_id).in_(numbers))).all())
    wamids = {status.wamid for status in statuses}
    found = session.exec(select(Outbound.wamid, Outbound.tenant_id, Outbound.message_id,
                                Outbound.id).where(col(Outbound.wamid).in_(wamids))
                         ).all() if tenant_of else []
    ours = {(wamid, tenant_id) for wamid, tenant_id, _, _ in found}
    place = {str(wamid): (int(message_id), int(outbound_id or 0))
             for wamid, _, message_id, outbound_id in found}
    outcomes = ["status_unknown"] * len(statuses)
    for n in _in_lock_order(statuses, place):
        status = statuses[n]
        if (status.wamid, tenant_of.get(status.phone_number_id)) not in ours:
            continue
        row = messages.apply_status(session, wamid=status.wamid, status=status.status,
                                    error_code=status.error_code,
                                    error_reason=status.error_reason, now=now)
        if row is None:
            continue
        if status.status == "failed":
            log.warning("outbound_failed", conversation_id=row.conversation_id,
                        error_code=status.error_code)
        outcomes[n] = "status"
    unknown = outcomes.count("status_unknown")
    if unknown:
        log.info("status_unknown_wamid", statuses=unknown)
    senders = {wamid: tenant_id for wamid, tenant_id in ours if wamid}
    for category, micro_usd in record_charges(session, statuses, tenant_of, now,
                                              senders=senders).items():
        if costs is not None:
            costs[category] = costs.get(category, 0) + micro_usd
    return outcomes


def _in_lock_order(statuses: list[StatusUpdate],
                   place: dict[str, tuple[int, int]]) -> list[int]:
    """The indexes of `statuses` by (reply, part) of their send (`place`: wamid → (message
    id, outbound id)), unknown wamids last, a wamid's own statuses in arrival order. Each
    status locks its reply's row until the run commits (messages.apply_status): two runs
    over the same replies take their rows in one order, so neither waits for a row the other
    holds while holding one it waits for (a deadlock, PostgreSQL). Meta orders nothing, and a
    send's final state does not depend on its statuses' order (delivery.supersedes)."""
    last = (2 ** 63, 2 ** 63)
    return sorted(range(len(statuses)), key=lambda n: place.get(statuses[n].wamid, last))


def record_charges(session: Session, statuses: list[StatusUpdate],
                   tenant_of: dict[str, int | None],
                   now: datetime, card: RateCard | None = None,
                   senders: dict[str, int] | None = None) -> dict[str, int]:
    """One `whatsapp_charge` row per (tenant, wamid) of the statuses with a `pricing` whose
    number is a tenant's (Meta bills the number whoever sent); the first status with a
    pricing wins, a later one (`delivered`/`read` after `sent`, a redelivery) changes nothing:
    one INSERT … ON CONFLICT DO NOTHING for the run. Market: the recipient's
    (`RateCard.market_of`); unknown → the card's fallback market, logged (no number). The rate
    applied and `micro_usd` are fixed here (`RateCard.charge`, on the status's UTC day).
    Never charged: a `failed` status (its message was not delivered; Meta's `pricing` comes
    on `sent` and delivered/read: Sources: WhatsApp §3.5), and a wamid `senders` (wamid →
    tenant of our sends) says another tenant sent (logged `whatsapp_charge_other_tenant`), a
    wamid longer than the column (logged `whatsapp_charge_bad_wamid`: it would refuse the
    run's transaction). Returns µUSD by category of the rows inserted
    now."""
    card = card or active_rate_card()
    senders = senders or {}
    rows: dict[tuple[int, str], dict[str, object]] = {}
    for status in statuses:
        tenant_id = tenant_of.get(status.phone_number_id)
        if status.pricing is None or tenant_id is None or status.status == "failed" \
                or (tenant_id, status.wamid) in rows:
            continue
        if len(status.wamid) > WAMID_LENGTH:  # never Meta's: it would refuse the whole run
            log.warning("whatsapp_charge_bad_wamid", tenant_id=tenant_id,
                        wamid_length=len(status.wamid))
            continue
        if senders.get(status.wamid, tenant_id) != tenant_id:
            log.warning("whatsapp_charge_other_tenant", tenant_id=tenant_id,
                        sender_tenant_id=senders[status.wamid])
            continue
        at = status.timestamp or now
        market = card.market_of(status.recipient_id, status.recipient_user_id)
        charge = card.charge(status.pricing, market, at.date())
        if not charge.market_known:
            log.warning("whatsapp_market_unknown", tenant_id=tenant_id,
                        fallback_market=charge.market)
        if card.rate(charge.market, status.pricing.category, at.date()) is None:
            log.warning("whatsapp_rate_missing", tenant_id=tenant_id, market=charge.market,
                        category=status.pricing.category[:32])
        rows[(tenant_id, status.wamid)] = {
            "tenant_id": tenant_id, "wamid": status.wamid,
            "billable": status.pricing.billable is not False,
            "pricing_model": status.pricing.pricing_model[:16],
            "category": status.pricing.category[:32], "pricing_type": status.pricing.type[:32],
            "market": charge.market[:8], "rate_micro_usd": charge.rate_micro_usd,
            "micro_usd": charge.micro_usd, "charged_at": at}
    inserted = messages.insert_rows(
        session, WhatsAppCharge.__table__, list(rows.values()),  # type: ignore[attr-defined]
        returning=("category", "micro_usd"), conflict=("tenant_id", "wamid"))
    costs: dict[str, int] = {}
    for category, micro_usd in inserted:
        costs[category] = costs.get(category, 0) + micro_usd
    return costs
