"""The operators' compare-and-set statements: unknown rows retried or marked delivered, a finished
campaign reopened by a retry, draft edits, and the races of a retry with finish and cancel."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction
from django.utils import timezone

from growth.models import Campaign, Send, Subscriber
from growth.operations.unknown_sends import mark_delivered, retry_unknown
from growth.sending.transports.null import NullTransport
from growth.sending.worker import Worker
from tests.factories import CampaignFactory, SegmentFactory, SubscriberFactory
from tests.helpers import concurrently
from tests.scenarios import finished_campaign_with_unknown_rows, make_unknown, sending_campaign, statuses

# --- retry (same key) ---------------------------------------------------------------------------

@pytest.mark.django_db
def test_retry_queues_unknown_rows_again_with_the_same_key_due_now():
    campaign = sending_campaign(count=3)
    lost = make_unknown(2)
    before = {row.id: row for row in Send.objects.filter(id__in=lost)}
    review = retry_unknown(send_ids=lost)
    assert review.changed == 2 and review.skipped == {} and review.reopened_campaigns == []
    for row in Send.objects.filter(id__in=lost):
        assert row.status == "queued"
        assert row.job_id == before[row.id].job_id
        assert row.next_attempt_at <= timezone.now() and row.lease_expires_at is None  # due now
        assert row.handed_over_at is None and row.claimed_by == "dead"  # names the lost claim
        assert row.attempts == before[row.id].attempts
        assert row.last_error.startswith("requeued by an operator after: lease expired")
    assert statuses(campaign) == {"queued": 3}
    again = Send.objects.claim(worker_id="w", batch_size=10, lease=60)
    assert {row.id for row in again} >= set(lost)


@pytest.mark.django_db
def test_retry_reopens_a_finished_campaign_and_the_worker_sends_the_rows_then_finishes_it():
    campaign, lost = finished_campaign_with_unknown_rows()
    review = retry_unknown(send_ids=lost)
    assert review.changed == 2 and review.reopened_campaigns == [campaign.id]
    campaign.refresh_from_db()
    assert campaign.status == "sending" and campaign.finished_at is None
    assert campaign.recipients_built_at is not None  # no rebuild: the same rows, nobody new
    Worker(worker_id="w", transport=NullTransport(), batch_size=10).cycle()
    assert statuses(campaign) == {"sent": 4}
    campaign.refresh_from_db()
    assert campaign.status == "sent" and campaign.finished_at is not None


@pytest.mark.django_db
def test_retry_in_a_paused_campaign_waits_for_resume():
    campaign = sending_campaign(count=2)
    lost = make_unknown(1)
    assert Campaign.objects.pause(campaign_id=campaign.id)
    assert retry_unknown(send_ids=lost).changed == 1
    campaign.refresh_from_db()
    assert campaign.status == "paused"
    assert Send.objects.claim(worker_id="w", batch_size=10, lease=60) == []
    assert Campaign.objects.resume(campaign_id=campaign.id)
    assert {row.id for row in Send.objects.claim(worker_id="w", batch_size=10, lease=60)} >= set(lost)


@pytest.mark.django_db
def test_retry_leaves_rows_of_a_cancelled_campaign_unknown_and_says_why():
    campaign = sending_campaign(count=2)
    lost = make_unknown(1)
    Campaign.objects.cancel(campaign_id=campaign.id)
    review = retry_unknown(send_ids=lost)
    assert review.changed == 0
    assert review.skipped == {"its campaign is cancelled": 1}
    assert statuses(campaign) == {"unknown": 1, "cancelled": 1}


@pytest.mark.django_db
def test_retry_and_mark_delivered_touch_only_unknown_rows_and_say_so():
    campaign = sending_campaign(count=4)
    lost = make_unknown(2)
    queued = list(Send.objects.filter(campaign=campaign, status="queued").values_list("id", flat=True))
    review = retry_unknown(send_ids=[*lost, *queued])
    assert review.changed == 2 and review.skipped == {"queued, not unknown": 2}
    Send.objects.filter(id__in=queued).update(status="sent")
    review = mark_delivered(send_ids=[*lost, *queued])
    assert review.changed == 0
    assert review.skipped == {"queued, not unknown": 2, "sent, not unknown": 2}


@pytest.mark.django_db
def test_repeating_a_retry_or_a_mark_is_harmless():
    campaign = sending_campaign(count=3)
    lost = make_unknown(3)
    assert retry_unknown(send_ids=lost[:1]).changed == 1
    assert retry_unknown(send_ids=lost[:1]).changed == 0
    assert mark_delivered(send_ids=lost[1:]).changed == 2
    assert mark_delivered(send_ids=lost[1:]).changed == 0
    assert statuses(campaign) == {"queued": 1, "sent": 2}


@pytest.mark.django_db
def test_mark_delivered_records_the_row_as_sent_and_leaves_the_campaign_alone():
    campaign, lost = finished_campaign_with_unknown_rows()
    review = mark_delivered(send_ids=lost)
    assert review.changed == 2 and review.reopened_campaigns == []
    for row in Send.objects.filter(id__in=lost):
        assert row.status == "sent" and row.sent_at is not None
        assert row.last_error.startswith("marked sent by an operator after:")
        [verdict] = row.verdicts.all()
        assert (verdict.verdict, verdict.decided_by) == ("sent", "an operator")
    campaign.refresh_from_db()
    assert campaign.status == "sent"


# --- races -------------------------------------------------------------------------------------

def hold_a_retry_open(send_ids: list[int], held: threading.Event, release: threading.Event) -> None:
    """An operator's retry whose transaction stays open until ``release`` (or 3 s)."""
    try:
        with transaction.atomic():
            assert len(Send.objects.retry_unknown(send_ids)) == len(send_ids)
            held.set()
            release.wait(timeout=3)
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_finish_never_closes_a_campaign_over_rows_a_retry_is_requeuing():
    # A single-statement finish would wait for the retry's lock, then judge the rows by its
    # older snapshot (still 'unknown') and close the campaign over the requeued rows.
    campaign = sending_campaign(count=2)
    lost = make_unknown(2)  # the campaign is finishable: nothing queued or sending
    held, release = threading.Event(), threading.Event()
    retry = threading.Thread(target=hold_a_retry_open, args=(lost, held, release))
    retry.start()
    assert held.wait(timeout=10)
    finished: list[int] = []
    finisher = threading.Thread(target=lambda: (finished.extend(Campaign.objects.finish()),
                                                connections.close_all()))
    finisher.start()
    finisher.join(timeout=2)
    release.set()
    retry.join(timeout=10)
    finisher.join(timeout=10)
    assert finished == []
    assert Campaign.objects.finish() == []  # and after the commit it sees the queued rows
    campaign.refresh_from_db()
    assert campaign.status == "sending"
    assert statuses(campaign) == {"queued": 2}


