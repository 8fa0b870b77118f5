"""Forgetting cached recipient domains in the admin: asked first, with the running campaigns'
recipients on them and what becomes of them; confirmed, deleted and logged; a page gone stale
forgets nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.urls import reverse
from django.utils import timezone

from growth.models import Campaign, Destination, MailDomain, Send
from growth.operations.campaigns import approve_campaign, cancel_campaign
from tests.factories import CampaignFactory, SegmentFactory, SubscriberFactory
from tests.helpers import confirm, post_back, texts
from tests.scenarios import operator

pytestmark = pytest.mark.django_db

URL = reverse("admin:growth_maildomain_changelist")


@pytest.fixture
def superuser(client, tenant):
    user = operator(tenant, is_superuser=True)
    client.force_login(user)
    return user


def cached(domain: str, destination: str) -> MailDomain:
    return MailDomain.objects.create(
        domain=domain, destination=Destination.objects.get_or_create(name=destination)[0],
        source="mx", expires_at=timezone.now() + dt.timedelta(days=1))


def running(account, addresses: list[str], *, name: str) -> Campaign:
    """A campaign sending to ``addresses``, built while the cache held what it holds now."""
    segment = SegmentFactory(account=account)
    for address in addresses:
        SubscriberFactory(segment=segment, email=address)
    campaign = CampaignFactory(account=account, name=name)
    campaign.segments.set([segment])
    approve_campaign(campaign_id=campaign.id)
    assert campaign.id in Campaign.objects.start_due()
    Send.objects.build_recipients(campaign_id=campaign.id, leases=False)
    return campaign


def selection(*domains: str) -> dict:
    return {"action": "forget", "_selected_action": list(domains)}


def forget(client, *domains: str):
    return client.post(URL, selection(*domains))


def test_the_page_counts_the_running_campaigns_recipients_on_the_domains_and_forgets_nothing(
        client, superuser, tenant):
    cached("gmail.com", "google")
    cached("acme-corp.example", "google")
    cached("example.org", "example.org")
    spring = running(tenant, ["a@gmail.com", "b@gmail.com", "c@gmail.com", "d@example.org",
                              "e@acme-corp.example"], name="Spring")
    Send.objects.filter(campaign=spring, email_lower="c@gmail.com").update(status="sent",
                                                                         sent_at=timezone.now())
    autumn = running(tenant, ["f@gmail.com"], name="Autumn")
    cancel_campaign(campaign_id=autumn.id)  # not running: its rows are no one's to pace

    page = forget(client, "gmail.com", "acme-corp.example")

    assert page.status_code == 200
    body = page.content.decode()
    assert "2 cached domains will be forgotten" in body
    assert ("3 recipients of 1 running campaign (sending or paused), not yet sent (queued, or on "
            "the wire), are on these domains: nothing changes for them in these campaigns.") in body
    assert "<td>gmail.com</td>" in body and "<td>2 (paced as google)</td>" in body
    assert "<td>1 (paced as google)</td>" in body
    assert "example.org</td>" not in body
    assert "the next build that meets them" in body
    assert MailDomain.objects.count() == 3 and not LogEntry.objects.exists()


def test_confirming_forgets_the_domains_logs_each_and_leaves_the_built_rows_as_they_are(
        client, superuser, tenant):
    cached("gmail.com", "google")
    cached("acme-corp.example", "google")
    spring = running(tenant, ["a@gmail.com"], name="Spring")
    google = Destination.objects.get(name="google")

    response = confirm(client, URL, selection("gmail.com"), follow=True)

    assert list(MailDomain.objects.values_list("domain", flat=True)) == ["acme-corp.example"]
    assert "1 domain forgotten: the next build that meets them resolves them again." in texts(response)
    entry = LogEntry.objects.get()
    assert (entry.object_id, entry.action_flag, entry.user) == ("gmail.com", DELETION, superuser)
    # as the page said: the row keeps the provider its build gave it, and pacing reads that
    assert Send.objects.get(campaign=spring).destination_id == google.id


def test_the_page_says_when_no_running_campaign_waits_on_the_domains(client, superuser):
    cached("gmail.com", "google")
    body = forget(client, "gmail.com").content.decode()
    assert "No recipient of a running campaign (sending or paused) waits on this domain" in body


def test_a_domain_resolved_again_since_the_page_forgets_nothing_and_shows_the_page_again(
        client, superuser):
    cached("gmail.com", "google")
    cached("acme-corp.example", "google")
    page = forget(client, "gmail.com", "acme-corp.example")
    MailDomain.objects.filter(domain="acme-corp.example").update(
        resolved_at=timezone.now() + dt.timedelta(seconds=1))  # a build looked it up again

    response = post_back(client, URL, page, follow=True)

    assert MailDomain.objects.count() == 2 and not LogEntry.objects.exists()
    assert any("changed since the page was shown" in t for t in texts(response))
    assert "2 cached domains will be forgotten" in response.content.decode()  # as it stands now


def test_a_domain_forgotten_since_the_page_forgets_nothing_else(client, superuser):
    cached("gmail.com", "google")
    cached("acme-corp.example", "google")
    page = forget(client, "gmail.com", "acme-corp.example")
    MailDomain.objects.filter(domain="gmail.com").delete()  # another operator's forget

    response = post_back(client, URL, page, follow=True)

    assert MailDomain.objects.filter(domain="acme-corp.example").exists()
    assert any("changed since the page was shown" in t for t in texts(response))
    assert "1 cached domain will be forgotten" in response.content.decode()


def test_every_domain_gone_since_the_page_is_said_and_nothing_fails(client, superuser):
    cached("gmail.com", "google")
    page = forget(client, "gmail.com")
    MailDomain.objects.all().delete()

    response = post_back(client, URL, page, follow=True)

    assert response.status_code == 200 and response.redirect_chain[-1][0].startswith(URL)
    assert "None of the selected domains is cached any more: nothing was forgotten." in texts(response)


def test_a_tenants_operator_can_neither_see_nor_forget_cached_domains(client, tenant):
    cached("gmail.com", "google")
    client.force_login(operator(tenant))
    page = forget(client, "gmail.com")
    assert page.status_code == 403 and "gmail.com" not in page.content.decode()
    client.post(URL, {"action": "forget", "_selected_action": ["gmail.com"], "post": "yes"})
    assert MailDomain.objects.filter(domain="gmail.com").exists() and not LogEntry.objects.exists()


def test_a_selection_across_the_filtered_list_forgets_what_the_page_listed(client, superuser):
    cached("gmail.com", "google")
    cached("googlemail.com", "google")
    cached("example.org", "example.org")
    url = f"{URL}?q=mail"
    page = client.post(url, {**selection("gmail.com"), "select_across": "1"})
    assert "2 cached domains will be forgotten" in page.content.decode()

    post_back(client, url, page)

    assert list(MailDomain.objects.values_list("domain", flat=True)) == ["example.org"]
    assert LogEntry.objects.count() == 2
