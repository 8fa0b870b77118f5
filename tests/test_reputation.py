"""The reputation guard: per-tenant bounce and complaint rates over recent sends, and the pause of
a tenant's sending campaigns when one reaches its stop threshold (growth.reputation.guard).

Sends go out through the real worker with the null transport, feedback comes in through the real
feedback path (growth.feedback.events.handle_event), as an ESP's webhook or the bounce mailbox
(ESP name "mailbox") records it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from anymail.signals import AnymailTrackingEvent, EventType
from django.contrib import admin
from django.db import connection
from django.template.loader import render_to_string
from django.test import RequestFactory
from django.utils import timezone

from growth.feedback.bounces import smtp_hard_bounce
from growth.feedback.events import Handled, handle_event
from growth.managers.queries import split_settings
from growth.managers.reputation import QUERIES, REPUTATION
from growth.models import Campaign, FeedbackEvent, Send, SendTally
from growth.reputation import guard
from growth.sending.transports.base import Outcome
from growth.sending.transports.null import NullTransport
from growth.sending.worker import Worker
from tests.factories import AccountFactory, UserFactory
from tests.scenarios import sending_campaign, statuses
from tests.test_settle_recover import claim_and_hand_over, settle


@pytest.fixture(autouse=True)
def reputation_settings(settings):
    settings.REPUTATION_WINDOW_DAYS = 7
    settings.REPUTATION_MIN_SENDS = 500
    settings.REPUTATION_BOUNCE_WARN = 2.0
    settings.REPUTATION_BOUNCE_STOP = 5.0
    settings.REPUTATION_COMPLAINT_WARN = 0.1
    settings.REPUTATION_COMPLAINT_STOP = 0.3
    guard.forget_feedback_checks()
    yield settings
    guard.forget_feedback_checks()


@pytest.fixture(autouse=True)
def feedback_checks_once_per_tenant(monkeypatch):
    """The feedback path checks a tenant once in these tests (its first bounce or complaint),
    so that what pauses is the worker's pass that the test calls, not a race with the clock."""
    monkeypatch.setattr(guard, "FEEDBACK_CHECK_EVERY", 3600.0)


def feedback(send: Send, kind: str, *, esp: str = "Postmark", tag: str = "") -> Handled:
    """Record a complaint or a hard bounce about ``send`` through the real feedback path."""
    raw = {}
    if kind == EventType.BOUNCED:  # hard, in each one's words: Postmark's type, a DSN's status
        raw = {"Postmark": {"Type": "HardBounce"},
               "mailbox": {"status": "5.1.1", "diagnostic_code": "smtp; 550 5.1.1 User unknown"},
               }.get(esp, {})
    event = AnymailTrackingEvent(
        event_type=kind, recipient=send.email, event_id=f"{esp}-{kind}-{send.id}{tag}",
        metadata={"job_id": send.job_id, "account_id": str(send.account_id),
                  "campaign_id": str(send.campaign_id)},
        esp_event=raw, timestamp=timezone.now())
    return handle_event(esp_name=esp, event=event)


def sent_rows(campaign: Campaign, count: int, *, ago: timedelta = timedelta(hours=1)) -> list[Send]:
    """Mark ``count`` queued rows of the campaign sent, ``ago`` (direct UPDATEs)."""
    ids = list(Send.objects.filter(campaign=campaign, status="queued").order_by("id")
               .values_list("id", flat=True)[:count])
    Send.objects.filter(id__in=ids).update(status="sent", sent_at=timezone.now() - ago)
    return list(Send.objects.filter(id__in=ids).order_by("id"))


def run_worker(cycles: int) -> None:
    worker = Worker(worker_id="w", transport=NullTransport(), batch_size=100)
    for _ in range(cycles):
        worker.cycle()


# --- the figures --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("error", [
    "550 5.1.1 No such user", "550 5.1.10 Recipient address rejected", "550 5.2.1 Mailbox disabled",
    "550 5.1.1", "553 5.1.3 Bad address syntax",
    "550 5.1.7 Bad sender address", "550 5.1.8 Sender domain unknown",
    "552 5.2.2 Mailbox full", "550 5.7.1 Spam detected", "550 Mailbox unavailable",
    "450 4.1.1 Try later", "550 5.2.10 something", "550 5.1.70 odd", "",
])
def test_the_sql_reads_a_relay_refusal_as_smtp_hard_bounce_does(error):
    with connection.cursor() as cursor:
        cursor.execute("SELECT growth_hard_refusal(%s)", [error])
        assert cursor.fetchone()[0] is smtp_hard_bounce(error)


