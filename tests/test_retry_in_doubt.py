"""An operator's "retry with the same key" of a row in doubt ('unknown'), and what follows it.

The retry sends the row again under its key, as the operator chose (the claim does not judge the
receiver's memory of that key by the attempt that went into doubt). It must not wash the doubt
away: the earlier attempt's message may still have arrived. A cancel, a "not delivered" answer to
the retry, or its failure leave the row in doubt for "resend to the rest", which mails it under
the follow-up's own key only if asked to. And a provider's delivery event for the row's key,
arriving before a claim takes it again, records it 'sent': not sent a second time. Both
protocols."""

from __future__ import annotations

import pytest
from django.test import Client

from growth.models import Campaign, Send, SendLease, SendTally, SendVerdict
from growth.operations.campaigns import cancel_campaign, pause_campaign
from growth.operations.follow_ups import create_follow_up, resend_audience
from growth.operations.unknown_sends import mark_not_delivered, retry_unknown
from growth.sending.transports import Outcome
from tests.factories import CampaignFactory
from tests.scenarios import sending_campaign
from tests.test_follow_ups import addresses, build
from tests.test_leases import _claim, _expire, _settle
from tests.test_reconcile import delivery
from tests.test_settle_recover import claim_and_hand_over, expire_leases, settle
from tests.webhook_payloads import ANYMAIL_SETTINGS, Postmark

pytestmark = pytest.mark.django_db

PROTOCOLS = pytest.mark.parametrize("protocol", ["rows", "leases"])


def retried_in_doubt(protocol: str) -> tuple[Campaign, Send, Send]:
    """A campaign of two rows: the first handed to a plain receiver by a worker that was lost,
    'unknown', then queued again by an operator's retry; the second queued, never sent.
    Returns (campaign, the retried row, the other)."""
    campaign = sending_campaign(count=2, leases=protocol == "leases")
    lost, fresh = Send.objects.filter(campaign=campaign).order_by("id")
    if protocol == "rows":
        assert [row.id for row in claim_and_hand_over(worker_id="dead")] == [lost.id]
        expire_leases()
        assert [r.status for r in Send.objects.recover_expired(idempotent=False,
                                                               max_attempts=5)] == ["unknown"]
    else:
        lease = _claim(campaign, worker="dead", batch_size=1)
        assert SendLease.objects.hand_over(lease.id, worker_id="dead")
        _expire(lease.id)
        assert SendLease.objects.recover(idempotent=False, max_attempts=5).unknown == 1
    assert retry_unknown(send_ids=[lost.id]).changed == 1
    return campaign, lost, fresh


def claimed_and_answered(campaign: Campaign, protocol: str, kind: str, *,
                         before_the_answer=lambda: None) -> dict[int, str]:
    """A worker 'w' claims both rows and hands them over; ``before_the_answer`` runs; then the
    receiver answers ``kind`` for both. Returns what the settle wrote."""
    if protocol == "rows":
        claimed = claim_and_hand_over(worker_id="w", batch_size=2)
        assert [row.status for row in claimed] == ["sending", "sending"]
        before_the_answer()
        return settle([Outcome(row.id, kind, error="451 4.3.2 later") for row in claimed],
                      worker_id="w", attempts={row.id: row.attempts for row in claimed},
                      campaign_id=campaign.id)
    lease = _claim(campaign, worker="w", batch_size=2)
    assert [row.status for row in lease.rows] == ["sending", "sending"]
    assert SendLease.objects.hand_over(lease.id, worker_id="w")
    before_the_answer()
    return _settle(lease, dict.fromkeys((row.id for row in lease.rows), kind))


def follow_up_without_doubt(campaign: Campaign) -> set[str]:
    """The addresses "resend to the rest" mails, rows in doubt not ticked."""
    follow_up = create_follow_up(campaign_id=campaign.id)
    build(follow_up)
    return addresses(follow_up)


# --- the retry keeps the doubt -----------------------------------------------------------------


@PROTOCOLS
def test_a_retried_row_goes_again_under_its_key_even_to_a_receiver_that_forgets_keys(protocol):
    """The operator accepted the duplicate: the claim sends the row, not 'unknown' again."""
    campaign, lost, fresh = retried_in_doubt(protocol)
    if protocol == "rows":
        claimed = Send.objects.claim(worker_id="w", batch_size=2, lease=60, forgets_after=0)
        assert {row.id: row.status for row in claimed} == {lost.id: "sending", fresh.id: "sending"}
    else:
        lease = _claim(campaign, worker="w", batch_size=2, forgets_after=0)
        assert {row.id: row.status for row in lease.rows} == {lost.id: "sending",
                                                            fresh.id: "sending"}


@PROTOCOLS
def test_a_retried_row_still_queued_when_its_campaign_is_cancelled_becomes_unknown(protocol):
    """Cancelled, it read as never reached: the follow-up mailed it under its own key."""
    campaign, lost, fresh = retried_in_doubt(protocol)
    cancel_campaign(campaign_id=campaign.id)
    assert Send.objects.get(id=lost.id).status == "unknown"
    assert Send.objects.get(id=fresh.id).status == "cancelled"
    assert resend_audience(campaign).takeable == {"cancelled": 1, "in_doubt": 1}
    assert follow_up_without_doubt(campaign) == {fresh.email_lower}


