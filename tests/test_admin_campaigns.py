"""The campaigns admin: list with progress, actions through the CAS services, read-only content
after draft, preview, "send a test to me", and tenant scoping."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from growth.admin.transitions import TRANSITIONS
from growth.models import Campaign, Send
from tests.factories import CampaignFactory, SegmentFactory, SubscriberFactory, UserFactory
from tests.helpers import LEASED_PROBE, confirm, texts
from tests.scenarios import audience, operator, sending_campaign

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:growth_campaign_changelist")


def change_url(campaign) -> str:
    return reverse("admin:growth_campaign_change", args=[campaign.pk])


def act(client: Client, action: str, *campaigns, follow: bool = True, confirmed: bool = True):
    """Run a list action; ``confirmed``: as posted from its confirmation page."""
    data = {"action": action, "_selected_action": [c.pk for c in campaigns]}
    if confirmed and action in TRANSITIONS:
        return confirm(client, CHANGELIST, data, follow=follow)
    if confirmed:
        data["post"] = "yes"
    return client.post(CHANGELIST, data, follow=follow)


def form_data(campaign, **changes) -> dict:
    """What the change form posts for ``campaign``, with ``changes``."""
    data = {
        "name": campaign.name, "account": campaign.account_id,
        "scheduled_for_0": campaign.scheduled_for.strftime("%Y-%m-%d") if campaign.scheduled_for else "",
        "scheduled_for_1": campaign.scheduled_for.strftime("%H:%M:%S") if campaign.scheduled_for else "",
        "subject": campaign.subject, "body_text": campaign.body_text, "body_html": campaign.body_html,
        "segments": [s.pk for s in campaign.segments.all()],
        "version": campaign.updated_at.isoformat(),
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
    }
    data.update(changes)
    return data


# --- the list ------------------------------------------------------------------------------------

def test_the_list_shows_progress_bars_with_counts_per_status(client, staff, tenant):
    campaign = sending_campaign(count=5, account=tenant, name="Spring sale")
    Send.objects.filter(id__in=Send.objects.filter(campaign=campaign).values("id")[:3]).update(status="sent")
    Send.objects.filter(campaign=campaign, status="queued").order_by("id").first()
    Send.objects.filter(id=Send.objects.filter(campaign=campaign, status="queued").first().id).update(
        status="unknown")
    CampaignFactory(account=tenant, name="Draft one")
    response = client.get(CHANGELIST)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Spring sale" in body and "Draft one" in body and "Acme" in body
    assert "3 / 5 sent" in body and "(60.0%)" in body
    assert 'class="growth-count growth-count--unknown">unknown <b>1</b>' in body
    assert 'class="growth-count growth-count--queued">queued <b>1</b>' in body
    assert "0 / 0 sent" in body  # the draft
    assert f"?campaign__id__exact={campaign.id}" in body  # the link to its sends


def test_the_list_runs_one_progress_query_per_page_whatever_the_number_of_campaigns(client, staff, tenant):
    def queries_for_the_list() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(CHANGELIST).status_code == 200
        statements = [q["sql"] for q in captured.captured_queries]
        progress = "FROM growth_send_counts\n         WHERE campaign_id = ANY"  # campaigns.sql's
        return len(captured), len([sql for sql in statements if progress in sql])

    sending_campaign(count=3, account=tenant)
    few = queries_for_the_list()
    for _ in range(10):
        sending_campaign(count=3, account=tenant)
    many = queries_for_the_list()
    assert few == many
    assert many[1] == 1  # one aggregate of the tallies for the whole page, none per row


def test_filters_and_search(client, staff, tenant):
    CampaignFactory(account=tenant, name="Winter news")
    sending_campaign(count=1, account=tenant, name="Summer news")
    body = client.get(CHANGELIST, {"status__exact": "sending"}).content.decode()
    assert "Summer news" in body and "Winter news" not in body
    body = client.get(CHANGELIST, {"q": "winter"}).content.decode()
    assert "Winter news" in body and "Summer news" not in body
    body = client.get(CHANGELIST, {"account__id__exact": tenant.id}).content.decode()
    assert "Winter news" in body and "Summer news" in body


# --- scoping -----------------------------------------------------------------------------------

def test_staff_see_only_their_accounts_campaigns_and_filter_choices(client, staff, tenant, other_tenant):
    CampaignFactory(account=tenant, name="Ours")
    CampaignFactory(account=other_tenant, name="Theirs")
    body = client.get(CHANGELIST).content.decode()
    assert "Ours" in body
    assert "Theirs" not in body and "Globex" not in body  # not even in the account filter
    body = client.get(CHANGELIST, {"account__id__exact": other_tenant.id}).content.decode()
    assert "Theirs" not in body


def test_another_tenants_campaign_is_a_404_everywhere(client, staff, other_tenant):
    theirs = CampaignFactory(account=other_tenant, name="Theirs", subject="Secret subject")
    for url in (change_url(theirs), reverse("admin:growth_campaign_history", args=[theirs.pk]),
                reverse("admin:growth_campaign_delete", args=[theirs.pk])):
        response = client.get(url)
        assert response.status_code == 404, url
        assert "Secret subject" not in response.content.decode()
    response = client.post(reverse("admin:growth_campaign_send_test", args=[theirs.pk]))
    assert response.status_code == 404
    response = client.post(change_url(theirs), form_data(theirs, subject="Hacked"))
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.subject == "Secret subject"


def test_actions_never_reach_another_tenants_campaign(client, staff, other_tenant):
    theirs = CampaignFactory(account=other_tenant)
    act(client, "approve", theirs)
    act(client, "cancel", theirs)
    theirs.refresh_from_db()
    assert theirs.status == "draft"


def test_a_superuser_sees_every_account(client, tenant, other_tenant):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    CampaignFactory(account=tenant, name="Ours")
    CampaignFactory(account=other_tenant, name="Theirs")
    body = client.get(CHANGELIST).content.decode()
    assert "Ours" in body and "Theirs" in body


def test_a_staff_user_without_membership_sees_nothing(client, tenant):
    client.force_login(operator())
    CampaignFactory(account=tenant, name="Ours")
    response = client.get(CHANGELIST)
    assert response.status_code == 200 and "Ours" not in response.content.decode()


def test_staff_cannot_add_a_campaign_to_another_account_or_with_its_segments(client, staff, tenant,
                                                                           other_tenant):
    foreign_segment = SegmentFactory(account=other_tenant)
    add = reverse("admin:growth_campaign_add")
    data = {"name": "X", "account": other_tenant.id, "subject": "s", "body_text": "b",
            "body_html": "", "version": ""}
    response = client.post(add, data)
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    response = client.post(add, {**data, "account": tenant.id, "segments": [foreign_segment.id]})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not Campaign.objects.exists()
    response = client.post(add, {**data, "account": tenant.id})
    assert response.status_code == 302
    assert Campaign.objects.get().status == "draft"


# --- actions -------------------------------------------------------------------------------------

def test_approve_says_how_many_moved_and_why_the_others_did_not(client, staff, tenant):
    good = CampaignFactory(account=tenant, name="Good")
    no_subject = CampaignFactory(account=tenant, name="No subject", subject="")
    running = sending_campaign(count=1, account=tenant, name="Running")
    messages = texts(act(client, "approve", good, no_subject, running))
    assert messages[0] == "1 campaign approved: “Good”."
    assert messages[1] == "2 not approved:"
    assert "“No subject”: A campaign needs a subject." in messages
    assert "“Running” is sending, not draft." in messages
    assert {c.name: c.status for c in Campaign.objects.all()} == {
        "Good": "approved", "No subject": "draft", "Running": "sending"}


def test_pause_resume_and_cancel_go_through_the_cas_and_explain_refusals(client, staff, tenant):
    running = sending_campaign(count=4, account=tenant, name="Running")
    draft = CampaignFactory(account=tenant, name="Draft")
    messages = texts(act(client, "pause", running, draft))
    assert messages[0] == "1 campaign paused: “Running”."
    assert "“Draft” is draft: only a sending campaign can be paused." in messages
    page = act(client, "pause", running, confirmed=False).content.decode()
    assert "left alone: a paused campaign cannot be paused" in page
    assert 'name="post"' not in page  # nothing to confirm
    assert texts(act(client, "resume", running))[0] == "1 campaign resumed: “Running”."
    messages = texts(act(client, "cancel", running, draft))
    assert messages[0] == ("2 campaigns cancelled: “Running” (4 queued recipients dropped), "
                           "“Draft” (0 queued recipients dropped).")
    page = act(client, "cancel", running, confirmed=False).content.decode()
    assert "left alone: a cancelled campaign cannot be cancelled" in page
    assert 'name="post"' not in page
    assert set(Send.objects.values_list("status", flat=True)) == {"cancelled"}


def test_actions_need_the_change_permission(client, tenant):
    client.force_login(operator(tenant, perms=["view_campaign"]))
    campaign = CampaignFactory(account=tenant)
    response = act(client, "approve", campaign)
    assert response.status_code == 200
    campaign.refresh_from_db()
    assert campaign.status == "draft"


def test_actions_need_the_csrf_token(tenant):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator(tenant))
    campaign = CampaignFactory(account=tenant)
    assert act(client, "approve", campaign, follow=False).status_code == 403
    campaign.refresh_from_db()
    assert campaign.status == "draft"


# --- the change page ----------------------------------------------------------------------------

def test_a_draft_is_edited_through_the_compare_and_set(client, staff, tenant):
    segment = SegmentFactory(account=tenant)
    campaign = CampaignFactory(account=tenant)
    response = client.post(change_url(campaign), form_data(campaign, subject="New subject",
                                                           segments=[segment.id]))
    assert response.status_code == 302, response.content.decode()[:2000]
    campaign.refresh_from_db()
    assert campaign.subject == "New subject" and list(campaign.segments.all()) == [segment]
    assert campaign.status == "draft"


def test_a_stale_form_saves_nothing_and_says_so(client, staff, tenant):
    campaign = CampaignFactory(account=tenant, subject="Original")
    stale = form_data(campaign, subject="Mine")
    client.post(change_url(campaign), form_data(campaign, subject="Theirs"))  # someone else saved
    response = client.post(change_url(campaign), stale)
    assert response.status_code == 200
    assert "changed since you opened it" in response.content.decode()
    campaign.refresh_from_db()
    assert campaign.subject == "Theirs"


def test_an_approval_between_opening_and_saving_keeps_the_approved_content(client, staff, tenant):
    from growth.operations.campaigns import approve_campaign

    campaign = CampaignFactory(account=tenant, subject="Approved subject")
    stale = form_data(campaign, subject="Edited after approval")
    approve_campaign(campaign_id=campaign.id)
    response = client.post(change_url(campaign), stale)
    assert response.status_code == 200
    assert "it is now approved" in response.content.decode()
    campaign.refresh_from_db()
    assert (campaign.subject, campaign.status) == ("Approved subject", "approved")


def test_content_is_read_only_once_the_campaign_left_draft(client, staff, tenant):
    campaign = sending_campaign(count=1, account=tenant, subject="Sent subject")
    body = client.get(change_url(campaign)).content.decode()
    assert 'name="subject"' not in body and 'name="body_text"' not in body
    assert 'name="segments"' not in body and 'name="scheduled_for_0"' not in body
    assert 'name="name"' in body
    response = client.post(change_url(campaign), form_data(campaign, name="Renamed", subject="Hacked"))
    assert response.status_code == 302
    campaign.refresh_from_db()
    assert (campaign.name, campaign.subject, campaign.status) == ("Renamed", "Sent subject", "sending")


def test_saving_never_writes_back_a_status_the_worker_changed(client, staff, tenant):
    campaign = sending_campaign(count=1, account=tenant)
    page = form_data(campaign, name="Renamed")
    Campaign.objects.pause(campaign_id=campaign.id)  # meanwhile
    client.post(change_url(campaign), page)
    campaign.refresh_from_db()
    assert campaign.status == "paused"


def test_the_change_page_shows_a_preview_for_a_sample_recipient_and_links_to_the_sends(client, staff,
                                                                                      tenant):
    campaign = CampaignFactory(account=tenant, subject="Hello {{ email }}",
                               body_html="<p>Hi <b>{{ email }}</b></p>")
    SubscriberFactory(segment=SegmentFactory(account=tenant), email="first@example.com")
    body = client.get(change_url(campaign)).content.decode()
    assert "Hello first@example.com" in body
    assert "Hi first@example.com." in body  # the text part
    assert re.search(r'<iframe class="growth-preview__html" sandbox [^>]*srcdoc="&lt;p&gt;Hi', body)
    assert f"/admin/growth/send/?campaign__id__exact={campaign.id}" in body
    assert "Send a test to me" in body


def test_the_preview_escapes_what_the_campaign_renders(client, staff, tenant):
    campaign = CampaignFactory(account=tenant, subject="<script>alert(1)</script>",
                               body_text="<img src=x onerror=alert(2)>",
                               body_html='<p>"><script>alert(3)</script></p>')
    body = client.get(change_url(campaign)).content.decode()
    assert "<script>alert" not in body and "<img src=x" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "&lt;img src=x onerror=alert(2)&gt;" in body
    assert 'srcdoc="&lt;p&gt;&quot;&gt;&lt;script&gt;alert(3)' in body


def test_a_preview_of_unsendable_content_shows_the_errors(client, staff, tenant):
    campaign = CampaignFactory(account=tenant, subject="", body_text="{% if %}")
    body = client.get(change_url(campaign)).content.decode()
    assert "A campaign needs a subject." in body
    assert "Template error" in body


# --- "send a test to me" -----------------------------------------------------------------------

def test_send_a_test_to_me_sends_one_marked_message_and_records_no_send(client, staff, tenant, mailoutbox):
    campaign = sending_campaign(count=2, account=tenant, subject="Big news")
    response = client.post(reverse("admin:growth_campaign_send_test", args=[campaign.pk]), follow=True)
    assert response.status_code == 200
    assert f"Sent a test of “{campaign.name}” to {staff.email}" in texts(response)[0]
    (message,) = mailoutbox
    assert message.subject == "[TEST] Big news"
    assert message.to == [staff.email]
    assert message.extra_headers["Idempotency-Key"].startswith(f"test:{campaign.id}:")
    assert Send.objects.count() == 2 and not Send.objects.filter(email_lower=staff.email).exists()
    # its unsubscribe link names no subscriber: opening it changes nothing
    link = message.extra_headers["List-Unsubscribe"][1:-1]
    assert Client().post(urlsplit(link).path).status_code == 400


def test_the_test_message_on_the_wire_carries_the_test_subject(client, staff, tenant, smtp_settings):
    campaign = CampaignFactory(account=tenant, subject="Big news")
    client.post(reverse("admin:growth_campaign_send_test", args=[campaign.pk]))
    (accepted,) = smtp_settings.handler.accepted  # the bytes the server got, not the object
    assert accepted.message["Subject"] == "[TEST] Big news"
    assert accepted.recipient == staff.email


@pytest.mark.parametrize("object_id", ["abc", "0", "99999999999999999999999", "1%00"])
def test_send_a_test_to_an_id_that_is_no_campaign_is_a_404(client, staff, object_id):
    assert client.post(f"/admin/growth/campaign/{object_id}/send-test/").status_code == 404


def test_send_a_test_is_a_post_with_a_csrf_token(tenant, mailoutbox):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator(tenant))
    campaign = CampaignFactory(account=tenant)
    url = reverse("admin:growth_campaign_send_test", args=[campaign.pk])
    assert client.get(url).status_code == 405
    assert client.post(url).status_code == 403
    assert mailoutbox == []


def test_send_a_test_action_from_the_list(client, staff, tenant, mailoutbox):
    first = CampaignFactory(account=tenant, subject="One")
    broken = CampaignFactory(account=tenant, name="Broken", subject="")
    messages = texts(act(client, "send_test_to_me", first, broken))
    assert [m.subject for m in mailoutbox] == ["[TEST] One"]
    assert "“Broken”: no test sent: A campaign needs a subject." in messages


def test_send_a_test_needs_an_email_address_on_the_user(client, tenant, mailoutbox):
    client.force_login(operator(tenant, email=""))
    campaign = CampaignFactory(account=tenant)
    messages = texts(act(client, "send_test_to_me", campaign))
    assert messages == ["Your user has no email address: add one to receive tests."]
    assert mailoutbox == []


def test_a_transport_failure_is_reported(client, staff, tenant, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2
    campaign = CampaignFactory(account=tenant)
    messages = texts(act(client, "send_test_to_me", campaign))
    assert messages[0].startswith(f"“{campaign.name}”: the test could not be sent:")


def test_a_large_audience_still_renders_the_change_page_with_one_progress_query(client, staff, tenant):
    campaign = CampaignFactory(account=tenant)
    audience(tenant, 50)
    with CaptureQueriesContext(connection) as captured:
        assert client.get(change_url(campaign)).status_code == 200
    statements = [q["sql"] for q in captured.captured_queries]
    counts = [sql for sql in statements if "FROM growth_send_counts" in sql
              and "growth_feedback_events" not in sql]  # not the tenant's reputation figures
    # the tallies read twice: the monitor's snapshot (which also fills the progress field and
    # the review badge) and the chart's minutes; never a query per status, per row or per minute
    assert len(counts) == 2 and len(set(counts)) == 2
    # the send rows themselves are read only to say who holds rows (and, apart, by the tenant's
    # reputation figures: its hard refusals and each reported event's send by primary key; by
    # the counts, a live lease's rows by primary key)
    assert [sql for sql in statements if "FROM growth_sends" in sql.replace(LEASED_PROBE, "")
            and "growth_feedback_events" not in sql] == [
        sql for sql in statements if "s.status = 'sending'" in sql]
