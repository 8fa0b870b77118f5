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

POLICY = {"retry_for": 3600, "backoff_base": 30.0, "backoff_max": 3600.0}


def sent_statements(queries) -> list[str]:
    """The statements that went to the server, less the PREPARE a statement's first use on a
    connection sends before it (once)."""
    return [query["sql"] for query in queries if not query["sql"].startswith("PREPARE ")]


def settle(outcomes, worker_id="w", attempts=None, campaign_id=None):
    """Settle as the claim's holder would; ``attempts`` and ``campaign_id`` default to the rows'
    current ones."""
    if attempts is None or campaign_id is None:
        rows = Send.objects.filter(id__in=[o.send_id for o in outcomes])
        attempts = attempts or dict(rows.values_list("id", "attempts"))
        campaign_id = campaign_id or rows.values_list("campaign_id", flat=True).first()
    return Send.objects.settle(outcomes, campaign_id=campaign_id, worker_id=worker_id,
                               attempts=attempts, **POLICY)


def hand_over(rows, *, worker_id: str) -> dict[int, str]:
    return Send.objects.hand_over(rows, worker_id=worker_id)


def claim_and_hand_over(worker_id="w", batch_size=1):
    claimed = Send.objects.claim(worker_id=worker_id, batch_size=batch_size, lease=60)
    hand_over(claimed, worker_id=worker_id)
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
    assert len(sent_statements(queries)) == 1
    assert result == {a.id: "sent", b.id: "queued", c.id: "failed"}
    sent, retry, failed = Send.objects.filter(campaign=campaign).order_by("id")
    assert sent.sent_at and sent.provider_message_id == "<m1@x>" and sent.lease_expires_at is None
    assert retry.next_attempt_at > timezone.now() + timezone.timedelta(seconds=20)
    assert retry.last_error == "451 later" and retry.job_id == b.job_id
    assert failed.last_error == "550 no such user" and failed.sent_at is None


@pytest.mark.django_db
def test_a_wire_settles_its_last_chunk_and_hands_over_its_next_in_one_round_trip():
    campaign = sending_campaign(count=3)
    a, b, c = Send.objects.claim(worker_id="w", batch_size=3, lease=60)
    hand_over([a], worker_id="w")
    Suppression.objects.suppress(account_id=campaign.account_id, email_lower=c.email.lower(),
                                 reason="unsubscribed")  # opted out since the claim
    with CaptureQueriesContext(connection) as queries:
        settled, handed = Send.objects.settle_and_hand_over(
            [Outcome(a.id, Outcome.SENT, provider_message_id="<m1@x>")], [b, c],
            campaign_id=campaign.id, worker_id="w",
            attempts={row.id: row.attempts for row in (a, b, c)}, **POLICY)
    assert len(sent_statements(queries)) == 1
    assert settled == {a.id: "sent"} and handed == {b.id: "sending", c.id: "suppressed"}
    assert statuses(campaign) == {"sent": 1, "sending": 1, "suppressed": 1}
    assert Send.objects.get(id=b.id).handed_over_at is not None


@pytest.mark.django_db(transaction=True)
def test_the_settle_and_the_next_hand_over_commit_together_or_not_at_all():
    campaign = sending_campaign(count=1)
    (a,) = Send.objects.claim(worker_id="w", batch_size=1, lease=60)
    hand_over([a], worker_id="w")
    with pytest.raises(Exception, match="invalid input syntax"):  # fails after the settle ran
        Send.objects.settle_and_hand_over(
            [Outcome(a.id, Outcome.SENT)], [a._replace(id="not an id")], campaign_id=campaign.id,
            worker_id="w", attempts={a.id: a.attempts}, **POLICY)
    assert statuses(campaign) == {"sending": 1}  # the settle was rolled back with it
    assert settle([Outcome(a.id, Outcome.SENT)]) == {a.id: "sent"}


