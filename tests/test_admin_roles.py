"""A membership's role means the same in the admin as in /app/: an editor changes the account's
data, a viewer reads it, whatever Django model permissions the user holds."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from growth.models import Campaign, Segment, Subscriber, Suppression
from tests.factories import AccountFactory, CampaignFactory, SegmentFactory, SubscriberFactory
from tests.helpers import confirm, texts
from tests.scenarios import operator, sending_campaign

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client, tenant, other_tenant):
    """Editor of other_tenant, viewer of tenant, with every model permission."""
    user = operator(other_tenant, viewer_of=(tenant,))
    client.force_login(user)
    return user


def test_a_viewer_sees_the_campaign_page_read_only_and_cannot_post_it(client, viewer, tenant):
    campaign = CampaignFactory(account=tenant, name="Theirs")
    url = reverse("admin:growth_campaign_change", args=[campaign.pk])

    page = client.get(url)
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
    response = client.post(url, {"name": "Renamed", "version": campaign.updated_at.isoformat()})
    assert response.status_code == 403
    campaign.refresh_from_db()
    assert campaign.name == "Theirs"


def test_actions_leave_the_viewers_rows_alone_and_say_so(client, viewer, tenant, other_tenant):
    theirs = sending_campaign(count=2, account=tenant)
    mine = sending_campaign(count=2, account=other_tenant)

    selection = {"action": "pause", "_selected_action": [theirs.pk, mine.pk]}
    page = client.post(reverse("admin:growth_campaign_changelist"), selection)
    assert "1 selected left alone: your role in their account is viewer (read only)." in texts(page)
    confirm(client, reverse("admin:growth_campaign_changelist"), selection)

    assert Campaign.objects.get(pk=mine.pk).status == "paused"
    assert Campaign.objects.get(pk=theirs.pk).status == "sending"


def test_ids_not_the_users_are_left_alone_as_not_theirs_or_not_there(client, viewer, tenant,
                                                                     other_tenant):
    """Neither an id of a third tenant's campaign nor one of none is blamed on a role; the two are
    counted together, worded alike, so that no answer says which ids another tenant has. The
    viewer's own account's row keeps its true reason."""
    stranger = sending_campaign(count=2, account=AccountFactory(name="Initech"))
    theirs = sending_campaign(count=2, account=tenant)
    mine = sending_campaign(count=2, account=other_tenant)
    missing = max(Campaign.objects.values_list("pk", flat=True)) + 1

    selection = {"action": "pause", "_selected_action": [stranger.pk, missing, mine.pk]}
    said = texts(client.post(reverse("admin:growth_campaign_changelist"), selection))
    assert "2 selected left alone: not yours to change, or not there." in said
    assert not any("viewer" in text for text in said)

    selection["_selected_action"].append(theirs.pk)
    said = texts(client.post(reverse("admin:growth_campaign_changelist"), selection))
    assert said == ["1 selected left alone: your role in their account is viewer (read only).",
                    "2 selected left alone: not yours to change, or not there."]
    confirm(client, reverse("admin:growth_campaign_changelist"), selection)
    assert [Campaign.objects.get(pk=c.pk).status for c in (stranger, theirs, mine)] == [
        "sending", "sending", "paused"]


def test_forms_offer_only_the_accounts_the_user_may_change(client, viewer, tenant, other_tenant):
    body = client.get(reverse("admin:growth_campaign_add")).content.decode()
    assert f'value="{other_tenant.pk}"' in body
    assert f'value="{tenant.pk}"' not in body


def test_a_viewer_cannot_add_to_or_delete_from_a_viewed_account(client, viewer, tenant):
    segment = SegmentFactory(account=tenant)
    response = client.post(reverse("admin:growth_suppression_add"),
                           {"account": tenant.pk, "email_lower": "x@example.com", "reason": "manual"})
    assert response.status_code == 200 and not Suppression.objects.exists()  # not a valid choice
    delete = client.post(reverse("admin:growth_segment_delete", args=[segment.pk]), {"post": "yes"})
    assert delete.status_code == 403
    assert Segment.objects.filter(pk=segment.pk).exists()


def test_a_user_who_is_only_a_viewer_anywhere_gets_no_add_button_and_no_import(client, tenant):
    client.force_login(operator(viewer_of=(tenant,)))
    assert client.get(reverse("admin:growth_campaign_add")).status_code == 403
    assert client.get(reverse("admin:growth_subscriber_import")).status_code == 403
    assert client.get(reverse("admin:growth_campaign_changelist")).status_code == 200


# --- a list has two action forms: every posted action value is judged, not only the last --------

def test_a_second_action_value_does_not_let_a_viewer_clone_into_a_viewed_account(client, viewer,
                                                                                 tenant):
    theirs = CampaignFactory(account=tenant, name="Theirs")
    # Django runs action[index] (the first); the scoping read request.POST.get("action"): the last
    client.post(reverse("admin:growth_campaign_changelist"),
                {"action": ["clone", "send_test_to_me"], "index": "0",
                 "_selected_action": [theirs.pk]})
    assert list(Campaign.objects.filter(account=tenant)) == [theirs]


def test_a_second_action_value_does_not_let_a_viewer_confirm_a_viewed_accounts_subscribers(
        client, viewer, tenant):
    pending = SubscriberFactory(segment=SegmentFactory(account=tenant), status="pending")
    client.post(reverse("admin:growth_subscriber_changelist"),
                {"action": ["confirm_pending", "no-such-action"], "index": "0", "post": "yes",
                 "_selected_action": [pending.pk]})
    pending.refresh_from_db()
    assert pending.status == Subscriber.Status.PENDING


def test_a_second_action_value_does_not_let_a_viewer_pause_a_viewed_accounts_campaign(
        client, viewer, tenant):
    theirs = sending_campaign(count=2, account=tenant)
    url = reverse("admin:growth_campaign_changelist")
    selection = {"action": ["pause", "send_test_to_me"], "index": "0",
                 "_selected_action": [theirs.pk]}
    page = client.post(url, selection)  # the confirmation page, with what it promised
    seen = re.findall(r'name="seen" value="([^"]*)"', page.content.decode())
    client.post(url, {**selection, "post": "yes", "seen": seen})
    assert Campaign.objects.get(pk=theirs.pk).status == Campaign.Status.SENDING


@pytest.mark.django_db
def test_the_left_alone_counts_hold_for_the_post_a_browser_sends(client, tenant, other_tenant):
    """The list's action form posts its hidden select_across as "0" (Django's ActionForm:
    initial=0) until "select all N" sets it to "1": read as Django reads it, not as a string's
    truth ("0" is true)."""
    from django.urls import reverse

    from tests.helpers import texts
    from tests.scenarios import operator, sending_campaign

    client.force_login(operator(other_tenant, viewer_of=(tenant,)))
    url = reverse("admin:growth_campaign_changelist")
    theirs = sending_campaign(count=2, account=tenant)
    page = client.get(url).content.decode()
    assert 'name="select_across" value="0"' in page  # what the browser posts back
    said = texts(client.post(url, {"action": "pause", "select_across": "0", "index": "0",
                                   "_selected_action": [theirs.pk, 10**12]}))
    assert "1 selected left alone: your role in their account is viewer (read only)." in said
    assert "1 selected left alone: not yours to change, or not there." in said
