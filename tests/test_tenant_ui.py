"""The tenants' opt-out UI under /app/: scoped by membership, CSRF everywhere, nothing lost."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from growth.models import Send, Suppression
from tests import tenant_pages
from tests.factories import AccountFactory, CampaignFactory, SegmentFactory, SubscriberFactory, UserFactory
from tests.helpers import texts
from tests.scenarios import member, sending_campaign
from tests.tenant_pages import url

pytestmark = pytest.mark.django_db

tenant, other_tenant, user = tenant_pages.tenant, tenant_pages.other_tenant, tenant_pages.user


def suppress(account, email, reason="manual", campaign=None):
    return Suppression.objects.create(account=account, email_lower=email, reason=reason,
                                      campaign=campaign)


# --- logging in -----------------------------------------------------------------------------

def test_every_page_needs_a_login(client, tenant):
    for name in ("suppressions", "suppression-add", "suppression-import", "suppression-export",
                 "lookup"):
        response = client.get(url(name, tenant))
        assert response.status_code == 302
        assert response["Location"].startswith("/app/login/?next=/app/accounts/acme/")
    assert client.get(reverse("growth:tenant:home"))["Location"].startswith("/app/login/")


def test_logging_in_and_out_with_a_password_and_csrf(tenant):
    user = member(tenant, username="ann")
    browser = Client(enforce_csrf_checks=True)
    login = reverse("growth:tenant:login")

    def token() -> str:
        return browser.cookies["csrftoken"].value

    assert browser.post(login, {"username": "ann", "password": "pw"}).status_code == 403  # no token
    browser.get(login)
    response = browser.post(login, {"username": "ann", "password": "wrong", "csrfmiddlewaretoken": token()})
    assert response.status_code == 200 and "didn't match" in response.content.decode()
    response = browser.post(login, {"username": "ann", "password": "pw", "csrfmiddlewaretoken": token()},
                            follow=True)
    assert response.redirect_chain[-1][0] == url("suppressions", tenant)
    assert response.wsgi_request.user == user
    assert browser.post(reverse("growth:tenant:logout"), {"csrfmiddlewaretoken": token()}).status_code == 302
    assert browser.get(url("suppressions", tenant)).status_code == 302


def test_home_lists_the_users_accounts(client, tenant, other_tenant):
    user = member(tenant)
    client.force_login(user)
    assert client.get(reverse("growth:tenant:home"))["Location"] == url("suppressions", tenant)
    from growth.models import Membership

    Membership.objects.create(user=user, account=other_tenant, role="viewer")
    body = client.get(reverse("growth:tenant:home")).content.decode()
    assert "Acme" in body and "Globex" in body and "Viewer" in body
    client.force_login(UserFactory())
    assert "not a member of any account" in client.get(reverse("growth:tenant:home")).content.decode()


# --- scoping ---------------------------------------------------------------------------------

def test_another_tenants_account_is_a_404_like_a_missing_one(client, user, other_tenant):
    theirs = suppress(other_tenant, "secret@example.com")
    missing = AccountFactory.build(slug="no-such-account")
    for account in (other_tenant, missing):
        for name, args in (("suppressions", ()), ("suppression-add", ()), ("suppression-import", ()),
                           ("suppression-export", ()), ("lookup", ()),
                           ("suppression-remove", (theirs.pk,))):
            response = client.get(url(name, account, *args))
            assert response.status_code == 404, (account.slug, name)
            assert b"secret@example.com" not in response.content
    response = client.post(url("suppression-remove", other_tenant, theirs.pk))
    assert response.status_code == 404
    assert Suppression.objects.filter(pk=theirs.pk).exists()


def test_another_tenants_suppression_id_under_my_account_is_a_404(client, user, tenant, other_tenant):
    theirs = suppress(other_tenant, "secret@example.com")
    response = client.get(url("suppression-remove", tenant, theirs.pk))
    assert response.status_code == 404 and b"secret@example.com" not in response.content
    assert client.post(url("suppression-remove", tenant, theirs.pk)).status_code == 404
    assert Suppression.objects.filter(pk=theirs.pk).exists()


def test_the_list_shows_only_the_accounts_suppressions(client, user, tenant, other_tenant):
    suppress(tenant, "mine@example.com")
    suppress(other_tenant, "theirs@example.com")
    body = client.get(url("suppressions", tenant)).content.decode()
    assert "mine@example.com" in body and "theirs@example.com" not in body


# --- the list ------------------------------------------------------------------------------------

def test_the_list_shows_reason_date_and_source_campaign(client, user, tenant):
    campaign = CampaignFactory(account=tenant, name="Spring sale")
    suppress(tenant, "gone@example.com", reason="unsubscribed", campaign=campaign)
    body = client.get(url("suppressions", tenant)).content.decode()
    assert "gone@example.com" in body and "Unsubscribed" in body and "Spring sale" in body
    assert "<time datetime=" in body


def test_search_filter_and_pages(client, user, tenant):
    Suppression.objects.bulk_create(
        [Suppression(account=tenant, email_lower=f"user{n:03}@example.com") for n in range(120)]
        + [Suppression(account=tenant, email_lower="bounce@example.org", reason="bounced")])
    first = client.get(url("suppressions", tenant)).content.decode()
    assert "121 addresses" in first and "Page 1 of 3" in first and first.count("<tr>") == 51
    third = client.get(url("suppressions", tenant), {"page": 3}).content.decode()
    assert third.count("<tr>") == 22
    found = client.get(url("suppressions", tenant), {"q": "USER01"}).content.decode()
    assert "10 addresses found" in found and "user010@example.com" in found
    bounced = client.get(url("suppressions", tenant), {"reason": "bounced"}).content.decode()
    assert "bounce@example.org" in bounced and "user000" not in bounced
    assert client.get(url("suppressions", tenant), {"page": "junk"}).status_code == 200


def facets(body: str) -> dict[str, str]:
    """{label: count} of the list's counts by reason."""
    return dict(re.findall(r'class="facet facet--[a-z]+"[^>]*>(\w+) <span class="facet__count">(\d+)</span>',
                           body))


