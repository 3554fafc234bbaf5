"""What storing a group of arriving messages reads first: their stored copies and tombstones,
their tenants, and the contacts they come from with each one's open conversation."""

from typing import Any

from sqlmodel import Session

from storage.contacts import lookup_many as contacts_lookup
from storage.messages import lookup_many, wamid_hash


def lookup_group(session: Session, *, wamids: list[str], phone_number_ids: list[str],
                 user_ids: list[str], wa_ids: list[str]) -> tuple[
                     dict[str, Any], set[str], dict[str, Any], list[Any]]:
    """`lookup_many` and the contacts of these tenants known by one of these ids, each with
    its open conversation (the rows of `contacts.lookup_many`). On PostgreSQL the four
    SELECTs (and the BEGIN) travel together in one pipeline: one round trip."""
    if session.connection().dialect.name != "postgresql":
        stored, tombstoned, tenants = lookup_many(session, wamids=wamids,
                                                  phone_number_ids=phone_number_ids)
        return stored, tombstoned, tenants, contacts_lookup(
            session, tenant_ids=[t.id for t in tenants.values()], user_ids=user_ids,
            wa_ids=wa_ids)
    from psycopg.rows import namedtuple_row  # psycopg: imported only where PostgreSQL runs

    raw: Any = session.connection().connection.driver_connection  # the psycopg connection
    by_hash = {wamid_hash(x): x for x in wamids}
    with raw.pipeline():
        cursors = [raw.cursor(row_factory=namedtuple_row) for _ in _GROUP_LOOKUPS]
        for cursor, sql, params in zip(cursors, _GROUP_LOOKUPS, (
                [wamids], [list(by_hash)], [phone_number_ids],
                [phone_number_ids, user_ids, wa_ids]), strict=True):
            cursor.execute(sql, params)
    stored_rows, tombs, tenants_rows, contact_rows = (c.fetchall() for c in cursors)
    return ({r.wamid: r for r in stored_rows}, {by_hash[r.wamid_hash] for r in tombs},
            {r.phone_number_id: r for r in tenants_rows}, contact_rows)


_GROUP_LOOKUPS = (  # PostgreSQL, psycopg's placeholders; table names as in storage/models.py
    "SELECT wamid, id, conversation_id, starts_turn, answered_at, wa_type FROM message "
    "WHERE wamid = ANY(%s)",
    "SELECT wamid_hash FROM wamidtombstone WHERE wamid_hash = ANY(%s)",
    "SELECT phone_number_id, id, timezone, inactivity_timeout_minutes, keep_cpf FROM tenant "
    "WHERE phone_number_id = ANY(%s)",
    "SELECT c.tenant_id, c.id, c.user_id, c.wa_id, c.profile_name, c.last_inbound_at, "
    "v.id AS conversation_id, v.last_activity_at, "
    "v.last_inbound_at AS conversation_last_inbound_at "
    "FROM contact c LEFT JOIN conversation v ON v.contact_id = c.id AND v.status = 'open' "
    "WHERE c.tenant_id IN (SELECT id FROM tenant WHERE phone_number_id = ANY(%s)) "
    "AND (c.user_id = ANY(%s) OR c.wa_id = ANY(%s))",
)
