"""The campaign admin's live monitor: the JSON the list and the campaign page poll (counts, rate
over the last minute, ETA, the sent-per-minute series and its SVG chart), its scoping and
refusals, the markup the pages carry for monitor.js, and the indexes its statements use."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from growth.managers.monitor import QUERIES
from growth.models import Campaign, Send
from tests import test_browser
from tests.factories import CampaignFactory
from tests.helpers import LEASED_PROBE
from tests.scenarios import operator, sending_campaign

pytestmark = pytest.mark.django_db

LIST_URL = reverse("admin:growth_campaign_monitor")


def one_url(campaign) -> str:
    return reverse("admin:growth_campaign_monitor_one", args=[campaign.pk])


def poll(client, *campaigns) -> dict:
    response = client.get(LIST_URL, {"ids": ",".join(str(c.pk) for c in campaigns)})
    assert response.status_code == 200, response.content
    return response.json()


def mark(campaign, status: str, count: int, *, sent_ago: str | None = None,
         before_this_minute: bool = False) -> None:
    """Give ``count`` of the campaign's queued rows ``status``; ``sent_ago``: their sent_at, as
    an interval before the database's now() (in a test, the transaction's start), or with
    ``before_this_minute`` before the start of now()'s minute (UTC)."""
    ids = list(Send.objects.filter(campaign=campaign, status="queued").order_by("id")
               .values_list("id", flat=True)[:count])
    assert len(ids) == count
    now = "date_trunc('minute', now(), 'UTC')" if before_this_minute else "now()"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE growth_sends SET status = %(status)s, sent_at = {now} - %(ago)s::interval, "
            "lease_expires_at = CASE WHEN %(status)s = 'sending' THEN now() + interval '1 minute' END "
            "WHERE id = ANY(%(ids)s)", {"status": status, "ago": sent_ago, "ids": ids})
        if sent_ago is not None:  # no row is sent before its campaign started
            cursor.execute(f"UPDATE growth_campaigns SET started_at = least(started_at, "
                           f"{now} - %(ago)s::interval) WHERE id = %(id)s",
                           {"ago": sent_ago, "id": campaign.pk})


def started(campaign, ago: str, *, at_minute: bool = False) -> None:
    start = "date_trunc('minute', now())" if at_minute else "now()"
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE growth_campaigns SET started_at = {start} - %s::interval WHERE id = %s",
                       [ago, campaign.pk])


# --- the figures -------------------------------------------------------------------------------

def test_counts_rate_and_eta_of_a_sending_campaign(client, staff, tenant):
    campaign = sending_campaign(count=10, account=tenant)
    started(campaign, "10 minutes")
    mark(campaign, "sent", 2, sent_ago="10 seconds", before_this_minute=True)  # the last minute
    mark(campaign, "sent", 2, sent_ago="5 minutes")
    mark(campaign, "sent", 1, sent_ago="0 seconds", before_this_minute=True)  # this one, not whole
    mark(campaign, "failed", 1)
    mark(campaign, "unknown", 1)
    mark(campaign, "sending", 1)  # 2 left queued

    data = poll(client, campaign)
    assert data["active"] is True and data["poll_seconds"] == 5
    c = data["campaigns"][str(campaign.pk)]
    assert c["status"] == "sending" and c["status_display"] == "Sending"
    assert dict(c["counts"]) == {"queued": 2, "sending": 1, "sent": 5, "suppressed": 0, "failed": 1,
                                 "unknown": 1, "cancelled": 0}
    assert [status for status, _ in c["counts"]] == [s.value for s in Send.Status]  # the page's order
    assert (c["total"], c["sent"], c["remaining"], c["percent"]) == (10, 5, 3, 50.0)
    assert c["sent_last_minute"] == 2
    assert (c["per_minute"], c["per_second"]) == (2.0, 0.03)
    assert c["eta_seconds"] == 90  # 3 left at 2 a minute
    assert c["duration_seconds"] == 600 and c["finished_at"] is None
    assert c["display"]["rate"] == "2 / min (0.0 / s)"
    assert c["display"]["duration"] == "10 min 00 s"
    assert c["display"]["eta"].startswith("about 1 min 30 s")


