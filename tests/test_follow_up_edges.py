"""What a follow-up takes from its original at three edges: the rows a paused campaign's worker
gave back in free leases (lease protocol), a corrected address whose other row in the original a
worker claims while the follow-up is built (row protocol), and a row in doubt whose retry was on
the wire when its campaign was cancelled (both protocols)."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction
from django.utils import timezone

from growth.models import Send, SendLease
from growth.operations.campaigns import cancel_campaign, resume_campaign
from growth.operations.follow_ups import create_follow_up, resend_audience
from growth.sending.transports.base import Outcome
from growth.sending.transports.errors import too_large
from growth.sending.worker import Worker
from tests.helpers import on_its_own_connection
from tests.scenarios import run_worker, sending_campaign
from tests.test_follow_up_corrected_address import edit_address
from tests.test_follow_ups import addresses, build, paused_with

RELAY_LIMIT = "552 5.3.4 Message size exceeds fixed maximum message size"
POLICY = {"retry_for": 3600.0, "backoff_base": 30.0, "backoff_max": 3600.0}

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_follow_up_of_a_campaign_paused_as_too_large_takes_its_free_leases(smtp_settings):
    """Lease protocol, plain relay, one connection: the relay refuses the first message as too
    large, the campaign pauses and its worker gives back the leases no wire took (free, never
    handed over). The follow-up that the campaign's page advises must reach every recipient
    nothing was sent to: those free leases' rows are on no wire, and the original stays paused."""
    original = sending_campaign(12, leases=True)
    rows = list(Send.objects.filter(campaign=original).order_by("id"))
    smtp_settings.handler.replies[rows[0].email_lower] = [RELAY_LIMIT]
    Worker(batch_size=10, tick=0.01, lease=30, once=True, connections=1).run()
    original.refresh_from_db()
    assert original.status == "paused" and too_large(original.pause_reason)
    assert SendLease.objects.filter(campaign=original, worker_id__isnull=True).exists()
    counted = resend_audience(original)
    assert (counted.in_flight, counted.takeable) == (0, {"queued": 12})
    follow_up = create_follow_up(campaign_id=original.id)
    assert build(follow_up) == 12
    run_worker()
    delivered = sorted(a.recipient.lower() for a in smtp_settings.handler.accepted)
    assert delivered == sorted(row.email_lower for row in rows)


def test_a_corrected_address_claimed_meanwhile_in_the_original_is_not_taken():
    """The original (row protocol, resumed after the follow-up was made) has a queued row at the
    address another recipient's was corrected to. A worker claims that row while the follow-up is
    built: the build waits for the claim's lock and leaves the row to the original, so it must
    not take the corrected recipient at that address either (two messages, two keys)."""
    original, _ = paused_with(["failed", "queued"])
    failed, queued = Send.objects.filter(campaign=original).order_by("id")
    follow_up = create_follow_up(campaign_id=original.id)
    resume_campaign(campaign_id=original.id)
    edit_address(failed, queued.email, other_segment=True)
    holding, release = threading.Event(), threading.Event()

    def original_worker() -> None:
        with transaction.atomic():
            claimed = Send.objects.claim(worker_id="w", batch_size=10, lease=60)
            assert [c.id for c in claimed] == [queued.id]
            holding.set()
            release.wait(30)

    worker = on_its_own_connection(original_worker)
    assert holding.wait(30)
    building = on_its_own_connection(lambda: build(follow_up))
    building.join(1)
    assert building.is_alive(), "the build should wait for the claim's lock on the row"
    release.set()
    worker.join(30)
    building.join(30)
    assert Send.objects.get(id=queued.id).status == "sending"  # the original's worker sends it
    assert queued.email_lower not in addresses(follow_up)
    assert Send.objects.get(id=failed.id).resent_in_id is None  # left to the original


def _retried_after_a_lost_worker(protocol: str):
    """Idempotent receiver: the campaign's first row handed over by a worker that was lost, its
    lease recovered, and both rows claimed again by worker 'w' (the first under its key, in
    doubt). Returns (campaign, the row in doubt, the other, a settle of w's answers)."""
    original = sending_campaign(count=2, leases=protocol == "leases")
    lost, fresh = Send.objects.filter(campaign=original).order_by("id")
    if protocol == "rows":
        Send.objects.claim(worker_id="dead", batch_size=1, lease=60, hand_over=True)
        Send.objects.filter(id=lost.id).update(
            lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
        assert [r.status for r in Send.objects.recover_expired(idempotent=True,
                                                               max_attempts=5)] == ["queued"]
        claimed = Send.objects.claim(worker_id="w", batch_size=2, lease=60, hand_over=True)

        def settle(kind: str) -> dict[int, str]:
            return Send.objects.settle([Outcome(c.id, kind, error="451 4.3.2 later")
                                        for c in claimed], campaign_id=original.id,
                                       worker_id="w", attempts={c.id: c.attempts for c in claimed},
                                       **POLICY)

        return original, lost, fresh, settle
    (lease,) = SendLease.objects.claim(worker_id="dead", campaign_id=original.id, batch_size=1,
                                       lease=60, hand_over=True)
    SendLease.objects.filter(id=lease.id).update(
        expires_at=timezone.now() - timezone.timedelta(seconds=1))
    assert SendLease.objects.recover(idempotent=True, max_attempts=5).freed == 1
    leases = [one for _ in range(2) for one in SendLease.objects.claim(
        worker_id="w", campaign_id=original.id, batch_size=1, lease=60, hand_over=True)]
    assert [row.id for one in leases for row in one.rows] == [lost.id, fresh.id]

    def settle(kind: str) -> dict[int, str]:
        settled = {}
        for one in leases:
            settled.update(SendLease.objects.settle(
                one.id, [Outcome(row.id, kind, error="451 4.3.2 later") for row in one.rows],
                campaign_id=original.id, worker_id="w", idempotent=True,
                attempts={row.id: row.attempts for row in one.rows}, **POLICY))
        return settled

    return original, lost, fresh, settle


@pytest.mark.parametrize("protocol", ["rows", "leases"])
@pytest.mark.parametrize("kind", [Outcome.TRANSIENT, Outcome.THROTTLED, Outcome.REFUSED])
def test_a_retry_in_doubt_answered_after_a_cancel_stays_in_doubt(protocol, kind):
    """The operator cancels while the retries are on the wire (the cancel leaves them to their
    settle); the receiver answers "not delivered" to both. That answer says nothing of the lost
    worker's attempt, which may have arrived: "resend to the rest" of the cancelled campaign
    must count that recipient in doubt and not mail it under the follow-up's own key unless
    asked to, as it does for a row the cancel itself found in doubt."""
    original, lost, fresh, settle = _retried_after_a_lost_worker(protocol)
    cancel_campaign(campaign_id=original.id)
    assert settle(kind) == {lost.id: "cancelled", fresh.id: "cancelled"}
    assert resend_audience(original).takeable == {"cancelled": 1, "in_doubt": 1}
    follow_up = create_follow_up(campaign_id=original.id)
    assert build(follow_up) == 1
    assert addresses(follow_up) == {fresh.email_lower}