@pytest.mark.django_db(transaction=True)
def test_a_cancel_racing_a_retry_leaves_no_requeued_row_queued_and_keeps_their_doubt():
    # The cancel waits for the retry's lock, then sees the rows it requeued: none stays queued
    # where nothing would claim it, and those in doubt are 'unknown' again, not 'cancelled' (a
    # follow-up would take them as never reached).
    campaign = sending_campaign(count=3)
    lost = make_unknown(2)
    held, release = threading.Event(), threading.Event()
    retry = threading.Thread(target=hold_a_retry_open, args=(lost, held, release))
    retry.start()
    assert held.wait(timeout=10)
    dropped: list[tuple[int, int]] = []

    def cancel() -> None:
        cancelled = Campaign.objects.cancel(campaign_id=campaign.id)
        dropped.append((cancelled.dropped, cancelled.in_doubt))
        connections.close_all()

    canceller = threading.Thread(target=cancel)
    canceller.start()
    canceller.join(timeout=0.5)
    assert canceller.is_alive()  # waiting for the retry's lock on the campaign
    release.set()
    retry.join(timeout=10)
    canceller.join(timeout=10)
    assert dropped == [(1, 2)]  # cancelled, in doubt
    assert statuses(campaign) == {"cancelled": 1, "unknown": 2}


@pytest.mark.django_db(transaction=True)
def test_racing_retries_and_finishes_requeue_each_row_once_and_never_strand_it():
    for _ in range(5):
        campaign, lost = finished_campaign_with_unknown_rows(count=3, unknown=3)

        def race(i, ids=lost):
            return len(Send.objects.retry_unknown(ids)) if i % 2 else len(Campaign.objects.finish())

        results = concurrently(6, race)
        assert sum(results[1::2]) == 3  # every row requeued by exactly one retry
        campaign.refresh_from_db()
        assert campaign.status == "sending"  # queued rows are never left in a finished campaign
        assert statuses(campaign) == {"queued": 3}
        Campaign.objects.cancel(campaign_id=campaign.id)  # out of the next round's way


