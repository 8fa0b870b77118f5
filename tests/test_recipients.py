"""Layer 3: the recipient list is built once, one row per address, whatever happens."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection

from growth.models import Campaign, Send, Subscriber, Suppression
from tests.factories import AccountFactory, CampaignFactory, SegmentFactory, SubscriberFactory
from tests.helpers import concurrently
from tests.scenarios import approved_campaign, audience


def started(campaign: Campaign) -> Campaign:
    from growth.operations.campaigns import approve_campaign

    approve_campaign(campaign_id=campaign.id)
    assert Campaign.objects.start_due() == [campaign.id]
    return campaign


@pytest.mark.django_db
def test_the_same_address_in_two_segments_gets_one_row_for_the_oldest_subscriber():
    account = AccountFactory()
    a, b = SegmentFactory(account=account), SegmentFactory(account=account)
    first = SubscriberFactory(segment=a, email="Ana@Example.com")
    SubscriberFactory(segment=b, email="ana@EXAMPLE.COM ")
    SubscriberFactory(segment=b, email="bob@example.com")
    campaign = started(CampaignFactory(account=account))

    assert Send.objects.build_recipients(campaign_id=campaign.id) == 2
    ana = Send.objects.get(campaign=campaign, email_lower="ana@example.com")
    assert ana.subscriber_id == first.id
    assert ana.job_id == f"campaign:{campaign.id}:{first.id}"
    assert ana.status == "queued" and ana.attempts == 0


@pytest.mark.django_db
def test_only_confirmed_unsuppressed_subscribers_of_the_chosen_segments_are_built():
    account = AccountFactory()
    chosen, other = SegmentFactory(account=account), SegmentFactory(account=account)
    SubscriberFactory(segment=chosen, email="in@example.com")
    SubscriberFactory(segment=chosen, email="pending@example.com", status="pending")
    SubscriberFactory(segment=chosen, email="gone@example.com", status="unsubscribed")
    SubscriberFactory(segment=chosen, email="Bounced@example.com")
    SubscriberFactory(segment=other, email="elsewhere@example.com")
    Suppression.objects.create(account=account, email_lower="bounced@example.com",
                               reason="bounced")
    # another tenant's suppression of the same address does not count here
    Suppression.objects.create(account=AccountFactory(), email_lower="in@example.com")
    campaign = CampaignFactory(account=account)
    campaign.segments.set([chosen])
    started(campaign)

    Send.objects.build_recipients(campaign_id=campaign.id)
    assert list(Send.objects.values_list("email_lower", flat=True)) == ["in@example.com"]


@pytest.mark.django_db
def test_no_segment_chosen_means_every_segment_of_the_account():
    account = AccountFactory()
    audience(account, 3, prefix="a")
    audience(account, 2, prefix="b")
    audience(AccountFactory(), 4, prefix="stranger")
    campaign = started(CampaignFactory(account=account))
    assert Send.objects.build_recipients(campaign_id=campaign.id) == 5


@pytest.mark.django_db
def test_a_rebuild_after_a_complete_or_partial_build_creates_nothing():
    campaign = approved_campaign(count=50)
    Campaign.objects.start_due()
    assert Send.objects.build_recipients(campaign_id=campaign.id) == 50
    # the list is marked built: a second build does not even run
    assert Send.objects.build_recipients(campaign_id=campaign.id) is None
    # a crash between start and build leaves recipients_built_at NULL: the rebuild adds nothing
    Send.objects.filter(campaign=campaign, id__gt=Send.objects.order_by("id")[24].id).delete()
    Campaign.objects.filter(id=campaign.id).update(recipients_built_at=None)
    assert Send.objects.build_recipients(campaign_id=campaign.id) == 25  # only the missing half
    Campaign.objects.filter(id=campaign.id).update(recipients_built_at=None)
    assert Send.objects.build_recipients(campaign_id=campaign.id) == 0
    assert Send.objects.filter(campaign=campaign).count() == 50


@pytest.mark.django_db
def test_the_address_constraint_holds_when_the_oldest_subscriber_row_changes_between_builds():
    account = AccountFactory()
    a, b = SegmentFactory(account=account), SegmentFactory(account=account)
    oldest = SubscriberFactory(segment=a, email="ana@example.com")
    newer = SubscriberFactory(segment=b, email="Ana@example.com")
    campaign = started(CampaignFactory(account=account))
    Send.objects.build_recipients(campaign_id=campaign.id)
    assert Send.objects.get().subscriber_id == oldest.id

    # Between builds the oldest row stops being eligible: the newer one now stands for Ana.
    Subscriber.objects.filter(id=oldest.id).update(status="pending")
    Campaign.objects.filter(id=campaign.id).update(recipients_built_at=None)
    assert Send.objects.build_recipients(campaign_id=campaign.id) == 0
    assert Send.objects.count() == 1
    with pytest.raises(IntegrityError, match="send_unique_address"):
        Send.objects.create(campaign=campaign, account=account, subscriber=newer,
                            email=newer.email, email_lower=newer.email_lower,
                            job_id=f"campaign:{campaign.id}:{newer.id}")


@pytest.mark.django_db(transaction=True)
def test_racing_builders_build_once():
    campaign = approved_campaign(count=2000)
    Campaign.objects.start_due()
    results = concurrently(6, lambda i: Send.objects.build_recipients(campaign_id=campaign.id))
    built = [r for r in results if r is not None]
    assert built == [2000]
    assert Send.objects.filter(campaign=campaign).count() == 2000


@pytest.mark.django_db
def test_the_build_insert_is_one_statement():
    campaign = approved_campaign(count=30)
    Campaign.objects.start_due()
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        Send.objects.build_recipients(campaign_id=campaign.id)
    inserts = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("INSERT")]
    assert len(inserts) == 1
