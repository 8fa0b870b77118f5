"""A row in doubt goes again under its key only while the receiver remembers that key.

A receiver that de-duplicates (an ESP's idempotency key) remembers a key for a while: Brevo 15
minutes, Resend 24 hours. A row whose message may have arrived (its worker was lost after the
hand-over, or its answer never came) is sent again under the same key, but only after a lease, a
backoff (up to an hour) or a pause (days): past the receiver's memory, that resend is a second
message. A claim makes such a row 'unknown' for an operator instead, on both protocols; and a
worker whose receiver does not de-duplicate at all never resends a row left in doubt."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from growth.managers.sends import FORGOTTEN_KEY
from growth.models import Campaign, Send, SendLease
from growth.sending.transports import BaseTransport, Outcome
from growth.sending.worker import Worker
from tests.scenarios import run_worker, sending_campaign, statuses

pytestmark = pytest.mark.django_db(transaction=True)

MEMORY = 600.0  # seconds the receiver remembers a key
LEASE = 30.0  # the worker's lease: its resend is on the wire within it


class Receiver(BaseTransport):
    """An ESP that de-duplicates on the key for MEMORY seconds (``plain``: not at all); it
    answers every message with ``answer``."""

    waits_on_a_wire = False  # one connection: the tests read self.got

    def __init__(self, answer: str = Outcome.SENT, *, plain: bool = False) -> None:
        self.idempotent = not plain
        self.idempotency_window = None if plain else MEMORY
        self.answer = answer
        self.got: list[str] = []

    def send_bulk(self, deliveries):
        self.got += [delivery.job_id for delivery in deliveries]
        return [Outcome(delivery.send_id, self.answer,
                        error="" if self.answer == Outcome.SENT else "no answer came")
                for delivery in deliveries]


def _lose_a_worker(campaign: Campaign, *, leases: bool) -> None:
    """A worker claimed the whole campaign for a receiver that de-duplicates (handed over by
    the claim), and was lost; recovery queued its rows again, in doubt."""
    if leases:
        SendLease.objects.claim(worker_id="lost", campaign_id=campaign.id, batch_size=100,
                                lease=LEASE, hand_over=True)
        SendLease.objects.filter(campaign=campaign).update(
            expires_at=timezone.now() - timedelta(seconds=1))
        assert SendLease.objects.recover(idempotent=True, max_attempts=5).freed == 1
    else:
        Send.objects.claim(worker_id="lost", batch_size=100, lease=LEASE,
                           campaign_id=campaign.id, hand_over=True)
        Send.objects.filter(campaign=campaign).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1))
        Send.objects.recover_expired(idempotent=True, max_attempts=5)
    assert statuses(campaign) == {"queued": 3}


def _in_doubt_since(campaign: Campaign, seconds_ago: float) -> None:
    """Move the campaign's doubt back in time: the hand-overs its rows (and its free leases)
    keep, as if the retry came that long after them."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE growth_sends SET handed_over_at = now() - make_interval(secs => %s),"
                       " next_attempt_at = CASE WHEN next_attempt_at IS NOT NULL THEN now() END"
                       " WHERE campaign_id = %s AND handed_over_at IS NOT NULL",
                       [seconds_ago, campaign.id])
        cursor.execute("UPDATE growth_send_leases SET in_doubt_since = now() - make_interval("
                       "secs => %s) WHERE campaign_id = %s AND in_doubt_since IS NOT NULL",
                       [seconds_ago, campaign.id])


def _attempts(campaign: Campaign) -> dict[int, int]:
    return dict(Send.objects.filter(campaign=campaign).values_list("id", "attempts"))


def _job_ids(campaign: Campaign) -> list[str]:
    return sorted(Send.objects.filter(campaign=campaign).values_list("job_id", flat=True))


@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
@pytest.mark.parametrize("seconds_ago, resent", [
    (MEMORY / 10, True),  # well within the receiver's memory: absorbed if it had arrived
    (MEMORY - LEASE / 2, False),  # within it now, but not for the lease the resend may take
    (MEMORY * 6, False),  # a pause of an hour
], ids=["recent", "about-to-be-forgotten", "forgotten"])
def test_a_lost_workers_rows_go_again_only_while_the_receiver_remembers_their_keys(
        leases, seconds_ago, resent):
    campaign = sending_campaign(3, leases=leases)
    _lose_a_worker(campaign, leases=leases)
    _in_doubt_since(campaign, seconds_ago)
    attempts = _attempts(campaign)
    receiver = Receiver()
    run_worker(transport=receiver, lease=LEASE)
    if resent:
        assert sorted(receiver.got) == _job_ids(campaign)
        assert statuses(campaign) == {"sent": 3}
    else:
        assert receiver.got == []
        assert statuses(campaign) == {"unknown": 3}
        assert set(Send.objects.filter(campaign=campaign).values_list("last_error", flat=True)) \
            == {FORGOTTEN_KEY}
        assert _attempts(campaign) == attempts  # nothing was tried
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.SENT  # nothing left to send either way


