"""The worker on the lease protocol (SENDER_PROTOCOL=leases, a receiver that de-duplicates), in
process, against a real SMTP server on loopback: what is the lease protocol's own (claimed
through the cursor, one write a recipient, no lease left behind). tests/test_worker.py runs its
shared scenarios on both protocols."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from growth.models import Campaign, Send, SendCursor, SendLease, Suppression
from growth.sending.transports import BaseTransport
from growth.sending.worker import Worker
from tests.scenarios import approved_campaign, run_worker, sending_campaign, statuses

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def on_leases(settings):
    settings.SENDER_PROTOCOL = "leases"
    settings.SENDER_IDEMPOTENT_TRANSPORT = True
    settings.SENDER_BACKOFF_BASE = 0.05  # seconds
    settings.SENDER_BACKOFF_MAX = 0.2


def test_a_campaign_built_on_leases_runs_to_completion_each_recipient_once(smtp_settings):
    campaign = approved_campaign(count=60)
    worker = run_worker()
    campaign.refresh_from_db()
    assert campaign.status == "sent"
    # claimed through its cursor, which went past every row
    assert SendCursor.objects.get(campaign=campaign).claimed_to == max(
        Send.objects.filter(campaign=campaign).values_list("id", flat=True))
    assert statuses(campaign) == {"sent": 60}
    keys = smtp_settings.handler.keys()
    assert set(keys) == set(Send.objects.values_list("job_id", flat=True))
    assert set(keys.values()) == {1}
    assert not SendLease.objects.exists()
    # each row written once, by its settle: its only attempt, handed over by the claim
    assert set(Send.objects.values_list("attempts", "claimed_by")) == {(1, worker.worker_id)}


class ExplodingTransport(BaseTransport):
    """A transport with a bug: it raises instead of returning outcomes."""

    idempotent = True

    def send_bulk(self, deliveries):
        raise RuntimeError("the provider's client library broke")


def test_a_transport_that_raises_pauses_the_campaign_and_leaves_nothing_stranded(smtp_settings):
    campaign = approved_campaign(count=12)
    Worker(batch_size=12, tick=0.05, until_idle=True, transport=ExplodingTransport(),
           connections=2).run()
    campaign.refresh_from_db()
    assert campaign.status == "paused" and "client library broke" in campaign.pause_reason
    # the receiver de-duplicates: the rows without an answer are due again, same keys
    assert statuses(campaign) == {"queued": 12}
    assert not SendLease.objects.filter(worker_id__isnull=False).exists()

    Campaign.objects.resume(campaign_id=campaign.id)
    run_worker()
    assert statuses(campaign) == {"sent": 12}
    assert set(smtp_settings.handler.keys().values()) == {1}


def test_a_plain_receiver_refuses_to_build_for_leases_and_leaves_their_campaigns_alone(
        smtp_settings, settings, caplog):
    settings.SENDER_IDEMPOTENT_TRANSPORT = False
    with pytest.raises(ImproperlyConfigured, match="de-duplicates"):
        Worker()
    campaign = sending_campaign(count=3, leases=True)
    settings.SENDER_PROTOCOL = "rows"
    run_worker(once=True, until_idle=False)
    assert statuses(campaign) == {"queued": 3} and not SendLease.objects.exists()
    assert "runs on the lease protocol" in caplog.text


def test_a_batch_whose_every_row_is_opted_out_still_ends_its_lease(smtp_settings):
    campaign = sending_campaign(count=3, leases=True)
    for row in Send.objects.filter(campaign=campaign):
        Suppression.objects.suppress(account_id=campaign.account_id, email_lower=row.email_lower,
                                     reason="unsubscribed")
    run_worker(lease=1)
    assert statuses(campaign) == {"suppressed": 3}
    assert not SendLease.objects.exists() and smtp_settings.handler.keys() == {}
