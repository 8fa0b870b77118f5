"""The send protocol as a state machine: hypothesis drives the real managers against the real
database in whatever order it finds (two workers claiming, handing over, sending, crashing and
settling; leases running out; recovery; opt-outs; an operator's decisions) and checks the
protocol's promises after every step, then once more after running the campaign to its end.

A longer search: PROTOCOL_EXAMPLES=2000 (and PROTOCOL_STEPS=50); new examples on each run:
PROTOCOL_RANDOM=1. Under a deliberate bug, where
the test is expected to fail: PROTOCOL_MUTANT=<a name of tests/protocol_mutants.MUTANTS>.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

import pytest
from django.db import connection
from django.utils import timezone
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from growth.job_ids import job_id
from growth.managers.sends import Claimed
from growth.models import (
    Account,
    Campaign,
    Send,
    SendTally,
    SendVerdict,
    Subscriber,
    Suppression,
)
from growth.operations.campaigns import approve_campaign
from growth.sending.batches import Batch, Tally
from growth.sending.transports import BaseTransport, Outcome
from growth.sending.worker import Worker
from tests.factories import AccountFactory, CampaignFactory, SegmentFactory, SubscriberFactory
from tests.protocol_mutants import MUTANTS, SURVIVE_BY_DESIGN, mutated
from tests.scenarios import sending_campaign

DEFAULT_EXAMPLES, DEFAULT_STEPS = 40, 30
EXAMPLES = int(os.environ.get("PROTOCOL_EXAMPLES", DEFAULT_EXAMPLES))
STEPS = int(os.environ.get("PROTOCOL_STEPS", DEFAULT_STEPS))
LONG_RUN = EXAMPLES > DEFAULT_EXAMPLES or STEPS > DEFAULT_STEPS
MUTANT = os.environ.get("PROTOCOL_MUTANT", "")

WORKERS = {"w1": 2, "w2": 1}  # worker id -> its batch size
CLOSER = "closer"  # the worker that runs the campaign to its end in the final check
LEASE = 60.0  # seconds: no lease runs out by itself during a run (time passes, or a worker stalls)
# seconds a receiver that de-duplicates remembers a key: no key is forgotten by itself during a
# run (the_receiver_forgets makes more time pass)
MEMORY = 3600.0
MAX_ATTEMPTS = 3  # recovery's bound on a worker dying with a row on the wire (idempotent)
# seconds: no retry falls due by itself, and no row reaches its retry horizon during a run
RETRY = {"backoff_base": 30.0, "backoff_max": 3600.0, "throttle_delay": 3600.0,
         "retry_for": 86400.0}
OPEN = {Send.Status.QUEUED, Send.Status.SENDING}
# What happens to a worker's move: the transport's answer, when the move is a send; or the worker
# dies just before or just after the move (a send: before or after the wire); or it stalls past
# its lease instead of moving, and another replica recovers its rows meanwhile.
DIES_BEFORE, DIES_AFTER, STALLS = "dies before its move", "dies after its move", "stalls past its lease"
# A worker that de-duplicates sends a chunk only while its claim's lease holds (by its own clock,
# which runs out no later than the database's: Batch.within_lease): past it, the rows it has not
# put on the wire yet are settled unsent (Outcome.UNSENT), as if each row were a chunk of its own.
RUNS_OUT = "its lease runs out before the wire"
# A refusal of us gives its attempt back as a throttle does, but is due again at once. A message
# in doubt went out whole and its answer was lost: the worker settles it 'in_doubt' for a plain
# receiver, 'in_doubt_retried' for one that de-duplicates.
FATES = (Outcome.SENT, Outcome.TRANSIENT, Outcome.THROTTLED, Outcome.REFUSED, Outcome.PERMANENT,
         Outcome.IN_DOUBT, DIES_BEFORE, DIES_AFTER, STALLS)
# A receiver that de-duplicates keeps messages by key, and may hold another message under ours
# (Outcome.KEY_TAKEN: an earlier try of ours whose body differs, or another sender's). A plain
# receiver keeps no keys: it never answers so (an ESP with keys whose window is shorter than a
# lease is treated as plain, and could: sends.sql makes its row 'unknown' as well, unmodelled).
IDEMPOTENT_FATES = (*FATES, Outcome.KEY_TAKEN, RUNS_OUT)

# (segment, address as typed). CY@ and cy@ are one address in two segments; the setup makes the
# later row (cy@) the older subscriber, so the build must pick it over the lower id.
AUDIENCE = ((0, "ann@example.com"), (0, "CY@example.com"), (0, "bob@example.com"),
            (1, "cy@example.com"), (1, "dee@example.com"), (1, "eve@example.com"))
TWIN, OLDER_TWIN = 1, 3  # indexes in AUDIENCE
OPTED_OUT_BEFORE_THE_BUILD = "eve@example.com"
ADDRESSES = sorted({address.lower() for _, address in AUDIENCE})
IN_FLIGHT = {f"the next recipient {worker} holds": worker for worker in sorted(WORKERS)}
# While a worker stalls with answers it has not settled, what becomes of the rows its claim held
# (recovered: 'unknown' for a plain receiver, queued again for one that de-duplicates): left
# alone; queued again by an operator's retry of the unknown rows; then claimed again by the
# worker itself, or taken over by the other worker, whose batch may go out and be throttled (a
# throttle gives the attempt back: queued at the stalled claim's attempt, in the other's name).
RETRIED, ITSELF, THE_OTHER, THROTTLED = "retried", "itself", "the other", "throttled"
MEANWHILE = {
    "nothing": (),
    "an operator retries the unknown rows": (RETRIED,),
    "it claims them again": (RETRIED, ITSELF),
    "the other worker takes them over": (RETRIED, THE_OTHER),
    "the other worker takes them over and is throttled": (RETRIED, THE_OTHER, THROTTLED),
}
# What such a worker may have heard: its rows no longer its claim's, only 'sent' may still change
# them (recorded on a row the claim left in doubt); the others differ in whether a message arrived.
LATE_ANSWERS = (Outcome.SENT, Outcome.IN_DOUBT, Outcome.TRANSIENT)
# A receiver that de-duplicates may also have said that it holds another message under the key
# (the next message under it is refused too, whoever sends it), and a worker that de-duplicates
# may have sent nothing: its lease ran out by its own clock before the batch's turn.
IDEMPOTENT_LATE_ANSWERS = (*LATE_ANSWERS, Outcome.KEY_TAKEN, RUNS_OUT)


@dataclass(frozen=True, slots=True)
class Transmission:
    """One message that went on the wire."""

    job_id: str
    address: str
    checked_at: int  # the machine's clock when its row passed its last check before the wire
    absorbed: bool  # an idempotent receiver remembered this job id and dropped the copy
    # the receiver holds another message under this job id (its key): it refused this one
    key_taken: bool = False


class FakeReceiver:
    """The other end of the wire: logs every message; an idempotent one delivers a job id once
    for as long as it remembers it, and refuses every message under a key it holds another
    message under (what it delivered under that key before, if anything, stays delivered)."""

    def __init__(self, *, idempotent: bool) -> None:
        self.idempotent = idempotent
        self.log: list[Transmission] = []
        self.remembered: set[str] = set()  # job ids (keys)
        # keys under which it holds a message other than ours as we send it now: an earlier one
        # of ours whose body differs (it was delivered then, and is in the log), or another
        # sender's (no message of ours); every message of ours under the key is refused
        self.taken: set[str] = set()

    def accept(self, *, job_id: str, address: str, checked_at: int,
               taken: bool = False) -> Transmission:
        """A message on the wire (``taken``: the receiver finds another message under its key,
        as the transport's answer Outcome.KEY_TAKEN says)."""
        if taken or job_id in self.taken:
            assert self.idempotent, "a receiver that keeps no keys holds nothing under one"
            self.taken.add(job_id)
            self.log.append(Transmission(job_id, address, checked_at, False, key_taken=True))
            return self.log[-1]
        absorbed = job_id in self.remembered
        if self.idempotent:
            self.remembered.add(job_id)
        self.log.append(Transmission(job_id, address, checked_at, absorbed))
        return self.log[-1]

    def forget(self) -> None:
        self.remembered.clear()
        self.taken.clear()

    def deliveries(self) -> Counter[str]:
        """Job id -> messages the recipient got."""
        return Counter(t.job_id for t in self.log if not (t.absorbed or t.key_taken))


class ReceiverKind(BaseTransport):
    """Only tells the Worker which receiver it talks to; messages go through FakeReceiver."""

    def __init__(self, *, idempotent: bool) -> None:
        self.idempotent = idempotent


@dataclass(frozen=True, slots=True)
class Chunk:
    """What the transport said of a chunk, with each row's attempt as claimed: to settle."""

    outcomes: list[Outcome]
    attempts: dict[int, int]


@dataclass
class WorkerState:
    """What a worker process holds in memory, as the Worker holds it; lost when it dies."""

    claimed: list[Claimed] = field(default_factory=list)  # its batch, before the last check
    attempts: dict[int, int] = field(default_factory=dict)  # the batch's rows: attempt claimed
    to_send: list[Claimed] = field(default_factory=list)  # passed the check: for the wire
    checked_at: int = 0  # the machine's clock at that check
    answers: list[Outcome] = field(default_factory=list)  # what the transport said so far
    unsettled: list[Chunk] = field(default_factory=list)  # oldest first, as the settler queues

    @property
    def delivering(self) -> bool:
        return bool(self.claimed or self.to_send)


def _wait_for_the_disk(wait: bool) -> None:
    """No commit of a run needs to outlive a database crash: not waiting for the disk halves the
    run's time. The session's setting is put back after each example, for the tests after it."""
    with connection.cursor() as cursor:
        cursor.execute("RESET synchronous_commit" if wait else "SET synchronous_commit = off")


def _expire_leases(campaign_id: int, holder: str | None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("""
            UPDATE growth_sends SET lease_expires_at = now() - interval '1 second'
             WHERE campaign_id = %s AND status = 'sending' AND (%s::text IS NULL OR claimed_by = %s)
        """, [campaign_id, holder, holder])


def _move_the_clocks_back(campaign_id: int, seconds: float) -> None:
    """Every time the campaign's send rows hold, moved back as if ``seconds`` had passed."""
    with connection.cursor() as cursor:
        cursor.execute("""
            UPDATE growth_sends
               SET handed_over_at = handed_over_at - make_interval(secs => %(s)s),
                   first_attempt_at = first_attempt_at - make_interval(secs => %(s)s),
                   lease_expires_at = lease_expires_at - make_interval(secs => %(s)s),
                   next_attempt_at = next_attempt_at - make_interval(secs => %(s)s),
                   updated_at = updated_at - make_interval(secs => %(s)s)
             WHERE campaign_id = %(campaign_id)s
        """, {"s": seconds, "campaign_id": campaign_id})


def _make_retries_due(campaign_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("""
            UPDATE growth_sends SET next_attempt_at = now() - interval '1 second'
             WHERE campaign_id = %s AND status = 'queued' AND next_attempt_at IS NOT NULL
        """, [campaign_id])


class RowVersion(NamedTuple):
    """What a worker's step may change of a send row."""

    holder: str
    status: str
    attempt: int
    handed_over_at: datetime | None
    lease: datetime | None
    next_attempt_at: datetime | None
    sent_at: datetime | None
    last_error: str


def _row_versions(campaign_id: int) -> dict[int, RowVersion]:
    return {row[0]: RowVersion(*row[1:]) for row in Send.objects.filter(
        campaign_id=campaign_id).values_list(
        "id", "claimed_by", "status", "attempts", "handed_over_at", "lease_expires_at",
        "next_attempt_at", "sent_at", "last_error")}


def _a_settle_may_change(before: RowVersion, after: RowVersion, *, worker: str, attempt: int,
                         outcome: str) -> bool:
    """A settle writes a row its claim holds (the worker's, at the attempt it claimed): on the
    wire; or, answered 'sent', left in doubt by that claim ('unknown', or queued again by
    recovery or an operator: sent again, it would arrive twice)."""
    if before.holder != worker or before.attempt != attempt:
        return False
    return before.status == Send.Status.SENDING or (
        before.status in (Send.Status.UNKNOWN, Send.Status.QUEUED)
        and outcome == Outcome.SENT and after.status == Send.Status.SENT)


def _a_hand_over_may_change(before: RowVersion, after: RowVersion, *, worker: str,
                            claimed: Claimed) -> bool:
    """A hand-over writes a row its claim holds (the worker's, on the wire under the lease the
    claim gave it), and only to send it or to suppress it."""
    held = (before.holder == worker and before.attempt == claimed.attempts
            and before.status == Send.Status.SENDING and before.lease == claimed.leased_until)
    return held and (after.status == Send.Status.SUPPRESSED
                     or (after.status == Send.Status.SENDING and after.lease == before.lease))


class SendProtocol(RuleBasedStateMachine):
    idempotent: bool  # the receiver's kind: set by the subclasses at the end of the module

    def __init__(self) -> None:
        super().__init__()
        self.clock = 0  # orders the events that P3 and P5 compare
        self.account_id = self.campaign_id = 0
        self.workers = {worker: WorkerState() for worker in WORKERS}
        self.receiver = FakeReceiver(idempotent=self.idempotent)
        self.subscribers: dict[str, list[int]] = {}  # address -> its subscriber rows
        self.stands_for: dict[str, int] = {}  # address -> the subscriber row the build must pick
        self.opted_out_at: dict[str, int] = {}  # address -> clock when its opt-out committed
        self.built_at: int | None = None
        self.address_of: dict[str, str] = {}  # job id -> address
        self.address_by_id: dict[int, str] = {}  # send id -> address
        self.job_by_id: dict[int, str] = {}  # send id -> job id
        self.retried: Counter[str] = Counter()  # job id -> an operator's retries
        self.marked_delivered: set[str] = set()  # job ids
        # job id -> an operator's retries of it when a settle recorded the receiver's answer that
        # its key was taken (P7: until the operator decides again, it stays 'unknown', unsent)
        self.key_taken: dict[str, int] = {}

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    # --- setup ---------------------------------------------------------------------------------

    @initialize()
    def open_a_sending_campaign(self) -> None:
        _wait_for_the_disk(False)
        account = AccountFactory()
        self.account_id = account.id
        segments = [SegmentFactory(account=account), SegmentFactory(account=account)]
        rows = [SubscriberFactory(segment=segments[s], email=address) for s, address in AUDIENCE]
        Subscriber.objects.filter(id=rows[OLDER_TWIN].id).update(
            created_at=timezone.now() - timezone.timedelta(hours=1))
        for row in Subscriber.objects.filter(account=account).order_by("email_lower", "created_at", "id"):
            self.subscribers.setdefault(row.email_lower, []).append(row.id)
            self.stands_for.setdefault(row.email_lower, row.id)
        assert self.stands_for["cy@example.com"] == rows[OLDER_TWIN].id > rows[TWIN].id

        campaign = CampaignFactory(account=account)
        approve_campaign(campaign_id=campaign.id)
        assert campaign.id in Campaign.objects.start_due()
        self.campaign_id = campaign.id
        self._opt_out(OPTED_OUT_BEFORE_THE_BUILD)

    # --- the engine ----------------------------------------------------------------------------
    # Few rules, each a whole move of one actor: hypothesis turns a random subset of the rules
    # off in each example (swarm testing), and with a rule per step of the worker (claim,
    # hand-over, send, settle, build, recover, finish...) the examples where all of them were on
    # and came in an order that mattered were too rare to find anything in a bounded run.

    @precondition(lambda self: self.built_at is None)
    @rule()
    def build(self) -> None:
        self._build()

    @rule(worker=st.sampled_from(sorted(WORKERS)), fate=st.sampled_from(FATES),
          ahead=st.booleans())
    def worker_moves(self, worker: str, fate: str, ahead: bool) -> None:
        """The worker's next move, in the order of its loop (Worker.cycle): idle, it runs its
        housekeeping and claims a batch (and, finding none, settles all it has sent and tries
        to finish the campaign); then it hands the batch over, sends it row by row (the
        transport answering ``fate``) and settles what the transport said: a plain worker at
        once, an idempotent one on its settler thread. It dies before or after the move, as
        ``fate`` says (its memory is lost, what it committed stays), or stalls: its next move
        comes after its leases ran out and were recovered. An idempotent worker's lease may also
        run out by its own clock before the rest of its batch goes out (RUNS_OUT: settled
        unsent), and its receiver may hold another message under a key (KEY_TAKEN)."""
        if fate == DIES_BEFORE:
            self._die(worker)
            return
        if fate == STALLS:
            _expire_leases(self.campaign_id, holder=worker)
            self._recover()
            return
        state = self.workers[worker]
        if state.to_send and fate == RUNS_OUT:
            self._runs_out(worker)
        elif state.to_send:
            self._transmit(worker, fate)
        elif state.claimed and state.unsettled and not self.idempotent:
            self._settle_and_hand_over(worker)  # a wire's last chunk, in its next one's commit
        elif state.claimed:
            self._hand_over(worker)
        elif state.unsettled and not self.idempotent and not ahead:
            self._settle(worker)
        else:  # (``ahead``: a plain worker's loop claims while its wires finish the last batch)
            self._build()
            self._recover()
            if not self._claim(worker, batch_size=WORKERS[worker]):
                while state.unsettled:  # the settler is drained first: finish judges by settled rows
                    self._settle(worker)
                self._finish()
        if fate == DIES_AFTER:
            self._die(worker)

    @precondition(lambda self: self.idempotent and any(s.unsettled for s in self.workers.values()))
    @rule(worker=st.sampled_from(sorted(WORKERS)))
    def settler_thread_settles(self, worker: str) -> None:
        """An idempotent worker settles on a thread of its own, while its loop goes on."""
        if self.workers[worker].unsettled:
            self._settle(worker)

    @precondition(lambda self: self.built_at is not None)
    @rule(worker=st.sampled_from(sorted(WORKERS)), answer=st.sampled_from(LATE_ANSWERS),
          meanwhile=st.sampled_from(sorted(MEANWHILE)))
    def a_settle_comes_after_the_lease(self, worker: str, answer: str, meanwhile: str) -> None:
        """The worker's batch goes out (claimed and handed over first if it holds none; the
        transport answering ``answer``), then the worker stalls before it settles: its leases
        run out and are recovered, and the rows move on (``meanwhile``) before what the
        transport said is settled: the races the settle's claim conditions are for. One rule:
        the steps apart came in this order too rarely to be found."""
        state = self.workers[worker]
        if not (state.delivering or state.unsettled):
            self._recover()
            self._claim(worker, batch_size=WORKERS[worker])
        self._goes_out(worker, answer)
        if not state.unsettled:
            return  # nothing went out
        _expire_leases(self.campaign_id, holder=worker)
        self._recover()
        note(f"meanwhile, {meanwhile}")
        for move in MEANWHILE[meanwhile]:
            self._meanwhile(move, worker)
        if state.claimed and not self.idempotent:  # it claimed again: its next hand-over settles
            self._settle_and_hand_over(worker)
        else:
            self._settle(worker)

    @rule()
    def housekeeping(self) -> None:
        """Another replica's pass with nothing to claim: build, recover, fold tallies, finish."""
        self._build()
        self._recover()
        SendTally.objects.fold()
        self._finish()

    # --- time passes (the only writes not made by the managers) ---------------------------------

    @rule(leases_of=st.sampled_from((*sorted(WORKERS), "everyone")))
    def time_passes(self, leases_of: str) -> None:
        """Leases run out (a worker stalled, or died), and every retry falls due."""
        _expire_leases(self.campaign_id, None if leases_of == "everyone" else leases_of)
        _make_retries_due(self.campaign_id)

    # Not while a worker holds rows on their way to the wire: a claim's attempt goes out within
    # its lease, which the claim relies on to judge whether the receiver will still remember.
    # The worker keeps to it (Batch.within_lease before each chunk, whose own test is
    # tests/test_forgotten_keys.py); this machine's sends are not the worker's loop.
    @precondition(lambda self: self.idempotent and self.built_at is not None
                  and not any(state.delivering for state in self.workers.values()))
    @rule()
    def the_receiver_forgets(self) -> None:
        """Longer than the receiver remembers a key passes: every lease runs out, every retry
        falls due, and a row in doubt sent again would be a second message."""
        _move_the_clocks_back(self.campaign_id, seconds=2 * MEMORY)
        self.receiver.forget()

    # --- people --------------------------------------------------------------------------------

    @rule(who=st.sampled_from((*ADDRESSES, *IN_FLIGHT)))
    def opt_out(self, who: str) -> None:
        """An address opts out; or the next recipient a worker holds, the race the checks before
        the wire are for."""
        if who in ADDRESSES:
            self._opt_out(who)
            return
        state = self.workers[IN_FLIGHT[who]]
        held = state.claimed or state.to_send
        if held:
            self._opt_out(self.address_of[held[0].job_id])

    # Offered while a worker holds rows (or to resume): a pause or a cancel that races nothing
    # would mostly end the example before anything happened.
    @precondition(lambda self: any(state.delivering for state in self.workers.values())
                  or self._campaign_status() == Campaign.Status.PAUSED)
    @rule(action=st.sampled_from(("pause", "resume", "cancel")))
    def operator_moves_the_campaign(self, action: str) -> None:
        if getattr(Campaign.objects, action)(campaign_id=self.campaign_id):
            note(f"the operator's {action}: done")

    @precondition(lambda self: Send.objects.filter(campaign_id=self.campaign_id,
                                                   status=Send.Status.UNKNOWN).exists())
    @rule(decision=st.sampled_from(("retry", "mark delivered")))
    def operator_decides_on_an_unknown_row(self, decision: str) -> None:
        send_id, job = (Send.objects.filter(campaign_id=self.campaign_id, status=Send.Status.UNKNOWN)
                        .order_by("id").values_list("id", "job_id").first())
        if decision == "retry":
            self._retry_unknown({send_id: job})
        elif SendVerdict.objects.settle_unknown({send_id: "test"}, verdict="sent",
                                                decided_by="the operator"):
            self.marked_delivered.add(job)
        note(f"the operator's {decision}: {self.address_of[job]}")

    # --- the promises --------------------------------------------------------------------------

    @invariant()
    def keeps_its_promises(self) -> None:
        rows = list(Send.objects.filter(campaign_id=self.campaign_id).values(
            "campaign_id", "subscriber_id", "email_lower", "job_id", "status", "lease_expires_at",
            "claimed_by"))
        self.p1_a_recipient_gets_a_job_once_per_operator_retry()
        self.p2_no_row_is_sent_without_a_delivery(rows)
        self.p3_no_message_goes_out_to_an_address_opted_out_before_its_last_check()
        self.p4_a_row_on_the_wire_has_a_lease_and_a_holder(rows)
        self.p5_one_row_per_recipient_picked_as_the_build_promises(rows)
        self.a_finished_campaign_has_nothing_left_to_send(rows)
        self.the_tallies_count_every_row()
        self.p7_a_row_whose_key_was_taken_waits_for_an_operator(rows)

    def p1_a_recipient_gets_a_job_once_per_operator_retry(self) -> None:
        for job, delivered in self.receiver.deliveries().items():
            assert delivered <= 1 + self.retried[job], (
                f"P1: {job} delivered {delivered} times, retried by an operator {self.retried[job]}")

    def p2_no_row_is_sent_without_a_delivery(self, rows: list[dict]) -> None:
        delivered = self.receiver.deliveries()
        for row in rows:
            if row["status"] == Send.Status.SENT:
                assert delivered[row["job_id"]] or row["job_id"] in self.marked_delivered, (
                    f"P2: {row['job_id']} is sent, but nothing was delivered nor marked delivered")

    def p3_no_message_goes_out_to_an_address_opted_out_before_its_last_check(self) -> None:
        for sent in self.receiver.log:
            opted_out_at = self.opted_out_at.get(sent.address)
            assert opted_out_at is None or opted_out_at > sent.checked_at, (
                f"P3: {sent.job_id} went to {sent.address}, opted out at {opted_out_at}, "
                f"after a check at {sent.checked_at}")

    def p4_a_row_on_the_wire_has_a_lease_and_a_holder(self, rows: list[dict]) -> None:
        for row in rows:
            if row["status"] == Send.Status.SENDING:
                assert row["lease_expires_at"] is not None and row["claimed_by"], f"P4: {row}"

    def p5_one_row_per_recipient_picked_as_the_build_promises(self, rows: list[dict]) -> None:
        for key in ("subscriber_id", "email_lower"):
            twice = [k for k, n in Counter(row[key] for row in rows).items() if n > 1]
            assert not twice, f"P5: more than one row for {key} {twice}"
        for row in rows:
            assert row["job_id"] == job_id(row["campaign_id"], row["subscriber_id"]), f"P5: {row}"
            address = row["email_lower"]
            assert row["subscriber_id"] == self.stands_for[address], (
                f"P5: {address} is sent to subscriber {row['subscriber_id']}, "
                f"not to its oldest row {self.stands_for[address]}")
            opted_out_at = self.opted_out_at.get(address)
            assert opted_out_at is None or opted_out_at > self.built_at, (
                f"P5: {address} was suppressed before the build, yet has a row")

    def a_finished_campaign_has_nothing_left_to_send(self, rows: list[dict]) -> None:
        if self._campaign_status() == Campaign.Status.SENT:
            left = [row["job_id"] for row in rows if row["status"] in OPEN]
            assert not left, f"the campaign finished with {left} still queued or sending"

    def p7_a_row_whose_key_was_taken_waits_for_an_operator(self, rows: list[dict]) -> None:
        """P7: a row settled on the receiver's answer that another message holds its key stays
        'unknown' until an operator decides: marked delivered, it is 'sent'; retried, it may go
        again (and the receiver answer the same). No claim leases it meanwhile (checked as it
        claims: _claim)."""
        for row in rows:
            job = row["job_id"]
            if self._key_taken_undecided(job):
                assert row["status"] == Send.Status.UNKNOWN or (
                    row["status"] == Send.Status.SENT and job in self.marked_delivered), (
                    f"P7: {job}'s key is taken, no operator decided since, and it is {row['status']}")

    def _key_taken_undecided(self, job: str) -> bool:
        return job in self.key_taken and self.key_taken[job] == self.retried[job]

    def the_tallies_count_every_row(self) -> None:
        """What the admin and the monitor show (the tallies) is what the rows say, after any
        move, folded or not."""
        if self.campaign_id:
            differences = SendTally.objects.differences([self.campaign_id])
            assert not differences, f"the tallies disagree with the rows: {differences}"

    @contextmanager
    def p6_changes_only_rows_still_held(self, worker: str, settles: Chunk | None = None,
                                        hands_over: Sequence[Claimed] = ()) -> Iterator[None]:
        """P6, around a worker's settle of ``settles`` and hand-over of ``hands_over`` (one
        commit): they change no row but those its claims still hold (a row whose lease expired
        and was taken over, by another worker or by this one again, is no longer that claim's).
        """
        before = _row_versions(self.campaign_id)
        yield
        after = _row_versions(self.campaign_id)
        outcomes = {o.send_id: o.kind for o in settles.outcomes} if settles else {}
        claimed = {row.id: row for row in hands_over}

        def may_change(i: int) -> bool:
            return ((i in outcomes and _a_settle_may_change(
                        before[i], after[i], worker=worker, attempt=settles.attempts[i],
                        outcome=outcomes[i]))
                    or (i in claimed and _a_hand_over_may_change(
                        before[i], after[i], worker=worker, claimed=claimed[i])))

        changed = [i for i in before if after[i] != before[i]]
        not_held = {self.address_by_id[i]: (before[i][:3], after[i].status)
                    for i in changed if not may_change(i)}
        assert not not_held, (f"P6: {worker} changed rows it did not hold "
                              f"((holder, status, attempt), status after): {not_held}")

    # --- the end of a run ----------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            # After a failed step the run to the end would only report a second failure, and
            # hypothesis would shrink towards that one instead.
            if self.campaign_id and sys.exc_info()[1] is None:
                self._run_to_the_end_and_check()
        finally:
            self._delete_the_tenant()
            _wait_for_the_disk(True)

    def _run_to_the_end_and_check(self) -> None:
        """Every worker stops; one worker runs the campaign to its end with a transport that
        always succeeds. Then every row is final, unless an operator paused the campaign."""
        self.workers = {CLOSER: WorkerState()}
        if self._campaign_status() == Campaign.Status.PAUSED:
            return
        for _ in range(5):
            _expire_leases(self.campaign_id, holder=None)
            _make_retries_due(self.campaign_id)
            self._build()
            self._recover()
            if not self._claim(CLOSER, batch_size=len(ADDRESSES)):
                break
            self._hand_over(CLOSER)
            while self.workers[CLOSER].to_send:
                self._transmit(CLOSER, Outcome.SENT)
            while self.workers[CLOSER].unsettled:
                self._settle(CLOSER)
        self._finish()
        self.keeps_its_promises()
        left = self._who(dict(Send.objects.filter(campaign_id=self.campaign_id, status__in=OPEN)
                              .values_list("id", "status")))
        status = self._campaign_status()
        assert not left, f"run to its end, the {status} campaign still has {left}"
        assert status in (Campaign.Status.SENT, Campaign.Status.CANCELLED), status

    def _delete_the_tenant(self) -> None:
        """Examples share the test's database: each removes what it made."""
        Send.objects.filter(account_id=self.account_id).delete()
        Campaign.objects.filter(account_id=self.account_id).delete()
        Account.objects.filter(id=self.account_id).delete()  # subscribers, suppressions, ...

    # --- the steps' parts ----------------------------------------------------------------------

    def _opt_out(self, address: str) -> None:
        """A recipient's opt-out, as the unsubscribe page records it."""
        Suppression.objects.unsubscribe(account_id=self.account_id,
                                        subscriber_id=self.subscribers[address][0],
                                        email_lower=address, campaign_id=self.campaign_id)
        if address not in self.opted_out_at:
            self.opted_out_at[address] = self.tick()
            note(f"{address} opts out at {self.clock}")

    def _build(self) -> None:
        """Build the list if it is not yet (any worker's housekeeping does); once it is, a build
        (by a worker restarted after a crash) adds nothing."""
        before = Send.objects.filter(campaign_id=self.campaign_id).count()
        created = Send.objects.build_recipients(campaign_id=self.campaign_id)
        after = Send.objects.filter(campaign_id=self.campaign_id).count()
        assert after == before + (created or 0), f"{after - before} rows built, {created} told"
        if created is None:
            return
        assert self.built_at is None, f"a rebuild added {created} rows"
        self.built_at = self.tick()
        for send_id, job, address in (Send.objects.filter(campaign_id=self.campaign_id)
                                      .values_list("id", "job_id", "email_lower")):
            self.address_of[job] = self.address_by_id[send_id] = address
            self.job_by_id[send_id] = job
        note(f"built at {self.clock}: {sorted(self.address_of.values())}")

    def _recover(self) -> None:
        recovered = Send.objects.recover_expired(idempotent=self.idempotent, max_attempts=MAX_ATTEMPTS)
        if recovered:
            note(f"recovered: {self._who({row.id: row.status for row in recovered})}")

    def _finish(self) -> None:
        if Campaign.objects.finish():
            note("the campaign finished")

    def _claim(self, worker: str, batch_size: int, after: int = 0) -> list[Claimed]:
        # A plain worker's claims say its receiver forgets at once (0: receiver_forgets_keys_after),
        # which would stop a row in doubt a second time; here recovery's own promise is checked.
        claimed = Send.objects.claim(worker_id=worker, batch_size=batch_size, lease=LEASE,
                                     campaign_id=self.campaign_id, hand_over=self.idempotent,
                                     after=after, forgets_after=MEMORY if self.idempotent else None)
        if claimed:
            note(f"{worker} claims {self._who({row.id: row.status for row in claimed})}")
        leased = [row for row in claimed if row.status == Send.Status.SENDING]
        opted_out = [row.job_id for row in leased if self.address_of[row.job_id] in self.opted_out_at]
        assert not opted_out, f"P3: the claim leased {opted_out}, opted out before it"
        # P7 where the engine decides it: a claim made since is what would send the row again (a
        # claim made before may still send it: the worker's own clock stops that one, within_lease,
        # which these sends do not model)
        taken = [row.job_id for row in leased if self._key_taken_undecided(row.job_id)]
        assert not taken, (f"P7: the claim leased {taken}, whose key the receiver said was taken, "
                           f"with no operator's decision since")
        self.workers[worker].claimed = leased
        self.workers[worker].attempts = {row.id: row.attempts for row in claimed}
        return claimed

    def _hand_over(self, worker: str) -> None:
        """The last check before the wire: the hand-over (plain), or the read of what an opt-out
        now blocks and the hand-over of those rows only (idempotent)."""
        state = self.workers[worker]
        with self.p6_changes_only_rows_still_held(worker, hands_over=state.claimed):
            ids = [row.id for row in state.claimed]
            if self.idempotent:
                # The Worker's own method: what it does with the managers' answers decides what
                # goes on the wire, so it is part of the protocol under test.
                batch = Batch(self.campaign_id, state.claimed, full=False,
                              tally=Tally(self.campaign_id, len(ids), len(ids)),
                              lease_ends=time.monotonic() + LEASE)
                checked = self._worker(worker)._hand_over(ids, batch=batch)
            else:  # a wire's first chunk: the hand-over alone (SendManager.hand_over)
                checked = Send.objects.hand_over(state.claimed, worker_id=worker)
        self._checked(worker, checked)

    def _settle_and_hand_over(self, worker: str) -> None:
        """A plain worker's wire: the settle of its last chunk and the hand-over of its next in
        one commit (SendManager.settle_and_hand_over)."""
        state = self.workers[worker]
        chunk = state.unsettled.pop(0)
        with self.p6_changes_only_rows_still_held(worker, chunk, state.claimed):
            settled, checked = Send.objects.settle_and_hand_over(
                chunk.outcomes, state.claimed, campaign_id=self.campaign_id,
                worker_id=worker, attempts=chunk.attempts, **RETRY)
        note(f"{worker} settles {self._who({o.send_id: o.kind for o in chunk.outcomes})}: "
             f"{self._who(settled)}, with the next hand-over")
        self._settled(chunk, settled)
        self._checked(worker, checked)

    def _checked(self, worker: str, checked: dict[int, str]) -> None:
        state = self.workers[worker]
        state.checked_at = self.tick()
        state.to_send = [row for row in state.claimed if checked.get(row.id) == Send.Status.SENDING]
        state.claimed = []
        note(f"{worker} checks at {self.clock}, to send: {self._who({r.id: '' for r in state.to_send})}")

    def _transmit(self, worker: str, outcome: str) -> None:
        """Send the next row; ``outcome`` is the transport's answer (DIES_AFTER: it went out),
        unless the receiver holds another message under its key: then it answers KEY_TAKEN."""
        state = self.workers[worker]
        row = state.to_send.pop(0)
        if outcome == Outcome.IN_DOUBT and self.idempotent:  # as the worker reads it
            outcome = Outcome.IN_DOUBT_RETRIED
        if outcome in (Outcome.SENT, DIES_AFTER, Outcome.IN_DOUBT, Outcome.IN_DOUBT_RETRIED,
                       Outcome.KEY_TAKEN):
            sent = self.receiver.accept(job_id=row.job_id, address=self.address_of[row.job_id],
                                        checked_at=state.checked_at,
                                        taken=outcome == Outcome.KEY_TAKEN)
            if sent.key_taken and outcome == Outcome.SENT:
                outcome = Outcome.KEY_TAKEN
            note(f"{worker} sends to {sent.address}: "
                 f"{'key taken' if sent.key_taken else 'absorbed' if sent.absorbed else 'delivered'}")
        if outcome == DIES_AFTER:
            return  # the caller lets it die
        state.answers.append(Outcome(row.id, outcome, provider_message_id=f"<{row.job_id}@fake>",
                                     error="" if outcome == Outcome.SENT else f"{outcome} failure"))
        if not state.to_send:  # the transport has answered for the whole chunk
            state.unsettled.append(Chunk(state.answers, state.attempts))
            state.answers = []

    def _runs_out(self, worker: str) -> None:
        """The claim's lease ran out (by the worker's clock; the database's may not yet) before
        the rest of the batch's turn: none of it goes on the wire, all of it is answered UNSENT."""
        state = self.workers[worker]
        state.answers += [Outcome(row.id, Outcome.UNSENT, error="not sent: past the lease")
                          for row in state.to_send]
        note(f"{worker}'s lease runs out: {self._who({r.id: 'unsent' for r in state.to_send})}")
        state.to_send = []
        state.unsettled.append(Chunk(state.answers, state.attempts))
        state.answers = []

    def _settle(self, worker: str) -> None:
        chunk = self.workers[worker].unsettled.pop(0)
        with self.p6_changes_only_rows_still_held(worker, chunk):
            settled = Send.objects.settle(chunk.outcomes, campaign_id=self.campaign_id,
                                          worker_id=worker, attempts=chunk.attempts, **RETRY)
        note(f"{worker} settles {self._who({o.send_id: o.kind for o in chunk.outcomes})}: "
             f"{self._who(settled)}")
        self._settled(chunk, settled)

    def _settled(self, chunk: Chunk, settled: dict[int, str]) -> None:
        """What a settle wrote of the rows its claim still held: a key taken is 'unknown' (P7),
        a row never put on the wire queued again (or cancelled with its campaign)."""
        for outcome in chunk.outcomes:
            if outcome.send_id not in settled:
                continue  # no longer the claim's: its new holder answers for it
            status, address = settled[outcome.send_id], self.address_by_id[outcome.send_id]
            if outcome.kind == Outcome.KEY_TAKEN:
                assert status == Send.Status.UNKNOWN, (
                    f"P7: {address}, answered that its key is taken, was settled {status}")
                job = self.job_by_id[outcome.send_id]
                self.key_taken[job] = self.retried[job]
            elif outcome.kind == Outcome.UNSENT:
                assert status in (Send.Status.QUEUED, Send.Status.CANCELLED), (
                    f"{address}, never put on the wire, was settled {status}")

    def _goes_out(self, worker: str, answer: str) -> None:
        """The worker's batch goes on the wire, handed over first if it is not yet (a plain
        worker's hand-over settles its last chunk: not one with a chunk left to settle); the
        transport answers ``answer`` for every message."""
        state = self.workers[worker]
        if state.claimed and not (state.unsettled and not self.idempotent):
            self._hand_over(worker)
        while state.to_send:
            if answer == RUNS_OUT:
                self._runs_out(worker)
            else:
                self._transmit(worker, answer)

    def _meanwhile(self, move: str, stalled: str) -> None:
        """A move of ``MEANWHILE``, while the worker ``stalled`` stalls."""
        other = next(worker for worker in WORKERS if worker != stalled)
        if move == RETRIED:
            self._retry_unknown(dict(Send.objects.filter(
                campaign_id=self.campaign_id, status=Send.Status.UNKNOWN).values_list("id", "job_id")))
        elif move == THROTTLED:
            self._goes_out(other, Outcome.THROTTLED)
            while self.workers[other].unsettled:
                self._settle(other)
        else:  # its hand at the stalled worker's rows
            claimant = stalled if move == ITSELF else other
            first = min(o.send_id for o in self.workers[stalled].unsettled[0].outcomes)
            if not self.workers[claimant].delivering:
                self._claim(claimant, batch_size=WORKERS[claimant], after=first - 1)

    def _retry_unknown(self, jobs: dict[int, str]) -> None:
        """An operator's retry of these unknown rows ({send id: job id})."""
        for requeued in Send.objects.retry_unknown(list(jobs)):
            self.retried[jobs[requeued.id]] += 1

    def _die(self, worker: str) -> None:
        if self.workers[worker] != WorkerState():
            note(f"{worker} dies")
        self.workers[worker] = WorkerState()

    def _worker(self, worker: str) -> Worker:
        return Worker(worker_id=worker, transport=ReceiverKind(idempotent=self.idempotent),
                      lease=LEASE, max_attempts=MAX_ATTEMPTS)

    def _campaign_status(self) -> str | None:
        return Campaign.objects.status_of(campaign_id=self.campaign_id)

    def _who(self, by_send_id: dict[int, str]) -> dict[str, str]:
        """{send id: x} as {address: x}, for notes a reader can follow."""
        return {self.address_by_id[send_id]: x for send_id, x in by_send_id.items()}


class PlainReceiver(SendProtocol):
    idempotent = False


class IdempotentReceiver(SendProtocol):
    idempotent = True

    # the same move, with what only a receiver that de-duplicates (and its worker) may answer
    @rule(worker=st.sampled_from(sorted(WORKERS)), fate=st.sampled_from(IDEMPOTENT_FATES),
          ahead=st.booleans())
    def worker_moves(self, worker: str, fate: str, ahead: bool) -> None:
        super().worker_moves(worker, fate, ahead)

    @precondition(lambda self: self.built_at is not None)
    @rule(worker=st.sampled_from(sorted(WORKERS)), answer=st.sampled_from(IDEMPOTENT_LATE_ANSWERS),
          meanwhile=st.sampled_from(sorted(MEANWHILE)))
    def a_settle_comes_after_the_lease(self, worker: str, answer: str, meanwhile: str) -> None:
        super().a_settle_comes_after_the_lease(worker, answer, meanwhile)

    @precondition(lambda self: self.built_at is not None)
    @rule(worker=st.sampled_from(sorted(WORKERS)), answer=st.sampled_from((Outcome.KEY_TAKEN, RUNS_OUT)))
    def a_batch_goes_out_and_is_settled_on_time(self, worker: str, answer: str) -> None:
        """The worker's batch goes out (claimed and handed over first if it holds none) and
        meets ``answer`` (the receiver holds another message under each key, or the lease runs
        out by the worker's clock before the batch's turn), and its settler settles it before
        anything else moves: the rows are still the claim's. One rule, as the settle after the
        lease: with a step per move, a claim, its hand-over, this answer and a settle on time
        came in this order too rarely to be found."""
        state = self.workers[worker]
        if not (state.delivering or state.unsettled):
            self._recover()
            self._claim(worker, batch_size=WORKERS[worker])
        self._goes_out(worker, answer)
        while state.unsettled:
            self._settle(worker)


# The same examples on every run (CI must not pass or fail by luck); PROTOCOL_RANDOM=1 searches
# new ones each time.
RUN = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
               derandomize=not os.environ.get("PROTOCOL_RANDOM"),
               suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.django_db(transaction=True)  # the managers commit: every step is really committed
# Shrinking a failure may take hypothesis minutes; a long search, hours.
@pytest.mark.timeout(0 if LONG_RUN else 900)
@pytest.mark.parametrize("machine", [PlainReceiver, IdempotentReceiver], ids=["plain", "idempotent"])
def test_the_send_protocol_keeps_its_promises_in_any_order_of_events(machine):
    with mutated(MUTANT):
        run_state_machine_as_test(machine, settings=RUN)


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_every_mutant_still_finds_its_text_in_the_sql(name):
    with mutated(name):
        pass


def test_a_mutant_said_to_survive_by_design_is_a_mutant():
    assert set(SURVIVE_BY_DESIGN) <= set(MUTANTS)


@pytest.mark.django_db(transaction=True)
def test_a_mutant_reaches_a_statement_the_connection_has_already_prepared():
    campaign = sending_campaign(count=2)
    first, second = Send.objects.claim(worker_id="w", batch_size=2, lease=60,
                                       campaign_id=campaign.id)
    assert Send.objects.hand_over([first], worker_id="w") == {first.id: "sending"}
    with mutated("hand_over_marks_sent"):
        assert Send.objects.hand_over([second], worker_id="w") == {second.id: "sent"}
