"""The lease protocol's manager (growth/managers/leases.py) on the engine's own tables: a claim
writes no send row, a settle writes each row once with the row protocol's policy, and what a
crash, an opt-out, a cancel or an operator does to a lease. The statements' races and their
model are tests/test_bench_directions.py and tests/test_lease_protocol_stateful.py (on copies)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from growth.managers.leases import SUPPRESSED, Lease, Pacing
from growth.models import Campaign, Send, SendCursor, SendLease, Suppression
from growth.sending.transports import Outcome
from tests.scenarios import sending_campaign

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = {"retry_for": 3600.0, "backoff_base": 30.0, "backoff_max": 3600.0}


def _claim(campaign: Campaign, worker: str = "w", batch_size: int = 10, **options) -> Lease | None:
    """The claim's one lease (None: nothing was due)."""
    leases = _claim_leases(campaign, worker, batch_size, **options)
    assert len(leases) <= 1
    return leases[0] if leases else None


def _claim_leases(campaign: Campaign, worker: str = "w", batch_size: int = 10,
                  **options) -> list[Lease]:
    return SendLease.objects.claim(worker_id=worker, campaign_id=campaign.id,
                                   batch_size=batch_size, lease=60, **options)


def _settle(lease: Lease, outcomes: dict[int, str] | None = None, worker: str = "w", *,
            answered: set[int] | None = None, idempotent: bool = False) -> dict[int, str]:
    """Settle the lease: each row's outcome from ``outcomes``, else sent (or suppressed, where
    the claim found it blocked); ``answered``: only these rows have an outcome."""
    outcomes = outcomes or {}
    return SendLease.objects.settle(
        lease.id, [Outcome(row.id, outcomes.get(row.id, Outcome.SENT if row.status == "sending"
                                                 else SUPPRESSED),
                           provider_message_id=f"p-{row.id}", error="")
                   for row in lease.rows if answered is None or row.id in answered],
        campaign_id=lease.rows[0].campaign_id, worker_id=worker, idempotent=idempotent,
        attempts={row.id: row.attempts for row in lease.rows}, **POLICY)


def _expire(lease_id: int) -> None:
    SendLease.objects.filter(id=lease_id).update(expires_at=timezone.now() - timedelta(seconds=1))


def _opt_out(campaign: Campaign, send_id: int) -> None:
    Suppression.objects.suppress(account_id=campaign.account_id, reason="unsubscribed",
                                 email_lower=Send.objects.get(id=send_id).email_lower)


def _rows(campaign: Campaign) -> dict[int, tuple[str, int]]:
    return {send.id: (send.status, send.attempts)
            for send in Send.objects.filter(campaign=campaign).order_by("id")}


def test_a_built_campaign_has_its_cursor_before_its_first_row():
    campaign = sending_campaign(count=3)
    assert SendCursor.objects.get(campaign=campaign).claimed_to == 0


def test_a_claim_writes_no_send_row_and_its_settle_writes_each_row_once():
    campaign = sending_campaign(count=5)
    before = {s.id: s.updated_at for s in Send.objects.filter(campaign=campaign)}
    lease = _claim(campaign, batch_size=3)
    assert [(row.status, row.attempts) for row in lease.rows] == [("sending", 1)] * 3
    assert {row.job_id for row in lease.rows} == {f"campaign:{campaign.id}:{row.subscriber_id}"
                                                 for row in lease.rows}
    # the rows in flight stay 'queued', untouched; the lease and the cursor say who holds them
    assert {s.id: s.updated_at for s in Send.objects.filter(campaign=campaign)} == before
    assert set(_rows(campaign).values()) == {("queued", 0)}
    assert SendCursor.objects.get(campaign=campaign).claimed_to == lease.rows[-1].id
    assert [(h.worker_id, h.rows_held) for h in SendLease.objects.on_the_wire(campaign.id)] == [
        ("w", 3)]

    settled = _settle(lease)
    assert settled == {row.id: "sent" for row in lease.rows}
    sent = Send.objects.filter(id__in=settled)
    assert {(s.status, s.attempts, s.provider_message_id == f"p-{s.id}") for s in sent} == {
        ("sent", 1, True)}
    assert all(s.sent_at and s.first_attempt_at and s.claimed_by == "w" for s in sent)
    assert not SendLease.objects.exists()  # the settle ended its lease
    assert _settle(lease) == {}  # and a second settle of it writes nothing

    rest = _claim(campaign, batch_size=10)
    assert [row.id for row in rest.rows] == sorted(set(_rows(campaign)) - set(settled))
    _settle(rest)
    assert SendLease.objects.finished(campaign.id)
    assert _claim(campaign) is None