@pytest.mark.django_db
def test_transient_failures_back_off_exponentially_until_the_retry_horizon_then_fail():
    sending_campaign(count=1)
    delays = []
    for attempt in range(1, 5):
        Send.objects.update(next_attempt_at=None)
        (row,) = claim_and_hand_over()
        assert row.attempts == attempt
        settle([Outcome(row.id, Outcome.TRANSIENT, error="421 busy")])
        stored = Send.objects.get()
        assert stored.status == "queued"  # four attempts: attempts alone never fail a row
        delays.append((stored.next_attempt_at - stored.updated_at).total_seconds())
    for doubling, delay in enumerate(delays):  # 30 s doubling, +-10% jitter
        assert 0.89 * 30 * 2 ** doubling <= delay <= 1.11 * 30 * 2 ** doubling
    first = Send.objects.get().first_attempt_at
    assert first is not None
    # the horizon (retry_for after the first attempt) passes: the next transient answer fails it.
    # A second past it: the claim stamps its own statement's time (sends.sql, _claim_mark),
    # while this test's one transaction settles at now(), its start, frozen before every claim
    # here (a worker's settle is a later transaction than its claim: never earlier than that)
    Send.objects.update(next_attempt_at=None, first_attempt_at=first - timezone.timedelta(
        seconds=POLICY["retry_for"] + 1))
    (row,) = claim_and_hand_over()
    settle([Outcome(row.id, Outcome.TRANSIENT, error="421 busy")])
    failed = Send.objects.get()
    assert failed.status == "failed" and failed.attempts == 5 and failed.last_error == "421 busy"


@pytest.mark.django_db
def test_the_first_attempt_is_when_the_message_first_went_on_the_wire():
    sending_campaign(count=1)
    (row,) = Send.objects.claim(worker_id="w", batch_size=1, lease=60)
    assert Send.objects.get().first_attempt_at is None  # claimed, not yet handed over
    hand_over([row], worker_id="w")
    first = Send.objects.get().first_attempt_at
    settle([Outcome(row.id, Outcome.TRANSIENT, error="451 later")])
    Send.objects.update(next_attempt_at=None)
    claim_and_hand_over()
    assert Send.objects.get().first_attempt_at == first  # kept across attempts


@pytest.mark.django_db
def test_a_throttle_queues_the_row_again_without_an_attempt_counted():
    sending_campaign(count=2)
    a, b = claim_and_hand_over(batch_size=2)
    result = settle([Outcome(a.id, Outcome.THROTTLED, error="421 4.7.28 unusual rate",
                             throttle_scope=Outcome.DESTINATION),
                     Outcome(b.id, Outcome.THROTTLED, error="429 Too Many Requests",
                             throttle_scope=Outcome.TRANSPORT, retry_after=120.0)])
    assert result == {a.id: "queued", b.id: "queued"}
    first, second = Send.objects.order_by("id")
    assert first.attempts == second.attempts == 0
    assert first.handed_over_at is None and first.lease_expires_at is None  # known not delivered
    assert 0 < (first.next_attempt_at - first.updated_at).total_seconds() <= 2  # throttle_delay
    assert (second.next_attempt_at - second.updated_at).total_seconds() == pytest.approx(120)
    assert first.last_error == "421 4.7.28 unusual rate"


@pytest.mark.django_db
def test_a_throttle_past_the_retry_horizon_fails_the_row_and_a_permanent_answer_at_once():
    sending_campaign(count=2)
    a, b = claim_and_hand_over(batch_size=2)
    Send.objects.filter(id=a.id).update(
        first_attempt_at=timezone.now() - timezone.timedelta(seconds=POLICY["retry_for"] + 1))
    result = settle([Outcome(a.id, Outcome.THROTTLED, error="421 4.7.28 unusual rate",
                             throttle_scope=Outcome.DESTINATION),
                     Outcome(b.id, Outcome.PERMANENT, error="550 5.1.1 no such user")])
    assert result == {a.id: "failed", b.id: "failed"}


