"""Layer 2: compare-and-set campaign transitions."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from growth.models import Campaign, Send
from growth.operations.campaigns import (
    TransitionRefused,
    approve_campaign,
    cancel_campaign,
    pause_campaign,
    resume_campaign,
)
from tests.factories import CampaignFactory
from tests.helpers import concurrently
from tests.scenarios import approved_campaign, sending_campaign, statuses

RACERS = 8
ROUNDS = 15


@pytest.mark.django_db(transaction=True)
def test_start_due_has_exactly_one_winner_among_racing_workers():
    for _ in range(ROUNDS):
        campaign = approved_campaign(count=1)
        winners = concurrently(RACERS, lambda i: Campaign.objects.start_due())
        assert sorted(winners, key=len)[-1] == [campaign.id]
        assert sum(len(w) for w in winners) == 1
        campaign.refresh_from_db()
        assert campaign.status == "sending"


@pytest.mark.django_db(transaction=True)
def test_pause_resume_and_cancel_have_exactly_one_winner():
    for _ in range(ROUNDS):
        campaign = sending_campaign(count=3)
        cid = campaign.id
        assert sum(concurrently(RACERS, lambda i, c=cid: Campaign.objects.pause(campaign_id=c))) == 1
        assert sum(concurrently(RACERS, lambda i, c=cid: Campaign.objects.resume(campaign_id=c))) == 1
        dropped = concurrently(RACERS, lambda i, c=cid: Campaign.objects.cancel(campaign_id=c))
        assert [d.dropped for d in dropped if d is not None] == [3]
        assert statuses(campaign) == {"cancelled": 3}


@pytest.mark.django_db(transaction=True)
def test_approve_races_resolve_to_one_approval():
    for _ in range(ROUNDS):
        campaign = CampaignFactory()
        outcomes = concurrently(RACERS, lambda i, c=campaign.id: _try(approve_campaign, c))
        assert outcomes.count("ok") == 1
        assert all(o == "refused" for o in outcomes if o != "ok")


def _try(transition, campaign_id):
    try:
        transition(campaign_id=campaign_id)
    except TransitionRefused:
        return "refused"
    return "ok"


@pytest.mark.django_db
def test_approve_refuses_unsendable_campaigns_with_a_clear_error():
    with pytest.raises(ValidationError, match="needs a subject"):
        approve_campaign(campaign_id=CampaignFactory(subject="").id)
    with pytest.raises(ValidationError, match="plain-text body"):
        approve_campaign(campaign_id=CampaignFactory(body_text="  ").id)
    with pytest.raises(ValidationError, match="when the campaign should go out"):
        approve_campaign(campaign_id=CampaignFactory(scheduled_for=None).id)
    with pytest.raises(ValidationError, match="inject headers"):
        approve_campaign(campaign_id=CampaignFactory(subject="Hi\r\nBcc: all@evil.example").id)
    with pytest.raises(ValidationError, match="Template error"):
        approve_campaign(campaign_id=CampaignFactory(body_text="{% if %}").id)
    assert set(Campaign.objects.values_list("status", flat=True)) == {"draft"}


@pytest.mark.django_db
def test_approve_refuses_a_campaign_edited_since_it_was_validated():
    campaign = CampaignFactory()
    stale = campaign.updated_at
    campaign.subject = "Edited"
    campaign.save()
    assert not Campaign.objects.approve(campaign_id=campaign.id, version=stale)
    assert Campaign.objects.approve(campaign_id=campaign.id, version=campaign.updated_at)


@pytest.mark.django_db
def test_transitions_from_the_wrong_state_say_why():
    campaign = CampaignFactory()
    with pytest.raises(TransitionRefused, match="draft: only a sending campaign can be paused"):
        pause_campaign(campaign_id=campaign.id)
    with pytest.raises(TransitionRefused, match="only a paused campaign can be resumed"):
        resume_campaign(campaign_id=campaign.id)
    cancel_campaign(campaign_id=campaign.id)
    with pytest.raises(TransitionRefused, match="cancelled: it cannot be cancelled"):
        cancel_campaign(campaign_id=campaign.id)
    with pytest.raises(TransitionRefused, match="cancelled, not draft"):
        approve_campaign(campaign_id=campaign.id)
    with pytest.raises(TransitionRefused, match="no campaign 999999"):
        pause_campaign(campaign_id=999999)


@pytest.mark.django_db
def test_a_campaign_scheduled_later_is_not_started():
    campaign = approved_campaign(count=1, scheduled_for=timezone.now() + timezone.timedelta(hours=1))
    assert Campaign.objects.start_due() == []
    campaign.refresh_from_db()
    assert campaign.status == "approved"


@pytest.mark.django_db
def test_finish_waits_for_the_build_and_for_rows_in_flight():
    campaign = approved_campaign(count=2)
    Campaign.objects.start_due()
    assert Campaign.objects.finish() == []  # not built yet: an empty list is not "done"
    Send.objects.build_recipients(campaign_id=campaign.id)
    claimed = Send.objects.claim(worker_id="w", batch_size=1, lease=60)
    assert Campaign.objects.finish() == []
    Send.objects.filter(id=claimed[0].id).update(status="sent")
    assert Campaign.objects.finish() == []  # one row still queued
    Send.objects.filter(campaign=campaign).update(status="sent")
    assert Campaign.objects.finish() == [campaign.id]
    campaign.refresh_from_db()
    assert campaign.status == "sent" and campaign.finished_at is not None


@pytest.mark.django_db
def test_cancel_keeps_rows_already_on_the_wire():
    campaign = sending_campaign(count=4)
    Send.objects.claim(worker_id="w", batch_size=1, lease=60)
    assert cancel_campaign(campaign_id=campaign.id).dropped == 3
    assert statuses(campaign) == {"cancelled": 3, "sending": 1}


@pytest.mark.django_db
def test_a_cancel_from_an_expected_status_is_a_compare_and_set_on_it():
    campaign = sending_campaign(count=3)
    assert Campaign.objects.cancel(campaign_id=campaign.id, expected="draft") is None
    assert Campaign.objects.get(pk=campaign.pk).status == "sending"
    assert Campaign.objects.cancel(campaign_id=campaign.id, expected="sending").dropped == 3
    assert Campaign.objects.get(pk=campaign.pk).status == "cancelled"