def test_the_settle_applies_the_row_protocols_policy_and_a_retry_is_due_behind_the_cursor():
    campaign = sending_campaign(count=3)
    lease = _claim(campaign)
    first, second, third = (row.id for row in lease.rows)
    settled = _settle(lease, {first: Outcome.TRANSIENT, second: Outcome.PERMANENT,
                              third: Outcome.THROTTLED})
    assert settled == {first: "queued", second: "failed", third: "queued"}
    rows = {s.id: s for s in Send.objects.filter(campaign=campaign)}
    assert rows[first].attempts == 1 and rows[third].attempts == 0  # a throttle is not an attempt
    now = timezone.now()
    assert timedelta(seconds=25) < rows[first].next_attempt_at - now < timedelta(seconds=35)
    assert timedelta(0) < rows[third].next_attempt_at - now < timedelta(seconds=2)
    assert not SendLease.objects.finished(campaign.id)
    assert _claim(campaign) is None  # neither is due yet

    Send.objects.filter(id__in=[first, third]).update(next_attempt_at=now - timedelta(seconds=1))
    again = _claim(campaign)
    assert {(row.id, row.attempts) for row in again.rows} == {(first, 2), (third, 1)}
    assert _settle(again) == {first: "sent", third: "sent"}
    assert Send.objects.get(id=first).next_attempt_at is None
    assert SendLease.objects.finished(campaign.id)


def test_an_opt_out_found_by_the_claim_or_the_hand_over_is_written_suppressed_and_never_sent():
    campaign = sending_campaign(count=3)
    first, second, third = sorted(_rows(campaign))
    _opt_out(campaign, first)
    lease = _claim(campaign)
    assert {row.id: row.status for row in lease.rows} == {first: SUPPRESSED, second: "sending",
                                                          third: "sending"}
    _opt_out(campaign, second)
    handed = SendLease.objects.hand_over(lease.id, worker_id="w")
    assert handed == {first: SUPPRESSED, second: SUPPRESSED, third: "sending"}
    assert SendLease.objects.get(id=lease.id).handed_over_at is not None
    settled = _settle(lease, {second: SUPPRESSED})
    assert settled == {first: "suppressed", second: "suppressed", third: "sent"}
    assert _rows(campaign) == {first: ("suppressed", 0), second: ("suppressed", 0),
                               third: ("sent", 1)}


def test_a_dead_workers_lease_is_taken_over_whole_and_its_late_settle_writes_nothing():
    campaign = sending_campaign(count=4)
    dead = _claim(campaign, worker="dead", batch_size=2)
    _expire(dead.id)
    assert SendLease.objects.recover(idempotent=False, max_attempts=5).freed == 1
    taken = _claim(campaign, worker="w", batch_size=10)
    assert [row.job_id for row in taken.rows] == [row.job_id for row in dead.rows]  # same keys
    assert taken.id != dead.id
    assert _settle(dead, worker="dead") == {}  # no longer its claim
    assert _settle(taken) == {row.id: "sent" for row in dead.rows}


def test_a_plain_receivers_lease_that_expires_after_its_hand_over_ends_unknown_until_it_says_sent():
    campaign = sending_campaign(count=2)
    lease = _claim(campaign, worker="slow")
    assert SendLease.objects.hand_over(lease.id, worker_id="slow")
    assert SendLease.objects.hand_over(lease.id, worker_id="other") == {}  # not its lease
    _expire(lease.id)
    recovery = SendLease.objects.recover(idempotent=False, max_attempts=5)
    assert (recovery.lost, recovery.unknown) == (1, 2)
    assert set(_rows(campaign).values()) == {("unknown", 0)}
    assert SendLease.objects.finished(campaign.id)
    # the slow worker's answer comes after all: what was accepted is known sent
    assert _settle(lease, worker="slow") == {row.id: "sent" for row in lease.rows}


def test_an_operators_requeue_is_due_at_once_and_reopens_a_finished_campaign():
    campaign = sending_campaign(count=2)
    lease = _claim(campaign, worker="dead")
    SendLease.objects.hand_over(lease.id, worker_id="dead")
    _expire(lease.id)
    SendLease.objects.recover(idempotent=False, max_attempts=5)
    Campaign.objects.filter(id=campaign.id).update(status="sent")
    requeued = SendLease.objects.requeue_unknown([row.id for row in lease.rows])
    assert {(r.id, r.reopened) for r in requeued} == {(row.id, True) for row in lease.rows}
    assert Campaign.objects.get(id=campaign.id).status == "sending"
    again = _claim(campaign)
    assert [row.id for row in again.rows] == [row.id for row in lease.rows]
    assert _settle(again) == {row.id: "sent" for row in lease.rows}