@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_a_lost_answer_is_not_resent_after_a_long_backoff(leases):
    campaign = sending_campaign(3, leases=leases)
    silent = Receiver(Outcome.IN_DOUBT)  # the whole message went out, no answer came
    Worker(transport=silent, lease=LEASE, batch_size=10, once=True).run()
    assert len(silent.got) == 3
    assert statuses(campaign) == {"queued": 3}  # in doubt, due again under their keys
    _in_doubt_since(campaign, MEMORY * 2)  # the backoff (up to an hour) outlasted the memory
    answering = Receiver()
    run_worker(transport=answering, lease=LEASE)
    assert answering.got == []
    assert statuses(campaign) == {"unknown": 3}


@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_a_receiver_that_does_not_deduplicate_never_gets_a_row_left_in_doubt(leases):
    """Rows an idempotent receiver's worker left in doubt, served now by a worker whose
    transport was changed to a plain relay: no key absorbs a resend there."""
    campaign = sending_campaign(3, leases=leases)
    _lose_a_worker(campaign, leases=leases)
    plain = Receiver(plain=True)
    run_worker(transport=plain, lease=LEASE)
    assert plain.got == []
    assert statuses(campaign) == {"unknown": 3}


STALLED_LEASE = 0.5  # a lease the stall below outlasts


def _a_worker_stalled_past_its_lease(receiver: Receiver, monkeypatch) -> None:
    """One pass of a worker that stalls past its lease just before the send (in its look at the
    opt-outs, the last step before the wire)."""
    look_at_opt_outs = Worker._hand_over

    def stalled(self, ids, *, batch):
        time.sleep(3 * STALLED_LEASE)
        return look_at_opt_outs(self, ids, batch=batch)

    with monkeypatch.context() as patched:
        patched.setattr(Worker, "_hand_over", stalled)
        Worker(transport=receiver, lease=STALLED_LEASE, batch_size=10, once=True).run()


@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_a_worker_stalled_past_its_lease_before_the_send_sends_nothing(leases, monkeypatch):
    """The claim let the rows go again because the receiver remembers their keys for as long as
    the claim's lease: an attempt on the wire later than that could arrive a second time. A
    worker stalled past its lease between the claim and the send (its process paused, a database
    slow to answer) sends none of them; they are queued again unsent, and the next claim judges
    their earlier doubt again."""
    campaign = sending_campaign(3, leases=leases)
    _lose_a_worker(campaign, leases=leases)
    _in_doubt_since(campaign, MEMORY - 2 * STALLED_LEASE)  # remembered for this claim's lease
    receiver = Receiver()
    _a_worker_stalled_past_its_lease(receiver, monkeypatch)
    assert receiver.got == []  # past its memory by now: a resend could arrive twice

    run_worker(transport=receiver, lease=LEASE)
    assert receiver.got == []
    assert statuses(campaign) == {"unknown": 3}
    assert set(Send.objects.filter(campaign=campaign).values_list("last_error", flat=True)) \
        == {FORGOTTEN_KEY}


@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_rows_a_contained_campaign_never_sent_are_not_in_doubt_when_it_is_resumed_days_later(
        leases):
    """The claim hands an idempotent receiver's rows over at once; a campaign that cannot be
    sent as it is (a subject that does not compile) is paused before any of them goes out.
    Fixed and resumed after the receiver's memory, they go out: nothing of them was sent."""
    campaign = sending_campaign(3, leases=leases)
    Campaign.objects.filter(id=campaign.id).update(subject="Hi {% if %}")
    receiver = Receiver()
    Worker(transport=receiver, lease=LEASE, batch_size=10, once=True).run()
    campaign.refresh_from_db()
    assert (campaign.status, statuses(campaign), receiver.got) == ("paused", {"queued": 3}, [])

    _in_doubt_since(campaign, MEMORY * 24 * 6)  # the operator fixes it days later
    Campaign.objects.filter(id=campaign.id).update(subject="Hi")
    assert Campaign.objects.resume(campaign_id=campaign.id)
    run_worker(transport=receiver, lease=LEASE)
    assert sorted(receiver.got) == _job_ids(campaign)
    assert statuses(campaign) == {"sent": 3}


@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_rows_a_stalled_worker_knows_it_never_sent_are_not_left_in_doubt(leases, monkeypatch):
    """A worker stalled past its lease sends nothing of its batch, and says so: the rows are
    queued again, not in doubt since its claim. Paused, and resumed after the receiver's memory
    of that claim, they go out: none was ever sent."""
    campaign = sending_campaign(3, leases=leases)
    receiver = Receiver()
    _a_worker_stalled_past_its_lease(receiver, monkeypatch)
    assert receiver.got == []
    assert statuses(campaign) == {"queued": 3}  # settled at once, not left to lease expiry
    assert _attempts(campaign) == dict.fromkeys(_attempts(campaign), 0)
    Campaign.objects.filter(id=campaign.id).update(status="paused")
    _in_doubt_since(campaign, MEMORY * 24)  # resumed a few hours later
    Campaign.objects.filter(id=campaign.id).update(status="sending")
    run_worker(transport=receiver, lease=LEASE)
    assert (sorted(receiver.got), statuses(campaign)) == (_job_ids(campaign), {"sent": 3})
