"""The configuration schema of a tenant: what a business may set and how it is validated
(`TenantSettings`, `TenantConfig`, the catalogue's specs), the readable problems of a refusal
(`problems_of`), and the pure rules of prices and reminder texts. Pure: no session, no rows
written; storage/catalogue.py and storage/tenants.py apply what it validates.
"""

from datetime import date
from string import Formatter
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from core.holidays import parse_calendar
from storage.errors import TenantConfigError
from storage.fact_keys import resolve_keys
from storage.models import Tenant

# the catalogue's parts of a tenant file (storage/catalogue.py), never settings
CATALOGUE_PARTS = ("services", "professionals", "hours", "hours_exceptions")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
TENANT_FIELDS = tuple(name for name in Tenant.model_fields
                      if name not in ("id", "phone_number_id", "created_at",
                                      "sending_paused_reason", "standby_seen_at"))

_INTERVAL = r"^([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-3]):[0-5][0-9]$"
_CODE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
Interval = Annotated[str, StringConstraints(pattern=_INTERVAL)]


def _check_intervals(intervals: list[str]) -> list[str]:
    for interval in intervals:
        if interval[:5] >= interval[6:]:
            raise ValueError(f"{interval!r}: opens must be before closes")
    ordered = sorted(intervals)
    for before, after in zip(ordered, ordered[1:], strict=False):
        if after[:5] < before[6:]:
            raise ValueError(f"{before!r} and {after!r} overlap")
    return ordered


Intervals = Annotated[list[Interval], Field(max_length=10), AfterValidator(_check_intervals)]


MODEL_PATTERN = r"^claude-[a-z0-9.-]{1,57}$"  # agent_model, summary_model, fallback_model
# the models the console offers in its selects (any id matching MODEL_PATTERN is accepted
# through the API and the CLI); usage/ledger.PRICES prices them by family
KNOWN_MODELS = ("claude-haiku-4-5", "claude-sonnet-5-5", "claude-opus-4-5")

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class FactKeySpec(_Strict):
    """A key of the tenant's own (storage/fact_keys.py)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{1,40}$", description="snake_case, 2 to 41 "
                                                                    "characters")
    kind: Literal["preference", "agreement", "restriction", "registration", "occurrence"] = \
        Field(description="what sort of fact it is")
    validity_days: int = Field(365, ge=1, le=36_500, description="a value expires this long "
                                                                "after it was recorded")
    review_days: int | None = Field(None, ge=1, le=36_500, description="marked \"to confirm\" "
                                    "after this long; none: validity_days - 30")
    risk: Literal["low", "high"] = Field("low", description="high: every value waits for a "
                                                           "person's review")
    sensitive: bool = Field(False, description="true allows health, religion or political "
                                               "content")
    shape: Literal["text", "name", "period", "weekday", "service", "professional"] = Field(
        "text", description="what a value must be; free text is reviewed by a person before "
                            "it is used")


REMINDER_PARAMETERS = ("customer_name", "service", "professional", "date", "time", "address")
# the body parameters a `deposit_template` may have (workers/deposits.py fills them in)
DEPOSIT_PARAMETERS = ("customer_name", "amount", "until")


def check_placeholders(text: str, allowed: tuple[str, ...] = REMINDER_PARAMETERS) -> str:
    """A tenant text with placeholders (`reminder_text`): only plain `{name}` fields of
    `allowed`, `{{`/`}}` for a literal brace. Raises ValueError naming the first fault:
    an unknown field, an attribute or index (`{service.x}`, `{service[0]}`), a conversion or
    format spec, or a lone brace. The rule str.format applies when the text is sent
    (workers/reminders.py)."""
    try:
        parts = list(Formatter().parse(text))
    except ValueError as exc:  # a lone { or }
        raise ValueError(f"{exc}; write {{{{ or }}}} for a brace") from None
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in allowed or spec or conversion:
            shown = "{" + field + (f"!{conversion}" if conversion else "") \
                + (f":{spec}" if spec else "") + "}"
            raise ValueError(f"{shown} is not a field; use plain {{name}} with one of "
                             + ", ".join("{" + a + "}" for a in allowed))
    return text
BUTTON_ACTIONS = ("confirm", "reschedule", "cancel")


class TemplateButton(_Strict):
    """A quick-reply button of a template, in order: its `title` as Meta's template shows it
    (the send carries only the payload) and what a tap does (issue 25, workers/reminders.py)."""

    title: str = Field(min_length=1, max_length=25, description="the button's text in Meta's "
                                                                "template")
    action: Literal["confirm", "reschedule", "cancel"] = Field(
        description="what a tap does (workers/reminders.py)")


class TemplateSpec(_Strict):
    """An approved WhatsApp template the tenant may send outside the 24-hour window (staff
    replies now; later capabilities reuse it). `parameters`: the names of its body variables,
    in order ({{1}}, {{2}}...), each filled in by whoever sends it; `buttons`: its quick-reply
    buttons' texts. Sources: WhatsApp §5.2 (template messages)."""

    name: str = Field(pattern=r"^[a-z0-9_]{1,512}$", description="the template's name in "
                                                                 "WhatsApp Manager")
    language: str = Field("pt_BR", pattern=r"^[a-z]{2}(_[A-Z]{2})?$",
                          description="the language it was approved in")
    parameters: list[Annotated[str, StringConstraints(min_length=1, max_length=60)]] = Field(
        default_factory=list, max_length=20, description="names of its body variables in "
                                                         "order ({{1}}, {{2}}...)")
    buttons: list[Annotated[str, StringConstraints(min_length=1, max_length=25)]
                  | TemplateButton] = Field(default_factory=list, max_length=10,
                                            description="its quick-reply buttons in order")