def test_a_cancel_leaves_the_wire_to_its_settle_and_a_released_lease_of_it_ends_cancelled():
    campaign = sending_campaign(count=6)
    on_the_wire = _claim(campaign, worker="a", batch_size=2)
    given_back = _claim(campaign, worker="b", batch_size=2)
    Campaign.objects.filter(id=campaign.id).update(status="cancelled")
    cancelled = SendLease.objects.cancel_rows(campaign.id)
    assert len(cancelled) == 2  # the rows no worker holds
    released = SendLease.objects.release(given_back.id, campaign_id=campaign.id, worker_id="b",
                                         idempotent=False)
    assert (released.freed, released.cancelled) == (0, 2)
    transient = on_the_wire.rows[0].id
    assert _settle(on_the_wire, {transient: Outcome.TRANSIENT}, worker="a") == {
        transient: "cancelled", on_the_wire.rows[1].id: "sent"}
    assert SendLease.objects.finished(campaign.id)
    assert not SendLease.objects.exists()


def test_a_paced_destination_without_tokens_is_set_aside_and_taken_as_its_share_allows():
    campaign = sending_campaign(count=6)
    ids = sorted(_rows(campaign))
    Send.objects.filter(id__in=ids[::2]).update(destination_id=7)
    paced = _claim(campaign, batch_size=10, pacing=Pacing(shares={7: 0}, scan=10))
    assert [row.id for row in paced.rows] == ids[1::2]
    set_aside = Send.objects.filter(id__in=ids[::2])
    assert all(s.status == "queued" and s.next_attempt_at for s in set_aside)
    _settle(paced)
    share = _claim(campaign, batch_size=10, pacing=Pacing(shares={7: 2}, scan=10))
    assert [row.id for row in share.rows] == ids[0:4:2]


def test_a_claim_cut_into_chunks_gives_each_its_lease_handed_over_and_settled_on_its_own():
    campaign = sending_campaign(count=7)
    chunks = _claim_leases(campaign, batch_size=7, chunk_size=3)
    assert [[row.id for row in lease.rows] for lease in chunks] == [
        sorted(_rows(campaign))[i:i + 3] for i in (0, 3, 6)]
    assert len({lease.id for lease in chunks}) == 3
    first, second, last = chunks
    assert SendLease.objects.hand_over(first.id, worker_id="w")
    assert SendLease.objects.get(id=second.id).handed_over_at is None  # not yet on a wire
    assert _settle(first) == {row.id: "sent" for row in first.rows}
    assert SendLease.objects.count() == 2
    _settle(second), _settle(last)
    assert SendLease.objects.finished(campaign.id)


@pytest.mark.parametrize("idempotent, handed, cancelled, becomes", [
    (False, True, False, ("unknown", False)),  # a plain receiver may have taken it: in doubt
    (True, True, False, ("queued", True)),  # the receiver de-duplicates: due again, same key
    (False, False, False, ("queued", True)),  # never on a wire: due again
    (False, False, True, ("cancelled", False)),
    (True, True, True, ("unknown", False)),  # handed over, and nothing will send it again
])
def test_a_row_its_settle_has_no_outcome_for_is_judged_as_recovery_would_never_left_behind(
        idempotent, handed, cancelled, becomes):
    campaign = sending_campaign(count=2)
    lease = _claim(campaign)
    if handed:
        SendLease.objects.hand_over(lease.id, worker_id="w")
    if cancelled:
        Campaign.objects.filter(id=campaign.id).update(status="cancelled")
    answered, unanswered = (row.id for row in lease.rows)
    assert _settle(lease, answered={answered}, idempotent=idempotent) == {answered: "sent"}
    row = Send.objects.get(id=unanswered)
    assert (row.status, row.next_attempt_at is not None) == becomes
    assert row.attempts == 0 and row.last_error == "no outcome recorded for this attempt"
    if becomes[1]:  # due again: the next claim takes it, under the same job id
        again = _claim(campaign)
        assert [r.id for r in again.rows] == [unanswered]
    else:
        assert SendLease.objects.finished(campaign.id)