def test_counts_by_reason_in_one_aggregate_each_a_filter(client, user, tenant, other_tenant):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    Suppression.objects.bulk_create(
        [Suppression(account=tenant, email_lower=f"gone{n}@example.com", reason="unsubscribed")
         for n in range(3)]
        + [Suppression(account=tenant, email_lower="bounce@example.org", reason="bounced"),
           Suppression(account=tenant, email_lower="typed@example.com", reason="manual"),
           Suppression(account=other_tenant, email_lower="theirs@example.com", reason="complained")])
    with CaptureQueriesContext(connection) as queries:
        body = client.get(url("suppressions", tenant)).content.decode()
    assert facets(body) == {"All": "5", "Unsubscribed": "3", "Bounced": "1", "Complained": "0",
                            "Manual": "1", "Imported": "0"}
    assert sum("FILTER (WHERE" in q["sql"] for q in queries.captured_queries) == 1
    # each count links to the list filtered by its reason, and that list has as many rows
    link = re.search(r'href="([^"]*)" class="facet facet--unsubscribed"', body)[1]
    assert link == url("suppressions", tenant) + "?reason=unsubscribed"
    filtered = client.get(link).content.decode()
    assert filtered.count('<td data-label="Address"') == 3
    assert re.search(r'class="facet facet--unsubscribed" aria-current="page"', filtered)
    assert "bounce@example.org" not in filtered


def test_counts_follow_the_search_and_its_links_keep_it(client, user, tenant):
    suppress(tenant, "ann@example.com", reason="bounced")
    suppress(tenant, "ann@example.org", reason="manual")
    suppress(tenant, "bob@example.com", reason="bounced")
    body = client.get(url("suppressions", tenant), {"q": "ann"}).content.decode()
    assert facets(body) == {"All": "2", "Unsubscribed": "0", "Bounced": "1", "Complained": "0",
                            "Manual": "1", "Imported": "0"}
    link = re.search(r'href="([^"]*)" class="facet facet--bounced"', body)[1]
    assert link == url("suppressions", tenant) + "?q=ann&amp;reason=bounced"
    filtered = client.get(url("suppressions", tenant), {"q": "ann", "reason": "bounced"}).content.decode()
    assert "ann@example.com" in filtered and "ann@example.org" not in filtered
    assert "bob@example.com" not in filtered
    # an unknown reason filters nothing and selects "All"
    junk = client.get(url("suppressions", tenant), {"reason": "<script>"}).content.decode()
    assert junk.count('<td data-label="Address"') == 3 and "<script>" not in junk
    assert re.search(r'class="facet facet--all" aria-current="page"', junk)