def _unique_templates(value: list[TemplateSpec] | None) -> list[TemplateSpec] | None:
    if value is not None:
        seen = [(t.name, t.language) for t in value]
        doubles = sorted({f"{n} ({lang})" for n, lang in seen if seen.count((n, lang)) > 1})
        if doubles:
            raise ValueError(f"declared twice: {', '.join(doubles)}")
    return value


def doubles(values: list[str], *, fold: bool = False) -> list[str]:
    """The values given more than once (ignoring case when `fold`), sorted; each named as
    first given."""
    keys = [v.casefold() if fold else v for v in values]
    return sorted({v for v, k in zip(values, keys, strict=True) if keys.count(k) > 1})


def _one_per_day(value: list[Any]) -> list[Any]:
    """Hours exceptions: one per date (a second would silently replace the first)."""
    twice = doubles([e.day.isoformat() for e in value])
    if twice:
        raise ValueError(f"more than one exception on {', '.join(twice)}")
    return value


def _unique_codes(value: list[Any] | None) -> list[Any] | None:
    """Services or professionals: one per code, codes compared ignoring case (the agent
    matches a code or name the customer says ignoring case: "corte" and "Corte" would be
    ambiguous, and a second "julia" would silently replace the first)."""
    if value is not None:
        twice = doubles([item.code for item in value], fold=True)
        if twice:
            raise ValueError(f"code given more than once (case ignored): {', '.join(twice)}")
    return value


def _iso_day(value: str) -> str:
    """A YYYY-MM-DD day, kept as its ISO text (a JSON column)."""
    try:
        return date.fromisoformat(value.strip()).isoformat()
    except ValueError:
        raise ValueError(f"{value[:20]!r} is not a day YYYY-MM-DD") from None


def _allowlist(value: list[str] | None) -> list[str] | None:
    """The allowlist's numbers as their digits, each once, sorted (storage/threads.allowed).
    A number without its country code ("(11) 98888-7777", a trunk 0) is refused: it matches
    no WhatsApp id, so the agent would silently answer no one (the rule of
    operations/agenda.phone_digits)."""
    if value is None:
        return None
    national = [n for n in value if n.strip().lstrip("(").startswith("0") or (
        not n.strip().startswith("+") and len("".join(c for c in n if c.isdigit())) <= 11)]
    if national:
        raise ValueError(f"{national[0][:24]!r} has no country code; type it in full, "
                         "e.g. +55 11 99999-0001")
    return sorted({"".join(c for c in number if c.isdigit()) for number in value})