@PROTOCOLS
@pytest.mark.parametrize("kind", [Outcome.TRANSIENT, Outcome.THROTTLED, Outcome.REFUSED])
def test_a_retry_on_the_wire_when_its_campaign_is_cancelled_answered_not_delivered_stays_in_doubt(
        protocol, kind):
    """The receiver's "not delivered" is about the retry, not the attempt that went into doubt."""
    campaign, lost, fresh = retried_in_doubt(protocol)
    written = claimed_and_answered(campaign, protocol, kind, before_the_answer=lambda: (
        cancel_campaign(campaign_id=campaign.id)))
    assert written == {lost.id: "cancelled", fresh.id: "cancelled"}
    assert resend_audience(campaign).takeable == {"cancelled": 1, "in_doubt": 1}
    assert follow_up_without_doubt(campaign) == {fresh.email_lower}


@PROTOCOLS
def test_a_retry_that_fails_stays_in_doubt(protocol):
    """A permanent refusal of the retry (or a transient one past the retry horizon, which the
    retry of an old row meets at once) says nothing of the earlier attempt either."""
    campaign, lost, fresh = retried_in_doubt(protocol)
    written = claimed_and_answered(campaign, protocol, Outcome.PERMANENT)
    assert written == {lost.id: "failed", fresh.id: "failed"}
    pause_campaign(campaign_id=campaign.id)  # nothing left to send: it finished
    assert resend_audience(campaign).takeable == {"failed": 1, "in_doubt": 1}
    assert follow_up_without_doubt(campaign) == {fresh.email_lower}


@PROTOCOLS
def test_an_operators_not_delivered_verdict_after_the_retry_ends_the_doubt(protocol):
    """Evidence settles it: the retry went into doubt too, and the operator marks the rows not
    delivered. A follow-up takes them as any failed row."""
    campaign, lost, fresh = retried_in_doubt(protocol)
    assert claimed_and_answered(campaign, protocol, Outcome.IN_DOUBT) == {lost.id: "unknown",
                                                                          fresh.id: "unknown"}
    assert mark_not_delivered(send_ids=[lost.id, fresh.id]).changed == 2
    pause_campaign(campaign_id=campaign.id)
    assert resend_audience(campaign).takeable == {"failed": 2}
    assert follow_up_without_doubt(campaign) == {lost.email_lower, fresh.email_lower}


# --- a delivery reported before the retry goes out ---------------------------------------------


def _posted(send: Send, *, campaign: Campaign | None = None) -> None:
    """Postmark's delivery event for the message of ``send``'s subscriber in ``campaign`` (its
    own by default), named by the job id in the metadata the sending side attaches."""
    campaign = campaign or send.campaign
    job_id = f"campaign:{campaign.id}:{send.subscriber_id}"
    metadata = {"account_id": str(send.account_id), "campaign_id": str(campaign.id),
                "job_id": job_id}
    assert Postmark.post(Client(), delivery(Postmark, send.email, metadata)).status_code == 200


def _claimed_now(campaign: Campaign, protocol: str) -> list[int]:
    if protocol == "rows":
        return [row.id for row in Send.objects.claim(worker_id="next", batch_size=10, lease=60)]
    return [row.id for lease in SendLease.objects.claim(worker_id="next", campaign_id=campaign.id,
                                                        batch_size=10, lease=60)
            for row in lease.rows]


@PROTOCOLS
def test_a_delivery_reported_after_the_retry_is_recorded_and_the_row_not_sent_again(
        protocol, settings):
    settings.ANYMAIL = dict(ANYMAIL_SETTINGS)
    campaign, lost, fresh = retried_in_doubt(protocol)
    _posted(lost)
    row = Send.objects.get(id=lost.id)
    assert (row.status, row.next_attempt_at) == ("sent", None)
    assert [(v.verdict, v.decided_by) for v in SendVerdict.objects.of_send(lost.id)] == [
        ("sent", f"esp:{Postmark.name}"), ("retried", "an operator")]
    assert _claimed_now(campaign, protocol) == [fresh.id]
    assert SendTally.objects.differences([campaign.id]) == []


@PROTOCOLS
def test_a_delivery_of_another_campaigns_message_leaves_the_retried_row_to_go(protocol, settings):
    settings.ANYMAIL = dict(ANYMAIL_SETTINGS)
    campaign, lost, fresh = retried_in_doubt(protocol)
    other = CampaignFactory(account=campaign.account)
    Send.objects.create(campaign=other, account=campaign.account, subscriber_id=lost.subscriber_id,
                        email=lost.email, email_lower=lost.email_lower, status="sent")
    _posted(lost, campaign=other)
    _posted(fresh)  # never sent: a delivery of it is no evidence about anything of ours
    assert Send.objects.get(id=lost.id).status == "queued"
    assert Send.objects.get(id=fresh.id).status == "queued"
    assert not SendVerdict.objects.filter(verdict="sent").exists()
    assert sorted(_claimed_now(campaign, protocol)) == [lost.id, fresh.id]
