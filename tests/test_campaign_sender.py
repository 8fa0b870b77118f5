"""A campaign goes out as the sender its account had when it started: every worker, every try of
one recipient. An edit of the account's sender reaches a campaign sending now only when an
operator pauses and resumes it, and the resume's confirmation says so."""

from __future__ import annotations

from email.utils import parseaddr

import pytest
from django.urls import reverse

from growth.models import Account, Campaign
from growth.sending.worker import Worker
from tests.helpers import confirm
from tests.scenarios import approved_campaign, sending_campaign, statuses
from tests.test_sender_domains import sending_domain


def senders(smtp_server) -> list[tuple[str, str]]:
    return [parseaddr(accepted.message["From"]) for accepted in smtp_server.handler.accepted]


def rename(campaign: Campaign, **sender) -> None:
    Account.objects.filter(id=campaign.account_id).update(**sender)


def one_batch(worker: Worker | None = None) -> Worker:
    worker = worker or Worker(batch_size=2, tick=0.01, lease=30, once=True)
    worker.run()
    return worker


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_an_account_edit_mid_send_does_not_change_the_campaigns_sender(smtp_settings, leases):
    campaign = sending_campaign(4, leases=leases, account__from_email="news@acme.example",
                                account__from_name="Acme")
    one_batch()
    rename(campaign, from_email="letters@acme.example", from_name="Acme Letters")
    one_batch()  # a worker started after the edit: it reads the campaign, not the account
    assert statuses(campaign) == {"sent": 4}
    assert senders(smtp_settings) == [("Acme", "news@acme.example")] * 4


@pytest.mark.django_db(transaction=True)
def test_a_campaign_takes_its_accounts_sender_as_it_is_when_it_starts(smtp_settings):
    campaign = approved_campaign(2, account__from_email="news@acme.example")
    rename(campaign, from_email="letters@acme.example", from_name="Acme Letters")
    Worker(batch_size=10, tick=0.01, lease=30, until_idle=True).run()
    campaign.refresh_from_db()
    assert (campaign.from_email, campaign.from_name) == ("letters@acme.example", "Acme Letters")
    assert senders(smtp_settings) == [("Acme Letters", "letters@acme.example")] * 2


@pytest.mark.django_db(transaction=True)
def test_resumed_the_rest_goes_out_as_the_accounts_sender_now_even_on_the_same_worker(
        smtp_settings):
    campaign = sending_campaign(4, account__from_email="news@acme.example",
                                account__from_name="Acme")
    worker = one_batch()
    assert Campaign.objects.pause(campaign_id=campaign.id)
    rename(campaign, from_email="letters@acme.example", from_name="Acme Letters")
    assert Campaign.objects.resume(campaign_id=campaign.id)
    one_batch(worker)  # it had built the campaign's renderer with the old sender
    assert senders(smtp_settings) == [("Acme", "news@acme.example")] * 2 + [
        ("Acme Letters", "letters@acme.example")] * 2


@pytest.mark.django_db
def test_the_resume_confirmation_names_the_sender_the_rest_will_go_out_as(client, staff, tenant):
    for domain in (tenant.from_email.rpartition("@")[2], "acme.example"):
        sending_domain(tenant, domain)  # its senders are on its own domains, verified
    campaign = sending_campaign(3, account=tenant)
    assert Campaign.objects.pause(campaign_id=campaign.id)
    url = reverse("admin:growth_campaign_transition", args=[campaign.pk, "resume"])
    assert "sender" not in client.get(url).content.decode()
    rename(campaign, from_email="letters@acme.example", from_name="Acme Letters")

    page = client.get(url).content.decode()

    assert ("They will go out from the account&#x27;s sender now, “Acme Letters "
            "&lt;letters@acme.example&gt;” (so far: “" in page)
    confirm(client, url)
    campaign.refresh_from_db()
    assert (campaign.status, campaign.from_email) == ("sending", "letters@acme.example")


@pytest.mark.django_db
def test_the_campaign_page_shows_the_sender_it_goes_out_as(client, staff, tenant):
    draft = approved_campaign(1, account=tenant)
    change = reverse("admin:growth_campaign_change", args=[draft.pk])
    shown = f"Acme &lt;{tenant.from_email}&gt; (its account&#x27;s sender now"
    assert shown in client.get(change).content.decode()
    Campaign.objects.start_due()
    rename(draft, from_email="letters@acme.example")
    page = client.get(change).content.decode()
    assert tenant.from_email in page and "letters@acme.example" not in page