# --- adding --------------------------------------------------------------------------------------

def test_adding_one_or_many_addresses(client, user, tenant):
    suppress(tenant, "old@example.com", reason="bounced")
    response = client.post(url("suppression-add", tenant), {
        "addresses": "New@Example.com\nother@example.com, OLD@example.com", "reason": "complained"},
        follow=True)
    assert response.redirect_chain[-1][0] == url("suppressions", tenant)
    assert texts(response) == ["Suppressed 2: new@example.com, other@example.com.",
                               "Already suppressed, left as they were: OLD@example.com."]
    assert dict(Suppression.objects.values_list("email_lower", "reason")) == {
        "old@example.com": "bounced", "new@example.com": "complained", "other@example.com": "complained"}


def test_an_invalid_address_adds_nothing_and_keeps_what_was_typed(client, user, tenant):
    typed = "good@example.com\nnot-an-address\n"
    response = client.post(url("suppression-add", tenant), {"addresses": typed, "reason": "manual"})
    assert response.status_code == 200
    body = response.content.decode()
    assert "Nothing was added: 1 invalid address." in body
    assert "Line 2: <code>not-an-address</code>" in body
    assert "good@example.com\nnot-an-address" in body  # still in the textarea
    assert not Suppression.objects.exists()


def test_adding_refuses_reasons_a_tenant_cannot_claim(client, user, tenant):
    response = client.post(url("suppression-add", tenant), {"addresses": "a@example.com",
                                                            "reason": "unsubscribed"})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not Suppression.objects.exists()


# --- removing ------------------------------------------------------------------------------------

def test_removing_asks_first_then_removes_and_a_repeat_is_harmless(client, user, tenant):
    segment = SegmentFactory(account=tenant)
    SubscriberFactory(segment=segment, email="gone@example.com", status="unsubscribed")
    row = suppress(tenant, "gone@example.com", reason="unsubscribed")
    page = client.get(url("suppression-remove", tenant, row.pk))
    assert page.status_code == 200
    body = page.content.decode()
    assert "Remove <span class=\"address\">gone@example.com</span>" in body
    assert "stays unsubscribed in 1 segment" in body
    assert Suppression.objects.filter(pk=row.pk).exists()  # a GET changes nothing
    response = client.post(url("suppression-remove", tenant, row.pk), follow=True)
    assert texts(response) == ["gone@example.com is no longer suppressed."]
    assert not Suppression.objects.exists()
    assert client.post(url("suppression-remove", tenant, row.pk)).status_code == 404


# --- import and export ---------------------------------------------------------------------------

def test_import_reports_and_export_reads_back(client, user, tenant, other_tenant):
    campaign = CampaignFactory(account=tenant, name="=HYPERLINK(\"x\")")
    suppress(tenant, "kept@example.com", reason="unsubscribed", campaign=campaign)
    suppress(other_tenant, "theirs@example.com")
    upload = SimpleUploadedFile("list.csv", b"email\nnew@example.com\nkept@example.com\nbad@\n")
    body = client.post(url("suppression-import", tenant), {"file": upload, "skip_invalid": "on"}
                       ).content.decode()
    assert "Imported 1 address" in body
    assert "<td>3</td><td>kept@example.com</td><td>already suppressed</td>" in body
    assert "<td>4</td><td><code>bad@</code></td>" in body
    response = client.get(url("suppression-export", tenant))
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="acme-suppressions-')
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == ["email", "reason", "suppressed_at", "campaign"]
    assert [(r[0], r[1], r[3]) for r in rows[1:]] == [
        ("kept@example.com", "unsubscribed", "'=HYPERLINK(\"x\")"), ("new@example.com", "imported", "")]
    # the export is a valid import: all duplicates
    again = SimpleUploadedFile("export.csv", b"".join(client.get(url("suppression-export", tenant))
                                                     .streaming_content))
    body = client.post(url("suppression-import", tenant), {"file": again}).content.decode()
    assert "Imported 0 addresses" in body and body.count("<td>already suppressed</td>") == 2


