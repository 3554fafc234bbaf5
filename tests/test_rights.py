"""The one contact lookup (`storage.rights.find_contact`): the admin API, the console
(`operations.service.find_contact`) and the CLI find the same contact for the same reference."""

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from sqlmodel import Session

from operations import service
from operations.service import NotFound
from storage.models import Contact, Tenant
from storage.rights import find_contact
from tests.conftest import START


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    with Session(engine) as s:
        s.add(Tenant(id=1, name="Salão", phone_number_id="100", created_at=START))
        s.add(Tenant(id=2, name="Outro", phone_number_id="200", created_at=START))
        s.flush()
        s.add(Contact(id=7, tenant_id=1, wa_id="5511999990001", created_at=START))
        s.add(Contact(id=8, tenant_id=1, user_id="BR.ana", created_at=START))
        s.add(Contact(id=9, tenant_id=2, wa_id="5511999990002", created_at=START))
        s.commit()
        yield s


def test_a_contact_is_found_by_wa_id_user_id_or_numeric_id(session: Session) -> None:
    assert [find_contact(session, 1, ref).id for ref in ("5511999990001", "BR.ana", "7", "8")
            ] == [7, 8, 7, 8]


@pytest.mark.parametrize("ref", ["9", "5511999990002", "²", "0000000007", "x", ""])
def test_no_other_tenants_contact_and_no_id_that_is_not_short_ascii_digits(
        session: Session, ref: str) -> None:
    assert find_contact(session, 1, ref) is None


def test_the_admin_service_uses_the_same_rule_and_names_a_miss(session: Session) -> None:
    tenant = session.get(Tenant, 1)
    assert tenant is not None
    assert service.find_contact(session, tenant, "7").id == 7
    with pytest.raises(NotFound):
        service.find_contact(session, tenant, "9")
