"""Deleting segments in the admin never widens a campaign whose recipients are not built yet: a
campaign that names no segment goes to every segment of its account."""

from __future__ import annotations

import html
import re
import threading
import time

import pytest
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import IntegrityError, OperationalError, transaction
from django.test import Client, RequestFactory
from django.urls import reverse

from growth.admin import segment_deletion
from growth.managers import campaigns as campaign_queries
from growth.models import Campaign, Segment, Send
from growth.operations.campaigns import approve_campaign, cancel_campaign
from tests.factories import CampaignFactory, SegmentFactory, SubscriberFactory
from tests.helpers import on_its_own_connection, texts, waiting_on_a_lock
from tests.scenarios import audience, operator

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:growth_segment_changelist")
REFUSED = "would leave 1 campaign with no segment"
SHRINKS = "Campaigns whose audience shrinks"


def delete_url(segment) -> str:
    return reverse("admin:growth_segment_delete", args=[segment.pk])


def page(response) -> str:
    """The page's text as read: tags left out, entities decoded, white space collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]*>", " ", response.content.decode())).split())


def two_segments(tenant) -> tuple[Segment, Segment]:
    """“Newsletter” (wanted0-1@) and “Customers” (other0-2@), all confirmed."""
    wanted = SegmentFactory(account=tenant, name="Newsletter")
    others = SegmentFactory(account=tenant, name="Customers")
    audience(tenant, 2, segment=wanted, prefix="wanted")
    audience(tenant, 3, segment=others, prefix="other")
    return wanted, others


def campaign_on(*segments, status: str = "approved", **kwargs) -> Campaign:
    campaign = CampaignFactory(account=segments[0].account, **kwargs)
    campaign.segments.set(segments)
    if status != "draft":
        approve_campaign(campaign_id=campaign.id)
    if status == "sending":  # started, its recipients not built yet
        assert Campaign.objects.start_due() == [campaign.id]
    campaign.refresh_from_db()
    return campaign


def recipients(campaign) -> list[str]:
    """Start and build ``campaign`` as the worker does; return whom it mails."""
    Campaign.objects.start_due()
    Send.objects.build_recipients(campaign_id=campaign.id)
    return sorted(Send.objects.filter(campaign=campaign).values_list("email_lower", flat=True))


WANTED = ["wanted0@example.com", "wanted1@example.com"]
OTHERS = ["other0@example.com", "other1@example.com", "other2@example.com"]


# --- refused: it would widen a campaign ----------------------------------------------------------

@pytest.mark.parametrize("status", ["draft", "approved", "sending"])
def test_deleting_the_only_segment_of_an_unbuilt_campaign_is_refused(client, staff, tenant, status):
    """The defect: deleted, the approved campaign then mailed “Customers” (every segment)."""
    wanted, _ = two_segments(tenant)
    campaign = campaign_on(wanted, status=status, name="Spring sale")

    for response in (client.get(delete_url(wanted)), client.post(delete_url(wanted), {"post": "yes"})):
        assert response.status_code == 200
        body = page(response)
        assert "Nothing was deleted." in body and REFUSED in body
        assert "every subscriber of the account" in body
        assert "Spring sale" in body
        assert reverse("admin:growth_campaign_change", args=[campaign.pk]) in response.content.decode()
        advice = "change its segments on its page" if status == "draft" else "cancel it first"
        assert advice in body

    assert Segment.objects.filter(pk=wanted.pk).exists()
    assert list(campaign.segments.all()) == [wanted]
    assert not LogEntry.objects.exists()
    if status == "draft":
        approve_campaign(campaign_id=campaign.id)
    assert recipients(campaign) == WANTED


def test_deleting_together_every_segment_of_a_campaign_is_refused(client, staff, tenant):
    wanted, others = two_segments(tenant)
    campaign = campaign_on(wanted, others, name="Spring sale")
    selection = {"action": "delete_selected", ACTION_CHECKBOX_NAME: [wanted.pk, others.pk]}

    for data in (selection, {**selection, "post": "yes"}):
        body = page(client.post(CHANGELIST, data))
        assert "Cannot delete the selected segments" in body and REFUSED in body
        assert "names only “Newsletter”, “Customers”" in body and "Spring sale" in body

    assert Segment.objects.count() == 2 and not LogEntry.objects.exists()
    assert recipients(campaign) == sorted(OTHERS + WANTED)


def test_one_then_the_other_the_second_deletion_is_refused(client, staff, tenant):
    wanted, others = two_segments(tenant)
    campaign = campaign_on(wanted, others, name="Spring sale")
    assert client.post(delete_url(others), {"post": "yes"}).status_code == 302
    assert REFUSED in page(client.post(delete_url(wanted), {"post": "yes"}))
    assert recipients(campaign) == WANTED


# --- allowed -------------------------------------------------------------------------------------

def test_a_campaign_keeping_another_segment_is_named_and_its_history_says_what_it_lost(
        client, staff, tenant):
    wanted, others = two_segments(tenant)
    campaign = campaign_on(wanted, others, name="Spring sale")
    gone = campaign_on(others, name="Cancelled one")
    cancel_campaign(campaign_id=gone.id)

    body = page(client.get(delete_url(others)))
    assert SHRINKS in body
    assert "Spring sale (approved): loses “Customers” and keeps its other segments." in body
    assert "Cancelled one" not in body
    assert "Campaign-segment relationship" in body  # Django's own list is still there

    response = client.post(delete_url(others), {"post": "yes"})
    assert response.status_code == 302 and not Segment.objects.filter(pk=others.pk).exists()
    assert texts(response) == ['The segment “Customers” was deleted successfully.']
    deletion, change = LogEntry.objects.order_by("id")
    assert (deletion.action_flag, deletion.user, deletion.object_id, deletion.object_repr,
            deletion.content_type) == (DELETION, staff, str(others.pk), "Customers",
                                       ContentType.objects.get_for_model(Segment))
    assert (change.action_flag, change.user, change.object_id, change.content_type) == (
        CHANGE, staff, str(campaign.pk), ContentType.objects.get_for_model(Campaign))
    assert change.get_change_message() == (
        "Segment(s) “Customers” deleted: no longer in its audience, which is now its other segments.")
    assert recipients(campaign) == WANTED


def test_bulk_deleting_some_of_a_campaigns_segments_says_so_and_deletes(client, staff, tenant):
    wanted, others = two_segments(tenant)
    spare = SegmentFactory(account=tenant, name="Spare")
    campaign = campaign_on(wanted, others, name="Spring sale")
    whole = campaign_on(wanted, status="draft", name="Everyone")
    whole.segments.clear()
    selection = {"action": "delete_selected", ACTION_CHECKBOX_NAME: [others.pk, spare.pk]}

    body = page(client.post(CHANGELIST, selection))
    assert SHRINKS in body and "Are you sure you want to delete the selected segments?" in body
    assert "Spring sale (approved): loses “Customers” and keeps its other segments." in body
    assert ("Everyone (draft): names no segment (every segment of its account): loses the "
            "subscribers of “Customers”, “Spare”.") in body

    response = client.post(CHANGELIST, {**selection, "post": "yes"})
    assert response.status_code == 302 and texts(response) == ["Successfully deleted 2 segments."]
    assert list(Segment.objects.all()) == [wanted]
    logged = LogEntry.objects.order_by("id")
    assert [(e.action_flag, e.object_repr) for e in logged] == [
        (DELETION, "Customers"), (DELETION, "Spare"), (CHANGE, "Spring sale"), (CHANGE, "Everyone")]
    assert recipients(campaign) == WANTED


@pytest.mark.parametrize("finished", [False, True])
def test_the_only_segment_of_a_built_or_finished_campaign_may_be_deleted(client, staff, tenant,
                                                                         finished):
    """Its recipients exist already: nothing can widen it (the subscribers it mailed would be
    protected by their rows; these were pending when it was built). Only the campaign still to
    be built is named."""
    wanted, _ = two_segments(tenant)
    pending = SegmentFactory(account=tenant, name="Pending")
    SubscriberFactory(segment=pending, status="pending")
    built = campaign_on(pending, name="Built one")
    assert recipients(built) == []
    if finished:
        assert Campaign.objects.finish() == [built.id]
    draft = campaign_on(pending, wanted, status="draft", name="Next one")

    body = page(client.get(delete_url(pending)))
    assert "Next one (draft): loses “Pending” and keeps its other segments." in body
    assert "Built one" not in body
    assert client.post(delete_url(pending), {"post": "yes"}).status_code == 302
    assert not Segment.objects.filter(pk=pending.pk).exists()
    assert [(e.action_flag, e.object_repr) for e in LogEntry.objects.order_by("id")] == [
        (DELETION, "Pending"), (CHANGE, "Next one")]
    built.refresh_from_db()
    assert built.status == ("sent" if finished else "sending") and not built.sends.exists()
    approve_campaign(campaign_id=draft.id)
    assert recipients(draft) == WANTED


# --- another tenant's ----------------------------------------------------------------------------

def test_another_tenants_segment_is_a_404_and_is_never_touched_or_named(client, staff, tenant,
                                                                       other_tenant):
    theirs = SegmentFactory(account=other_tenant, name="Their list")
    campaign_on(theirs, name="Their launch")
    mine = SegmentFactory(account=tenant, name="My list")
    campaign_on(mine, name="My launch")
    assert client.get(delete_url(theirs)).status_code == 404
    assert client.post(delete_url(theirs), {"post": "yes"}).status_code == 404
    for data in ({}, {"post": "yes"}):
        body = page(client.post(CHANGELIST, {"action": "delete_selected",
                                             ACTION_CHECKBOX_NAME: [mine.pk, theirs.pk], **data}))
        assert "Cannot delete segment “My list”" in body and "My launch" in body
        assert "Their" not in body
    assert Segment.objects.count() == 2 and not LogEntry.objects.exists()


# --- at the same moment --------------------------------------------------------------------------

def _deleting(staff, segment):
    """Run the admin's deletion of ``segment`` in the caller's transaction (not committed)."""
    request = RequestFactory().post("/")
    request.user = staff
    admin.site._registry[Segment].delete_queryset(request, Segment.objects.filter(pk=segment.pk))


def _in_a_thread(func) -> tuple[threading.Thread, dict]:
    outcome: dict = {}
    return on_its_own_connection(func, outcome), outcome


@pytest.mark.django_db(transaction=True)
def test_two_deletions_at_the_same_moment_cannot_leave_a_campaign_with_no_segment(tenant):
    """Each alone leaves the campaign a segment; the second waits for the first, then judges
    what the first left."""
    staff = operator(tenant)
    wanted, others = two_segments(tenant)
    campaign = campaign_on(wanted, others, name="Spring sale")
    second = Client()
    second.force_login(staff)

    with transaction.atomic():
        _deleting(staff, others)
        thread, outcome = _in_a_thread(lambda: second.post(delete_url(wanted), {"post": "yes"}))
        assert waiting_on_a_lock()
    thread.join(timeout=30)

    assert REFUSED in page(outcome["result"])
    assert list(campaign.segments.all()) == [wanted]
    assert recipients(campaign) == WANTED


@pytest.mark.django_db(transaction=True)
def test_a_build_at_the_same_moment_reads_the_segments_after_the_deletion(tenant):
    """The build waits for the deletion's lock, then reads what it left: no error, and nobody
    of the deleted segment."""
    staff = operator(tenant)
    wanted, others = two_segments(tenant)
    campaign = campaign_on(wanted, others, status="sending", name="Spring sale")

    with transaction.atomic():
        _deleting(staff, others)
        thread, outcome = _in_a_thread(
            lambda: Send.objects.build_recipients(campaign_id=campaign.id))
        assert waiting_on_a_lock()
    thread.join(timeout=30)

    assert outcome == {"result": 2}
    assert recipients(campaign) == WANTED


# --- the converse: a campaign's own form -------------------------------------------------------

def test_removing_a_drafts_last_segment_in_its_form_is_kept_and_said(client, staff, tenant):
    """An explicit choice (none selected: every segment), made visible."""
    wanted, _ = two_segments(tenant)
    campaign = campaign_on(wanted, status="draft", name="Spring sale")
    when = campaign.scheduled_for
    response = client.post(reverse("admin:growth_campaign_change", args=[campaign.pk]), {
        "name": campaign.name, "subject": campaign.subject, "body_text": campaign.body_text,
        "body_html": "", "scheduled_for_0": when.strftime("%Y-%m-%d"),
        "scheduled_for_1": when.strftime("%H:%M:%S"), "segments": [],
        "version": campaign.updated_at.isoformat()})
    assert response.status_code == 302 and not campaign.segments.exists()
    assert ("“Spring sale” names no segment now: it goes to every segment of Acme, every "
            "confirmed subscriber of the account.") in texts(response)


@pytest.mark.django_db(transaction=True)
def test_a_build_under_way_holds_off_a_deletion_but_not_an_operators_pause(tenant):
    """The build's hold on its campaign is the weakest that makes a deletion wait: a pause or a
    cancel, which a build of millions of rows would otherwise keep waiting for minutes, goes
    through at once."""
    from growth.managers.sends import QUERIES

    staff = operator(tenant)
    wanted, others = two_segments(tenant)
    campaign = campaign_on(wanted, others, status="sending", name="Spring sale")
    deleting = Client()
    deleting.force_login(staff)

    with transaction.atomic():  # a build, from its first statement on
        assert QUERIES.one("still_unbuilt", campaign_id=campaign.id) is not None
        pausing, paused = _in_a_thread(lambda: Campaign.objects.pause(campaign_id=campaign.id))
        pausing.join(timeout=30)
        assert paused == {"result": True}
        thread, outcome = _in_a_thread(lambda: deleting.post(delete_url(others), {"post": "yes"}))
        assert waiting_on_a_lock()
    thread.join(timeout=30)

    assert outcome["result"].status_code == 302
    assert list(campaign.segments.all()) == [wanted]


@pytest.mark.django_db(transaction=True)
def test_a_draft_naming_the_segment_committed_during_the_deletion_is_not_widened(
        monkeypatch, tenant):
    """A campaign that comes to name the segment after the deletion judged the campaigns (a new
    draft, a clone, or an edit replacing its segments, committed by another operator meanwhile)
    is neither locked nor judged; the deletion's cascade then removes its only link and it goes
    to every segment of the account."""
    staff = operator(tenant)
    _, others = two_segments(tenant)
    judged = segment_deletion.losses_of
    threads = []

    def judged_then_another_operator_commits(segments, *, lock):
        losses = judged(segments, lock=lock)
        def new_draft():
            try:
                with transaction.atomic():
                    draft = CampaignFactory(account=tenant, name="Customers only")
                    draft.segments.set([others])
            except IntegrityError:
                pass  # with the fix: the segment was deleted first
        threads.append(on_its_own_connection(new_draft))
        threads[-1].join(timeout=3)  # without the segments' lock it commits at once
        return losses

    monkeypatch.setattr(segment_deletion, "losses_of", judged_then_another_operator_commits)
    request = RequestFactory().post("/")
    request.user = staff
    try:
        with transaction.atomic():
            admin.site._registry[Segment].delete_queryset(
                request, Segment.objects.filter(pk=others.pk))
    except segment_deletion.SegmentsInUse:
        pass  # refused: what it must do (or wait and then refuse)

    for thread in threads:
        thread.join(timeout=30)  # with the fix: the draft's commit fails its foreign key
    draft = Campaign.objects.filter(name="Customers only").first()
    if draft is None:
        return  # its link named a segment deleted before it committed: nothing saved
    assert draft.segments.exists(), (
        "the draft was left with no segment: it now goes to every segment of the account")


@pytest.mark.django_db(transaction=True)
def test_a_deletion_does_not_deadlock_with_an_edit_of_a_campaign_new_to_its_set(
        monkeypatch, tenant):
    """campaign -> segment -> campaign: a draft committed between step 1 and step 1b (it names
    no segment: every segment of the account, so step 1 run again wants it) and being edited to
    name the segment (its row held by the edit; the link's deferred key check wants the segment
    at its commit) would deadlock with a deletion that held the segment and waited for the draft
    (PostgreSQL aborts one: a 500). The deletion takes its second look without waiting, lets go
    of the segments and starts again."""
    segment = SegmentFactory(account=tenant, name="Doomed")
    real_rows = campaign_queries.QUERIES.rows
    calls = {"lock_audiences_of_segments": 0}
    edit_holds, edit_commit = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def edit(draft_id):
        try:
            with transaction.atomic():
                Campaign.objects.filter(pk=draft_id).update(name="now for Doomed")  # row held
                Campaign.objects.get(pk=draft_id).segments.add(segment)  # key check at commit
                edit_holds.set()
                edit_commit.wait(10)
        except IntegrityError:
            pass  # lost to the deletion: what the fix promises (ValidatedAgain's form)
        except BaseException as exc:
            errors.append(exc)
        finally:
            edit_holds.set()

    threads = []

    def rows(name, /, **params):
        result = real_rows(name, **params)
        if name == "lock_audiences_of_segments":
            calls[name] += 1
            if calls[name] == 1:  # after step 1: another operator adds a draft, then edits it
                made = {}
                t = on_its_own_connection(lambda: made.update(
                    id=CampaignFactory(account=tenant, name="new draft").pk))
                t.join(10)
                threads.append(on_its_own_connection(lambda: edit(made["id"])))
                edit_holds.wait(10)
        # step 1b held: the edit commits (its key check waits)
        if name == "lock_segments" and not edit_commit.is_set():
            edit_commit.set()
            time.sleep(0.3)
        return result

    monkeypatch.setattr(campaign_queries.QUERIES, "rows", rows)
    try:
        with transaction.atomic():
            Campaign.objects.audiences_of_segments([segment.pk], lock=True)
            segment.delete()
    except OperationalError as exc:
        errors.append(exc)
    for t in threads:
        t.join(15)
    assert not errors, f"deadlock: {errors!r}"


@pytest.mark.parametrize("object_id", ["999999", "abc", "-1"])
def test_deleting_a_segment_that_is_not_there_is_no_500(client, staff, tenant, object_id):
    response = client.get(reverse("admin:growth_segment_delete", args=[object_id]))
    assert response.status_code in (302, 404)
    response = client.post(reverse("admin:growth_segment_delete", args=[object_id]),
                           {"post": "yes"})
    assert response.status_code in (302, 404)