class TenantSettings(_Strict):
    """The fields of a tenant a business may change (all optional: only those given apply)."""

    name: str | None = Field(None, min_length=1, max_length=200,
                             description="the business's name, shown to the model")
    timezone: str | None = Field(None, max_length=64, description="IANA zone of opening hours, "
                                 "slots and received times")
    language: Literal["pt-BR", "en"] | None = Field(
        None, description="the default language of replies and of the product's own "
                          "customer-facing texts (apologies, fallbacks)")
    instructions: str | None = Field(None, max_length=50_000,
                                     description="the agent's instructions (system prompt)")
    inactivity_timeout_minutes: int | None = Field(
        None, ge=1, le=43_200, description="a conversation idle this long closes (a new one "
                                           "starts clean; facts are extracted)")
    compaction_threshold_tokens: int | None = Field(
        None, ge=0, le=1_000_000_000, description="context size (all three input counters) "
                                                  "past which compaction runs")
    compaction_min_gain_tokens: int | None = Field(
        None, ge=0, le=1_000_000_000, description="compaction runs only if it frees at least "
                                                  "this much")
    keep_messages: int | None = Field(None, ge=1, le=500,
                                      description="messages kept verbatim after compaction "
                                                  "(moved forward to a safe start)")
    prune_after_user_turns: int | None = Field(
        None, ge=0, le=1000, description="tool results older than this many customer turns "
                                         "become a short note")
    agent_model: str | None = Field(None, pattern=MODEL_PATTERN,
                                    description="the model of a turn")
    summary_model: str | None = Field(None, pattern=MODEL_PATTERN,
                                      description="the smaller model that writes summaries "
                                                  "and extracts facts")
    slot_granularity_minutes: int | None = Field(
        None, ge=5, le=1440, description="step between start times, from each opening "
                                         "interval's start; a booking off this grid (15:07) is "
                                         "refused")
    booking_horizon_days: int | None = Field(
        None, ge=1, le=3650, description="bookings open at most this many days ahead (the "
                                         "last day: today + this)")
    booking_notice_minutes: int | None = Field(
        None, ge=0, le=43_200, description="a booking starts at least this long after now "
                                           "(slots sooner are not offered)")
    max_upcoming_bookings: int | None = Field(
        None, ge=1, le=1000, description="upcoming visits one customer may hold at once (a "
                                         "move does not count twice)")
    parallel_services: list[Annotated[str, StringConstraints(max_length=64)]] | None = Field(
        None, max_length=100, description="service codes that may run at once with the "
                                          "service before them in a visit, with another "
                                          "professional (e.g. a manicure beside a haircut)")
    retention_days: int | None = Field(
        None, ge=1, le=36_500, description="closed conversations older than this lose their "
                                           "messages and summary")
    followup_template: str | None = Field(None, pattern=r"^[a-z0-9_]{0,512}$",
                                          description="approved template sent when the "
                                                      "24 h window closed; empty: none")
    followup_template_language: str | None = Field(
        None, pattern=r"^[a-z]{2}(_[A-Z]{2})?$", description="the follow-up template's "
                                                              "language code")
    fact_keys: list[Annotated[str, StringConstraints(max_length=64)] | FactKeySpec] | None = \
        Field(None, max_length=50, description="names of default keys, or keys of your own")
    # a person takes over (storage/staff.py)
    handoff_text: str | None = Field(None, max_length=1000, description="what the customer is "
                                     "told when the agent hands off; empty: the product's")
    staff_timeout_minutes: int | None = Field(
        None, ge=1, le=43_200, description="back to the agent after this long without a "
                                           "staff message")
    handoff_alert_minutes: int | None = Field(
        None, ge=1, le=43_200, description="a handoff nobody answered alerts again after this")
    echo_pause_minutes: int | None = Field(
        None, ge=0, le=43_200, description="how long a message sent from the WhatsApp "
                                           "Business app pauses the agent; 0: never")
    templates: Annotated[list[TemplateSpec] | None, AfterValidator(_unique_templates)] = Field(
        None, max_length=100, description="approved templates for outside the 24-hour window")
    currency: str | None = Field(None, pattern=r"^[A-Z]{3}$",
                                 description="ISO 4217 code of the services' prices (BRL)")
    appointment_notes_sensitive: bool | None = Field(
        None, description="appointment notes may hold health details (an allergy); "
                          "default false: such a note is refused and the model is told to "
                          "record the request without them")
    # reminders (issue 25; storage/reminders.py)
    reminder_lead_minutes: list[Annotated[int, Field(ge=15, le=20_160)]] | None = Field(
        None, max_length=3, description="reminders this many minutes before the start, up "
                                        "to three (default [1440]); [] sends none")
    quiet_hours: str | None = Field(
        None, pattern=r"^$|" + _INTERVAL,
        description="local HH:MM-HH:MM (may wrap midnight) when no reminder goes out "
                    "(default 21:00-08:00); empty: none")
    reminder_template: str | None = Field(
        None, pattern=r"^[a-z0-9_]{0,512}$",
        description="one of `templates`, sent as the reminder outside the 24-hour window; "
                    "empty: none (such reminders are skipped)")
    reminder_text: str | None = Field(
        None, max_length=900, description="the reminder inside the 24-hour window ({service}, "
                                          "{professional}, {date}, {time}, {customer_name}, "
                                          "{address}); empty: the product's")
    cancellation_window_minutes: int | None = Field(
        None, ge=0, le=43_200, description="a tapped Cancelar cancels only at least this "
                                           "long before the start; 0: any time before")
    notice_template: str | None = Field(
        None, pattern=r"^[a-z0-9_]{0,512}$",
        description="one of `templates`, telling the customer of a cancel or move by the "
                    "business outside the 24-hour window; empty: none")
    address: str | None = Field(None, max_length=300,
                                description="the business's address (a reminder field)")
    coexistence: bool | None = Field(
        None, description="the number is also used in the WhatsApp Business app (sends "
                          "paced at 20/s instead of 80/s)")
    # issue 42: CPF kept in stored text; public holidays (core/holidays.py)
    keep_cpf: bool | None = Field(None, description="keep CPF numbers customers send (a "
                                  "clinic that issues invoices); default false: masked before "
                                  "they are stored, as card numbers always are (all but the "
                                  "last four digits)")
    holiday_calendar: str | None = Field(
        None, max_length=64, description="public holidays: BR, BR-SP (a state or city); "
                                         "empty: the timezone's country; none: no holidays")
    open_holidays: Annotated[list[Annotated[str, AfterValidator(_iso_day)]] | None,
                             AfterValidator(lambda v: v if v is None else sorted(set(v)))] = \
        Field(None, max_length=100, description="public holidays (YYYY-MM-DD) the business "
                                                "opens")
    # issue 47: the waitlist (storage/waitlist.py)
    waitlist_hold_minutes: int | None = Field(
        None, ge=1, le=1440, description="how long a slot freed for the waitlist is held "
                                         "for the customer offered it (default 15)")
    waitlist_template: str | None = Field(
        None, pattern=r"^[a-z0-9_]{0,512}$",
        description="one of `templates`, offering a freed slot outside the 24-hour window "
                    "(a paid message); empty: such offers go to the next customer")
    waitlist_inside_window_only: bool | None = Field(
        None, description="offer freed slots only inside the 24-hour window (no paid "
                          "template); default false")

    # issue 45: beside Meta's agent on the same number (storage/threads.py)
    busy_thread_rule: Literal["skip_and_show", "send_template"] | None = Field(
        None, description="a reminder or business notice due while Meta's agent or another "
                          "app holds the thread: skip_and_show (not sent, shown to staff; the "
                          "default) or send_template (the declared template, never free text)")
    agent_allowlist: Annotated[
        list[Annotated[str, StringConstraints(pattern=r"^\+?[0-9 ()-]{8,24}$")]] | None,
        AfterValidator(_allowlist)] = Field(None, max_length=1000,
                       description="staged launch: the customer numbers the agent answers "
                                   "(others are stored and listed, not answered); empty: "
                                   "everyone")

    # issue 46: the iCalendar feeds (operations/feeds.py)
    feed_notes: bool | None = Field(
        None, description="the calendar feeds show appointment notes; default false: the "
                          "service and the customer's first name only")
    no_show_uses_session: bool | None = Field(
        None, description="a no-show uses a session of the customer's package of that "
                          "service; default true")

    # issue 48: deposits by Pix (storage/deposits.py)
    deposit_cents: int | None = Field(
        None, ge=0, le=100_000_000, description="deposit in cents a booking waits for "
                                                    "(a service's own rule wins); 0: none")
    deposit_percent: int | None = Field(
        None, ge=0, le=100, description="deposit as a percentage of the visit's price, when "
                                        "no amount is set; 0: none")
    deposit_hold_minutes: int | None = Field(
        None, ge=5, le=1440, description="how long a booking is held waiting for its deposit "
                                         "(default 30), then released")
    pix_key: str | None = Field(None, max_length=77, description="the Pix key deposits are "
                                "paid into, shown with the code (never logged)")
    pix_key_type: str | None = Field(
        None, pattern=r"^(|CPF|CNPJ|EMAIL|PHONE|EVP)$",
        description="kind of pix_key: CPF, CNPJ, EMAIL, PHONE or EVP (random key)")
    deposit_refund: str | None = Field(
        None, pattern=r"^(kept|owed|kept_inside_window)$",
        description="a paid deposit on a cancelled visit: kept, owed (refund by staff), or "
                    "kept_inside_window (owed when cancelled before the cancellation window)")
    deposit_template: str | None = Field(
        None, pattern=r"^[a-z0-9_]{0,512}$",
        description="one of `templates`, approved in WhatsApp Manager with an ORDER_DETAILS "
                    "button, asking for a deposit outside the 24-hour window (a paid message; "
                    "its parameters: customer_name, amount, until); empty: not sent")

    # issue 49: the monthly model budget (workers/budgets.py)
    model_budget_cents: int | None = Field(
        None, ge=0, le=100_000_000, description="monthly model budget in US cents (the "
                                                "calendar month in the tenant's timezone); "
                                                "0: none. At 80 % the owner is told; at 100 % "
                                                "budget_action applies")
    budget_action: Literal["fallback", "handoff"] | None = Field(
        None, description="once the month's model cost reaches the budget: fallback (turns "
                          "use fallback_model; the default) or handoff (the customer gets "
                          "the handoff text and staff take over)")
    fallback_model: str | None = Field(None, pattern=MODEL_PATTERN,
                                       description="the model of a turn over budget "
                                                   "(default claude-haiku-4-5)")

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: "America" is a
                # directory of the zone database, not a zone
                raise ValueError(f"{value!r} is not an IANA zone (e.g. America/Sao_Paulo)")\
                    from None
        return value

    @field_validator("holiday_calendar")
    @classmethod
    def _calendar(cls, value: str | None) -> str | None:
        if value is not None:
            parse_calendar(value)  # ValueError names the fault
        return value

    @field_validator("reminder_text")
    @classmethod
    def _placeholders(cls, value: str | None) -> str | None:
        return value if value is None else check_placeholders(value)

    @field_validator("fact_keys")
    @classmethod
    def _keys(cls, value: list[Any] | None) -> list[Any] | None:
        if value is not None:
            try:
                resolve_keys([k.model_dump(exclude_none=True) if isinstance(k, BaseModel)
                              else k for k in value])
            except (TypeError, ValueError) as exc:
                raise ValueError(str(exc)) from None
        return value

    def settings(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True, exclude_none=True)