def test_an_address_a_spreadsheet_would_run_as_a_formula_is_exported_as_text_and_reads_back(
        client, user, tenant):
    hostile = "=cmd|'/c.calc'!a0@example.com"  # a valid address
    suppress(tenant, hostile)
    for other in ("+1+2@example.com", "-2+3@example.com", "=1+2@example.com"):
        suppress(tenant, other)

    export = b"".join(client.get(url("suppression-export", tenant)).streaming_content)
    emails = [row[0] for row in csv.reader(io.StringIO(export.decode()))][1:]

    assert all(email.startswith("'") for email in emails), emails
    assert "'" + hostile in emails
    Suppression.objects.all().delete()
    body = client.post(url("suppression-import", tenant),
                       {"file": SimpleUploadedFile("export.csv", export)}).content.decode()
    assert "Imported 4 addresses" in body
    assert hostile in set(Suppression.objects.values_list("email_lower", flat=True))


def test_an_address_that_starts_with_a_quote_of_its_own_reads_back_as_itself(client, user, tenant):
    """The export's quote before a formula must not be mistaken for the address's own: exported
    as it was, ``'=a@example.com`` came back ``=a@example.com``, another address, and the
    tenant's own stayed unsuppressed."""
    own_quotes = {"'=a@example.com", "'+1@example.com", "'-x@example.com", "'plain@example.com",
                  "''twice@example.com"}
    for address in own_quotes:
        suppress(tenant, address)

    export = b"".join(client.get(url("suppression-export", tenant)).streaming_content)
    Suppression.objects.all().delete()
    body = client.post(url("suppression-import", tenant),
                       {"file": SimpleUploadedFile("export.csv", export)}).content.decode()

    assert "Imported 5 addresses" in body
    assert set(Suppression.objects.values_list("email_lower", flat=True)) == own_quotes


def test_an_import_with_an_invalid_line_imports_nothing_by_default(client, user, tenant):
    upload = SimpleUploadedFile("list.csv", b"a@example.com\nnope\n")
    body = client.post(url("suppression-import", tenant), {"file": upload}).content.decode()
    assert "Nothing was imported:" in body
    assert not Suppression.objects.exists()


def test_an_unreadable_import_imports_nothing(client, user, tenant):
    upload = SimpleUploadedFile("list.csv", b"a@example.com\n\xff\n")
    body = client.post(url("suppression-import", tenant), {"file": upload, "skip_invalid": "on"}
                       ).content.decode()
    assert "Nothing was imported: Line 2 is not UTF-8 text" in body
    assert not Suppression.objects.exists()


# --- lookup --------------------------------------------------------------------------------------

def test_lookup_shows_status_suppression_and_the_campaigns_that_reached_the_address(client, user, tenant):
    campaign = sending_campaign(count=2, account=tenant, name="Spring sale")
    Send.objects.filter(campaign=campaign, email_lower="person0@example.com").update(status="sent")
    elsewhere = sending_campaign(count=2, name="Someone else's")  # person0 there too
    assert Send.objects.filter(campaign=elsewhere, email_lower="person0@example.com").exists()
    suppress(tenant, "person0@example.com", reason="bounced")
    body = client.get(url("lookup", tenant), {"email": "PERSON0@example.com"}).content.decode()
    assert "person0@example.com" in body
    assert "Suppressed</strong> (bounced)" in body
    # its subscriber row is confirmed, but it is not mailed: shown as suppressed
    assert '<span class="status status--suppressed">Suppressed</span>' in body
    assert "Confirmed" not in body
    assert "Reached by 1 campaign." in body and "Spring sale" in body
    assert "Someone else" not in body
    body = client.get(url("lookup", tenant), {"email": "nobody@example.com"}).content.decode()
    assert "Not on the suppression list." in body and "Not a subscriber of Acme." in body
    assert "Reached by 0 campaigns." in body
    body = client.get(url("lookup", tenant), {"email": "broken@@"}).content.decode()
    assert "not a valid email address" in body or "valid email" in body


# --- roles and CSRF ------------------------------------------------------------------------------

def test_a_viewer_reads_but_cannot_change_anything(client, tenant):
    client.force_login(member(tenant, role="viewer"))
    row = suppress(tenant, "kept@example.com")
    body = client.get(url("suppressions", tenant)).content.decode()
    assert "kept@example.com" in body and "Remove" not in body and "read only" in body
    assert client.get(url("lookup", tenant), {"email": "kept@example.com"}).status_code == 200
    assert client.get(url("suppression-export", tenant)).status_code == 200
    for name, args in (("suppression-add", ()), ("suppression-import", ()),
                       ("suppression-remove", (row.pk,))):
        assert client.get(url(name, tenant, *args)).status_code == 403
    assert client.post(url("suppression-add", tenant), {"addresses": "x@example.com",
                                                        "reason": "manual"}).status_code == 403
    assert client.post(url("suppression-remove", tenant, row.pk)).status_code == 403
    assert list(Suppression.objects.values_list("email_lower", flat=True)) == ["kept@example.com"]