@pytest.mark.django_db
def test_each_send_counts_once_whoever_reports_it_and_only_in_the_window(tenant):
    campaign = sending_campaign(count=60, account=tenant)
    rows = sent_rows(campaign, 40)
    old = sent_rows(campaign, 10, ago=timedelta(days=8))  # before the window
    # a complaint reported by the ESP and by the mailbox (an ARF report): one complaint
    assert feedback(rows[0], EventType.COMPLAINED) == Handled.SUPPRESSED
    assert feedback(rows[0], EventType.COMPLAINED, esp="mailbox") == Handled.SUPPRESSED
    # a hard bounce after acceptance, reported twice: one bounce
    feedback(rows[1], EventType.BOUNCED)
    feedback(rows[1], EventType.BOUNCED, esp="mailbox")
    # our relay refused two addresses for good, and one for a reason that says nothing of it
    refused = Send.objects.filter(campaign=campaign, status="queued").order_by("id")[:3]
    ids = [row.id for row in refused]
    Send.objects.filter(id__in=ids[:2]).update(status="failed", last_error="550 5.1.1 No such user",
                                               updated_at=timezone.now())
    Send.objects.filter(id=ids[2]).update(status="failed", last_error="550 5.7.1 Policy",
                                          updated_at=timezone.now())
    # a hard bounce reported for a row our relay refused too counts once; for the other, it counts
    feedback(Send.objects.get(id=ids[0]), EventType.BOUNCED)
    feedback(Send.objects.get(id=ids[2]), EventType.BOUNCED)
    # feedback about a send outside the window counts nowhere
    feedback(old[0], EventType.COMPLAINED)

    (figures,) = REPUTATION.figures([tenant.id], days=7)
    assert (figures.sent, figures.bounced_sent, figures.bounced_failed, figures.complained) == (40, 1, 3, 1)
    assert (figures.attempts, figures.hard_bounces, figures.delivered) == (43, 4, 39)
    assert figures.complained_at is not None and figures.bounced_at is not None


@pytest.mark.django_db
def test_feedback_that_comes_while_its_send_is_on_the_wire_counts_as_the_send_ends(tenant):
    """An ESP's webhook can beat the worker's own record of the send: the figures go by the
    send's status now, not by its status when the report came."""
    campaign = sending_campaign(count=10, account=tenant)
    on_wire = claim_and_hand_over(batch_size=3)
    complained, bounced, unsent = (Send.objects.get(id=row.id) for row in on_wire)
    feedback(complained, EventType.COMPLAINED)
    feedback(bounced, EventType.BOUNCED)
    feedback(unsent, EventType.BOUNCED)
    (figures,) = REPUTATION.figures([tenant.id], days=7)
    assert (figures.sent, figures.bounced_sent, figures.bounced_failed, figures.complained) == (0, 0, 2, 1)

    settle([Outcome(complained.id, Outcome.SENT), Outcome(bounced.id, Outcome.SENT),
            Outcome(unsent.id, Outcome.PERMANENT, error="554 5.7.1 Policy")])
    (figures,) = REPUTATION.figures([tenant.id], days=7)
    assert (figures.sent, figures.bounced_sent, figures.bounced_failed, figures.complained) == (2, 1, 1, 1)
    assert SendTally.objects.differences([campaign.id]) == []


@pytest.mark.django_db
def test_a_report_deleted_or_unsuppressed_no_longer_counts_unless_another_says_the_same(tenant):
    campaign = sending_campaign(count=10, account=tenant)
    first, second = sent_rows(campaign, 2)
    feedback(first, EventType.COMPLAINED)
    feedback(first, EventType.COMPLAINED, esp="mailbox")  # the same complaint, an ARF report
    feedback(second, EventType.BOUNCED)
    (figures,) = REPUTATION.figures([tenant.id], days=7)
    assert (figures.bounced_sent, figures.complained) == (1, 1)

    FeedbackEvent.objects.filter(send=first, esp="Postmark").delete()
    FeedbackEvent.objects.filter(send=second).update(suppressed=False)
    (figures,) = REPUTATION.figures([tenant.id], days=7)
    assert (figures.bounced_sent, figures.complained) == (0, 1)
    FeedbackEvent.objects.filter(send=first).delete()
    (figures,) = REPUTATION.figures([tenant.id], days=7)
    assert (figures.sent, figures.bounced_sent, figures.complained) == (2, 0, 0)
    assert SendTally.objects.differences([campaign.id]) == []