MAX_PRICE_CENTS = 100_000_000  # one million in the tenant's currency


def parse_price(text: str) -> int | None:
    """A price as an owner types it → cents: "80", "80,00", "80.5", "R$ 1.200,00" (Brazilian
    thousands dots), "1200.00"; "" → None (no price). Raises TenantConfigError when it is not
    an amount (at most two decimals, not negative, at most MAX_PRICE_CENTS)."""
    raw = text.strip().removeprefix("R$").strip().replace(" ", "")
    if not raw:
        return None
    if "," in raw:  # Brazilian: dots group thousands, the comma is the decimal mark
        raw = raw.replace(".", "").replace(",", ".")
    whole, _, cents = raw.partition(".")
    # isdecimal, not isdigit: "²" is a digit int() refuses (a 500 in the console's forms)
    if not whole.isdecimal() or not (cents == "" or (cents.isdecimal() and len(cents) <= 2)):
        raise TenantConfigError(f"price: {text[:40]!r} is not an amount (e.g. 80 or 80,00)")
    value = int(whole) * 100 + int(cents.ljust(2, "0") or 0)
    if value > MAX_PRICE_CENTS:
        raise TenantConfigError(f"price: at most {MAX_PRICE_CENTS // 100}")
    return value


CURRENCY_SIGNS = {"BRL": "R$", "USD": "US$", "EUR": "€"}  # others: the ISO code