def test_in_its_first_minute_the_rate_counts_only_the_seconds_it_ran(client, staff, tenant):
    campaign = sending_campaign(count=20, account=tenant)
    started(campaign, "20 seconds")
    mark(campaign, "sent", 10, sent_ago="5 seconds")
    c = poll(client, campaign)["campaigns"][str(campaign.pk)]
    assert c["per_second"] == 0.5 and c["per_minute"] == 30.0
    assert c["eta_seconds"] == 20


def test_no_eta_without_recent_sends_or_while_paused(client, staff, tenant):
    stalled = sending_campaign(count=3, account=tenant)
    mark(stalled, "sent", 1, sent_ago="10 minutes")
    paused = sending_campaign(count=3, account=tenant)
    mark(paused, "sent", 1, sent_ago="10 seconds")
    Campaign.objects.pause(campaign_id=paused.pk)
    draft = CampaignFactory(account=tenant)

    data = poll(client, stalled, paused, draft)
    assert data["campaigns"][str(stalled.pk)]["eta_seconds"] is None
    assert data["campaigns"][str(stalled.pk)]["display"]["eta"].startswith("unknown")
    assert data["campaigns"][str(paused.pk)]["eta_seconds"] is None
    assert data["campaigns"][str(paused.pk)]["active"] is False
    empty = data["campaigns"][str(draft.pk)]
    assert (empty["total"], empty["percent"], empty["started_at"]) == (0, 0, None)
    assert empty["duration_seconds"] is None and empty["eta_seconds"] is None
    assert data["active"] is True  # stalled is still sending

    data = poll(client, paused, draft)
    assert data["active"] is False and data["poll_seconds"] == 30  # nothing sending: a slow poll


def test_every_listed_campaign_is_counted_in_one_statement(client, staff, tenant):
    campaigns = [sending_campaign(count=3, account=tenant) for _ in range(4)]
    with CaptureQueriesContext(connection) as captured:
        data = poll(client, *campaigns)
    assert set(data["campaigns"]) == {str(c.pk) for c in campaigns}
    statements = [q["sql"] for q in captured.captured_queries]
    assert len([sql for sql in statements if "growth_send_counts" in sql]) == 1
    # the tallies, never the rows (but the lease protocol's on the wire, each by primary key)
    assert not [sql for sql in statements if "growth_sends" in sql.replace(LEASED_PROBE, "")]


# --- the series and its chart --------------------------------------------------------------------

def test_the_series_has_every_minute_with_zeros_where_nothing_was_sent(client, staff, tenant):
    campaign = sending_campaign(count=10, account=tenant)
    started(campaign, "5 minutes", at_minute=True)
    with connection.cursor() as cursor:  # 2 sent 5 minutes ago, 1 three minutes later
        for offset, n in (("5 minutes", 2), ("2 minutes", 1)):
            ids = list(Send.objects.filter(campaign=campaign, status="queued")
                       .values_list("id", flat=True)[:n])
            cursor.execute("UPDATE growth_sends SET status = 'sent', sent_at = date_trunc('minute', "
                           "now()) - %s::interval + interval '10 seconds' WHERE id = ANY(%s)",
                           [offset, ids])
    series = Campaign.monitor.series(campaign.pk)
    assert [m.sends for m in series] == [2, 0, 0, 1, 0, 0]
    assert all((b.minute - a.minute).total_seconds() == 60 for a, b in pairwise(series))

    c = client.get(one_url(campaign)).json()["campaigns"][str(campaign.pk)]
    assert [point["sent"] for point in c["series"]] == [2, 0, 0, 1, 0, 0]
    chart = c["chart"]
    assert chart.startswith("<svg") and chart.count("<rect") == 6
    assert "3 in all, at most 2 in a minute" in chart  # in the <title> and the aria-label
    assert 'role="img"' in chart and "2 / min" in chart
    assert chart.count("<text") == 3  # the peak, the first minute and the last


