"""The admin API's request bodies that exist only at the HTTP edge (the rest are the schema's:
storage/tenant_config.py, or the operations'): described in the OpenAPI document."""

from pydantic import BaseModel, ConfigDict, Field

from operations import service
from storage.tenant_config import (
    MAX_PRICE_CENTS,
    HoursExceptionSpec,
    Intervals,
    ProfessionalSpec,
    ServiceSpec,
    TenantConfig,
    TimeOffSpec,
    WeeklyHours,
)

MAX_ID = 2**31 - 1


# -- request bodies that exist only at the HTTP edge -----------------------------------------

class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class TenantCreate(TenantConfig):
    """A new tenant: as `TenantConfig`, with its name required."""

    name: str = Field(min_length=1, max_length=200)


class TokenCreate(_Body):
    label: str = Field("", max_length=100, description="who or what uses the token")


class Decision(_Body):
    reason: str = Field("", max_length=500, description="kept with the decision")


class ServiceBody(_Body):
    """Fields left out keep their value; a new service needs its duration."""

    name: str | None = Field(None, max_length=200)
    duration_minutes: int | None = Field(None, ge=5, le=1440)
    price_cents: int | None = Field(None, ge=0, le=MAX_PRICE_CENTS,
                                    description="price in cents of the tenant's currency "
                                                "(8000 = R$ 80,00); null clears it")
    price_from: bool | None = Field(None, description='the price is a minimum ("a partir de")')
    description: str | None = Field(None, max_length=300)
    buffer_minutes: int | None = Field(None, ge=0, le=240, description="minutes busy after "
                                       "the visit (clean-up)")


class ProfessionalBody(_Body):
    """Fields left out keep their value (their week: storage/tenant_config.ProfessionalSpec)."""

    name: str | None = Field(None, max_length=200)
    services: list[str] | None = Field(None, max_length=200,
                                       description="codes of the services they do")
    hours: WeeklyHours | None = Field(None, description="their weekly hours; null: the "
                                                        "business's")
    time_off: list[TimeOffSpec] | None = Field(None, max_length=200)
    hours_exceptions: list[HoursExceptionSpec] | None = Field(None, max_length=366)
    durations: dict[str, int] | None = Field(None, description="minutes by service code")


class HoursExceptionBody(_Body):
    hours: Intervals = Field(default_factory=list,
                             description="HH:MM-HH:MM intervals; empty: closed all day")
    note: str = Field("", max_length=200)


class HoursBody(_Body):
    hours: WeeklyHours = Field(description='{"mon": ["09:00-18:00"], ...}; days left out '
                                           "are closed")


class CatalogueBody(_Body):
    services: list[ServiceSpec] | None = None
    professionals: list[ProfessionalSpec] | None = None
    hours: WeeklyHours | None = None
    hours_exceptions: list[HoursExceptionSpec] | None = None
    slot_granularity_minutes: int | None = Field(None, ge=5, le=1440)


class Page(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(50, ge=1, le=service.MAX_PAGE, description="at most this many")
    after_id: int = Field(0, ge=0, le=MAX_ID, description="those after this id")


class MessagesPage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(service.MAX_PAGE, ge=1, le=service.MAX_PAGE,
                       description="at most this many messages")
    after_id: int = Field(0, ge=0, le=MAX_ID, description="messages after this id")