@pytest.mark.django_db
def test_events_written_in_bulk_mark_each_of_their_sends(tenant):
    """One statement of many events (an import of an ESP's history): one UPDATE marks them all."""
    campaign = sending_campaign(count=10, account=tenant)
    rows = sent_rows(campaign, 4)
    with connection.cursor() as cursor:
        cursor.execute("""
            INSERT INTO growth_feedback_events (esp, event_id, event_type, reject_reason,
                   email_lower, account_id, campaign_id, send_id, unattributed_because,
                   suppressed, description, mta_response)
            SELECT 'import', s.id || '-' || k.n, k.kind, '', s.email_lower, s.account_id,
                   s.campaign_id, s.id, '', k.kind <> 'deferred', '', ''
              FROM growth_sends s,
                   unnest(ARRAY['bounced', 'complained', 'complained', 'deferred'])
                       WITH ORDINALITY AS k(kind, n)
             WHERE s.id = ANY(%s) AND (k.kind <> 'bounced' OR s.id = %s)""",
                       [[row.id for row in rows[:3]], rows[0].id])
    marked = dict(Send.objects.filter(campaign=campaign).exclude(
        bounce_reported=False, complaint_reported=False).values_list("id", "bounce_reported"))
    assert marked == {rows[0].id: True, rows[1].id: False, rows[2].id: False}
    (figures,) = REPUTATION.figures([tenant.id], days=7)
    assert (figures.sent, figures.bounced_sent, figures.complained) == (4, 1, 3)
    assert SendTally.objects.differences([campaign.id]) == []


@pytest.mark.django_db
def test_a_tenant_that_sent_nothing_has_zeros(tenant):
    (figures,) = REPUTATION.figures([tenant.id], days=7)
    assert (figures.sent, figures.hard_bounces, figures.complained) == (0, 0, 0)
    reputation = guard.reputation_of(tenant.id)
    assert reputation.state == guard.UNJUDGED and not reputation.warning


# --- the guard ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # committed rows: the database's clock moves on
def test_the_guard_pauses_the_tenant_whose_complaints_cross_the_threshold_mid_campaign_and_no_other():
    acme, globex = AccountFactory(name="Acme"), AccountFactory(name="Globex")
    noisy = sending_campaign(count=1000, account=acme)
    quiet = sending_campaign(count=1000, account=globex)
    run_worker(12)  # the worker serves both in turn: 600 each
    assert statuses(noisy) == {"sent": 600, "queued": 400}
    assert statuses(quiet) == {"sent": 600, "queued": 400}
    delivered = list(Send.objects.filter(campaign=noisy, status="sent").order_by("id"))
    complaints_elsewhere = list(Send.objects.filter(campaign=quiet, status="sent").order_by("id"))

    feedback(delivered[0], EventType.COMPLAINED)
    feedback(complaints_elsewhere[0], EventType.COMPLAINED)
    assert guard.check_all() == []  # 1 of 600 each, 0.17 %: a warning, not a stop
    assert [r.state for r in guard.reputations([acme.id, globex.id])] == [guard.WARN, guard.WARN]

    feedback(delivered[1], EventType.COMPLAINED, esp="mailbox")  # an ARF report from a feedback loop
    paused = guard.check_all()

    assert [p.campaign_id for p in paused] == [noisy.id]
    noisy.refresh_from_db()
    quiet.refresh_from_db()
    assert noisy.status == "paused" and quiet.status == "sending"
    assert noisy.pause_reason.startswith("Reputation guard: complaint rate 0.33 % over the last "
                                         "600 sends (2 complaints, 7 days; stop at 0.3 %)")
    assert "Resume knowingly" in noisy.pause_reason
    assert guard.check_all() == []  # a paused campaign is not paused twice

    run_worker(10)  # Globex's campaign goes on to the end; Acme's waits, nothing of it claimed
    assert statuses(quiet) == {"sent": 1000}
    assert statuses(noisy) == {"sent": 600, "queued": 400}
    assert Campaign.objects.status_of(campaign_id=quiet.id) == "sent"
    assert Campaign.objects.status_of(campaign_id=noisy.id) == "paused"


@pytest.mark.django_db(transaction=True)
def test_a_resumed_campaign_is_not_paused_again_until_new_feedback_keeps_the_rate_over():
    acme = AccountFactory(name="Acme")
    campaign = sending_campaign(count=800, account=acme)
    rows = sent_rows(campaign, 600)
    for row in rows[:3]:
        feedback(row, EventType.COMPLAINED)
    assert [p.campaign_id for p in guard.check_all()] == [campaign.id]

    assert Campaign.objects.resume(campaign_id=campaign.id)  # the operator, knowingly
    assert guard.check_all() == []
    assert guard.check_all() == []
    assert Campaign.objects.status_of(campaign_id=campaign.id) == "sending"

    more = sent_rows(campaign, 100)  # it goes on sending; a new complaint comes in, still 0.57 %
    feedback(more[0], EventType.COMPLAINED)
    assert [p.campaign_id for p in guard.check_all()] == [campaign.id]
    assert Campaign.objects.status_of(campaign_id=campaign.id) == "paused"