# --- campaign edits ----------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_draft_edit_is_a_compare_and_set_on_status_and_version():
    campaign = CampaignFactory()
    loaded = campaign.updated_at
    fields = {"name": "N", "subject": "S", "body_text": "B", "body_html": "", "scheduled_for": None}
    version = Campaign.objects.update_draft(campaign_id=campaign.id, version=loaded, **fields)
    assert version is not None and version != loaded
    # a second editor who loaded the old version loses
    assert Campaign.objects.update_draft(campaign_id=campaign.id, version=loaded, **fields) is None
    campaign.refresh_from_db()
    assert (campaign.name, campaign.subject, campaign.status) == ("N", "S", "draft")
    # once approved, no content edit lands, even with the current version
    assert Campaign.objects.approve(campaign_id=campaign.id, version=version)
    campaign.refresh_from_db()
    assert Campaign.objects.update_draft(campaign_id=campaign.id, version=campaign.updated_at,
                                         **{**fields, "subject": "Changed"}) is None
    renamed = Campaign.objects.rename(campaign_id=campaign.id, version=campaign.updated_at,
                                      name="Renamed")
    assert renamed is not None
    assert Campaign.objects.rename(campaign_id=campaign.id, version=campaign.updated_at,
                                   name="Stale") is None
    campaign.refresh_from_db()
    assert (campaign.name, campaign.subject, campaign.status) == ("Renamed", "S", "approved")


# --- subscribers and suppressions ------------------------------------------------------------

@pytest.mark.django_db
def test_confirm_pending_never_confirms_an_unsubscribed_address():
    segment = SegmentFactory()
    pending = SubscriberFactory(segment=segment, status="pending")
    gone = SubscriberFactory(segment=segment, status="unsubscribed")
    assert Subscriber.objects.confirm_pending([pending.id, gone.id]) == [pending.id]
    assert Subscriber.objects.confirm_pending([pending.id]) == []
    gone.refresh_from_db()
    assert gone.status == "unsubscribed"


@pytest.mark.django_db
def test_add_many_inserts_new_addresses_only_and_never_touches_existing_rows():
    segment = SegmentFactory()
    old = SubscriberFactory(segment=segment, email="old@example.com", status="unsubscribed")
    added = Subscriber.objects.add_many(segment_id=segment.id, status="confirmed", addresses=[
        ("Old@Example.com", "old@example.com"), ("New@Example.com", "new@example.com")])
    assert added == {"new@example.com"}
    old.refresh_from_db()
    assert old.status == "unsubscribed" and old.email == "old@example.com"
    new = Subscriber.objects.get(email_lower="new@example.com")
    assert (new.email, new.account_id, new.status) == ("New@Example.com", segment.account_id, "confirmed")


@pytest.mark.django_db
def test_removing_a_suppression_needs_the_owning_account():
    from growth.models import Suppression

    segment = SegmentFactory()
    other = SegmentFactory()
    assert Suppression.objects.suppress_many(account_id=segment.account_id, reason="manual",
                                             emails_lower=["a@x.example", "b@x.example"]) == {
        "a@x.example", "b@x.example"}
    assert Suppression.objects.suppress_many(account_id=segment.account_id, reason="bounced",
                                             emails_lower=["a@x.example"]) == set()
    row = Suppression.objects.get(email_lower="a@x.example")
    assert row.reason == "manual"
    assert Suppression.objects.remove(account_id=other.account_id, suppression_id=row.id) is None
    assert Suppression.objects.filter(id=row.id).exists()
    assert Suppression.objects.remove(account_id=segment.account_id, suppression_id=row.id) == "a@x.example"
    assert Suppression.objects.remove(account_id=segment.account_id, suppression_id=row.id) is None


@pytest.mark.django_db
def test_history_of_an_address_lists_only_the_tenants_campaigns():
    campaign = sending_campaign(count=2)
    address = Send.objects.filter(campaign=campaign).order_by("id").first().email_lower
    elsewhere = sending_campaign(count=2)  # another tenant, the same addresses
    assert Send.objects.filter(campaign=elsewhere, email_lower=address).exists()
    history = Send.objects.history_of_address(account_id=campaign.account_id, email_lower=address)
    assert [(h.campaign_id, h.status) for h in history] == [(campaign.id, "queued")]
    assert Send.objects.history_of_address(account_id=campaign.account_id,
                                           email_lower="nobody@example.com") == []