@pytest.mark.django_db
def test_a_stale_claim_of_the_same_worker_cannot_hand_over_or_release_its_new_claims_rows():
    """A row never handed over whose lease ran out is queued again with its attempt given back,
    so the worker that held it may claim it again at the same attempt. The stale claim (a wire
    that stalled past its lease) must not send it beside the new one: the lease names the claim."""
    campaign = sending_campaign(count=1)
    (first,) = Send.objects.claim(worker_id="w", batch_size=1, lease=60)
    expire_leases()
    assert [r.status for r in Send.objects.recover_expired(idempotent=False, max_attempts=5)] == [
        "queued"]
    (second,) = Send.objects.claim(worker_id="w", batch_size=1, lease=60)
    assert (first.id, first.attempts) == (second.id, second.attempts)
    assert hand_over([first], worker_id="w") == {}
    assert Send.objects.release([first], campaign_id=campaign.id, worker_id="w",
                                idempotent=True) == []
    assert hand_over([second], worker_id="w") == {second.id: "sending"}


@pytest.mark.django_db
def test_settle_leaves_rows_that_are_no_longer_ours_alone():
    sending_campaign(count=1)
    (row,) = claim_and_hand_over(worker_id="slow")
    expire_leases()
    Send.objects.recover_expired(idempotent=True, max_attempts=5)
    (again,) = Send.objects.claim(worker_id="fast", batch_size=1, lease=60)
    assert again.job_id == row.job_id
    assert hand_over([row], worker_id="slow") == {}  # slow must not send it
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
    hand_over([claimed[0]], worker_id="dead")  # died before the other two
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
    handed = hand_over([first, second], worker_id="w")
    assert handed == {first.id: "suppressed", second.id: "sending"}
    stopped = Send.objects.get(id=first.id)
    assert stopped.handed_over_at is None and stopped.attempts == 0
    assert Send.objects.get(id=second.id).handed_over_at is not None


@pytest.mark.django_db(transaction=True)  # each statement at its own time, as in a worker
@pytest.mark.parametrize("outcome", [Outcome.TRANSIENT, Outcome.THROTTLED, Outcome.REFUSED])
@pytest.mark.parametrize("receiver", ["plain", "idempotent"])
def test_a_row_in_doubt_stays_in_doubt_through_an_attempt_that_failed(outcome, receiver):
    """Handed to a receiver that de-duplicates and its worker lost, the row may have arrived.
    A later attempt that did not deliver it says nothing of that one: queued again, the row is
    still in doubt, and no follow-up (another key) may take it as never reached."""
    sending_campaign(count=1)
    claim_and_hand_over(worker_id="dead")
    expire_leases()
    Send.objects.recover_expired(idempotent=True, max_attempts=5)
    lost = Send.objects.get().handed_over_at
    Send.objects.update(next_attempt_at=None)
    claimed = Send.objects.claim(worker_id="next", batch_size=1, lease=60,
                                 hand_over=receiver == "idempotent")
    if receiver == "plain":
        hand_over(claimed, worker_id="next")
    assert Send.objects.get().handed_over_at == lost  # that hand-over's, not this one's
    settle([Outcome(claimed[0].id, outcome, error="451 4.3.0 try later")], worker_id="next")
    row = Send.objects.get()
    assert (row.status, row.handed_over_at) == ("queued", lost)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("outcome", [Outcome.TRANSIENT, Outcome.THROTTLED, Outcome.REFUSED])
def test_an_attempt_that_failed_clears_its_own_hand_over(outcome):
    sending_campaign(count=1)
    claimed = claim_and_hand_over(worker_id="w")
    assert Send.objects.get().handed_over_at is not None
    settle([Outcome(claimed[0].id, outcome, error="451 4.3.0 try later")])
    row = Send.objects.get()
    assert (row.status, row.handed_over_at) == ("queued", None)  # known not delivered


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
        hand_over([claimed[0]], worker_id="dead")
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
    handed.update(hand_over([row], worker_id="slow"))
    recoverer.join()
    connection.close()
    assert handed == {}  # not ours any more: must not be sent
    stored = Send.objects.get()
    assert stored.status == "queued" and stored.handed_over_at is None


