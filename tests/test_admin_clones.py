"""Cloning campaigns in the admin: asked first (which drafts, from which campaigns, and that no
recipient is touched); confirmed, created and logged; a page gone stale clones nothing; another
tenant's campaigns are neither cloned nor shown."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.db import transaction
from django.test import Client
from django.urls import reverse

from growth.models import Campaign, Segment
from growth.operations.follow_ups import create_follow_up
from tests.factories import CampaignFactory, SegmentFactory
from tests.helpers import confirm, post_back, texts, waiting_on_a_lock
from tests.scenarios import operator, rows_by_status, sending_campaign
from tests.test_admin_segment_deletion import _deleting, _in_a_thread

pytestmark = pytest.mark.django_db

URL = reverse("admin:growth_campaign_changelist")


def selection(*campaigns) -> dict:
    return {"action": "clone", "_selected_action": [c.pk for c in campaigns]}


def clone(client, *campaigns):
    return client.post(URL, selection(*campaigns))


def test_the_page_names_each_draft_and_its_original_and_creates_nothing(client, staff, tenant):
    spring = sending_campaign(count=3, account=tenant, name="Spring sale")
    draft = CampaignFactory(account=tenant, name="Autumn")
    draft.segments.set([SegmentFactory(account=tenant, name="Members")])

    page = clone(client, spring, draft)

    assert page.status_code == 200
    body = page.content.decode()
    assert "2 drafts will be created" in body and "No recipient is touched" in body
    assert "“Copy of Spring sale”, a draft of Acme, from <b>Spring sale</b> (sending)" in body
    assert "“Copy of Autumn”, a draft of Acme, from <b>Autumn</b> (draft); segments: Members." in body
    assert Campaign.objects.count() == 2 and not LogEntry.objects.exists()


def test_the_page_says_a_follow_ups_copy_is_no_follow_up(client, staff, tenant):
    spring = sending_campaign(count=3, account=tenant, name="Spring sale")
    assert Campaign.objects.pause(campaign_id=spring.id)
    follow_up = create_follow_up(campaign_id=spring.id, name="Spring, again")

    body = clone(client, spring, follow_up).content.decode()

    said = "It is a follow-up (“resend to the rest”); its copy is not</b>"
    assert body.count(said) == 1
    assert body.index("from <b>Spring, again</b>") < body.index(said)


def test_confirming_creates_the_drafts_logs_each_and_touches_no_recipient(client, staff, tenant):
    spring = sending_campaign(count=3, account=tenant, name="Spring sale")
    before = rows_by_status(spring)

    response = confirm(client, URL, selection(spring), follow=True)

    copy = Campaign.objects.get(name="Copy of Spring sale")
    assert copy.status == "draft" and copy.resend_of_id is None and not copy.sends.exists()
    assert "1 draft created: Copy of Spring sale." in texts(response)
    entry = LogEntry.objects.get()
    assert (entry.object_id, entry.action_flag, entry.user) == (str(copy.pk), ADDITION, staff)
    assert entry.change_message == f"Clone of “Spring sale” (id {spring.pk})."
    assert rows_by_status(spring) == before and Campaign.objects.get(pk=spring.pk).status == "sending"


def test_a_campaign_edited_since_the_page_clones_nothing_and_shows_the_page_again(client, staff,
                                                                                  tenant):
    draft = CampaignFactory(account=tenant, name="Autumn", subject="Old")
    other = CampaignFactory(account=tenant, name="Winter")
    page = clone(client, draft, other)
    Campaign.objects.filter(pk=draft.pk).update(subject="New")  # someone saved the draft meanwhile

    response = post_back(client, URL, page, follow=True)

    assert Campaign.objects.count() == 2 and not LogEntry.objects.exists()
    assert any("changed since the page was shown" in t for t in texts(response))
    assert "2 drafts will be created" in response.content.decode()  # the page, as it stands now


def test_a_campaign_deleted_since_the_page_is_said_and_nothing_fails(client, staff, tenant):
    draft = CampaignFactory(account=tenant, name="Autumn")
    page = clone(client, draft)
    draft.delete()

    response = post_back(client, URL, page, follow=True)

    assert response.status_code == 200 and not Campaign.objects.exists()
    assert "None of the selected campaigns is there any more: nothing was cloned." in texts(response)


def test_another_tenants_campaign_is_neither_shown_nor_cloned(client, tenant, other_tenant):
    theirs = CampaignFactory(account=other_tenant, name="Globex secret plan")
    mine = CampaignFactory(account=tenant, name="Mine")
    client.force_login(operator(tenant))

    page = clone(client, theirs, mine)
    assert "Globex secret plan" not in page.content.decode()
    assert "1 draft will be created" in page.content.decode()
    # their operator's confirmation page, posted back by ours
    their_client = Client()
    their_client.force_login(operator(other_tenant))
    post_back(client, URL, clone(their_client, theirs))

    assert not Campaign.objects.filter(account=other_tenant).exclude(pk=theirs.pk).exists()
    assert not Campaign.objects.filter(name__startswith="Copy of").exists()


@pytest.mark.django_db(transaction=True)
def test_a_clone_confirmed_while_one_of_its_segments_is_deleted_creates_nothing_and_says_so(
        tenant):
    """The deletion locks the segment: the copy's link to it waits, then fails its foreign key at
    the commit. Nothing is created, the operator is told why, and the page is shown again."""
    staff = operator(tenant)
    spring = sending_campaign(count=2, account=tenant, name="Spring sale")  # built: not held
    extra = SegmentFactory(account=tenant, name="Extra")  # nobody in it: nothing protects it
    spring.segments.set([extra])
    cloning = Client()
    cloning.force_login(staff)
    page = clone(cloning, spring)

    with transaction.atomic():
        _deleting(staff, extra)
        thread, outcome = _in_a_thread(lambda: post_back(cloning, URL, page))
        assert waiting_on_a_lock()
    thread.join(timeout=30)

    assert "error" not in outcome, outcome
    response = outcome["result"]
    assert response.status_code == 200
    assert texts(response) == ["Nothing was cloned: a segment of one of them was deleted "
                               "meanwhile. Here is what it would do now."]
    assert "1 draft will be created" in response.content.decode()
    assert not Campaign.objects.filter(name__startswith="Copy of").exists()
    assert not LogEntry.objects.filter(action_flag=ADDITION).exists()
    assert not Segment.objects.filter(pk=extra.pk).exists()
