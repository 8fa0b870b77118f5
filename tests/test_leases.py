"""The lease protocol's manager (growth/managers/leases.py) on the engine's own tables: a claim
writes no send row, a settle writes each row once with the row protocol's policy, and what a
crash, an opt-out, a cancel or an operator does to a lease. The statements' races and their
model are tests/test_bench_directions.py and tests/test_lease_protocol_stateful.py (on copies)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from growth.managers.leases import SUPPRESSED, Lease, LeaseHandOver, Pacing
from growth.models import (
    Campaign,
    Destination,
    RateLimit,
    Send,
    SendCursor,
    SendLease,
    Suppression,
    WorkerHeartbeat,
)
from growth.sending.transports import Outcome
from tests.helpers import concurrently, waiting_on_a_lock
from tests.scenarios import sending_campaign

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = {"retry_for": 3600.0, "backoff_base": 30.0, "backoff_max": 3600.0}


def leased_campaign(count: int) -> Campaign:
    return sending_campaign(count=count, leases=True)


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


def _queued(campaign: Campaign) -> bool:
    """Some row is still to send (a row in flight, in a free lease or due again is queued)."""
    return Send.objects.filter(campaign=campaign, status="queued").exists()


def _rows(campaign: Campaign) -> dict[int, tuple[str, int]]:
    return {send.id: (send.status, send.attempts)
            for send in Send.objects.filter(campaign=campaign).order_by("id")}


def test_a_campaign_built_for_the_lease_protocol_has_its_cursor_before_its_first_row():
    campaign = leased_campaign(count=3)
    assert SendCursor.objects.get(campaign=campaign).claimed_to == 0
    rows = sending_campaign(count=3)  # the row protocol's
    assert not SendCursor.objects.filter(campaign=rows).exists()
    assert {c.campaign_id: c.leases for c in Campaign.objects.sending()} == {campaign.id: True,
                                                                            rows.id: False}


def test_a_claim_writes_no_send_row_and_its_settle_writes_each_row_once():
    campaign = leased_campaign(count=5)
    before = {s.id: s.updated_at for s in Send.objects.filter(campaign=campaign)}
    lease = _claim(campaign, batch_size=3)
    assert [(row.status, row.attempts) for row in lease.rows] == [("sending", 1)] * 3
    assert {row.job_id for row in lease.rows} == {f"campaign:{campaign.id}:{row.subscriber_id}"
                                                 for row in lease.rows}
    # the rows in flight stay 'queued', untouched; the lease and the cursor say who holds them
    assert {s.id: s.updated_at for s in Send.objects.filter(campaign=campaign)} == before
    assert set(_rows(campaign).values()) == {("queued", 0)}
    assert SendCursor.objects.get(campaign=campaign).claimed_to == lease.rows[-1].id
    # the admin's count of rows on the wire reads the leases
    assert [(h.worker_id, h.rows_held) for h in WorkerHeartbeat.objects.holders_of(
        campaign_id=campaign.id)] == [("w", 3)]
    assert WorkerHeartbeat.objects.held()["w"].rows_held == 3

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
    assert not _queued(campaign)
    assert _claim(campaign) is None


def test_the_settle_applies_the_row_protocols_policy_and_a_retry_is_due_behind_the_cursor():
    campaign = leased_campaign(count=3)
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
    assert _queued(campaign)
    assert _claim(campaign) is None  # neither is due yet

    Send.objects.filter(id__in=[first, third]).update(next_attempt_at=now - timedelta(seconds=1))
    again = _claim(campaign)
    assert {(row.id, row.attempts) for row in again.rows} == {(first, 2), (third, 1)}
    assert _settle(again) == {first: "sent", third: "sent"}
    assert Send.objects.get(id=first).next_attempt_at is None
    assert not _queued(campaign)


def test_an_opt_out_found_by_the_claim_or_the_hand_over_is_written_suppressed_and_never_sent():
    campaign = leased_campaign(count=3)
    first, second, third = sorted(_rows(campaign))
    _opt_out(campaign, first)
    lease = _claim(campaign)
    assert {row.id: row.status for row in lease.rows} == {first: SUPPRESSED, second: "sending",
                                                          third: "sending"}
    _opt_out(campaign, second)
    handed = SendLease.objects.hand_over(lease.id, worker_id="w")
    assert handed == {first: SUPPRESSED, second: SUPPRESSED, third: "sending"}
    assert SendLease.objects.get(id=lease.id).handed_over_at is not None
    # written by the hand-over: a crash before the settle leaves them suppressed, not in doubt
    assert _rows(campaign) == {first: ("suppressed", 0), second: ("suppressed", 0),
                               third: ("queued", 0)}
    settled = _settle(lease, {second: SUPPRESSED})
    assert settled == {third: "sent"}
    assert _rows(campaign) == {first: ("suppressed", 0), second: ("suppressed", 0),
                               third: ("sent", 1)}


def test_a_plain_hand_over_writes_the_claims_opt_outs_though_none_came_since():
    """No opt-out of the tenant since the claim, but the hand-over still writes what the claim
    found, so that a crash before the settle leaves it suppressed, not in doubt (it does not trust
    the opt-out clock as the look of a receiver that de-duplicates does)."""
    campaign = leased_campaign(count=2)
    blocked, sent = sorted(_rows(campaign))
    _opt_out(campaign, blocked)
    lease = _claim(campaign, worker="dead")
    assert SendLease.objects.hand_over(lease.id, worker_id="dead") == {blocked: SUPPRESSED,
                                                                      sent: "sending"}
    assert _rows(campaign)[blocked] == ("suppressed", 0)


def test_a_plain_receivers_lease_recovered_after_its_hand_over_leaves_its_opt_outs_suppressed():
    campaign = leased_campaign(count=2)
    blocked, sent = sorted(_rows(campaign))
    lease = _claim(campaign, worker="dead")
    _opt_out(campaign, blocked)
    SendLease.objects.hand_over(lease.id, worker_id="dead")
    _expire(lease.id)
    assert SendLease.objects.recover(idempotent=False, max_attempts=5).unknown == 1
    assert _rows(campaign) == {blocked: ("suppressed", 0), sent: ("unknown", 0)}


def test_a_dead_workers_lease_is_taken_over_whole_and_its_late_settle_writes_nothing():
    campaign = leased_campaign(count=4)
    dead = _claim(campaign, worker="dead", batch_size=2)
    _expire(dead.id)
    assert SendLease.objects.recover(idempotent=False, max_attempts=5).freed == 1
    taken = _claim(campaign, worker="w", batch_size=10)
    assert [row.job_id for row in taken.rows] == [row.job_id for row in dead.rows]  # same keys
    assert taken.id != dead.id
    assert _settle(dead, worker="dead") == {}  # no longer its claim
    assert _settle(taken) == {row.id: "sent" for row in dead.rows}


def test_a_plain_receivers_lease_that_expires_after_its_hand_over_ends_unknown_until_it_says_sent():
    campaign = leased_campaign(count=2)
    lease = _claim(campaign, worker="slow")
    assert SendLease.objects.hand_over(lease.id, worker_id="slow")
    assert SendLease.objects.hand_over(lease.id, worker_id="other") == {}  # not its lease
    _expire(lease.id)
    recovery = SendLease.objects.recover(idempotent=False, max_attempts=5)
    assert (recovery.lost, recovery.unknown) == (1, 2)
    assert set(_rows(campaign).values()) == {("unknown", 0)}
    assert not _queued(campaign)
    # the slow worker's answer comes after all: what was accepted is known sent
    assert _settle(lease, worker="slow") == {row.id: "sent" for row in lease.rows}


def test_an_operators_retry_is_due_behind_the_cursor_and_reopens_a_finished_campaign():
    campaign = leased_campaign(count=2)
    lease = _claim(campaign, worker="dead")
    SendLease.objects.hand_over(lease.id, worker_id="dead")
    _expire(lease.id)
    SendLease.objects.recover(idempotent=False, max_attempts=5)
    Campaign.objects.filter(id=campaign.id).update(status="sent")
    requeued = Send.objects.retry_unknown([row.id for row in lease.rows])  # both protocols
    assert {(r.id, r.reopened) for r in requeued} == {(row.id, True) for row in lease.rows}
    assert Campaign.objects.get(id=campaign.id).status == "sending"
    again = _claim(campaign)
    assert [row.id for row in again.rows] == [row.id for row in lease.rows]
    assert _settle(again) == {row.id: "sent" for row in lease.rows}


def test_a_cancel_leaves_the_wire_to_its_settle_and_a_released_lease_of_it_ends_cancelled():
    campaign = leased_campaign(count=6)
    on_the_wire = _claim(campaign, worker="a", batch_size=2)
    given_back = _claim(campaign, worker="b", batch_size=2)
    assert Campaign.objects.cancel(campaign_id=campaign.id).dropped == 2  # the rows no worker holds
    released = SendLease.objects.release(given_back.id, campaign_id=campaign.id, worker_id="b",
                                         idempotent=False)
    assert (released.freed, released.cancelled) == (0, 2)
    transient = on_the_wire.rows[0].id
    assert _settle(on_the_wire, {transient: Outcome.TRANSIENT}, worker="a") == {
        transient: "cancelled", on_the_wire.rows[1].id: "sent"}
    assert not _queued(campaign)
    assert not SendLease.objects.exists()


@pytest.mark.parametrize("cancelled", [False, True], ids=["paused", "cancelled"])
def test_a_lease_given_back_after_its_hand_over_to_an_idempotent_receiver_stays_in_doubt(
        cancelled):
    """Given back when its batch may have reached a wire, a lease an idempotent receiver's claim
    handed over is in doubt as recovery would leave it: freed with the time of its hand-over
    (judged by the receiver's memory when taken over), or, cancelled, its rows 'unknown'. Known
    unsent (the batch never reached a wire), it is nothing of the kind."""
    campaign = leased_campaign(count=4)
    maybe_sent = _claim(campaign, worker="a", batch_size=2, hand_over=True)
    unsent = _claim(campaign, worker="b", batch_size=2, hand_over=True)
    if cancelled:
        Campaign.objects.cancel(campaign_id=campaign.id)
    released = [SendLease.objects.release(lease.id, campaign_id=campaign.id, worker_id=worker,
                                          idempotent=True, unsent=worker == "b")
                for lease, worker in [(maybe_sent, "a"), (unsent, "b")]]
    if cancelled:
        assert [(r.freed, r.cancelled, r.unknown) for r in released] == [(0, 0, 2), (0, 2, 0)]
        assert {row.id: row.status for row in Send.objects.filter(campaign=campaign)} == {
            **{row.id: "unknown" for row in maybe_sent.rows},
            **{row.id: "cancelled" for row in unsent.rows}}
    else:
        assert [(r.freed, r.cancelled, r.unknown) for r in released] == [(1, 0, 0), (1, 0, 0)]
        doubt = dict(SendLease.objects.values_list("id", "in_doubt_since"))
        assert doubt[maybe_sent.id] is not None and doubt[unsent.id] is None
        assert dict(SendLease.objects.values_list("id", "takeovers")) == {
            maybe_sent.id: 1, unsent.id: 0}


def test_a_taken_over_lease_released_unsent_in_a_cancelled_campaign_keeps_the_earlier_doubt():
    """Idempotent receiver, leases. Worker a's claim hands its lease over, a's batch may have gone
    out, a dies; recovery frees the lease (takeovers 1, in_doubt_since). Worker b takes it over,
    its renderer fails (nothing of b's batch reaches a wire: _contain(unsent=True)), and a cancel
    commits in between. The release ends the lease: its rows must stay in doubt (a's message may
    have arrived), not read 'cancelled' as never reached."""
    campaign = sending_campaign(count=2, leases=True)
    first = _claim(campaign, worker="a", hand_over=True)
    _expire(first.id)
    assert SendLease.objects.recover(idempotent=True, max_attempts=5).freed == 1
    taken_over = _claim(campaign, worker="b", hand_over=True)
    assert SendLease.objects.get(id=taken_over.id).takeovers == 1
    Campaign.objects.cancel(campaign_id=campaign.id)
    released = SendLease.objects.release(taken_over.id, campaign_id=campaign.id, worker_id="b",
                                         idempotent=True, unsent=True)
    rows = list(Send.objects.filter(campaign=campaign).values_list(
        "status", "handed_over_at", "in_doubt_since"))
    assert (released.cancelled, released.unknown) == (0, 2), rows


def test_a_paced_destination_without_tokens_is_set_aside_and_taken_as_its_share_allows():
    campaign = leased_campaign(count=6)
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
    campaign = leased_campaign(count=7)
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
    assert not _queued(campaign)


def test_wires_settle_and_hand_over_in_one_commit_and_a_lease_no_longer_ours_is_not_handed():
    campaign = leased_campaign(count=9)
    first, second, third = _claim_leases(campaign, batch_size=9, chunk_size=3)
    policy = {"campaign_id": campaign.id, "worker_id": "w", "throttle_delay": 1.0, **POLICY,
              "attempts": {row.id: row.attempts for lease in (first, second, third)
                           for row in lease.rows}}
    # two wires' first hand-overs, in one commit
    (_, handed_first), (_, handed_second) = SendLease.objects.settle_and_hand_over_many([
        LeaseHandOver([], first.id, policy), LeaseHandOver([], second.id, policy)])
    assert handed_first == {row.id: "sending" for row in first.rows}
    assert set(handed_second) == {row.id for row in second.rows}
    # the third lease was taken over meanwhile: not ours, so not handed over (nothing of it is
    # sent); the first wire's settle in the same commit still writes its rows
    SendLease.objects.filter(id=third.id).update(worker_id="someone else")
    outcomes = [Outcome(row.id, Outcome.SENT) for row in first.rows]
    ((settled, handed),) = SendLease.objects.settle_and_hand_over_many([
        LeaseHandOver([(first.id, outcomes)], third.id, policy)])
    assert settled == {row.id: "sent" for row in first.rows} and handed == {}
    assert SendLease.objects.get(id=third.id).handed_over_at is None
    # the second wire's last settle: no lease to hand over
    ((settled, handed),) = SendLease.objects.settle_and_hand_over_many([
        LeaseHandOver([(second.id, [Outcome(row.id, Outcome.SENT) for row in second.rows])],
                      None, policy)])
    assert settled == {row.id: "sent" for row in second.rows} and handed == {}
    assert set(SendLease.objects.values_list("id", flat=True)) == {third.id}


@pytest.mark.parametrize("idempotent, handed, cancelled, becomes", [
    (False, True, False, ("unknown", False)),  # a plain receiver may have taken it: in doubt
    (True, True, False, ("queued", True)),  # the receiver de-duplicates: due again, same key
    (False, False, False, ("queued", True)),  # never on a wire: due again
    (False, False, True, ("cancelled", False)),
    (True, True, True, ("unknown", False)),  # handed over, and nothing will send it again
])
def test_a_row_its_settle_has_no_outcome_for_is_judged_as_recovery_would_never_left_behind(
        idempotent, handed, cancelled, becomes):
    campaign = leased_campaign(count=2)
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
        assert not _queued(campaign)


def test_a_cancel_racing_claims_never_cancels_a_row_on_the_wire():
    """The cancel takes the cursor's lock in a statement of its own, so its snapshot shows the
    lease of the claim it waited for: otherwise it cancels rows that claim just leased, their
    settle writes nothing, and a message that went out is recorded cancelled."""
    campaign = leased_campaign(count=600)

    def claim_and_settle_or_cancel(i: int) -> list[int]:
        if i == 3:
            time.sleep(0.05)  # while the claims run
            Campaign.objects.cancel(campaign_id=campaign.id)
            return []
        unwritten = []
        while leases := _claim_leases(campaign, f"w{i}", batch_size=4):
            for lease in leases:
                settled = _settle(lease, worker=f"w{i}")
                unwritten += [row.id for row in lease.rows if row.id not in settled]
        return unwritten

    assert concurrently(4, claim_and_settle_or_cancel) == [[], [], [], []]
    statuses = Counter(status for status, _ in _rows(campaign).values())
    assert set(statuses) == {"sent", "cancelled"} and statuses["sent"] < 600
    assert not SendLease.objects.exists()


def test_a_cancel_that_waits_for_a_claim_leaves_that_claims_rows_to_its_settle():
    """Staged by hand: a claim holds the cursor, uncommitted, while the cancel waits for it."""
    campaign = leased_campaign(count=6)
    claimed, cancel_waits = threading.Event(), threading.Event()
    leases: list[Lease] = []

    def claim_then_cancel(i: int) -> None:
        if i == 0:
            with transaction.atomic():
                leases.extend(_claim_leases(campaign, batch_size=2))
                claimed.set()
                assert cancel_waits.wait(10)
            return
        assert claimed.wait(10)
        threading.Timer(0.3, cancel_waits.set).start()  # the cancel is blocked by then
        assert Campaign.objects.cancel(campaign_id=campaign.id).dropped == 4

    concurrently(2, claim_then_cancel)
    [lease] = leases
    assert _settle(lease) == {row.id: "sent" for row in lease.rows}
    assert sorted(status for status, _ in _rows(campaign).values()) == ["cancelled"] * 4 + ["sent"] * 2


def _dead_workers_leases(campaign: Campaign) -> tuple[Lease, Lease]:
    """A plain receiver's two chunks, claimed by a worker that died after handing the second
    over, both expired."""
    unsent, handed = _claim_leases(campaign, "dead", batch_size=4, chunk_size=2)
    assert SendLease.objects.hand_over(handed.id, worker_id="dead")
    _expire(unsent.id)
    _expire(handed.id)
    return unsent, handed


def _until_blocked(timeout: float = 3.0) -> None:
    """Wait until another session of this database waits for a lock (the race is staged), or
    for ``timeout``: a statement that should have waited and did not has run by then, and the
    caller's checks of what it left find it."""
    waiting_on_a_lock(timeout)


def _recover() -> None:
    SendLease.objects.recover(idempotent=False, max_attempts=5)


@pytest.mark.parametrize("first", ["recovery", "cancel"])
def test_a_recovery_racing_a_cancel_leaves_no_lease_and_no_row_to_send(first):
    """Staged by hand, either way round: one holds the campaign, uncommitted, while the other
    waits for it. Recovery reads the campaign FOR SHARE: a lease it freed before the cancel is
    then ended by the cancel, and after it, none is freed. Either way nothing is left queued in
    the cancelled campaign, where no claim would reach it, and the chunk that went on the wire
    stays in doubt ('unknown'), never 'cancelled'."""
    campaign = leased_campaign(count=6)
    _, handed = _dead_workers_leases(campaign)
    holding = threading.Event()

    def cancel() -> None:
        Campaign.objects.cancel(campaign_id=campaign.id)

    def hold_then_wait(i: int) -> None:
        one, other = (_recover, cancel) if first == "recovery" else (cancel, _recover)
        if i == 0:
            with transaction.atomic():
                one()
                holding.set()
                _until_blocked()
            return
        assert holding.wait(10)
        other()

    concurrently(2, hold_then_wait)
    rows = {send_id: status for send_id, (status, _) in _rows(campaign).items()}
    assert {rows[row.id] for row in handed.rows} == {"unknown"}
    assert {status for send_id, status in rows.items()
            if send_id not in {row.id for row in handed.rows}} == {"cancelled"}
    assert not SendLease.objects.filter(campaign=campaign).exists()
    assert Campaign.objects.get(id=campaign.id).status == "cancelled"


def test_a_follow_up_leaves_the_originals_live_leases_to_it_and_counts_them_on_the_wire():
    """A live lease's rows may be on the wire: the original's. A free lease never handed over
    (given back by a worker of the paused campaign) holds rows nothing sent: the follow-up takes
    them as queued rows, and the original, resumed, takes the lease over without sending them."""
    from growth.operations.campaigns import approve_campaign, pause_campaign, resume_campaign
    from growth.operations.follow_ups import create_follow_up, resend_audience

    original = leased_campaign(count=6)
    on_the_wire = _claim(original, worker="w", batch_size=2)
    given_back = _claim(original, worker="v", batch_size=2)
    SendLease.objects.release(given_back.id, campaign_id=original.id, worker_id="v",
                              idempotent=False)
    pause_campaign(campaign_id=original.id)
    counted = resend_audience(original)
    assert (counted.in_flight, counted.takeable) == (2, {"queued": 4})

    follow_up = create_follow_up(campaign_id=original.id)
    Campaign.objects.filter(id=follow_up.id).update(
        scheduled_for=timezone.now() - timedelta(minutes=1))
    approve_campaign(campaign_id=follow_up.id)
    assert follow_up.id in Campaign.objects.start_due()
    assert Send.objects.build_recipients(campaign_id=follow_up.id) == 4
    live = {row.email.lower() for row in on_the_wire.rows}
    taken = set(Send.objects.filter(campaign=follow_up).values_list("email_lower", flat=True))
    assert not taken & live
    assert {row.email.lower() for row in given_back.rows} <= taken
    # the lease on the wire still settles in the original: the follow-up took none of its rows
    assert _settle(on_the_wire) == {row.id: "sent" for row in on_the_wire.rows}
    resume_campaign(campaign_id=original.id)
    assert SendLease.objects.claim(worker_id="w", campaign_id=original.id, batch_size=10,
                                   lease=60) == []


def test_a_destinations_cap_on_messages_on_the_wire_counts_the_rows_of_live_leases():
    campaign = leased_campaign(count=5)
    google = Destination.objects.create(name="google")
    Send.objects.filter(campaign=campaign).update(destination_id=google.id)
    RateLimit.objects.create(destination=google, max_in_flight=3)
    lease = _claim(campaign, batch_size=2)
    granted = RateLimit.objects.take_destinations(account_id=campaign.account_id, want=10)
    assert granted[google.id].granted == 1  # two of three on the wire already
    _settle(lease)
    granted = RateLimit.objects.take_destinations(account_id=campaign.account_id, want=10)
    assert granted[google.id].granted == 3


def test_the_workers_housekeeping_recovers_expired_leases_too():
    from growth.sending.transports.null import NullTransport
    from growth.sending.worker import Worker

    campaign = leased_campaign(count=2)
    lease = _claim(campaign, worker="dead", hand_over=True)
    _expire(lease.id)
    Worker(transport=NullTransport(), worker_id="alive")._recover()  # a receiver that de-duplicates
    freed = SendLease.objects.get(id=lease.id)
    assert (freed.worker_id, freed.takeovers) == (None, 1)


def test_a_live_leases_rows_count_as_on_the_wire_for_the_admin_the_monitor_and_a_cancel():
    """A claim writes no send row, so the tallies count a lease's rows 'queued'; an operator's
    counts show them on the wire, as the row protocol's, and a cancel's confirmation does not
    promise to cancel them. A free lease's rows wait for a claim: queued."""
    from growth.admin.transitions import TRANSITIONS, effect

    campaign = leased_campaign(count=10)
    live = _claim(campaign, worker="w", batch_size=4)
    freed = _claim(campaign, worker="dead", batch_size=2)
    _expire(freed.id)
    assert SendLease.objects.recover(idempotent=False, max_attempts=5).freed == 1
    assert SendLease.objects.hand_over(live.id, worker_id="w")
    _opt_out(campaign, live.rows[0].id)  # after its hand-over: still on the wire
    handed = SendLease.objects.claim(worker_id="p", campaign_id=campaign.id, batch_size=2,
                                     lease=60)  # the freed lease, taken over
    assert handed[0].rows == freed.rows
    _opt_out(campaign, handed[0].rows[0].id)
    assert SendLease.objects.hand_over(handed[0].id, worker_id="p")  # withheld: suppressed

    expected = {"queued": 4, "sending": 5, "suppressed": 1}
    assert Campaign.objects.progress([campaign.id])[campaign.id] == expected
    assert Campaign.monitor.snapshot([campaign.id])[campaign.id].counts == expected
    assert Campaign.objects.metrics_snapshot().sending_rows == expected
    assert effect(TRANSITIONS["cancel"], campaign).startswith(
        "4 queued recipients will never get it (cancelled); 5 on the wire now finish")
    _settle(live)  # its opt-out came after its hand-over: it went out
    assert Campaign.objects.progress([campaign.id])[campaign.id] == {
        "queued": 4, "sending": 1, "sent": 4, "suppressed": 1}
