"""Steering a campaign from its page: the buttons its state allows, a confirmation page that
says what will happen to how many recipients, History entries, "send now", and no Delete once it
has recipients."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse
from django.utils import timezone

from growth.models import Campaign, Send, Suppression
from growth.operations.campaigns import approve_campaign
from tests.factories import CampaignFactory, SubscriberFactory
from tests.helpers import confirm, texts
from tests.scenarios import audience, operator, sending_campaign, statuses

pytestmark = pytest.mark.django_db


def do_url(campaign, name: str) -> str:
    return reverse("admin:growth_campaign_transition", args=[campaign.pk, name])


def page(client, campaign) -> str:
    return client.get(reverse("admin:growth_campaign_change", args=[campaign.pk])).content.decode()


def test_each_state_shows_the_buttons_it_allows(client, staff, tenant):
    draft = CampaignFactory(account=tenant)
    running = sending_campaign(count=2, account=tenant)
    body = page(client, draft)
    assert do_url(draft, "approve") in body and do_url(draft, "send_now") in body
    assert do_url(draft, "pause") not in body
    body = page(client, running)
    assert do_url(running, "pause") in body and do_url(running, "cancel") in body
    assert do_url(running, "approve") not in body and do_url(running, "resume") not in body


def test_approving_counts_the_recipients_the_build_would_create(client, staff, tenant):
    campaign = CampaignFactory(account=tenant)
    people = audience(tenant, 5)
    Suppression.objects.create(account=tenant, email_lower=people[0].email_lower)
    SubscriberFactory(segment=people[1].segment, email="pending@example.com", status="pending")
    response = client.get(do_url(campaign, "approve"))
    text = response.content.decode()
    assert "go to 4 recipients" in text and "6 addresses in its segments, 2 of them suppressed" in text
    campaign.refresh_from_db()
    assert campaign.status == "draft"  # the GET changed nothing
    assert not Send.objects.exists()  # counted without building


def test_confirming_moves_the_campaign_and_leaves_history(client, staff, tenant):
    campaign = sending_campaign(count=3, account=tenant)
    response = client.get(do_url(campaign, "pause"))
    assert "3 queued wait until it is resumed" in response.content.decode()
    response = confirm(client, do_url(campaign, "pause"), follow=True)
    assert any("1 campaign paused" in t for t in texts(response))
    campaign.refresh_from_db()
    assert campaign.status == "paused"
    entry = LogEntry.objects.get(object_id=str(campaign.pk))
    assert (entry.user, entry.action_flag, entry.change_message) == (staff, CHANGE, "Paused.")
    history = client.get(reverse("admin:growth_campaign_history", args=[campaign.pk]))
    assert "Paused." in history.content.decode()


def test_an_unconfirmed_post_changes_nothing(client, staff, tenant):
    campaign = sending_campaign(count=2, account=tenant)
    response = client.post(do_url(campaign, "cancel"), {})
    assert response.status_code == 200 and "will never get it" in response.content.decode()
    campaign.refresh_from_db()
    assert campaign.status == "sending" and not LogEntry.objects.exists()


def test_cancelling_says_how_many_were_dropped_in_history(client, staff, tenant):
    campaign = sending_campaign(count=4, account=tenant)
    confirm(client, do_url(campaign, "cancel"))
    assert LogEntry.objects.get().change_message == "Cancelled (4 queued recipients dropped)."


def test_send_now_approves_a_draft_with_no_schedule(client, staff, tenant):
    campaign = CampaignFactory(account=tenant, scheduled_for=None)
    audience(tenant, 2)
    assert "start at once" in client.get(do_url(campaign, "send_now")).content.decode()
    confirm(client, do_url(campaign, "send_now"))
    assert Campaign.objects.start_due() == [campaign.id]


def test_a_list_action_asks_first_then_acts(client, staff, tenant):
    one, two = (sending_campaign(count=1, account=tenant) for _ in range(2))
    ask = client.post(reverse("admin:growth_campaign_changelist"),
                      {"action": "pause", "_selected_action": [one.pk, two.pk]})
    assert ask.status_code == 200 and "Pause 2 campaigns?" in ask.content.decode()
    assert set(Campaign.objects.values_list("status", flat=True)) == {"sending"}
    confirm(client, reverse("admin:growth_campaign_changelist"),
            {"action": "pause", "_selected_action": [one.pk, two.pk]})
    assert set(Campaign.objects.values_list("status", flat=True)) == {"paused"}
    assert LogEntry.objects.count() == 2


def test_another_tenants_campaign_is_a_404_and_a_viewer_has_no_buttons(client, tenant, other_tenant):
    theirs = sending_campaign(count=1, account=other_tenant)
    client.force_login(operator(tenant))
    assert client.get(do_url(theirs, "pause")).status_code == 404
    assert client.post(do_url(theirs, "pause"), {"post": "yes"}).status_code == 404
    assert client.get(do_url(theirs, "nonsense")).status_code == 404
    mine = sending_campaign(count=1, account=tenant)
    client.force_login(operator(viewer_of=(tenant,)))
    assert do_url(mine, "pause") not in page(client, mine)
    assert client.post(do_url(mine, "pause"), {"post": "yes"}).status_code == 403
    assert Campaign.objects.get(pk=mine.pk).status == "sending"


def test_no_delete_once_it_has_recipients_and_one_save_after_draft(client, staff, tenant):
    draft = CampaignFactory(account=tenant)
    running = sending_campaign(count=1, account=tenant)
    assert reverse("admin:growth_campaign_delete", args=[draft.pk]) in page(client, draft)
    body = page(client, running)
    assert reverse("admin:growth_campaign_delete", args=[running.pk]) not in body
    assert "_addanother" not in body and "_continue" not in body
    assert client.get(reverse("admin:growth_campaign_delete", args=[running.pk])).status_code == 403


def test_the_page_says_who_holds_its_rows_on_the_wire_and_whether_they_are_alive(client, staff, tenant):
    from django.utils import timezone

    from growth.models import WorkerHeartbeat

    campaign = sending_campaign(count=5, account=tenant)
    Send.objects.claim(worker_id="host:1", batch_size=2, lease=60)
    Send.objects.claim(worker_id="host:2", batch_size=1, lease=60)
    WorkerHeartbeat.objects.beat(worker_id="host:1", hostname="host", pid=1, receiver="plain",
                                 batch_size=2)
    WorkerHeartbeat.objects.beat(worker_id="host:2", hostname="host", pid=2, receiver="plain",
                                 batch_size=1)
    WorkerHeartbeat.objects.filter(worker_id="host:2").update(
        seen_at=timezone.now() - timezone.timedelta(minutes=5))
    body = page(client, campaign)
    assert "2 recipients held by <code>host:1</code>:\n      alive" in body
    assert "1 recipient held by <code>host:2</code>" in body and "nobody is sending them" in body


def test_the_pause_banner_says_who_paused_and_what_to_look_at(client, staff, tenant):
    from growth.reputation.guard import REASON_PREFIX

    by_guard, by_engine = (sending_campaign(count=1, account=tenant) for _ in range(2))
    Campaign.objects.pause(campaign_id=by_guard.id, reason=f"{REASON_PREFIX} complaint rate 0.5 %")
    Campaign.objects.pause(campaign_id=by_engine.id, reason="the sender name has a line break")
    guarded = page(client, by_guard)
    assert "Paused to protect the sender's reputation" in guarded
    assert "cannot be sent as it is" not in guarded
    engine = page(client, by_engine)
    assert "cannot be sent as it is" in engine and "reputation" not in engine.split("errornote")[1][:300]


def test_the_pause_banner_sends_the_operator_to_the_transport_when_it_refused_us(
        client, staff, tenant):
    from growth.sending.transports.errors import refusal_reason

    campaign = sending_campaign(count=1, account=tenant)
    Campaign.objects.pause(campaign_id=campaign.id,
                           reason=refusal_reason("535 5.7.8 Authentication credentials invalid"))
    banner = page(client, campaign).split('class="errornote growth-pause-reason"')[1].split("</p>")[0]
    assert "the mail server or provider refused us, not the recipients" in banner
    assert "The transport refused us: 535 5.7.8 Authentication credentials invalid" in banner
    assert "Fix the transport (its login or API key" in banner
    assert "cannot be sent as it is" not in banner


# --- a confirmation is a promise: what it showed, or nothing ------------------------------------

def test_a_cancel_confirmed_for_a_draft_does_nothing_once_the_campaign_started(
        client, staff, tenant):
    campaign = CampaignFactory(account=tenant)
    audience(tenant, 4)
    url = do_url(campaign, "cancel")
    page = client.get(url)
    assert "Nobody will get it" in page.content.decode()
    approve_campaign(campaign_id=campaign.id)  # meanwhile, another operator and the worker
    assert Campaign.objects.start_due() == [campaign.id]
    assert Send.objects.build_recipients(campaign_id=campaign.id) == 4

    seen = re.findall(r'name="seen" value="([^"]+)"', page.content.decode())
    said = texts(client.post(url, {"post": "yes", "seen": seen}, follow=True))

    campaign.refresh_from_db()
    assert campaign.status == "sending" and statuses(campaign) == {"queued": 4}
    assert (f"“{campaign}” is sending now, not draft as the page you confirmed showed it: "
            "nothing was done to it. Look again.") in said
    assert not LogEntry.objects.exists()


def test_a_list_action_leaves_alone_what_its_page_said_it_would_even_once_it_could_act(
        client, staff, tenant):
    one = sending_campaign(count=1, account=tenant)
    two = CampaignFactory(account=tenant)  # a draft: "left alone: cannot be paused"
    audience(tenant, 2)
    changelist = reverse("admin:growth_campaign_changelist")
    selection = {"action": "pause", "_selected_action": [one.pk, two.pk]}
    page = client.post(changelist, selection)
    assert "left alone" in page.content.decode()
    approve_campaign(campaign_id=two.id)
    assert Campaign.objects.start_due() == [two.id]

    seen = re.findall(r'name="seen" value="([^"]+)"', page.content.decode())
    client.post(changelist, {**selection, "post": "yes", "seen": seen})

    assert Campaign.objects.get(pk=one.pk).status == "paused"
    assert Campaign.objects.get(pk=two.pk).status == "sending"


def test_an_approval_confirmed_before_the_draft_was_edited_does_nothing(client, staff, tenant):
    campaign = CampaignFactory(account=tenant, scheduled_for=timezone.now())
    audience(tenant, 2)
    url = do_url(campaign, "approve")
    page = client.get(url)
    Campaign.objects.filter(pk=campaign.pk).update(subject="Edited since",
                                                   updated_at=timezone.now())

    seen = re.findall(r'name="seen" value="([^"]+)"', page.content.decode())
    said = texts(client.post(url, {"post": "yes", "seen": seen}, follow=True))

    assert Campaign.objects.get(pk=campaign.pk).status == "draft"
    assert any("was changed since it was shown" in m for m in said)


def test_a_confirmation_that_names_no_page_does_nothing(client, staff, tenant):
    campaign = sending_campaign(count=2, account=tenant)
    client.post(do_url(campaign, "cancel"), {"post": "yes"})
    assert Campaign.objects.get(pk=campaign.pk).status == "sending"