def test_every_change_needs_the_csrf_token(tenant):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(member(tenant))
    row = suppress(tenant, "kept@example.com")
    assert browser.post(url("suppression-add", tenant), {"addresses": "x@example.com",
                                                         "reason": "manual"}).status_code == 403
    assert browser.post(url("suppression-remove", tenant, row.pk)).status_code == 403
    upload = SimpleUploadedFile("list.csv", b"x@example.com\n")
    assert browser.post(url("suppression-import", tenant), {"file": upload}).status_code == 403
    assert list(Suppression.objects.values_list("email_lower", flat=True)) == ["kept@example.com"]


def test_pages_carry_the_stylesheet_and_a_phone_viewport(client, user, tenant):
    body = client.get(url("suppressions", tenant)).content.decode()
    assert '<link rel="stylesheet" href="/static/growth/app.css">' in body
    assert 'name="viewport" content="width=device-width, initial-scale=1"' in body
    # every stylesheet, script and image is ours: no third-party host (the page's random CSRF
    # token may well contain "cdn", so only src and href are looked at)
    assert all(link.startswith("/") or link.startswith("#")
               for link in re.findall(r'(?:src|href)="([^"]*)"', body))


@pytest.mark.django_db
def test_a_tenants_export_says_what_happened_without_naming_the_platforms_hosts_or_people(client):
    from django.utils import timezone

    from growth.operations.unknown_sends import mark_not_delivered

    campaign = sending_campaign(count=2)
    Send.objects.claim(worker_id="mta-prod-eu1.internal:4242", batch_size=2, lease=60)
    Send.objects.filter(status="sending").update(
        lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
    Send.objects.recover_expired(idempotent=False, max_attempts=5)  # never handed over: queued
    Send.objects.filter(campaign=campaign).update(status="unknown")  # as if they had been
    first = Send.objects.order_by("id").first()
    mark_not_delivered(send_ids=[first.id], decided_by="ops.alice@platform.example")
    client.force_login(member(campaign.account, role="viewer"))
    response = client.get(reverse("growth:tenant:campaign-export",
                                  args=[campaign.account.slug, campaign.id]))
    body = b"".join(response.streaming_content).decode()
    errors = sorted(row["last_error"] for row in csv.DictReader(io.StringIO(body)))
    assert errors == [
        "lease expired: the worker sending it was lost",
        "marked failed by an operator after: lease expired: the worker sending it was lost"]


# --- files as spreadsheets save them: a Mac's "CSV" ends its lines with CR alone --------------

CR_ONLY = [b"email\rann@example.com\rbob@example.com\r",
           b"ann@example.com\rbob@example.com\r",
           b"name,email\rAnn,ann@example.com\r"]


@pytest.mark.parametrize("content", CR_ONLY)
def test_a_csv_with_carriage_return_line_ends_is_imported(tenant, content):
    client = Client(raise_request_exception=False)
    client.force_login(member(tenant))
    response = client.post(reverse("growth:tenant:suppression-import", args=[tenant.slug]),
                           {"file": SimpleUploadedFile("list.csv", content)})
    assert response.status_code == 200, response.status_code
    assert "ann@example.com" in set(Suppression.objects.filter(account=tenant)
                                    .values_list("email_lower", flat=True))


@pytest.mark.parametrize("content", [b"x" * 200_000 + b"\n", b"email," + b"x" * 200_000 + b"\n"])
def test_a_first_line_with_a_cell_past_the_csv_field_limit_is_refused_with_its_line(tenant,
                                                                                     content):
    client = Client(raise_request_exception=False)
    client.force_login(member(tenant))
    response = client.post(reverse("growth:tenant:suppression-import", args=[tenant.slug]),
                           {"file": SimpleUploadedFile("list.csv", content)})
    assert response.status_code == 200, response.status_code
    assert "cannot be read as CSV" in response.content.decode()
    assert not Suppression.objects.exists()