def test_the_series_covers_the_last_hour_of_a_long_campaign_and_nothing_before_a_start(tenant):
    campaign = sending_campaign(count=3, account=tenant)
    started(campaign, "3 hours")
    assert len(Campaign.monitor.series(campaign.pk)) == 60
    assert Campaign.monitor.series(CampaignFactory(account=tenant).pk) == []


def test_a_campaign_not_started_has_no_chart_but_says_so(client, staff, tenant):
    draft = CampaignFactory(account=tenant)
    c = client.get(one_url(draft)).json()["campaigns"][str(draft.pk)]
    assert c["series"] == [] and "No sends yet" in c["chart"] and "<svg" not in c["chart"]


# --- scoping and refusals --------------------------------------------------------------------------

def test_another_tenants_campaigns_are_absent_or_404(client, staff, tenant, other_tenant):
    ours = sending_campaign(count=2, account=tenant)
    theirs = sending_campaign(count=2, account=other_tenant, name="Secret plan")
    assert set(poll(client, ours, theirs)["campaigns"]) == {str(ours.pk)}
    response = client.get(one_url(theirs))
    assert response.status_code == 404 and b"Secret plan" not in response.content


def test_a_viewer_of_the_account_may_watch(client, tenant):
    campaign = sending_campaign(count=2, account=tenant)
    client.force_login(operator(viewer_of=(tenant,)))
    assert str(campaign.pk) in poll(client, campaign)["campaigns"]
    assert client.get(one_url(campaign)).status_code == 200


def test_without_the_view_permission_or_staff_status_it_is_refused(client, tenant):
    campaign = sending_campaign(count=2, account=tenant)
    client.force_login(operator(tenant, perms=["view_send"]))
    assert client.get(LIST_URL, {"ids": campaign.pk}).status_code == 403
    assert client.get(one_url(campaign)).status_code == 403
    client.logout()
    for url in (f"{LIST_URL}?ids={campaign.pk}", one_url(campaign)):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]


@pytest.mark.parametrize("ids", ["abc", "1,,x", "99999999999999999999999", "-1", "0", "1.5", "١",
                                 ",".join(["1"] * 201)])
def test_malformed_ids_are_a_400(client, staff, ids):
    response = client.get(LIST_URL, {"ids": ids})
    assert response.status_code == 400 and "error" in response.json()


def test_no_ids_or_empty_items_are_no_error(client, staff, tenant):
    campaign = sending_campaign(count=1, account=tenant)
    assert client.get(LIST_URL).json()["campaigns"] == {}
    assert set(client.get(LIST_URL, {"ids": f",{campaign.pk},,"}).json()["campaigns"]) == {str(campaign.pk)}


@pytest.mark.parametrize("object_id", ["abc", "99999999999999999999999", "0"])
def test_a_malformed_or_missing_campaign_is_a_404(client, staff, object_id):
    assert client.get(f"/admin/growth/campaign/{object_id}/monitor.json").status_code == 404


def test_get_only(client, staff, tenant):
    campaign = sending_campaign(count=1, account=tenant)
    assert client.post(LIST_URL, {"ids": campaign.pk}).status_code == 405
    assert client.post(one_url(campaign)).status_code == 405


# --- the pages ---------------------------------------------------------------------------------------

def test_the_campaign_page_has_the_live_panel_with_its_figures_and_chart(client, staff, tenant):
    campaign = sending_campaign(count=4, account=tenant)
    started(campaign, "3 minutes")
    mark(campaign, "sent", 3, sent_ago="30 seconds", before_this_minute=True)
    body = client.get(reverse("admin:growth_campaign_change", args=[campaign.pk])).content.decode()
    assert f'data-monitor-url="{one_url(campaign)}"' in body and 'data-active="true"' in body
    assert "3 / min (0.1 / s)" in body  # the rate
    assert "3 min 00 s" in body  # the duration
    assert 'data-monitor="eta">about 20 s' in body
    assert "<svg" in body and "3 in all" in body
    assert "growth/monitor.js" in body
    assert "3 / 4 sent" in body  # the progress field, from the monitor's snapshot