def price_text(cents: int | None, currency: str = "BRL", *, minimum: bool = False,
               language: str = "pt-BR") -> str:
    """A price as people read it: "R$ 1.200,00", "a partir de R$ 80,00" (pt-BR), "from
    R$ 80.00" (en); "" when there is none. The one rendering of a price (console, prompt)."""
    if cents is None:
        return ""
    whole, rest = divmod(cents, 100)
    if language == "pt-BR":
        amount = f"{whole:,}".replace(",", ".") + f",{rest:02d}"
    else:
        amount = f"{whole:,}.{rest:02d}"
    text = f"{CURRENCY_SIGNS.get(currency, currency)} {amount}"
    if minimum:
        text = ("a partir de " if language == "pt-BR" else "from ") + text
    return text


def _not_blank(name: str) -> str:
    """A name given is not blank (left out, a service or professional is named by its code)."""
    if not name:
        raise ValueError("must not be blank (leave it out to keep the name, or the code)")
    return name


class ServiceSpec(_Strict):
    code: str = Field(pattern=_CODE, description="the service's code (case-sensitive), what "
                                                  "the tools name")
    name: str = Field("", max_length=200, description="what customers call it")
    duration_minutes: int = Field(ge=5, le=1440, description="how long a visit takes")
    price_cents: int | None = Field(None, ge=0, le=MAX_PRICE_CENTS,
                                    description="price in cents of the tenant's currency "
                                                "(e.g. 8000 = R$ 80,00); none: not stated")
    price_from: bool = Field(False, description="the price is a minimum (\"a partir de\")")
    description: str = Field("", max_length=300, description="one line the model may quote")
    buffer_minutes: int = Field(0, ge=0, le=240, description="minutes the professional stays "
                                "busy after the visit (clean-up); default 0")
    deposit_cents: int | None = Field(None, ge=0, le=MAX_PRICE_CENTS,
                                      description="deposit (Pix) to hold a booking, in cents; "
                                                  "none: the tenant's rule")
    deposit_percent: int | None = Field(None, ge=0, le=100,
                                        description="deposit as a percentage of the price; "
                                                    "none: the tenant's rule")

    @field_validator("name")
    @classmethod
    def _named(cls, value: str) -> str:
        return _not_blank(value)

    @field_validator("price_from")
    @classmethod
    def _from_needs_price(cls, value: bool, info: Any) -> bool:
        if value and info.data.get("price_cents") is None:
            raise ValueError("price_from needs price_cents")
        return value

    @field_validator("description")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return " ".join(value.split())


