"""The worker on the lease protocol (SENDER_PROTOCOL=leases), in process, against a real SMTP
server on loopback: what is the lease protocol's own (claimed through the cursor, one write a
recipient, no lease left behind; a plain receiver's chunks each a lease handed over before its
wire takes it). tests/test_worker.py runs its shared scenarios on both protocols."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from growth.models import Campaign, Send, SendCursor, SendLease, Suppression
from growth.sending.transports import BaseTransport
from growth.sending.transports.django_mail import DjangoMailTransport
from growth.sending.worker import Worker
from tests.scenarios import (
    approved_campaign,
    rows_by_status,
    run_worker,
    sending_campaign,
    statuses,
)

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

    def __init__(self, *, idempotent: bool = True) -> None:
        self.idempotent = idempotent

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


@pytest.mark.parametrize("connections", [1, 3])
def test_a_plain_receivers_chunk_is_a_lease_handed_over_before_its_wire_takes_it(
        smtp_settings, settings, connections):
    settings.SENDER_IDEMPOTENT_TRANSPORT = False
    settings.SENDER_HANDOFF_CHUNK = 4
    campaign = approved_campaign(count=30)
    seen: list[tuple[int, bool]] = []  # per chunk on a wire: its rows, handed over (committed)

    class Checking(DjangoMailTransport):
        def send_bulk(self, deliveries):
            ids = [d.send_id for d in deliveries]
            with connection.cursor() as cursor:  # the wire's own connection: committed rows only
                cursor.execute("SELECT count(*) FROM growth_send_leases WHERE send_ids @> %s::bigint[] "
                               "AND handed_over_at IS NOT NULL", [ids])
                seen.append((len(ids), cursor.fetchone()[0] == 1))
            return super().send_bulk(deliveries)

    worker = run_worker(transport=Checking(), connections=connections)
    assert statuses(campaign) == {"sent": 30} and not SendLease.objects.exists()
    assert all(handed for _, handed in seen) and max(n for n, _ in seen) <= 4
    assert sum(n for n, _ in seen) == 30
    keys = smtp_settings.handler.keys()
    assert len(keys) == 30 and set(keys.values()) == {1}
    assert set(Send.objects.values_list("attempts", "claimed_by")) == {(1, worker.worker_id)}


def test_a_plain_transport_that_raises_leaves_the_wires_leases_in_doubt_and_frees_the_rest(
        smtp_settings, settings):
    settings.SENDER_HANDOFF_CHUNK = 5
    campaign = approved_campaign(count=12)
    Worker(batch_size=12, tick=0.05, until_idle=True,
           transport=ExplodingTransport(idempotent=False), connections=2).run()
    campaign.refresh_from_db()
    assert campaign.status == "paused" and "client library broke" in campaign.pause_reason
    # a claim writes no send row; the two leases handed over to the wires may have gone out:
    # they stay to their expiry (then 'unknown'); the one no wire took is freed for a take-over
    assert rows_by_status(campaign) == {"queued": 12}
    assert statuses(campaign) == {"queued": 2, "sending": 10}  # as an operator sees it
    handed = SendLease.objects.filter(handed_over_at__isnull=False, worker_id__isnull=False)
    assert sorted(len(lease.send_ids) for lease in handed) == [5, 5]
    assert [len(lease.send_ids) for lease in SendLease.objects.filter(worker_id=None)] == [2]


def test_a_batch_whose_every_row_is_opted_out_still_ends_its_lease(smtp_settings):
    campaign = sending_campaign(count=3, leases=True)
    for row in Send.objects.filter(campaign=campaign):
        Suppression.objects.suppress(account_id=campaign.account_id, email_lower=row.email_lower,
                                     reason="unsubscribed")
    run_worker(lease=1)
    assert statuses(campaign) == {"suppressed": 3}
    assert not SendLease.objects.exists() and smtp_settings.handler.keys() == {}


def test_a_dead_workers_free_leases_are_taken_over_claim_after_claim_without_waiting_a_poll(
        smtp_settings, settings, monkeypatch):
    """A plain receiver's batch is a lease per chunk: a worker killed or stopped leaves many
    free, and a claim takes over one. Each came back short of the batch, so the worker looked at
    the outlook and waited its poll (a second) as if the rest were on other workers' wires: a
    second per chunk."""
    settings.SENDER_IDEMPOTENT_TRANSPORT = False
    campaign = sending_campaign(count=16, leases=True)
    dead = SendLease.objects.claim(worker_id="dead", campaign_id=campaign.id, batch_size=16,
                                   lease=60, chunk_size=4)
    assert len(dead) == 4
    SendLease.objects.filter(worker_id="dead").update(expires_at=timezone.now())
    assert SendLease.objects.recover(idempotent=False, max_attempts=5).freed == 4
    looks = []
    outlook = Campaign.objects.outlook
    monkeypatch.setattr(Campaign.objects, "outlook", lambda: looks.append(1) or outlook())

    Worker(worker_id="w", batch_size=16, tick=0.05, until_idle=True).run()
    assert statuses(campaign) == {"sent": 16}
    assert set(smtp_settings.handler.keys().values()) == {1}
    assert len(looks) == 1, looks  # only once nothing was left: never between take-overs
