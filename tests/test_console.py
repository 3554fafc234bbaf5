"""The console over HTTP (no browser): sign-in, cookies, CSRF, tenant isolation, errors."""

import http.cookiejar
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from sqlmodel import select

from cli.main import main
from replay.environment import ReplayEnvironment
from storage.db import session_scope
from storage.models import Appointment, ContactFact, Conversation, Service, Tenant
from tests.conftest import START
from tests.console_helpers import SALON, Seeded, seed
from tests.test_admin_api import call
from tests.test_edits import follow_up


@pytest.fixture
def env(database_url: str | None, redis_url: str | None) -> Iterator[ReplayEnvironment]:
    environment = ReplayEnvironment(start=START, database_url=database_url, redis_url=redis_url)
    yield environment
    environment.close()


@pytest.fixture
def seeded(env: ReplayEnvironment) -> Seeded:
    return seed(env)


class Browser:
    """A cookie-keeping HTTP client that does not follow redirects."""

    def __init__(self, base: str) -> None:
        self.base, self.jar = base, http.cookiejar.CookieJar()

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None

        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar),
                                                  NoRedirect())
        self.csrf = ""

    def request(self, path: str, data: dict[str, Any] | None = None
                ) -> tuple[int, str, dict[str, str]]:
        body = urllib.parse.urlencode(data, doseq=True).encode() if data is not None else None
        try:
            response = self.opener.open(self.base + path, body, timeout=10)
            status, text, headers = response.status, response.read().decode(), response.headers
        except urllib.error.HTTPError as exc:
            status, text, headers = exc.code, exc.read().decode(), exc.headers
        found = re.search(r'name="csrf" value="([^"]+)"', text)
        if found:
            self.csrf = found.group(1)
        return status, text, dict(headers)

    def sign_in(self, token: str) -> None:
        self.request("/console/login")
        status, _, headers = self.request("/console/login", {"csrf": self.csrf, "token": token})
        assert status == 303 and headers["Location"] == "/console/"
        assert self.request("/console/")[0] == 200


def test_sign_in_sets_a_strict_httponly_cookie_and_a_wrong_token_is_refused(
        env: ReplayEnvironment, seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    assert browser.request("/console/")[:1] == (303,), "signed out: to the sign-in page"
    browser.request("/console/login")
    status, _, headers = browser.request("/console/login", {"csrf": browser.csrf,
                                                           "token": "wat_wrong"})
    assert status == 303 and "failed" in headers["Location"]
    browser.request("/console/login")
    status, _, headers = browser.request("/console/login", {"csrf": browser.csrf,
                                                           "token": seeded.salon_token})
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
    status, page, headers = browser.request("/console/")
    assert status == 200 and "Salão Exemplo" in page
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]