@pytest.mark.django_db(transaction=True)
def test_new_feedback_that_leaves_the_rate_under_the_threshold_does_not_pause_a_resumed_campaign():
    acme = AccountFactory(name="Acme")
    campaign = sending_campaign(count=2000, account=acme)
    rows = sent_rows(campaign, 600)
    for row in rows[:2]:
        feedback(row, EventType.COMPLAINED)
    assert len(guard.check_all()) == 1
    assert Campaign.objects.resume(campaign_id=campaign.id)
    more = sent_rows(campaign, 1000)  # clean sends since: 3 of 1,600 is 0.19 %
    feedback(more[0], EventType.COMPLAINED)
    assert guard.check_all() == []
    assert guard.reputation_of(acme.id).state == guard.WARN


@pytest.mark.django_db(transaction=True)
def test_below_the_minimum_of_sends_nothing_is_judged():
    acme = AccountFactory(name="Acme")
    campaign = sending_campaign(count=10, account=acme)  # a test to ten colleagues
    rows = sent_rows(campaign, 10)
    for row in rows[:3]:
        feedback(row, EventType.COMPLAINED)
    feedback(rows[3], EventType.BOUNCED, esp="mailbox")
    reputation = guard.reputation_of(acme.id)
    assert reputation.complaint.percent == pytest.approx(100 * 3 / 9)
    assert reputation.state == guard.UNJUDGED and not reputation.warning
    assert guard.check_all() == []
    assert Campaign.objects.status_of(campaign_id=campaign.id) == "sending"


@pytest.mark.django_db(transaction=True)
def test_hard_bounces_over_the_stop_threshold_pause_every_sending_campaign_of_the_tenant():
    acme, globex = AccountFactory(name="Acme"), AccountFactory(name="Globex")
    first = sending_campaign(count=400, account=acme)
    second = sending_campaign(count=400, account=acme)
    other = sending_campaign(count=600, account=globex)
    rows = sent_rows(first, 300) + sent_rows(second, 250)
    sent_rows(other, 600)
    for row in rows[:20]:  # reported by mail: 20 of 550
        feedback(row, EventType.BOUNCED, esp="mailbox")
    refused = Send.objects.filter(campaign=second, status="queued").order_by("id")[:10]
    Send.objects.filter(id__in=[r.id for r in refused]).update(  # and refused by our relay: 30 of 560
        status="failed", last_error="550 5.1.1 No such user", updated_at=timezone.now())
    paused = guard.check_all()
    assert sorted(p.campaign_id for p in paused) == [first.id, second.id]
    assert all(p.reason.startswith("Reputation guard: bounce rate 5.36 % over the last 560 sends")
               for p in paused)
    assert Campaign.objects.status_of(campaign_id=other.id) == "sending"


@pytest.mark.django_db(transaction=True)
def test_the_feedback_path_pauses_at_once_after_the_complaint_that_crosses(monkeypatch):
    monkeypatch.setattr(guard, "FEEDBACK_CHECK_EVERY", 0.0)
    acme, globex = AccountFactory(name="Acme"), AccountFactory(name="Globex")
    campaign = sending_campaign(count=700, account=acme)
    other = sending_campaign(count=700, account=globex)
    rows = sent_rows(campaign, 600)
    sent_rows(other, 600)
    feedback(rows[0], EventType.COMPLAINED)
    assert Campaign.objects.status_of(campaign_id=campaign.id) == "sending"
    feedback(rows[1], EventType.COMPLAINED)  # no worker pass: the webhook's own check
    assert Campaign.objects.status_of(campaign_id=campaign.id) == "paused"
    assert Campaign.objects.status_of(campaign_id=other.id) == "sending"


@pytest.mark.django_db(transaction=True)
def test_a_campaign_resumed_while_the_guard_decides_is_left_alone():
    """The lock re-checks the condition: a campaign that moved after the evidence is not paused,
    even if the guard read its figures before the move."""
    acme = AccountFactory(name="Acme")
    campaign = sending_campaign(count=700, account=acme)
    for row in sent_rows(campaign, 600)[:3]:
        feedback(row, EventType.COMPLAINED)
    judged = guard.reputations([acme.id])  # read first...
    Campaign.objects.pause(campaign_id=campaign.id)  # ...then an operator pauses and resumes
    Campaign.objects.resume(campaign_id=campaign.id)
    assert guard._enforce(judged) == []
    assert Campaign.objects.status_of(campaign_id=campaign.id) == "sending"


