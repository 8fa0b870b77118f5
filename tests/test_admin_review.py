"""The review queue: the sends that need a person (unknown, failed), its badges, what a send's
page says about it, and the decisions about unknown sends — each through a confirmation page,
recorded as a verdict and in the send's History, refused for another tenant's send or a viewer."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import localize
from django.utils.html import escape

from growth.admin.review_queue import campaign_review_counts, queue_url
from growth.job_ids import message_id
from growth.models import Campaign, Send, SendVerdict
from growth.operations.campaigns import cancel_campaign
from tests.factories import UserFactory
from tests.helpers import confirm, texts
from tests.scenarios import (
    finished_campaign_with_unknown_rows,
    make_unknown,
    operator,
    sending_campaign,
    statuses,
)

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:growth_send_changelist")
OLD_FORM = "SMTPRecipientsRefused: {'person1@example.com': (550, b'5.1.1 No such user')}"
NEW_FORM = "550 5.1.1 No such user"


def decide_url(send_id: int, decision: str) -> str:
    return reverse("admin:growth_send_decide", args=[send_id, decision])


def change_page(client, send_id: int) -> str:
    return client.get(reverse("admin:growth_send_change", args=[send_id])).content.decode()


def entries_of(send_id: int):
    return LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(Send),
                                   object_id=str(send_id))


def fail(campaign, count: int, error: str = NEW_FORM) -> list[int]:
    """Fail ``count`` queued rows of the campaign, as a permanent refusal leaves them."""
    ids = list(Send.objects.filter(campaign=campaign, status="queued").order_by("id")
               .values_list("id", flat=True)[:count])
    Send.objects.filter(id__in=ids).update(status="failed", attempts=1, last_error=error)
    return ids


def superuser(client):
    user = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(user)
    return user


# --- the badges -------------------------------------------------------------------------------

def test_the_review_badge_counts_come_from_a_context_processor_in_the_settings():
    processors = settings.TEMPLATES[0]["OPTIONS"]["context_processors"]
    assert "growth.admin.review_queue.review_queue" in processors


def test_the_index_counts_the_sends_that_need_review_in_the_operators_accounts_only(
        client, staff, tenant, other_tenant):
    ours = sending_campaign(count=5, account=tenant)
    make_unknown(2)
    fail(ours, 1)
    theirs = sending_campaign(count=4, account=other_tenant)
    fail(theirs, 3)

    body = client.get(reverse("admin:index")).content.decode()
    assert "3 sends need review" in body
    assert "2 unknown" in body and "1 failed" in body
    assert f'href="{escape(queue_url())}"' in body
    assert f'href="{escape(queue_url(status="unknown"))}"' in body

    superuser(client)
    body = client.get(reverse("admin:index")).content.decode()
    assert "6 sends need review" in body and "2 unknown" in body and "4 failed" in body


def test_the_index_says_so_when_nothing_needs_review_and_shows_no_badge_without_send_access(
        client, staff, tenant):
    sending_campaign(count=2, account=tenant)
    assert "No sends need review" in client.get(reverse("admin:index")).content.decode()
    client.force_login(operator(tenant, perms=["view_campaign"]))
    body = client.get(reverse("admin:index")).content.decode()
    assert "need review" not in body and "growth-review-badge" not in body


def test_the_campaign_badge_counts_that_campaigns_unknown_and_failed_sends(tenant, other_tenant):
    campaign = sending_campaign(count=6, account=tenant)
    make_unknown(2)
    fail(campaign, 3)
    other = sending_campaign(count=2, account=other_tenant)
    quiet = campaign_review_counts(other.id)
    assert render_to_string("growth/admin/review_badge.html", {"review_counts": quiet}).strip() == ""
    fail(other, 1)

    counts = campaign_review_counts(campaign.id)
    assert (counts.unknown, counts.failed, counts.total) == (2, 3, 5)
    html = render_to_string("growth/admin/review_badge.html", {"review_counts": counts})
    assert "5 sends of this campaign need review" in html
    assert "2 unknown" in html and "3 failed" in html
    for url in (counts.url, counts.unknown_url, counts.failed_url):
        assert f'href="{escape(url)}"' in html
    assert counts.unknown_url == f"{CHANGELIST}?campaign__id__exact={campaign.id}&status__exact=unknown"


def test_the_campaign_page_shows_its_badge(client, staff, tenant):
    campaign = sending_campaign(count=3, account=tenant)
    make_unknown(1)
    body = client.get(reverse("admin:growth_campaign_change", args=[campaign.pk])).content.decode()
    assert "1 send of this campaign needs review" in body
    assert escape(campaign_review_counts(campaign.id).unknown_url) in body


def test_the_index_count_reads_the_tallies_of_the_operators_accounts_only(tenant):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from growth.admin.review_queue import sends_needing_review
    from tests.factories import AccountFactory

    sending_campaign(count=3, account=tenant)
    make_unknown(1)
    fail(sending_campaign(count=4, account=AccountFactory()), 2)  # another tenant's
    with CaptureQueriesContext(connection) as captured:
        everyone = sends_needing_review(UserFactory(is_staff=True, is_superuser=True))
    assert (everyone.unknown, everyone.failed) == (1, 2)
    assert not [q for q in captured.captured_queries if "growth_sends" in q["sql"]]
    mine = sends_needing_review(operator(tenant))
    assert (mine.unknown, mine.failed) == (1, 0)


# --- the queue --------------------------------------------------------------------------------

def test_the_queue_lists_unknown_and_failed_sends_with_guidance(client, staff, tenant):
    campaign = sending_campaign(count=5, account=tenant)
    lost = make_unknown(1)
    failed = fail(campaign, 1)
    body = client.get(queue_url()).content.decode()
    assert body.count('name="_selected_action"') == 2
    for row in Send.objects.filter(id__in=[*lost, *failed]):
        assert row.job_id in body
    assert "Review queue: sends that need a person" in body
    assert "reconcile_unknown" in body and "Resend to the rest" in body

    body = client.get(CHANGELIST, {"status__exact": "unknown"}).content.decode()
    assert "reconcile_unknown" in body and "Resend to the rest" not in body
    assert "Review queue" not in client.get(CHANGELIST).content.decode()


def test_a_send_can_be_found_by_its_message_id(client, staff, tenant):
    campaign = sending_campaign(count=3, account=tenant)
    row = Send.objects.filter(campaign=campaign).order_by("id").last()
    body = client.get(CHANGELIST, {"q": message_id(row.job_id)}).content.decode()
    assert body.count('name="_selected_action"') == 1 and row.job_id in body


@pytest.mark.parametrize("stored", [OLD_FORM, NEW_FORM,
                                    f"requeued by an operator after: {OLD_FORM}"])
def test_an_error_shows_as_code_and_text_whichever_form_it_was_stored_in(client, staff, tenant,
                                                                         stored):
    campaign = sending_campaign(count=2, account=tenant)
    (row,) = fail(campaign, 1, error=stored)
    shown = "<code>550 5.1.1</code> No such user"
    listed = client.get(queue_url()).content.decode()
    assert shown in listed
    assert "b&#x27;5.1.1" not in listed.split("<tbody>")[1].split("title=")[0]
    assert shown in change_page(client, row)


def test_other_errors_show_as_they_are(client, staff, tenant):
    campaign = sending_campaign(count=2, account=tenant)
    (row,) = fail(campaign, 1, error="SMTPServerDisconnected: Connection unexpectedly closed")
    assert "SMTPServerDisconnected: Connection unexpectedly closed" in change_page(client, row)


def test_a_row_waiting_to_retry_shows_its_next_attempt(client, staff, tenant):
    campaign = sending_campaign(count=2, account=tenant)
    waiting, _fresh = Send.objects.filter(campaign=campaign).order_by("id")
    when = timezone.now() + timezone.timedelta(minutes=4, seconds=30)
    first = timezone.now() - timezone.timedelta(hours=1)
    Send.objects.filter(id=waiting.id).update(next_attempt_at=when, attempts=2,
                                              first_attempt_at=first,
                                              last_error="421 4.7.0 Try again later")
    horizon = localize(timezone.localtime(first + timezone.timedelta(
        seconds=settings.SENDER_RETRY_FOR)))
    body = client.get(CHANGELIST, {"campaign__id__exact": campaign.id}).content.decode()
    assert "Next attempt" in body
    assert f'<time datetime="{when.isoformat()}">' in body
    assert f"(in 4\xa0minutes; attempt 3, retried until {horizon})" in body
    assert "<code>421 4.7.0</code> Try again later" in body
    assert body.count("<time datetime=") == 1  # the fresh row has no next attempt
    assert f"attempt 3, retried until {horizon}" in change_page(client, waiting.id)


# --- one send's page ----------------------------------------------------------------------

def test_an_unknown_sends_page_shows_its_ids_guidance_and_the_three_decisions(client, staff, tenant):
    sending_campaign(count=2, account=tenant)
    (row,) = make_unknown(1)
    send = Send.objects.get(id=row)
    body = change_page(client, row)
    assert send.job_id in body
    assert escape(message_id(send.job_id)) in body
    assert "search the relay's log for it" in body
    assert "Mark as delivered" in body and "reconcile_unknown" in body
    for decision in ("retry", "delivered", "not-delivered"):
        assert decide_url(row, decision) in body
    assert "lease expired while held by dead" in body


def test_a_failed_sends_page_points_to_a_follow_up_and_offers_no_decision(client, staff, tenant):
    campaign = sending_campaign(count=2, account=tenant)
    (row,) = fail(campaign, 1, error=OLD_FORM)
    body = change_page(client, row)
    assert "Resend to the rest" in body
    assert reverse("admin:growth_campaign_change", args=[campaign.pk]) in body
    assert "/decide/" not in body
    assert "<code>550 5.1.1</code> No such user" in body


def test_a_sent_sends_page_has_no_review_panel(client, staff, tenant):
    campaign, _lost = finished_campaign_with_unknown_rows()
    Campaign.objects.filter(id=campaign.id).update(account=tenant)
    Send.objects.filter(campaign=campaign).update(account=tenant)
    sent = Send.objects.filter(campaign=campaign, status="sent").first()
    body = change_page(client, sent.id)
    assert "Needs a person" not in body and "/decide/" not in body
    assert escape(message_id(sent.job_id)) in body  # shown for every send


# --- deciding about one send --------------------------------------------------------------

def test_a_get_or_an_unconfirmed_post_only_shows_the_confirmation(client, staff, tenant):
    campaign = sending_campaign(count=2, account=tenant)
    (row,) = make_unknown(1)
    job = Send.objects.get(id=row).job_id
    for response in (client.get(decide_url(row, "delivered")),
                     client.post(decide_url(row, "delivered"))):
        assert response.status_code == 200
        body = response.content.decode()
        assert "1 send will move (unknown → sent)" in body
        assert job in body and escape(message_id(job)) in body
        assert 'name="post" value="yes"' in body
    assert statuses(campaign) == {"unknown": 1, "queued": 1}
    assert not SendVerdict.objects.exists() and not entries_of(row).exists()


@pytest.mark.parametrize(("decision", "status", "verdict"), [
    ("delivered", "sent", "sent"), ("not-delivered", "failed", "failed"),
    ("retry", "queued", "retried")])
def test_confirming_decides_and_leaves_a_verdict_and_history(client, staff, tenant, decision,
                                                             status, verdict):
    sending_campaign(count=2, account=tenant)
    (row,) = make_unknown(1)
    response = confirm(client, decide_url(row, decision))
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:growth_send_change", args=[row])
    assert Send.objects.get(id=row).status == status
    recorded = SendVerdict.objects.get(send_id=row)
    assert (recorded.verdict, recorded.decided_by) == (verdict, f"operator {staff.username}")
    entry = entries_of(row).get()
    assert (entry.user, entry.action_flag) == (staff, CHANGE)
    assert f"decided by operator {staff.username}" in entry.change_message
    assert "unknown → " + status in entry.change_message
    history = client.get(reverse("admin:growth_send_history", args=[row])).content.decode()
    assert f"decided by operator {staff.username}" in history


def test_a_retry_that_reopens_a_finished_campaign_says_so_in_its_history(client, staff, tenant):
    campaign, lost = finished_campaign_with_unknown_rows()
    Campaign.objects.filter(id=campaign.id).update(account=tenant)
    Send.objects.filter(campaign=campaign).update(account=tenant)
    response = confirm(client, decide_url(lost[0], "retry"), follow=True)
    assert "1 finished campaign(s) went back to sending so that the worker sends these rows." in texts(
        response)
    campaign.refresh_from_db()
    assert campaign.status == "sending"
    entry = LogEntry.objects.get(content_type=ContentType.objects.get_for_model(Campaign),
                                 object_id=str(campaign.pk))
    assert entry.user == staff and entry.change_message.startswith("Back to sending")


def test_a_decision_about_a_send_no_longer_unknown_changes_nothing(client, staff, tenant):
    campaign = sending_campaign(count=2, account=tenant)
    (row,) = make_unknown(1)
    confirm(client, decide_url(row, "delivered"))
    body = client.get(decide_url(row, "not-delivered")).content.decode()
    assert "Nothing will change" in body and "1: sent, not unknown" in body
    assert 'value="Yes,' not in body
    response = confirm(client, decide_url(row, "not-delivered"), follow=True)
    assert texts(response) == ["0 sends marked as not delivered (a follow-up campaign can resend "
                               "them).", "1 left alone: sent, not unknown."]
    assert statuses(campaign) == {"sent": 1, "queued": 1}
    assert entries_of(row).count() == 1 and SendVerdict.objects.filter(send_id=row).count() == 1


def test_another_tenants_send_is_a_404_on_every_decision(client, staff, other_tenant):
    campaign = sending_campaign(count=2, account=other_tenant)
    (row,) = make_unknown(1)
    for decision in ("retry", "delivered", "not-delivered"):
        assert client.get(decide_url(row, decision)).status_code == 404
        assert client.post(decide_url(row, decision), {"post": "yes"}).status_code == 404
    assert client.get(decide_url(10**12, "retry")).status_code == 404
    assert client.get(f"{CHANGELIST}abc/decide/retry/").status_code == 404
    assert client.get(f"{CHANGELIST}99999999999999999999999/decide/retry/").status_code == 404
    assert statuses(campaign) == {"unknown": 1, "queued": 1}
    assert not SendVerdict.objects.exists()


def test_an_unknown_decision_is_a_404(client, staff, tenant):
    sending_campaign(count=1, account=tenant)
    (row,) = make_unknown(1)
    assert client.post(decide_url(row, "forget"), {"post": "yes"}).status_code == 404
    assert Send.objects.get(id=row).status == "unknown"


@pytest.mark.parametrize("who", ["viewer", "viewer_elsewhere_editor", "no_change_permission"])
def test_who_may_not_decide_is_refused(client, tenant, other_tenant, who):
    user = {"viewer": lambda: operator(viewer_of=(tenant,)),
            "viewer_elsewhere_editor": lambda: operator(other_tenant, viewer_of=(tenant,)),
            "no_change_permission": lambda: operator(tenant, perms=["view_send"])}[who]()
    client.force_login(user)
    campaign = sending_campaign(count=2, account=tenant)
    (row,) = make_unknown(1)
    body = change_page(client, row)
    assert "/decide/" not in body and "does not let you decide" in body
    assert client.get(decide_url(row, "delivered")).status_code == 403
    assert confirm(client, decide_url(row, "delivered")).status_code == 403
    assert statuses(campaign) == {"unknown": 1, "queued": 1}


def test_confirming_needs_the_csrf_token(tenant):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator(tenant))
    sending_campaign(count=1, account=tenant)
    (row,) = make_unknown(1)
    assert confirm(client, decide_url(row, "delivered")).status_code == 403
    assert Send.objects.get(id=row).status == "unknown"


# --- the list's actions -------------------------------------------------------------------

def test_an_action_first_shows_what_will_happen_to_how_many_sends(client, staff, tenant):
    campaign = sending_campaign(count=5, account=tenant)
    lost = make_unknown(2)
    failed = fail(campaign, 1)
    queued = list(Send.objects.filter(campaign=campaign, status="queued").values_list("id", flat=True))
    selected = [*lost, *failed, *queued]
    response = client.post(CHANGELIST, {"action": "mark_as_not_delivered", "index": "0",
                                        "_selected_action": selected})
    assert response.status_code == 200
    body = response.content.decode()
    assert "2 sends will move (unknown → failed)" in body
    assert "3 selected sends will be left alone" in body
    assert "1: failed, not unknown" in body and "2: queued, not unknown" in body
    for row in Send.objects.filter(id__in=lost):
        assert escape(message_id(row.job_id)) in body
    for pk in selected:
        assert f'name="_selected_action" value="{pk}"' in body
    assert 'name="action" value="mark_as_not_delivered"' in body
    assert statuses(campaign) == {"unknown": 2, "failed": 1, "queued": 2}  # nothing yet

    response = confirm(client, CHANGELIST, {"action": "mark_as_not_delivered",
                                            "_selected_action": selected}, follow=True)
    assert texts(response) == [
        "2 sends marked as not delivered (a follow-up campaign can resend them).",
        "1 left alone: failed, not unknown.", "2 left alone: queued, not unknown."]
    assert statuses(campaign) == {"failed": 3, "queued": 2}
    for row in lost:
        entry = entries_of(row).get()
        assert entry.user == staff and "unknown → failed" in entry.change_message
    assert not any(entries_of(pk).exists() for pk in [*failed, *queued])
    assert set(SendVerdict.objects.values_list("send_id", flat=True)) == set(lost)


def test_a_retry_says_which_unknown_sends_it_will_leave_alone_and_why(client, staff, tenant):
    campaign = sending_campaign(count=3, account=tenant)
    lost = make_unknown(2)
    cancel_campaign(campaign_id=campaign.id)
    body = client.post(CHANGELIST, {"action": "retry_same_key", "index": "0",
                                    "_selected_action": lost}).content.decode()
    assert "Nothing will change" in body and "2: its campaign is cancelled" in body
    response = confirm(client, CHANGELIST, {"action": "retry_same_key",
                                            "_selected_action": lost}, follow=True)
    assert texts(response)[1:] == ["2 left alone: its campaign is cancelled."]
    assert not any(entries_of(pk).exists() for pk in lost)


def test_select_all_across_pages_counts_and_decides_the_whole_filter(client, staff, tenant):
    campaign = sending_campaign(count=6, account=tenant)
    lost = make_unknown(3)
    url = f"{CHANGELIST}?campaign__id__exact={campaign.id}"
    body = client.post(url, {"action": "mark_as_delivered", "index": "0", "select_across": "1",
                             "_selected_action": [lost[0]]}).content.decode()
    assert "3 sends will move (unknown → sent)" in body and "3 selected sends will be left alone" in body
    assert 'name="select_across" value="1"' in body
    confirm(client, url, {"action": "mark_as_delivered", "index": "0", "select_across": "1",
                          "_selected_action": [lost[0]]})
    assert statuses(campaign) == {"sent": 3, "queued": 3}
    assert LogEntry.objects.filter(user=staff).count() == 3


def test_a_viewer_gets_no_decision_in_the_list(client, tenant):
    client.force_login(operator(viewer_of=(tenant,)))
    campaign = sending_campaign(count=2, account=tenant)
    lost = make_unknown(1)
    assert "retry_same_key" not in client.get(CHANGELIST).content.decode()
    client.post(CHANGELIST, {"action": "mark_as_delivered", "post": "yes", "_selected_action": lost})
    assert statuses(campaign) == {"unknown": 1, "queued": 1}
    assert not LogEntry.objects.exists()


# --- a confirmation is a promise: the sends it listed, or none ----------------------------------

def test_a_send_that_became_unknown_after_the_page_is_not_decided_with_the_others(
        client, staff, tenant):
    campaign = sending_campaign(count=3, account=tenant)
    lost = make_unknown(1)
    queued = list(Send.objects.filter(campaign=campaign, status="queued").values_list("id", flat=True))
    selection = {"action": "mark_as_delivered", "index": "0", "_selected_action": [*lost, *queued]}
    page = client.post(CHANGELIST, selection).content.decode()
    assert "1 send will move (unknown → sent)" in page and "2: queued, not unknown" in page
    make_unknown(1)  # meanwhile a worker took one of the queued and died: never reviewed

    planned = re.search(r'name="planned" value="([^"]+)"', page).group(1)
    response = client.post(CHANGELIST, {**selection, "post": "yes", "planned": planned})

    assert not SendVerdict.objects.exists() and statuses(campaign)["unknown"] == 2
    body = response.content.decode()  # the page again, as it now stands
    assert "2 sends will move (unknown → sent)" in body
    assert "The sends this would move changed since the page was shown" in body


def test_select_all_confirmed_for_n_sends_moves_none_once_there_are_more(client, staff, tenant):
    campaign = sending_campaign(count=6, account=tenant)
    lost = make_unknown(2)
    url = f"{CHANGELIST}?campaign__id__exact={campaign.id}"
    selection = {"action": "mark_as_delivered", "index": "0", "select_across": "1",
                 "_selected_action": [lost[0]]}
    page = client.post(url, selection).content.decode()
    assert "2 sends will move (unknown → sent)" in page
    make_unknown(2)

    planned = re.search(r'name="planned" value="([^"]+)"', page).group(1)
    client.post(url, {**selection, "post": "yes", "planned": planned})

    assert not SendVerdict.objects.exists() and statuses(campaign)["unknown"] == 4


def test_a_decision_on_one_send_confirmed_without_its_page_moves_nothing(client, staff, tenant):
    sending_campaign(count=1, account=tenant)
    (row,) = make_unknown(1)
    response = client.post(decide_url(row, "delivered"), {"post": "yes"})
    assert response.status_code == 200 and not SendVerdict.objects.exists()
