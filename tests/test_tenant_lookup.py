"""The address lookup under /app/: its state, its last failure, and suppress / remove in place."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client

from growth.models import Send, Subscriber, Suppression
from tests import tenant_pages
from tests.factories import CampaignFactory, SegmentFactory, SubscriberFactory
from tests.helpers import texts
from tests.scenarios import member, sending_campaign
from tests.tenant_pages import url

pytestmark = pytest.mark.django_db

tenant, other_tenant, user = tenant_pages.tenant, tenant_pages.other_tenant, tenant_pages.user

SMTP_REFUSAL = ("SMTPRecipientsRefused: {'person0@example.com': "
                "(550, b'5.1.1 <person0@example.com>: Recipient address rejected: User unknown')}")


def look_up(client, account, email: str) -> str:
    response = client.get(url("lookup", account), {"email": email})
    assert response.status_code == 200
    return response.content.decode()


def statuses_shown(body: str) -> list[str]:
    return re.findall(r'<span class="status status--[a-z]+">(\w+)</span>', body.split("<h3>Campaigns")[0])


# --- what the lookup shows -----------------------------------------------------------------------

def test_a_suppressed_subscriber_is_shown_suppressed_not_confirmed(client, user, tenant):
    segment = SegmentFactory(account=tenant, name="News")
    SubscriberFactory(segment=segment, email="ann@example.com", status="confirmed")
    SubscriberFactory(segment=SegmentFactory(account=tenant, name="Offers"),
                      email="ann@example.com", status="pending")
    SubscriberFactory(segment=SegmentFactory(account=tenant, name="Old"),
                      email="ann@example.com", status="unsubscribed")
    assert statuses_shown(look_up(client, tenant, "ann@example.com")) == [
        "Confirmed", "Pending", "Unsubscribed"]

    Suppression.objects.create(account=tenant, email_lower="ann@example.com", reason="manual")
    body = look_up(client, tenant, "ann@example.com")
    assert statuses_shown(body) == ["Suppressed", "Suppressed", "Unsubscribed"]
    assert "opted in here, but suppressed: not mailed" in body
    assert "not confirmed yet, and suppressed: not mailed" in body
    assert "Confirmed" not in body


def test_the_source_campaign_of_the_suppression_is_shown(client, user, tenant):
    campaign = CampaignFactory(account=tenant, name="Spring sale")
    Suppression.objects.create(account=tenant, email_lower="gone@example.com", reason="unsubscribed",
                               campaign=campaign)
    Suppression.objects.create(account=tenant, email_lower="typed@example.com", reason="manual")
    body = look_up(client, tenant, "gone@example.com")
    assert "<dt>Source campaign</dt><dd>Spring sale</dd>" in body
    assert "<dt>Source campaign</dt><dd>—</dd>" in look_up(client, tenant, "typed@example.com")


def test_the_failure_reason_of_the_last_failed_send_is_shown_readably(client, user, tenant):
    older = sending_campaign(count=1, account=tenant, name="Winter sale")
    newer = sending_campaign(count=1, account=tenant, name="Spring sale")
    Send.objects.filter(campaign=older).update(
        status="failed", last_error="SMTPDataError: (554, b'5.7.1 Message rejected')")
    Send.objects.filter(campaign=newer).update(status="failed", last_error=SMTP_REFUSAL)
    body = look_up(client, tenant, "person0@example.com")
    assert ('<span class="failure__reason">550 5.1.1 &lt;person0@example.com&gt;: Recipient address '
            "rejected: User unknown</span>") in body
    assert "in “Spring sale”" in body
    assert "SMTPRecipientsRefused" not in body and "b&#x27;" not in body
    assert "Message rejected" not in body  # only the most recent failure

    # the most recent by when it failed, whichever campaign is newer
    later = Send.objects.get(campaign=newer).updated_at + timedelta(minutes=5)
    Send.objects.filter(campaign=older).update(updated_at=later)
    body = look_up(client, tenant, "person0@example.com")
    assert "554 5.7.1 Message rejected" in body and "in “Winter sale”" in body


def test_no_failure_no_failure_section_and_another_tenants_failure_never_shown(
        client, user, tenant, other_tenant):
    sending_campaign(count=1, account=tenant, name="Fine")
    theirs = sending_campaign(count=1, account=other_tenant, name="Theirs")
    Send.objects.filter(campaign=theirs).update(status="failed", last_error=SMTP_REFUSAL)
    body = look_up(client, tenant, "person0@example.com")
    assert "Last failed send" not in body and "Theirs" not in body and "User unknown" not in body


# --- suppress in place ---------------------------------------------------------------------------

def test_an_editor_suppresses_the_address_from_its_lookup(client, user, tenant):
    SubscriberFactory(segment=SegmentFactory(account=tenant), email="ann@example.com")
    body = look_up(client, tenant, "Ann@Example.com")
    assert f'action="{url("lookup-suppress", tenant)}"' in body
    assert '<input type="hidden" name="email" value="ann@example.com"' in body
    response = client.post(url("lookup-suppress", tenant), {"email": "ann@example.com",
                                                            "reason": "complained"})
    assert response.status_code == 302
    assert response["Location"] == url("lookup", tenant) + "?email=ann%40example.com"
    assert texts(response) == ["ann@example.com is suppressed."]
    row = Suppression.objects.get()
    assert (row.account_id, row.email_lower, row.reason) == (tenant.id, "ann@example.com", "complained")
    body = look_up(client, tenant, "ann@example.com")
    assert "Suppressed</strong> (complained)" in body
    assert 'name="reason"' not in body  # no second suppress form
    assert Subscriber.objects.get().status == "confirmed"  # a suppression, not an opt-out


def test_suppressing_an_address_already_suppressed_keeps_its_reason(client, user, tenant):
    Suppression.objects.create(account=tenant, email_lower="ann@example.com", reason="bounced")
    response = client.post(url("lookup-suppress", tenant), {"email": "ANN@example.com",
                                                            "reason": "manual"})
    assert texts(response) == ["ann@example.com was already suppressed; left as it was."]
    assert list(Suppression.objects.values_list("reason", flat=True)) == ["bounced"]


@pytest.mark.parametrize("data", [
    {"email": "not-an-address", "reason": "manual"},
    {"email": "a@example.com\r\nBcc: x@example.com", "reason": "manual"},
    {"email": "a\x00@example.com", "reason": "manual"},
    {"email": "a" * 400 + "@example.com", "reason": "manual"},
    {"email": "a@example.com", "reason": "unsubscribed"},  # a recipient's to claim, not a tenant's
    {"email": "a@example.com", "reason": "<b>"},
    {"email": "", "reason": "manual"},
    {},
])
def test_bad_input_to_suppress_is_a_400_and_changes_nothing(client, user, tenant, data):
    response = client.post(url("lookup-suppress", tenant), data)
    assert response.status_code == 400
    body = response.content.decode()
    assert "Nothing was suppressed." in body
    assert "<b>" not in body and "\x00" not in body
    assert not Suppression.objects.exists()


def test_suppress_in_place_is_for_editors_with_csrf_and_their_own_account(tenant, other_tenant):
    data = {"email": "ann@example.com", "reason": "manual"}
    viewer = Client()
    viewer.force_login(member(tenant, role="viewer"))
    body = viewer.get(url("lookup", tenant), {"email": "ann@example.com"}).content.decode()
    assert "lookup/suppress" not in body and "Suppress</button>" not in body
    assert viewer.post(url("lookup-suppress", tenant), data).status_code == 403
    editor = member(tenant)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(editor)
    assert browser.post(url("lookup-suppress", tenant), data).status_code == 403
    trusted = Client()
    trusted.force_login(editor)
    assert trusted.post(url("lookup-suppress", other_tenant), data).status_code == 404
    assert trusted.get(url("lookup-suppress", tenant)).status_code == 405
    assert not Suppression.objects.exists()


# --- remove in place -----------------------------------------------------------------------------

def test_an_editor_removes_the_suppression_from_its_lookup_after_a_confirmation(client, user, tenant):
    row = Suppression.objects.create(account=tenant, email_lower="ann@example.com", reason="manual")
    body = look_up(client, tenant, "ann@example.com")
    remove = url("suppression-remove", tenant, row.pk) + "?back=lookup"
    assert f'href="{remove}"' in body
    page = client.get(remove).content.decode()
    assert '<input type="hidden" name="back" value="lookup">' in page
    assert f'<a href="{url("lookup", tenant)}?email=ann%40example.com">Keep it</a>' in page
    assert Suppression.objects.filter(pk=row.pk).exists()  # asking changed nothing
    response = client.post(url("suppression-remove", tenant, row.pk), {"back": "lookup"})
    assert response["Location"] == url("lookup", tenant) + "?email=ann%40example.com"
    assert texts(response) == ["ann@example.com is no longer suppressed."]
    assert not Suppression.objects.exists()
    assert "Not on the suppression list." in look_up(client, tenant, "ann@example.com")


def test_remove_in_place_never_reaches_another_tenants_suppression(client, user, tenant, other_tenant):
    theirs = Suppression.objects.create(account=other_tenant, email_lower="ann@example.com")
    for account in (tenant, other_tenant):
        assert client.get(url("suppression-remove", account, theirs.pk),
                          {"back": "lookup"}).status_code == 404
        assert client.post(url("suppression-remove", account, theirs.pk),
                           {"back": "lookup"}).status_code == 404
    assert Suppression.objects.filter(pk=theirs.pk).exists()
    body = look_up(client, tenant, "ann@example.com")
    assert "Not on the suppression list." in body and str(theirs.pk) not in re.findall(
        r'suppressions/(\d+)/remove', body)


def test_back_only_ever_returns_to_the_lookup(client, user, tenant):
    row = Suppression.objects.create(account=tenant, email_lower="ann@example.com")
    response = client.post(url("suppression-remove", tenant, row.pk), {"back": "https://evil.example/"})
    assert response["Location"] == url("suppressions", tenant)


def test_a_viewer_sees_the_state_but_no_remove_link(client, tenant):
    client.force_login(member(tenant, role="viewer"))
    Suppression.objects.create(account=tenant, email_lower="ann@example.com")
    body = look_up(client, tenant, "ann@example.com")
    assert "Suppressed</strong>" in body and "/remove/" not in body
