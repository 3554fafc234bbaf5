"""Tenant configuration problems travel as a list (`TenantConfigError.problems`) from the
validator to the admin API and the console; nothing splits a joined message back."""

from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine
from sqlmodel import Session

from operations import service
from operations import settings as settings_ops
from storage.errors import TenantConfigError
from storage.tenant_config import validate_config
from storage.tenants import upsert_tenant

BAD = {"phone_number_id": "100", "name": "Salão", "timezone": "Mars/Base", "keep_messages": -1}


def test_every_problem_is_one_item_and_the_message_joins_them() -> None:
    with pytest.raises(TenantConfigError) as caught:
        validate_config(BAD)
    problems = caught.value.problems
    assert len(problems) == 2
    assert [p.split(": ", 1)[0] for p in problems] == ["timezone", "keep_messages"]
    assert str(caught.value) == "; ".join(problems)
    assert TenantConfigError("a; b").problems == ["a; b"], "a problem is never split"


def test_the_admin_service_passes_the_list_on(engine: Engine) -> None:
    with Session(engine) as session:
        with pytest.raises(TenantConfigError) as direct:
            upsert_tenant(session, BAD, now=datetime(2026, 6, 1, tzinfo=UTC))
        with pytest.raises(service.Invalid) as caught:
            settings_ops.create_tenant(session, BAD, now=datetime(2026, 6, 1, tzinfo=UTC))
    assert caught.value.problems == direct.value.problems
    assert len(caught.value.problems) == 2


@pytest.mark.parametrize("part", ["hours", "services", "professionals", "hours_exceptions"])
def test_a_catalogue_part_given_as_a_setting_says_where_it_is_changed(part: str) -> None:
    """`tenant update --set hours=...` (or a PATCH) names the catalogue's doors instead of
    pydantic's "Extra inputs are not permitted" (found by a newcomer's trial)."""
    from pydantic import ValidationError

    from storage.tenant_config import TenantSettings, problems_of
    with pytest.raises(ValidationError) as caught:
        TenantSettings.model_validate({part: {"mon": ["09:00-18:00"]}})
    assert problems_of(caught.value) == [
        f"{part}: part of the catalogue, not a setting: change it in the console's Catálogo, "
        "the admin API's catalog routes or `wagent catalog`"]
    with pytest.raises(ValidationError) as other:
        TenantSettings.model_validate({"colour": "red"})
    assert problems_of(other.value) == ["colour: Extra inputs are not permitted"]
