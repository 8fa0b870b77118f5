"""An operator's "retry unknown rows" racing the late settle of the same row.

A worker hands a row over, stalls past its lease, recovery makes the row 'unknown' (plain
receiver); the operator retries it (same job id) while the stalled worker finally gets the
provider's answer, 'sent', and settles. Whichever commits first, the answer is recorded and the
row is not sent a second time, unless a claim took it before the answer came (the duplicate the
operator accepted). Both protocols, real connections in real threads."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction

from growth.models import Send, SendLease, SendTally
from growth.operations.unknown_sends import retry_unknown
from growth.sending.transports import Outcome
from tests.helpers import concurrently, waiting_on_a_lock
from tests.scenarios import sending_campaign
from tests.test_leases import _claim, _expire, _settle
from tests.test_settle_recover import claim_and_hand_over, expire_leases, settle

pytestmark = pytest.mark.django_db(transaction=True)

PROTOCOLS = ["rows", "leases"]


def _lost_row(protocol: str):
    """One row handed to a plain receiver by worker 'slow', whose lease then expired: 'unknown'.
    Returns (send id, a function that delivers slow's late 'sent' and returns what it wrote)."""
    if protocol == "rows":
        sending_campaign(count=1)
        (row,) = claim_and_hand_over(worker_id="slow")
        expire_leases()
        assert {r.status for r in Send.objects.recover_expired(idempotent=False,
                                                               max_attempts=5)} == {"unknown"}

        def late_sent() -> dict[int, str]:
            return settle([Outcome(row.id, Outcome.SENT, provider_message_id="late-p")],
                          worker_id="slow", attempts={row.id: row.attempts},
                          campaign_id=row.campaign_id)

        return row.id, late_sent
    campaign = sending_campaign(count=1, leases=True)
    lease = _claim(campaign, worker="slow")
    assert SendLease.objects.hand_over(lease.id, worker_id="slow")
    _expire(lease.id)
    assert SendLease.objects.recover(idempotent=False, max_attempts=5).unknown == 1

    def late_sent() -> dict[int, str]:
        return _settle(lease, worker="slow")

    return lease.rows[0].id, late_sent


def _claim_again(send_id: int, protocol: str) -> list[int]:
    """What another worker's claim takes now (ids), settled 'sent' at once."""
    campaign_id = Send.objects.get(id=send_id).campaign_id
    if protocol == "rows":
        rows = Send.objects.claim(worker_id="next", batch_size=10, lease=60)
        if rows:
            settle([Outcome(r.id, Outcome.SENT, provider_message_id="again") for r in rows],
                   worker_id="next", attempts={r.id: r.attempts for r in rows},
                   campaign_id=campaign_id)
        return [r.id for r in rows]
    lease = SendLease.objects.claim(worker_id="next", campaign_id=campaign_id, batch_size=10,
                                    lease=60)
    ids = [r.id for one in lease for r in one.rows]
    for one in lease:
        _settle(one, worker="next")
    return ids


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_late_sent_settled_before_the_retry_wins_and_the_retry_moves_nothing(protocol):
    """Order 1 (settle first): recorded once, never requeued, counted once."""
    send_id, late_sent = _lost_row(protocol)
    assert late_sent() == {send_id: "sent"}
    review = retry_unknown(send_ids=[send_id])
    assert review.changed == 0 and review.skipped == {"sent, not unknown": 1}
    assert _claim_again(send_id, protocol) == []
    row = Send.objects.get(id=send_id)
    late_id = f"p-{send_id}" if protocol == "leases" else "late-p"  # as each helper answers
    assert (row.status, row.attempts, row.provider_message_id) == ("sent", 1, late_id)
    assert SendTally.objects.differences([row.campaign_id]) == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_late_sent_that_arrives_while_the_operators_retry_commits_is_not_lost(protocol):
    """Order 2 (the retry's transaction holds the campaign's lock; the late settle waits on it,
    then runs): the provider said 'sent', so the row must end 'sent' and not be sent again."""
    send_id, late_sent = _lost_row(protocol)
    retried, release, result = threading.Event(), threading.Event(), {}

    def operator() -> None:
        try:
            with transaction.atomic():
                result["review"] = retry_unknown(send_ids=[send_id])
                retried.set()
                release.wait(15)  # committed once the late settle waits on its locks
        finally:
            connections.close_all()

    def slow_worker() -> None:
        try:
            retried.wait(15)
            result["late"] = late_sent()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=operator), threading.Thread(target=slow_worker)]
    for thread in threads:
        thread.start()
    retried.wait(15)
    settle_waited = waiting_on_a_lock()  # seen from this thread's own connection
    release.set()
    for thread in threads:
        thread.join(30)
    assert result["review"].changed == 1 and settle_waited  # a real overlap
    resent = _claim_again(send_id, protocol)
    row = Send.objects.get(id=send_id)
    assert SendTally.objects.differences([row.campaign_id]) == []
    # what the worker was told by its provider is on the row, and nobody sends it a second time
    assert result["late"] == {send_id: "sent"}, (
        f"late 'sent' dropped: settle wrote {result['late']}, the row was then claimed again "
        f"({resent}) and ended {row.status} with provider id {row.provider_message_id!r}")
    assert resent == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retry_and_late_settle_released_together_never_double_count(protocol):
    """Released at one instant, 8 times: whichever goes first, the row ends 'sent' once, with
    the tallies equal to the rows and one attempt per claim (on leases a claim lost to recovery
    is never counted: 1), and a row the late settle made 'sent' is never sent again."""
    for _ in range(8):
        send_id, late_sent = _lost_row(protocol)
        review, late = concurrently(2, lambda i, send_id=send_id, late_sent=late_sent: (
            retry_unknown(send_ids=[send_id]) if i == 0 else late_sent()))
        assert review.changed or late  # serialized on the campaign's lock
        resent = _claim_again(send_id, protocol)
        row = Send.objects.get(id=send_id)
        assert row.status == "sent"
        assert not (late and resent)  # recorded 'sent', never claimed and sent again
        assert SendTally.objects.differences([row.campaign_id]) == []
        assert row.attempts == (1 if late or protocol == "leases" else 2)
