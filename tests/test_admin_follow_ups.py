"""The admin's recovery tool "Resend to the rest…" (a confirmation page with the counts, then a
draft, each step in History), scoped to the operator's tenants. Clones: test_admin_clones."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from growth.models import Campaign, Send
from growth.operations.campaigns import pause_campaign
from tests.factories import SegmentFactory
from tests.helpers import texts, waiting_on_a_lock
from tests.scenarios import operator, sending_campaign
from tests.test_admin_segment_deletion import _deleting, _in_a_thread
from tests.test_follow_up_corrected_address import edit_address, onto_a_newcomer
from tests.test_follow_ups import build

pytestmark = pytest.mark.django_db


def resend_url(campaign) -> str:
    return reverse("admin:growth_campaign_resend", args=[campaign.pk])


def paused(tenant, statuses: list[str]) -> Campaign:
    campaign = sending_campaign(count=len(statuses), account=tenant, name="Spring sale")
    pause_campaign(campaign_id=campaign.id)
    for row, status in zip(Send.objects.filter(campaign=campaign).order_by("id"), statuses,
                           strict=True):
        Send.objects.filter(id=row.id).update(
            status=status, lease_expires_at=timezone.now() if status == "sending" else None)
    campaign.refresh_from_db()
    return campaign


def test_the_confirmation_page_counts_who_the_follow_up_would_reach(client, staff, tenant):
    campaign = paused(tenant, ["sent", "failed", "failed", "queued", "unknown", "sending"])
    page = client.get(reverse("admin:growth_campaign_change", args=[campaign.pk]))
    assert resend_url(campaign) in page.content.decode()
    response = client.get(resend_url(campaign))
    assert response.status_code == 200
    counted = response.context["counted"]
    assert counted.takeable == {"failed": 2, "queued": 1, "in_doubt": 1}
    assert counted.in_flight == 1
    assert "would reach 3 recipients" in response.content.decode()
    assert not Campaign.objects.filter(resend_of=campaign).exists()  # a GET creates nothing


def test_the_confirmation_page_gives_the_total_for_each_choice_of_the_boxes(client, staff, tenant):
    """A row in doubt whose subscriber now has a newcomer's address: ticked alone, each box adds
    one recipient; ticked together, they add one message."""
    campaign = paused(tenant, ["failed", "unknown"])
    in_doubt = Send.objects.get(campaign=campaign, status="unknown")
    onto_a_newcomer(campaign, [in_doubt])
    response = client.get(resend_url(campaign))
    assert response.context["totals"] == {"neither": 1, "new_subscribers": 2, "in_doubt": 2,
                                          "both": 2}
    table = response.content.decode().split('class="growth-resend-totals"')[1].split("</table>")[0]
    assert re.findall(r"<td>(\d+)</td>", table) == ["1", "2", "2", "2"]
    client.post(resend_url(campaign), {"name": "Spring sale, again", "include_unknown": "on",
                                       "include_new_subscribers": "on"})
    assert build(Campaign.objects.get(resend_of=campaign)) == 2


def test_the_confirmation_page_counts_two_recipients_now_at_one_address_once(client, staff,
                                                                             tenant):
    campaign = paused(tenant, ["failed", "failed", "failed"])
    a, b, _ = Send.objects.filter(campaign=campaign).order_by("id")
    edit_address(a, b.email, other_segment=True)
    response = client.get(resend_url(campaign))
    assert response.context["counted"].sharing_an_address == 1
    assert "would reach 2 recipients" in response.content.decode()
    client.post(resend_url(campaign), {"name": "Spring sale, again"})
    assert build(Campaign.objects.get(resend_of=campaign)) == 2


def test_confirming_creates_a_draft_and_leaves_history_on_both(client, staff, tenant):
    campaign = paused(tenant, ["sent", "failed"])
    response = client.post(resend_url(campaign), {"name": "Spring sale, again",
                                                  "include_unknown": "on"})
    follow_up = Campaign.objects.get(resend_of=campaign)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:growth_campaign_change", args=[follow_up.pk])
    assert (follow_up.name, follow_up.status, follow_up.resend_unknown,
            follow_up.resend_new_subscribers) == ("Spring sale, again", "draft", True, False)
    entries = LogEntry.objects.filter(user=staff).order_by("id")
    assert [(e.object_id, e.action_flag) for e in entries] == [
        (str(follow_up.pk), 1), (str(campaign.pk), 2)]
    assert "unknown included: True" in entries[0].change_message
    page = client.get(response["Location"]).content.decode()
    assert "follow-up of" in page and "Spring sale" in page


def test_a_campaign_still_sending_is_refused_with_the_reason(client, staff, tenant):
    campaign = sending_campaign(count=2, account=tenant)
    response = client.get(resend_url(campaign), follow=True)
    assert any("only a sent, cancelled or paused" in t for t in texts(response))
    assert not Campaign.objects.filter(resend_of=campaign).exists()


def test_another_tenants_campaign_is_a_404_and_a_viewer_is_refused(client, tenant, other_tenant):
    theirs = paused(other_tenant, ["failed"])
    mine = paused(tenant, ["failed"])
    client.force_login(operator(tenant))
    assert client.get(resend_url(theirs)).status_code == 404
    assert client.post(resend_url(theirs), {"name": "x"}).status_code == 404
    client.force_login(operator(viewer_of=(tenant,)))
    assert client.post(resend_url(mine), {"name": "x"}).status_code == 403
    assert not Campaign.objects.filter(resend_of__isnull=False).exists()


def test_a_follow_ups_segments_are_its_originals_and_cannot_be_narrowed(client, staff, tenant):
    """Its recipients were counted on the confirmation page, from the original's audience: a
    narrower segment list would not narrow the rows it takes from the original."""
    campaign = paused(tenant, ["failed", "failed"])
    client.post(resend_url(campaign), {"name": "Spring sale, again"})
    follow_up = Campaign.objects.get(resend_of=campaign)
    segments = set(follow_up.segments.values_list("id", flat=True))
    assert segments == set(campaign.segments.values_list("id", flat=True))
    other = SegmentFactory(account=tenant)
    change = reverse("admin:growth_campaign_change", args=[follow_up.pk])
    page = client.get(change)
    assert "segments" not in page.context["adminform"].form.fields
    assert "A follow-up's segments are its original's" in page.content.decode()
    form = {"name": follow_up.name, "subject": "Again", "body_text": follow_up.body_text,
            "body_html": "", "scheduled_for_0": "", "scheduled_for_1": "", "window_starts": "",
            "window_ends": "", "version": follow_up.updated_at.isoformat(),
            "segments": [other.id]}
    assert client.post(change, form).status_code == 302
    follow_up.refresh_from_db()
    assert follow_up.subject == "Again"  # the rest of the draft is edited as before
    assert set(follow_up.segments.values_list("id", flat=True)) == segments


@pytest.mark.django_db(transaction=True)
def test_a_follow_up_confirmed_while_a_segment_of_the_campaign_is_deleted_creates_nothing(tenant):
    """The deletion locks the segment: the follow-up's link to it waits, then fails its foreign
    key at the commit. Nothing is created, and the operator is told why, on the page again."""
    staff = operator(tenant)
    campaign = paused(tenant, ["sent", "failed"])
    extra = SegmentFactory(account=tenant, name="Extra")  # nobody in it: nothing protects it
    campaign.segments.set([extra])
    resending = Client()
    resending.force_login(staff)

    with transaction.atomic():
        _deleting(staff, extra)
        thread, outcome = _in_a_thread(
            lambda: resending.post(resend_url(campaign), {"name": "Spring sale, again"}))
        assert waiting_on_a_lock()
    thread.join(timeout=30)

    assert "error" not in outcome, outcome
    response = outcome["result"]
    assert response.status_code == 200
    assert texts(response) == ["Nothing was created: a segment of “Spring sale” was deleted "
                               "meanwhile. Look again at what the follow-up would reach now, "
                               "then confirm."]
    assert "would reach 1 recipient" in response.content.decode()
    assert not Campaign.objects.filter(resend_of=campaign).exists()
    assert not LogEntry.objects.filter(user=staff, action_flag=ADDITION).exists()
