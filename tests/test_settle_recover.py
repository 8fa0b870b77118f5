"""Settling what the transport said, and recovering rows whose worker died."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from growth.models import Send, Suppression
from growth.sending.transports import Outcome
from tests.scenarios import sending_campaign, statuses

POLICY = {"max_attempts": 3, "backoff_base": 30.0, "backoff_max": 3600.0}


def settle(outcomes, worker_id="w", attempts=None, campaign_id=None):
    """Settle as the claim's holder would; ``attempts`` and ``campaign_id`` default to the rows'
    current ones."""
    if attempts is None or campaign_id is None:
        rows = Send.objects.filter(id__in=[o.send_id for o in outcomes])
        attempts = attempts or dict(rows.values_list("id", "attempts"))
        campaign_id = campaign_id or rows.values_list("campaign_id", flat=True).first()
    return Send.objects.settle(outcomes, campaign_id=campaign_id, worker_id=worker_id,
                               attempts=attempts, **POLICY)


def claim_and_hand_over(worker_id="w", batch_size=1):
    claimed = Send.objects.claim(worker_id=worker_id, batch_size=batch_size, lease=60)
    Send.objects.hand_over([row.id for row in claimed], worker_id=worker_id)
    return claimed


def expire_leases():
    Send.objects.filter(status="sending").update(
        lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))


@pytest.mark.django_db
def test_a_whole_batch_settles_in_one_statement():
    campaign = sending_campaign(count=3)
    a, b, c = Send.objects.claim(worker_id="w", batch_size=3, lease=60)
    with CaptureQueriesContext(connection) as queries:
        result = settle([Outcome(a.id, Outcome.SENT, provider_message_id="<m1@x>"),
                         Outcome(b.id, Outcome.TRANSIENT, error="451 later"),
                         Outcome(c.id, Outcome.PERMANENT, error="550 no such user")],
                        attempts={row.id: row.attempts for row in (a, b, c)},
                        campaign_id=campaign.id)
    assert len(queries) == 1
    assert result == {a.id: "sent", b.id: "queued", c.id: "failed"}
    sent, retry, failed = Send.objects.filter(campaign=campaign).order_by("id")
    assert sent.sent_at and sent.provider_message_id == "<m1@x>" and sent.lease_expires_at is None
    assert retry.next_attempt_at > timezone.now() + timezone.timedelta(seconds=20)
    assert retry.last_error == "451 later" and retry.job_id == b.job_id
    assert failed.last_error == "550 no such user" and failed.sent_at is None


@pytest.mark.django_db
def test_transient_failures_back_off_exponentially_then_fail():
    sending_campaign(count=1)
    delays = []
    for attempt in range(1, POLICY["max_attempts"] + 1):
        Send.objects.update(next_attempt_at=None)
        (row,) = Send.objects.claim(worker_id="w", batch_size=1, lease=60)
        assert row.attempts == attempt
        settle([Outcome(row.id, Outcome.TRANSIENT, error="421 busy")])
        stored = Send.objects.get()
        if stored.next_attempt_at:
            delays.append((stored.next_attempt_at - stored.updated_at).total_seconds())
    assert Send.objects.get().status == "failed"
    assert len(delays) == 2
    assert 27 <= delays[0] <= 33 and 54 <= delays[1] <= 66


@pytest.mark.django_db
def test_settle_leaves_rows_that_are_no_longer_ours_alone():
    sending_campaign(count=1)
    (row,) = claim_and_hand_over(worker_id="slow")
    expire_leases()
    Send.objects.recover_expired(idempotent=True, max_attempts=5)
    (again,) = Send.objects.claim(worker_id="fast", batch_size=1, lease=60)
    assert again.job_id == row.job_id
    assert Send.objects.hand_over([row.id], worker_id="slow") == {}  # slow must not send it
    assert settle([Outcome(row.id, Outcome.PERMANENT, error="late")], worker_id="slow") == {}
    assert settle([Outcome(row.id, Outcome.SENT)], worker_id="fast") == {row.id: "sent"}


@pytest.mark.django_db
def test_expired_lease_with_an_idempotent_receiver_is_queued_again_with_the_same_key():
    campaign = sending_campaign(count=2)
    claimed = claim_and_hand_over(worker_id="dead", batch_size=2)
    assert Send.objects.recover_expired(idempotent=True, max_attempts=5) == []  # not expired yet
    expire_leases()
    recovered = Send.objects.recover_expired(idempotent=True, max_attempts=5)
    assert sorted(row.status for row in recovered) == ["queued", "queued"]
    assert statuses(campaign) == {"queued": 2}
    again = Send.objects.claim(worker_id="alive", batch_size=2, lease=60)
    assert [r.job_id for r in again] == [r.job_id for r in claimed]
    assert [r.attempts for r in again] == [2, 2]


@pytest.mark.django_db
def test_expired_lease_with_a_plain_receiver_becomes_unknown_not_resent():
    campaign = sending_campaign(count=2)
    claim_and_hand_over(worker_id="dead", batch_size=2)
    expire_leases()
    Send.objects.recover_expired(idempotent=False, max_attempts=5)
    assert statuses(campaign) == {"unknown": 2}
    assert "lease expired while held by dead" in Send.objects.first().last_error
    assert Send.objects.claim(worker_id="alive", batch_size=2, lease=60) == []


@pytest.mark.django_db
@pytest.mark.parametrize("idempotent", [False, True])
def test_an_expired_row_never_handed_over_is_queued_again_in_any_mode(idempotent):
    campaign = sending_campaign(count=3)
    claimed = Send.objects.claim(worker_id="dead", batch_size=3, lease=60)
    Send.objects.hand_over([claimed[0].id], worker_id="dead")  # died before the other two
    expire_leases()
    Send.objects.recover_expired(idempotent=idempotent, max_attempts=5)
    expected = {"queued": 3} if idempotent else {"unknown": 1, "queued": 2}
    assert statuses(campaign) == expected
    never_sent = Send.objects.filter(id__in=[claimed[1].id, claimed[2].id])
    assert [row.attempts for row in never_sent] == [0, 0]  # that attempt never happened


@pytest.mark.django_db
def test_an_opt_out_committed_after_the_claim_is_still_honoured_at_hand_over():
    campaign = sending_campaign(count=2)
    first, second = Send.objects.claim(worker_id="w", batch_size=2, lease=60)
    Suppression.objects.suppress(account_id=campaign.account_id,
                                 email_lower=Send.objects.get(id=first.id).email_lower,
                                 reason="unsubscribed")
    handed = Send.objects.hand_over([first.id, second.id], worker_id="w")
    assert handed == {first.id: "suppressed", second.id: "sending"}
    stopped = Send.objects.get(id=first.id)
    assert stopped.handed_over_at is None and stopped.attempts == 0
    assert Send.objects.get(id=second.id).handed_over_at is not None


@pytest.mark.django_db
def test_a_new_claim_clears_the_previous_hand_over():
    sending_campaign(count=1)
    claim_and_hand_over(worker_id="dead")
    expire_leases()
    Send.objects.recover_expired(idempotent=True, max_attempts=5)
    Send.objects.update(next_attempt_at=None)
    Send.objects.claim(worker_id="next", batch_size=1, lease=60)
    assert Send.objects.get().handed_over_at is None


@pytest.mark.django_db
def test_an_idempotent_retry_that_keeps_dying_ends_unknown():
    sending_campaign(count=1)
    for _ in range(3):
        claim_and_hand_over(worker_id="dying")
        expire_leases()
        Send.objects.recover_expired(idempotent=True, max_attempts=3)
    assert Send.objects.get().status == "unknown"


@pytest.mark.django_db
def test_a_late_success_turns_our_unknown_row_into_sent():
    sending_campaign(count=1)
    (row,) = claim_and_hand_over(worker_id="slow")
    expire_leases()
    Send.objects.recover_expired(idempotent=False, max_attempts=5)
    assert settle([Outcome(row.id, Outcome.SENT, provider_message_id="p")],
                  worker_id="slow") == {row.id: "sent"}


@pytest.mark.django_db
def test_a_transient_failure_in_a_cancelled_campaign_is_not_queued_again():
    campaign = sending_campaign(count=1)
    (row,) = Send.objects.claim(worker_id="w", batch_size=1, lease=60)
    from growth.operations.campaigns import cancel_campaign

    cancel_campaign(campaign_id=campaign.id)
    settle([Outcome(row.id, Outcome.TRANSIENT, error="451")])
    assert statuses(campaign) == {"cancelled": 1}


@pytest.mark.django_db
@pytest.mark.parametrize("idempotent", [False, True])
def test_rows_of_a_cancelled_campaign_are_never_recovered_to_queued(idempotent):
    """Found by the model checker (verify/): a worker killed with rows in hand, the campaign
    cancelled, then the leases run out. Queued again, the rows would stay queued for ever, since
    nothing claims from a cancelled campaign: never handed over, they are cancelled; handed over,
    nobody knows whether they went out, and they are 'unknown'."""
    from growth.operations.campaigns import cancel_campaign

    campaign = sending_campaign(count=2)
    claimed = Send.objects.claim(worker_id="dead", batch_size=2, lease=60, hand_over=idempotent)
    if not idempotent:
        Send.objects.hand_over([claimed[0].id], worker_id="dead")
    cancel_campaign(campaign_id=campaign.id)
    expire_leases()
    Send.objects.recover_expired(idempotent=idempotent, max_attempts=5)
    assert statuses(campaign) == ({"unknown": 2} if idempotent else {"unknown": 1, "cancelled": 1})


@pytest.mark.django_db
def test_a_late_settle_of_an_earlier_attempt_by_the_same_worker_changes_nothing():
    """Found by the model checker: with an idempotent receiver a settle waits on the worker's
    settler thread. If the lease ran out meanwhile and the same worker claimed the row again, the
    late settle (same worker id, earlier attempt) must not overwrite the new attempt."""
    sending_campaign(count=1)
    (first,) = Send.objects.claim(worker_id="w", batch_size=1, lease=60, hand_over=True)
    expire_leases()
    Send.objects.recover_expired(idempotent=True, max_attempts=5)
    (second,) = Send.objects.claim(worker_id="w", batch_size=1, lease=60, hand_over=True)
    assert (first.attempts, second.attempts) == (1, 2)
    late = Outcome(first.id, Outcome.PERMANENT, error="550 from the first attempt")
    assert settle([late], worker_id="w", attempts={first.id: first.attempts}) == {}
    now = Outcome(first.id, Outcome.SENT)
    assert settle([now], worker_id="w", attempts={first.id: second.attempts}) == {first.id: "sent"}


@pytest.mark.django_db(transaction=True)
def test_a_hand_over_racing_a_recovery_leaves_the_recovered_row_alone():
    """Found by the chaos harness: the hand-over's conditions lived only in its CTE, whose
    snapshot predates a concurrent recovery, and it put a recovered row back to 'sending'
    without a lease, where nobody would ever recover it."""
    import threading

    from django.db import connection, connections, transaction

    sending_campaign(count=1)
    (row,) = Send.objects.claim(worker_id="slow", batch_size=1, lease=60)
    expire_leases()
    recovering, handed = threading.Event(), {}

    def recover_but_wait_before_commit():
        with transaction.atomic():
            Send.objects.recover_expired(idempotent=False, max_attempts=5)  # locks the row
            recovering.set()
            time.sleep(1.0)  # the hand-over below is now blocked on our row lock
        connections.close_all()

    recoverer = threading.Thread(target=recover_but_wait_before_commit)
    recoverer.start()
    recovering.wait(10)
    handed.update(Send.objects.hand_over([row.id], worker_id="slow"))
    recoverer.join()
    connection.close()
    assert handed == {}  # not ours any more: must not be sent
    stored = Send.objects.get()
    assert stored.status == "queued" and stored.handed_over_at is None