@pytest.mark.django_db(transaction=True)  # each statement at its own time, as in a worker
@pytest.mark.parametrize("given_back", ["refused", "unsent", "released unsent"])
@pytest.mark.parametrize("receiver", ["plain", "idempotent"])
def test_an_attempt_given_back_keeps_the_retry_horizon_an_earlier_attempt_started(given_back,
                                                                                  receiver):
    """A throttle gives its attempt back but the message did go on the wire: the retry horizon
    runs from then. A later first-numbered attempt that is refused, never sent, or released
    unsent, is no attempt, and must not restart that horizon."""
    campaign = sending_campaign(count=1)
    claim_and_hand_over(worker_id="w")
    (row,) = Send.objects.all()
    settle([Outcome(row.id, Outcome.THROTTLED, error="421 4.7.28 slow down",
                    throttle_scope=Outcome.DESTINATION)])
    started = timezone.now() - timezone.timedelta(hours=1)
    Send.objects.update(next_attempt_at=None, first_attempt_at=started)
    claimed = Send.objects.claim(worker_id="w", batch_size=1, lease=60,
                                 hand_over=receiver == "idempotent")
    if receiver == "plain" and given_back == "refused":
        hand_over(claimed, worker_id="w")
    assert claimed[0].attempts == 1
    if given_back == "released unsent":
        assert Send.objects.release(claimed, campaign_id=campaign.id, worker_id="w",
                                    idempotent=receiver == "idempotent", unsent=True)
    else:
        settle([Outcome(row.id, given_back, error="535 5.7.8 no" if given_back == "refused"
                        else "not sent: the claim's lease ran out")])
    after = Send.objects.get()
    assert (after.status, after.attempts, after.first_attempt_at) == ("queued", 0, started)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("given_back", ["refused", "unsent", "released unsent"])
def test_a_first_attempt_given_back_leaves_no_retry_horizon(given_back):
    campaign = sending_campaign(count=1)
    claimed = Send.objects.claim(worker_id="w", batch_size=1, lease=60, hand_over=True)
    assert Send.objects.get().first_attempt_at is not None
    if given_back == "released unsent":
        Send.objects.release(claimed, campaign_id=campaign.id, worker_id="w", idempotent=True,
                             unsent=True)
    else:
        settle([Outcome(claimed[0].id, given_back, error="not sent")])
    assert Send.objects.get().first_attempt_at is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("given_back", ["unsent", "refused", "released unsent"])
def test_a_claim_whose_transaction_began_before_an_earlier_attempt_keeps_its_doubt(
        given_back):
    """The pacer claims inside a transaction begun before it waited for the destinations'
    buckets (pacer.claim, `held`): its now(), the updated_at it writes, can be older than a
    hand-over another worker made meanwhile. Settled unsent (the window closed) or refused, the
    row then loses that earlier hand-over (no longer in doubt: a follow-up takes it as never
    reached and mails it under another key) and its retry horizon (found by review)."""
    import threading

    from django.db import transaction

    sending_campaign(count=1)
    with transaction.atomic():  # worker b's paced claim: its transaction starts here ...
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
        time.sleep(0.05)

        def worker_a():  # ... while worker a sends the row, to a receiver that de-duplicates
            try:
                (row,) = Send.objects.claim(worker_id="a", batch_size=1, lease=60, hand_over=True)
                settle([Outcome(row.id, Outcome.IN_DOUBT_RETRIED, error="timed out")],
                       worker_id="a")
                Send.objects.update(next_attempt_at=None)  # its backoff ran out
            finally:
                connection.close()

        thread = threading.Thread(target=worker_a)
        thread.start()
        thread.join()
        before = Send.objects.get()
        assert before.status == "queued" and before.handed_over_at is not None  # in doubt
        (claimed,) = Send.objects.claim(worker_id="b", batch_size=1, lease=60, hand_over=True)
    if given_back == "released unsent":
        assert Send.objects.release([claimed], campaign_id=claimed.campaign_id, worker_id="b",
                                    idempotent=True, unsent=True)
    else:
        settle([Outcome(claimed.id, given_back, error="not sent")], worker_id="b")

    after = Send.objects.get()
    assert after.status == "queued"
    assert after.handed_over_at == before.handed_over_at, "the earlier attempt's doubt was lost"
    assert after.first_attempt_at == before.first_attempt_at, "its retry horizon was restarted"