def test_the_schedule_checks_at_most_every_interval(monkeypatch):
    calls = []
    monkeypatch.setattr(guard, "check_all", lambda: calls.append(1) or [])
    schedule = guard.GuardSchedule(every=3600)
    for _ in range(5):
        schedule.run_if_due()
    assert calls == [1]
    assert guard.GuardSchedule(every=0).run_if_due() == [] and len(calls) == 2


# --- the plans ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_figures_are_read_through_indexes_not_by_scanning_sends_or_events(tenant, other_tenant):
    campaigns = [sending_campaign(count=2500, account=account)
                 for account in (tenant, other_tenant) for _ in range(2)]
    for campaign in campaigns:
        for row in sent_rows(campaign, 2000)[:5]:
            feedback(row, EventType.COMPLAINED)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE growth_sends")
        cursor.execute("ANALYZE growth_feedback_events")
        plans = {}
        for name, params in (("rates", {"account_ids": [tenant.id], "days": 7}),
                             ("rates_of_sending_tenants", {"days": 7})):
            cursor.execute("EXPLAIN " + split_settings(QUERIES[name])[1], params)
            plans[name] = "\n".join(row[0] for row in cursor.fetchall())
    for plan in plans.values():
        # the sends only through the partial indexes that hold what the figures count beside
        # the tallies (relay refusals; reported rows not 'sent'), never row by row
        readers = {line.split(" using ")[-1].split(" on ")[0]
                   for line in plan.splitlines() if " on growth_sends " in line}
        assert readers == {"send_hard_refused", "send_bounced_unsent", "send_complained_unsent"}, plan
        assert "growth_send_tallies" in plan, plan  # the sent rows, and the reported among them
    # the events are few here, so the planner may read them whole; only their index of the newest
    # report per campaign and kind serves them when they are many
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + split_settings(QUERIES["rates"])[1],
                       {"account_ids": [tenant.id], "days": 7})
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("SET LOCAL enable_seqscan = on")
    events = [line for line in plan.splitlines() if "growth_feedback_events" in line]
    assert events and all("feedback_campaign_news" in line for line in events), plan
    assert "Seq Scan" not in plan, plan


# --- the admin ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_warnings_include_names_the_tenant_its_rate_and_the_threshold(tenant):
    campaign = sending_campaign(count=600, account=tenant)
    rows = sent_rows(campaign, 600)
    feedback(rows[0], EventType.COMPLAINED)
    warnings = guard.reputation_warnings([tenant.id])
    html = render_to_string("growth/reputation/warnings.html", {"reputation_warnings": warnings})
    assert "Acme" in html and "complaint rate <strong>0.17 %</strong>" in html
    assert "warn at 0.1 %" in html
    assert render_to_string("growth/reputation/warnings.html", {"reputation_warnings": []}).strip() == ""


@pytest.mark.django_db
def test_the_account_page_panel_shows_the_reputation_and_the_readiness(tenant, monkeypatch, settings):
    from growth.admin.audience import AccountAdmin
    from growth.deliverability import readiness
    from tests.test_check_sender import StubResolver, good_zone

    settings.SITE_URL = "https://growth.example.com"
    settings.BOUNCE_DOMAIN = ""
    zone = good_zone(from_domain=tenant.from_email.rpartition("@")[2])
    monkeypatch.setattr(readiness, "default_resolver", lambda **kwargs: StubResolver(zone))
    monkeypatch.setattr(readiness, "post_probe", lambda url, timeout: (400, ""))
    campaign = sending_campaign(count=600, account=tenant)
    for row in sent_rows(campaign, 600)[:2]:
        feedback(row, EventType.COMPLAINED)
    request = RequestFactory().get(f"/admin/growth/account/{tenant.pk}/change/?recheck-sender=1")
    request.user = UserFactory(is_staff=True, is_superuser=True)
    request.session = {}
    response = AccountAdmin(type(tenant), admin.site).change_view(request, str(tenant.pk))
    html = response.rendered_content
    assert "Sending reputation" in html and "<strong>STOP</strong>" in html
    assert "0.33 %" in html
    assert "Sender readiness" in html and "check_sender --account" in html
    assert "<strong>ready</strong>" in html
