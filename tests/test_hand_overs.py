"""The wires' hand-overs committed together (growth.sending.hand_overs): what waits is committed
in one transaction, each wire gets its own answer, and a failure reaches every wire it concerns."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from growth.managers.sends import HandOver
from growth.models import Send
from growth.sending.hand_overs import HandOvers
from growth.sending.transports import Outcome
from tests.scenarios import sending_campaign

POLICY = {"retry_for": 3600, "backoff_base": 30.0, "backoff_max": 3600.0, "throttle_delay": 1.0}
TIMEOUT = 10.0


class HeldFirst:
    """A commit function whose first call waits until ``behind`` more requests are queued behind
    it, so that the next call finds them all waiting; records each call's requests."""

    def __init__(self, commit, behind: int) -> None:
        self.commit, self.behind = commit, behind
        self.calls: list[list] = []
        self.hand_overs: HandOvers | None = None
        self.entered = threading.Event()  # the first call has begun

    def __call__(self, requests):
        if not self.calls:
            self.entered.set()
            deadline = time.monotonic() + TIMEOUT
            while self.hand_overs._waiting.qsize() < self.behind:
                assert time.monotonic() < deadline, "the other requests never came"
                time.sleep(0.005)
        self.calls.append(list(requests))
        return self.commit(requests)


def submit_all(held: HeldFirst, requests) -> list:
    """Submit each request from a thread of its own, the others once the first one's commit has
    begun; return what each got (its result or its exception)."""
    hand_overs = held.hand_overs
    got: list = [None] * len(requests)

    def submit(n: int) -> None:
        try:
            got[n] = hand_overs.submit(requests[n])
        except Exception as exc:
            got[n] = exc

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(len(requests))]
    threads[0].start()
    assert held.entered.wait(TIMEOUT)
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    hand_overs.close()
    return got


def test_what_waits_is_committed_in_one_call_and_each_gets_its_own_answer():
    commit = HeldFirst(lambda requests: [request * 10 for request in requests], behind=3)
    commit.hand_overs = HandOvers(commit)
    assert submit_all(commit, [1, 2, 3, 4]) == [10, 20, 30, 40]
    assert [sorted(call) for call in commit.calls] == [[1], [2, 3, 4]]


def test_a_failed_commit_reaches_every_request_of_its_group_and_the_next_group_goes_on():
    def commit(requests):
        if 2 in requests:
            raise RuntimeError("the group's transaction failed")
        return requests

    held = HeldFirst(commit, behind=2)
    held.hand_overs = HandOvers(held)
    first, *group = submit_all(held, [1, 2, 3])
    assert first == 1
    assert [str(exc) for exc in group] == ["the group's transaction failed"] * 2
    assert held.hand_overs.submit(5) == 5  # a new thread after close()
    held.hand_overs.close()


def test_a_commit_that_answers_wrongly_fails_its_group_and_no_wire_waits_for_ever():
    hand_overs = HandOvers(lambda requests: requests[:-1])
    with pytest.raises(RuntimeError, match="0 answers to 1 hand-overs"):
        hand_overs.submit(1)
    with pytest.raises(RuntimeError):  # the thread is still there for the next one
        hand_overs.submit(2)
    hand_overs.close()


@pytest.mark.django_db(transaction=True)
def test_the_wires_hand_overs_and_settles_commit_in_one_transaction():
    campaign = sending_campaign(count=8)
    rows = Send.objects.claim(worker_id="w", batch_size=8, lease=60, campaign_id=campaign.id)
    attempts = {row.id: row.attempts for row in rows}
    policy = {"campaign_id": campaign.id, "worker_id": "w", "attempts": attempts, **POLICY}
    ids = [row.id for row in rows]
    Send.objects.hand_over(rows[:2], worker_id="w")  # two wires' last chunks, on the wire
    requests = [
        HandOver([], rows[2:4], policy),  # a first chunk, alone
        HandOver([Outcome(ids[0], Outcome.SENT, provider_message_id="<a@x>")], rows[4:6], policy),
        HandOver([Outcome(ids[1], Outcome.PERMANENT, error="550 5.1.1 no such user")],
                 rows[6:8], policy),
    ]
    commit = HeldFirst(Send.objects.settle_and_hand_over_many, behind=2)
    commit.hand_overs = HandOvers(commit)
    first, second, third = submit_all(commit, requests)

    assert first == ({}, {ids[2]: "sending", ids[3]: "sending"})
    assert second == ({ids[0]: "sent"}, {ids[4]: "sending", ids[5]: "sending"})
    assert third == ({ids[1]: "failed"}, {ids[6]: "sending", ids[7]: "sending"})
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, xmin::text, status, handed_over_at IS NOT NULL"
                       " FROM growth_sends WHERE id = ANY(%s) ORDER BY id", [ids])
        found = {row[0]: row[1:] for row in cursor.fetchall()}
    later = ids[:2] + ids[4:]  # the second and third requests: one group, one transaction
    assert len({found[i][0] for i in later}) == 1
    assert found[ids[2]][0] != found[ids[4]][0]
    assert [found[i][1:] for i in ids] == [("sent", True), ("failed", True)] + [("sending", True)] * 6