class TimeOffSpec(_Strict):
    """Days a professional does not work (a holiday): `from` to `to`, both included."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, populate_by_name=True)
    start: date = Field(alias="from", description="first local day off, YYYY-MM-DD")
    end: date = Field(alias="to", description="last local day off, YYYY-MM-DD (included)")
    note: str = Field("", max_length=200, description="why (\"férias\"), for staff")

    @field_validator("end")
    @classmethod
    def _ordered(cls, value: date, info: Any) -> date:
        start = info.data.get("start")
        if start is not None and value < start:
            raise ValueError(f"ends ({value.isoformat()}) before it starts "
                             f"({start.isoformat()})")
        return value

    def stored(self) -> dict[str, str]:
        return {"from": self.start.isoformat(), "to": self.end.isoformat(), "note": self.note}


class ProfessionalSpec(_Strict):
    """A professional and their own week (issue 22; agent/tools/availability.py): `hours` in
    the business's shape (left out: the business's hours), `time_off` ranges, `hours_exceptions`
    of their own (the business's apply on top), `durations` {service code: minutes} where a
    service takes them another time than the service's."""

    code: str = Field(pattern=_CODE, description="the professional's code")
    name: str = Field("", max_length=200, description="their name, as customers say it")
    services: list[str] = Field(default_factory=list, max_length=200,
                                description="codes of the services this professional does")
    hours: dict[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"], Intervals] | None = \
        Field(None, description="their weekly hours, {\"mon\": [\"09:00-18:00\"]}; "
                                "none: the business's")
    time_off: list[TimeOffSpec] = Field(default_factory=list, max_length=200,
                                        description="[{\"from\", \"to\", \"note\"}] days "
                                                    "off, both included")
    hours_exceptions: list["HoursExceptionSpec"] = Field(
        default_factory=list, max_length=366, description="their own dates, as the business's "
                                                          "(which apply on top)")
    durations: dict[str, Annotated[int, Field(ge=5, le=1440)]] = Field(
        default_factory=dict, max_length=200,
        description="minutes a service takes with this professional, by service code")

    @field_validator("name")
    @classmethod
    def _named(cls, value: str) -> str:
        return _not_blank(value)

    @field_validator("services")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))

    @field_validator("durations")
    @classmethod
    def _done_here(cls, value: dict[str, int], info: Any) -> dict[str, int]:
        services = info.data.get("services")
        if services is not None:
            stray = sorted(set(value) - set(services))
            if stray:
                raise ValueError(f"{', '.join(stray)}: not a service this professional does "
                                 f"(does: {', '.join(services) or 'none'})")
        return value

    @field_validator("hours_exceptions")
    @classmethod
    def _days_once(cls, value: list[Any]) -> list[Any]:
        return _one_per_day(value)

    def week(self) -> dict[str, Any]:
        """The Professional columns of the week: hours, time_off, hours_exceptions, durations."""
        return {"hours": {d: list(i) for d, i in self.hours.items()} if self.hours is not None
                else None,
                "time_off": [t.stored() for t in self.time_off],
                "hours_exceptions": [{"day": e.day.isoformat(), "hours": list(e.hours),
                                      "note": e.note} for e in self.hours_exceptions],
                "durations": dict(self.durations)}