def test_forms_without_a_valid_csrf_token_are_refused(env: ReplayEnvironment,
                                                      seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.request("/console/login")
    assert browser.request("/console/login", {"csrf": "forged",
                                              "token": seeded.salon_token})[0] == 403
    browser.sign_in(seeded.salon_token)
    for path, data in (("/console/catalog/services", {"code": "x", "duration_minutes": "30"}),
                       ("/console/settings", {"instructions": "hacked"}),
                       (f"/console/review/{seeded.salon_fact_id}/approve", {}),
                       ("/console/logout", {})):
        assert browser.request(path, data)[0] == 403, path
        assert browser.request(path, {**data, "csrf": "wrong"})[0] == 403, path
    with session_scope(env.engine) as session:
        assert session.exec(select(Service).where(Service.code == "x")).first() is None
        assert session.get(ContactFact, seeded.salon_fact_id).state == "pending_review"
        assert "hacked" not in session.exec(select(Tenant)).first().instructions


def test_a_tenant_session_cannot_see_or_change_another_tenants_data(
        env: ReplayEnvironment, seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.garage_token)
    status, page, _ = browser.request(f"/console/conversations/{seeded.salon_conversation_id}")
    assert status == 404 and "Ana" not in page and "corte" not in page
    status, page, _ = browser.request("/console/conversations")
    assert "Ana Teste" not in page and f"/console/conversations/{seeded.garage_conversation_id}" \
        in page
    assert "amônia" not in browser.request("/console/review")[1]
    with session_scope(env.engine) as session:
        salon_booking = session.exec(select(Appointment)).one()
    for path in (f"/console/review/{seeded.salon_fact_id}/approve",
                 f"/console/review/{seeded.salon_fact_id}/reject",
                 f"/console/appointments/{salon_booking.id}/cancel"):
        status, page, _ = browser.request(path, {"csrf": browser.csrf, "reason": "x"})
        assert status == 404, path
    assert browser.request("/console/appointments?week=2026-06-01")[1].count("Corte") == 0
    with session_scope(env.engine) as session:
        assert session.get(ContactFact, seeded.salon_fact_id).state == "pending_review"
        assert session.get(Appointment, salon_booking.id).status == "booked"


def test_validation_errors_are_shown_beside_the_field(env: ReplayEnvironment,
                                                      seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    browser.request("/console/settings")
    status, page, _ = browser.request("/console/settings", {
        "csrf": browser.csrf, "instructions": "Oi", "inactivity_timeout_minutes": "0",
        "retention_days": "abc", "language": "pt-BR", "fact_keys": "shoe_size",
        "followup_template": "", "followup_template_language": "pt_BR"})
    assert status == 422
    for field in ("inactivity_timeout_minutes", "retention_days"):
        assert f'id="error-{field}"' in page, field
    status, page, _ = browser.request("/console/settings", {
        "csrf": browser.csrf, "instructions": "Oi", "inactivity_timeout_minutes": "0",
        "retention_days": "30", "language": "pt-BR", "fact_keys": "shoe_size",
        "followup_template": "", "followup_template_language": "pt_BR"})
    assert 'id="error-inactivity_timeout_minutes"' in page and 'id="error-fact_keys"' in page
    status, page, _ = browser.request("/console/catalog/services", {
        "csrf": browser.csrf, "code": "corte", "duration_minutes": "2"})
    assert status == 303


def test_pages_render_in_english_too(env: ReplayEnvironment, seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    assert "Agenda" in browser.request("/console/")[1]
    browser.request("/console/language", {"csrf": browser.csrf, "language": "en",
                                          "next": "/console/review"})
    status, page, _ = browser.request("/console/review")
    assert status == 200 and "Fact review" in page and 'lang="en"' in page
    for path in ("/console/settings", "/console/catalog", "/console/conversations",
                 f"/console/conversations/{seeded.salon_conversation_id}",
                 "/console/appointments", "/console/appointments?week=nonsense"):
        assert browser.request(path)[0] == 200, path


def test_a_revoked_token_ends_the_session(env: ReplayEnvironment, seeded: Seeded) -> None:
    from storage.models import AdminToken

    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    with session_scope(env.engine) as session:
        for token in session.exec(select(AdminToken)):
            token.revoked_at = env.clock.now()
            session.add(token)
    status, _, headers = browser.request("/console/")
    assert status == 303 and headers["Location"] == "/console/login"


def test_the_transcript_and_the_agenda_read_as_a_person_would(env: ReplayEnvironment,
                                                              seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    _, page, _ = browser.request(f"/console/conversations/{seeded.salon_conversation_id}")
    assert "oi! tem horário amanhã à tarde pra corte?" in page
    assert "[Mon 2026-06-01" not in page, "the model's received-time stamp is not shown"
    _, agenda, _ = browser.request("/console/appointments?week=2026-06-01")
    assert "Ana Teste" in agenda and "Corte feminino" in agenda and "Júlia" in agenda


def test_a_message_the_customer_deleted_shows_as_deleted_without_its_text(
        env: ReplayEnvironment, seeded: Seeded) -> None:
    first = "oi! tem horário amanhã à tarde pra corte?"  # Ana's first message, then deleted
    revoke = follow_up("revoke", "wamid.R.CONSOLE", "wamid.TEST0001000001",
                       ts=int(env.clock.now().timestamp()))
    assert env.post_webhook(json.dumps(revoke).encode()) == 200
    path = f"/console/conversations/{seeded.salon_conversation_id}"
    for language, label in (("pt-BR", "Mensagem apagada pelo cliente"),
                            ("en", "Message deleted by the customer")):
        browser = Browser(env.web_url)
        browser.sign_in(seeded.salon_token)
        browser.request("/console/language", {"csrf": browser.csrf, "language": language,
                                              "next": path})
        _, page, _ = browser.request(path)
        assert page.count(label) == 1 and first not in page, language
        assert '<div class="bubble customer deleted">' in page
    with session_scope(env.engine) as session:
        salon_id = session.get(Conversation, seeded.salon_conversation_id).tenant_id
    status, body = call(env, "GET", f"/admin/tenants/{salon_id}/conversations/"
                        f"{seeded.salon_conversation_id}", token=seeded.salon_token)
    (deleted,) = [m for m in body["messages"] if m["deleted_at"]]
    assert status == 200 and first not in json.dumps(deleted["content"], ensure_ascii=False)


def test_the_session_cookie_is_secure_behind_a_tls_proxy(env: ReplayEnvironment,
                                                         seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.request("/console/login")
    request = urllib.request.Request(
        env.web_url + "/console/login", method="POST",
        data=urllib.parse.urlencode({"csrf": browser.csrf, "token": seeded.salon_token}).encode(),
        headers={"X-Forwarded-Proto": "https"})
    try:
        browser.opener.open(request, timeout=10)
    except urllib.error.HTTPError as exc:
        cookie = exc.headers["Set-Cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie


def test_errors_read_in_portuguese_in_the_portuguese_console(env: ReplayEnvironment,
                                                             seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    browser.request("/console/settings")
    status, page, _ = browser.request("/console/settings", {
        "csrf": browser.csrf, "instructions": "Oi", "inactivity_timeout_minutes": "0",
        "retention_days": "trinta", "language": "pt-BR", "fact_keys": "preferred_name",
        "followup_template": "", "followup_template_language": "pt_BR"})
    assert status == 422 and "deve ser no mínimo 1" in page
    assert "informe um número inteiro" in page and "Input should" not in page
    browser.request("/console/catalog/services", {"csrf": browser.csrf, "code": "corte",
                                                  "duration_minutes": "2"})
    _, catalog, _ = browser.request("/console/catalog")
    assert "deve ser no mínimo 5" in catalog
    # the holidays hint is a command that runs: it names the tenant's phone_number_id
    assert (f"wagent tenant update {SALON['phone_number_id']} --set holiday_calendar=BR-SP"
            in catalog)
    browser.request("/console/catalog/services/remove", {"csrf": browser.csrf, "code": "corte"})
    _, catalog, _ = browser.request("/console/catalog")
    assert "agendamento(s) futuro(s)" in catalog


def test_a_long_conversation_shows_its_latest_messages(env: ReplayEnvironment, seeded: Seeded,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # a page size of the console no setting reaches
    monkeypatch.setattr("bot.console.conversations.TRANSCRIPT_MESSAGES", 4)
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    _, page, _ = browser.request(f"/console/conversations/{seeded.salon_conversation_id}")
    assert 'id="older"' in page and "Pode sim! Aceitamos pix" in page, "the newest are shown"
    assert "oi! tem horário amanhã" not in page


def test_a_fact_whose_key_the_tenant_dropped_is_refused_by_every_door(
        env: ReplayEnvironment, seeded: Seeded, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """CLI, API and console approve through one operation (operations.service.approve_fact),
    so the same refusal comes out of each, and the fact stays in review."""
    with session_scope(env.engine) as session:
        fact = session.get(ContactFact, seeded.salon_fact_id)
        salon = session.get(Tenant, fact.tenant_id)
        salon.fact_keys = ["preferred_name", "preferred_period"]  # allergies no longer kept
        session.add(salon)
        salon_id = salon.id
    refusal = "key 'allergies' is no longer among the tenant's fact_keys"
    monkeypatch.setenv("DATABASE_URL", env.engine.url.render_as_string(hide_password=False))
    capsys.readouterr()
    assert main(["facts", "approve", str(seeded.salon_fact_id), "--reason", "ok"]) == 2
    assert refusal in capsys.readouterr().err
    status, body = call(env, "POST", f"/admin/tenants/{salon_id}/facts/"
                        f"{seeded.salon_fact_id}/approve", {"reason": "ok"},
                        token=seeded.salon_token)
    assert status == 409 and body["error"]["message"] == refusal
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    browser.request("/console/review")
    status, _, headers = browser.request(f"/console/review/{seeded.salon_fact_id}/approve",
                                         {"csrf": browser.csrf, "reason": "ok"})
    assert status == 303 and headers["Location"] == "/console/review"
    _, page, _ = browser.request("/console/review")
    assert ('<div class="flash bad" role="status">o fato &#39;allergies&#39; não está mais '
            "entre os fatos que o negócio guarda</div>") in page
    with session_scope(env.engine) as session:
        assert session.get(ContactFact, seeded.salon_fact_id).state == "pending_review"


def test_facts_reject_from_the_cli_is_the_consoles_rejection_and_its_job(
        env: ReplayEnvironment, seeded: Seeded, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DATABASE_URL", env.engine.url.render_as_string(hide_password=False))
    monkeypatch.setenv("QUEUE_NAME", env.settings.queue_name)
    # the CLI connects by REDIS_URL; the in-process stand-in has none: hand it over
    monkeypatch.setattr("cli.facts.connect_redis", lambda url: env.redis)
    capsys.readouterr()
    assert main(["facts", "reject", str(seeded.salon_fact_id), "--reason", "errado"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["state"], out["decided_by"], out["summaries"]) == ("rejected", "cli",
                                                                   "re-deriving")
    assert main(["facts", "reject", str(seeded.salon_fact_id)]) == 2, "rejected twice: refused"
    assert "is rejected" in capsys.readouterr().err
    scrubs = len([c for c in env.messages_api.calls if c.purpose == "summary"])
    env.drain()  # the job re-derives the summary without the value and closes the session
    (scrub,) = [c for c in env.messages_api.calls if c.purpose == "summary"][scrubs:]
    assert "<forget>\nallergies: amônia\n</forget>" in scrub.request["messages"][0]["content"]
    with session_scope(env.engine) as session:
        assert session.get(Conversation, seeded.salon_conversation_id).status == "closed"


def test_the_owner_edits_and_rejects_facts_and_cancels_a_booking(env: ReplayEnvironment,
                                                                 seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    browser.request("/console/review")
    status, _, headers = browser.request(f"/console/review/{seeded.salon_fact_id}/edit", {
        "csrf": browser.csrf, "value": "amônia e formol", "reason": "cliente corrigiu"})
    assert status == 303 and headers["Location"] == "/console/review"
    with session_scope(env.engine) as session:
        facts = session.exec(select(ContactFact).where(
            ContactFact.tenant_id == session.get(ContactFact, seeded.salon_fact_id).tenant_id)
        ).all()
        edited = next(f for f in facts if f.value == "amônia e formol")
        assert (edited.state, edited.origin) == ("confirmed", "admin")
        assert session.get(ContactFact, seeded.salon_fact_id).state == "superseded"
        pending = ContactFact(tenant_id=edited.tenant_id, contact_id=edited.contact_id,
                              key="preferred_name", value="Aninha", state="suggested",
                              created_at=env.clock.now())
        session.add(pending)
        session.flush()
        pending_id = pending.id
    status, _, _ = browser.request(f"/console/review/{pending_id}/reject",
                                   {"csrf": browser.csrf, "reason": "não é o nome dela"})
    assert status == 303
    with session_scope(env.engine) as session:
        assert session.get(ContactFact, pending_id).state == "rejected"
        booking = session.exec(select(Appointment)).one()
    status, _, headers = browser.request(f"/console/appointments/{booking.id}/cancel",
                                         {"csrf": browser.csrf})
    assert status == 303 and "week=2026-06-02" in headers["Location"]
    with session_scope(env.engine) as session:
        assert session.get(Appointment, booking.id).status == "cancelled"
    _, agenda, _ = browser.request(headers["Location"])
    assert "cancelado" in agenda and "O cliente recebe um aviso" in agenda


def test_the_owner_sets_the_booking_limits(env: ReplayEnvironment, seeded: Seeded) -> None:
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    _, page, _ = browser.request("/console/settings")
    assert 'name="booking_notice_minutes" value="60"' in page
    assert "Antecedência mínima" in page
    form = {"csrf": browser.csrf, "instructions": "Oi", "inactivity_timeout_minutes": "1440",
            "retention_days": "180", "language": "pt-BR", "fact_keys": "preferred_name",
            "followup_template": "", "followup_template_language": "pt_BR",
            "booking_notice_minutes": "120", "booking_horizon_days": "30",
            "max_upcoming_bookings": "0"}
    status, page, _ = browser.request("/console/settings", form)
    assert status == 422 and 'id="error-max_upcoming_bookings"' in page
    assert browser.request("/console/settings", {**form, "max_upcoming_bookings": "2"})[0] == 303
    with session_scope(env.engine) as session:
        tenant = session.exec(select(Tenant).where(Tenant.name == "Salão Exemplo")).one()
        assert (tenant.booking_notice_minutes, tenant.booking_horizon_days,
                tenant.max_upcoming_bookings) == (120, 30, 2)


def test_a_customers_packages_on_the_conversation_page_sold_and_adjusted(
        env: ReplayEnvironment, seeded: Seeded) -> None:
    """Issue 46 (2): staff see a customer's packages ("6 de 10 usadas"), sell one and adjust
    its sessions used, with CSRF; refusals change nothing; another tenant's package is not
    found; an expired one is shown as not usable (operations/packages.py's rules)."""
    from datetime import date

    from operations import packages
    from storage.models import CustomerPackage

    with session_scope(env.engine) as session:
        by_tenant = {c.tenant_id: c for c in session.exec(select(Conversation))}
        for tenant in session.exec(select(Tenant)):
            salon = tenant.phone_number_id == SALON["phone_number_id"]
            service_code = "corte" if salon else "revisao"
            packages.define(session, tenant, packages.PackageSpec(
                code="dez", name=f"Dez {service_code}", service=service_code, sessions=10,
                validity_days=60))
            packages.sell(session, tenant, packages.Sale(
                contact=str(by_tenant[tenant.id].contact_id), package="dez",
                expires_on=date(2026, 5, 1)), now=env.clock.now())  # already expired
        garage_id = session.get(Conversation, seeded.garage_conversation_id).tenant_id
        garage_package = session.exec(select(CustomerPackage).where(
            CustomerPackage.tenant_id == garage_id)).one().id
    browser = Browser(env.web_url)
    browser.sign_in(seeded.salon_token)
    base = f"/console/conversations/{seeded.salon_conversation_id}"
    _, page, _ = browser.request(base)
    assert 'id="packages"' in page and "vencido ou esgotado" in page
    assert browser.request(base + "/packages", {"package": "dez"})[0] == 403, "CSRF"
    status, _, headers = browser.request(base + "/packages", {
        "csrf": browser.csrf, "package": "dez", "authorisation": "AUT-77"})
    assert status == 303 and headers["Location"] == base + "#packages"
    _, page, _ = browser.request(base)
    assert "Pacote vendido: Dez corte" in page and "0 de 10 usadas" in page
    with session_scope(env.engine) as session:
        sold = session.exec(select(CustomerPackage).where(
            CustomerPackage.authorisation == "AUT-77")).one()
    adjust = f"{base}/packages/{sold.id}/adjust"
    assert browser.request(adjust, {"used": "6"})[0] == 403, "CSRF"
    assert browser.request(adjust, {"csrf": browser.csrf, "used": "6"})[0] == 303
    _, page, _ = browser.request(base)
    assert "6 de 10 usadas" in page and "Sessões usadas ajustadas" in page
    for bad, said in (("11", "de 0 a 10"), ("seis", "informe um número inteiro")):
        assert browser.request(adjust, {"csrf": browser.csrf, "used": bad})[0] == 303
        _, page, _ = browser.request(base)
        assert said in page and "6 de 10 usadas" in page, bad
    assert browser.request(f"{base}/packages/{garage_package}/adjust",
                           {"csrf": browser.csrf, "used": "3"})[0] == 303
    with session_scope(env.engine) as session:
        assert session.get(CustomerPackage, garage_package).used == 0, "another tenant's"
        assert session.get(CustomerPackage, sold.id).used == 6
    status, _, _ = browser.request(f"/console/conversations/{seeded.garage_conversation_id}"
                                   f"/packages/{garage_package}/adjust",
                                   {"csrf": browser.csrf, "used": "3"})
    assert status == 404