def test_the_list_carries_the_monitors_url_and_script(client, staff, tenant):
    campaign = sending_campaign(count=2, account=tenant)
    body = client.get(reverse("admin:growth_campaign_changelist")).content.decode()
    assert f'data-monitor-list-url="{LIST_URL}"' in body and "growth/monitor.js" in body
    assert f'name="_selected_action" value="{campaign.pk}"' in body  # how monitor.js finds a row


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_list_and_the_page_follow_the_sends_without_a_reload(page, tenant):
    from playwright.sync_api import expect

    poll = {"timeout": 12_000}  # monitor.js polls every 5 s while a campaign is sending
    campaign = sending_campaign(count=4, account=tenant)
    operator(tenant, username="olga")
    test_browser.log_in(page, reverse("admin:login"), "olga")
    page.goto(reverse("admin:growth_campaign_changelist"))
    label = page.locator(f"#result_list tr:has(input[value='{campaign.pk}']) .growth-progress__label")
    expect(label).to_have_text("0 / 4 sent (0.0%)")
    mark(campaign, "sent", 3, sent_ago="1 second")
    expect(label).to_have_text("3 / 4 sent (75.0%)", **poll)
    expect(page.locator(".growth-count--queued b")).to_have_text("1")

    page.goto(reverse("admin:growth_campaign_change", args=[campaign.pk]))
    # one bar with sends in it (a minute that turned since the start adds an empty one)
    expect(page.locator(".growth-monitor .growth-monitor__svg rect:not([height='0.0'])")
           ).to_have_count(1)
    mark(campaign, "sent", 1, sent_ago="1 second")
    progress = page.locator(".field-progress_detail .growth-progress__label")
    expect(progress).to_have_text("4 / 4 sent (100.0%)", **poll)
    expect(page.locator("[data-monitor=eta]")).to_have_text("any moment: nothing left to send")
    expect(page.locator(".growth-monitor svg")).to_have_attribute("aria-label", re.compile("4 in all"))
    test_browser.shot(page, "admin-campaign-live")


# --- the plans -----------------------------------------------------------------------------------------

def test_the_snapshot_and_the_series_read_the_campaigns_tallies_by_index(tenant):
    campaign = sending_campaign(count=300, account=tenant)
    started(campaign, "30 minutes")
    mark(campaign, "sent", 250, sent_ago="10 minutes")
    with connection.cursor() as cursor:  # other campaigns' history: 20 campaigns x 1,000 minutes
        cursor.execute("INSERT INTO growth_send_tallies (campaign_id, status, sent_minute, sends) "
                       "SELECT 1000000 + c, 'sent', date_trunc('minute', now()) - m * interval "
                       "'1 minute', 7 FROM generate_series(1, 20) c, generate_series(1, 1000) m")
        # growth_sends too: its statistics are otherwise what earlier tests left (a seq scan of
        # it was once planned here in a full run, never alone)
        cursor.execute("ANALYZE growth_send_tallies; ANALYZE growth_send_tally_deltas; "
                       "ANALYZE growth_sends")
        plans = {}
        for name, params in (("snapshot", {"campaign_ids": [campaign.pk]}),
                             ("series", {"campaign_id": campaign.pk})):
            cursor.execute("EXPLAIN " + QUERIES[name], params)
            plans[name] = "\n".join(row[0] for row in cursor.fetchall())
    for plan in plans.values():  # the sends only by primary key: the lease protocol's on the wire
        assert "Seq Scan on growth_sends " not in plan, plan
        # an index scan of the primary key, or a bitmap heap scan whose bitmap is of it
        assert set(re.findall(r"(?:Index Scan|Index Only Scan) using (\S+) on growth_sends |"
                              r"Bitmap Index Scan on ((?:growth_sends|send_(?!tally))\S*)", plan)) <= {
            ("growth_sends_pkey", ""), ("", "growth_sends_pkey")}, plan
        assert "using send_tally_key on growth_send_tallies" in plan, plan
        assert "Seq Scan on growth_send_tallies" not in plan, plan