class HoursExceptionSpec(_Strict):
    day: date = Field(description="local date, YYYY-MM-DD")
    hours: Intervals = Field(default_factory=list,
                             description="HH:MM-HH:MM intervals; empty: closed all day")
    note: str = Field("", max_length=200, description="why (\"Natal\")")


ProfessionalSpec.model_rebuild()
WeeklyHours = dict[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"], Intervals]
WEEKLY_HOURS: TypeAdapter[WeeklyHours] = TypeAdapter(WeeklyHours)


class TenantConfig(TenantSettings):
    """A whole tenant as `wagent tenant create` and replays take it."""

    phone_number_id: str = Field(pattern=r"^[0-9]{1,64}$", description="the WhatsApp number's "
                                 "id in Meta's webhooks; routes updates to the tenant "
                                 "(required)")
    services: Annotated[list[ServiceSpec] | None, AfterValidator(_unique_codes)] = Field(
        None, max_length=200, description="the catalogue's services (the service keys below)")
    professionals: Annotated[list[ProfessionalSpec] | None, AfterValidator(_unique_codes)] = \
        Field(None, max_length=100, description="who works, what they do and when (the "
                                                "professional keys below)")
    hours: WeeklyHours | None = Field(None, description="local opening intervals by weekday: "
                                      "{\"mon\": [\"09:00-12:00\", \"13:00-18:00\"], ...}")
    hours_exceptions: Annotated[list[HoursExceptionSpec] | None,
                                AfterValidator(lambda v: v if v is None else _one_per_day(v))] \
        = Field(None, max_length=1000, description="a date's hours instead of its weekday's: "
                                                   "[{\"day\", \"hours\", \"note\"}]; "
                                                   "hours [] closes it")

    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in super().settings().items() if k in TENANT_FIELDS}


# What a pattern means, said to the owner instead of the regular expression itself
_PATTERN_MEANS = {
    _INTERVAL: "use HH:MM-HH:MM, times from 00:00 to 23:59 (e.g. 09:00-18:00)",
    _CODE: "use 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit",
}


def problems_of(exc: ValidationError) -> list[str]:
    """Readable "where: what" lines of a pydantic error (for API details and the CLI); a
    pattern the value missed is said in words (`_PATTERN_MEANS`), the value echoed."""
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "body"
        message = str(error["msg"]).removeprefix("Value error, ")
        pattern = (error.get("ctx") or {}).get("pattern")
        if error["type"] == "string_pattern_mismatch" and pattern in _PATTERN_MEANS:
            message = f"{str(error['input'])[:40]!r}: {_PATTERN_MEANS[pattern]}"
        elif error["type"] == "extra_forbidden" and where in CATALOGUE_PARTS:
            message = ("part of the catalogue, not a setting: change it in the console's "
                       "Catálogo, the admin API's catalog routes or `wagent catalog`")
        lines.append(f"{where}: {message}")
    return lines


def validate_config(config: Any) -> TenantConfig:
    """Validate a whole tenant dict; raises TenantConfigError naming every problem at once
    (a bad timezone would otherwise fail every message later)."""
    if not isinstance(config, dict):
        raise TenantConfigError("the tenant must be a JSON object")
    try:
        return TenantConfig.model_validate(config)
    except ValidationError as exc:
        raise TenantConfigError(*problems_of(exc)) from None
