"""The next send protocol's statements (shape i of bench/directions.sql: a lease per batch behind a
campaign cursor, docs/one-write-per-recipient.md) as a state machine, before the engine runs them:
hypothesis drives two workers (claiming with and without a paced destination, handing over,
sending, settling, dying, stalling past their lease), recovery, opt-outs and an operator (cancel,
requeue an unknown row) against the real database in whatever order it finds, and checks the
promises after every step, then once more after running the campaign to its end.

It covers what spin could not: a lease of two rows with two live workers
(verify/lease_protocol.pml stops at 1 row x 2 workers, or 2 rows x 1). A longer search:
LEASE_EXAMPLES=2000 (and LEASE_STEPS=50). Under LEASE_MUTANT=<a name of
tests/protocol_mutants.LEASE_MUTANTS> it is expected to fail (verify/check.py --stateful).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

import pytest
from django.db import connection
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from bench import directions
from growth.models import Suppression
from tests import lease_statements
from tests.protocol_mutants import LEASE_MUTANTS, lease_mutated
from tests.scenarios import sending_campaign

# 600: with 200 (a third of the time) the search missed a plain hand-over blind to opt-outs (the
# mutant lease_hand_over_ignores_opt_outs); 600 finds it, about 70 s for both receivers
EXAMPLES = int(os.environ.get("LEASE_EXAMPLES", 600))
# a deliberate bug of tests/protocol_mutants.LEASE_MUTANTS, under which this test must fail
MUTANT = os.environ.get("LEASE_MUTANT", "")
STEPS = int(os.environ.get("LEASE_STEPS", 30))
WORKERS = ("w1", "w2")
ROWS, BATCH = 4, 2
PACED, OTHER = 1, 2  # destination ids on the copy: rows 0 and 2 go to the paced one
MAX_ATTEMPTS = 3
SENT, TRANSIENT, PERMANENT = "sent", "transient", "permanent"
REFUSED = "refused"  # the transport refused us: its attempt given back, due again at once
# it went out whole and its answer was lost: 'in_doubt' to a plain receiver, 'in_doubt_retried'
# (again under its key) to one that de-duplicates, as the worker settles it
IN_DOUBT = "in_doubt"
DIES, STALLS = "dies", "stalls past its lease"
RAISES = "a wire raises"  # the worker settles what was answered: the rest has no outcome
FATES = (SENT, TRANSIENT, REFUSED, IN_DOUBT, PERMANENT, DIES, STALLS, RAISES)
# A receiver that de-duplicates may hold another message under our key (an earlier one of ours
# whose body differs, or another sender's): it refuses ours, and every later one under the key.
# A plain receiver keeps no keys. A worker that de-duplicates sends a chunk only while its claim's
# lease holds (Batch.within_lease): past it, what it has not sent is settled unsent.
KEY_TAKEN, UNSENT = "key_taken", "unsent"
IDEMPOTENT_FATES = (*FATES, KEY_TAKEN, UNSENT)
FINAL = {"sent", "failed", "suppressed", "unknown", "cancelled"}


@dataclass
class Hand:
    """What a worker holds in memory between its steps; lost when it dies."""

    lease_id: int
    rows: list[dict]  # as the claim returned them
    epoch: dict[int, int] = field(default_factory=dict)  # each row's requeues when claimed
    checked_at: int = 0  # the clock at the last check before the wire (0: not yet)
    to_send: list[dict] = field(default_factory=list)
    outcomes: dict[int, str] = field(default_factory=dict)


class LeaseProtocol(RuleBasedStateMachine):
    idempotent: bool  # the receiver's kind: set by the subclasses below
    campaign = None  # built by the first example of a test, reused by the others

    def __init__(self) -> None:
        super().__init__()
        self.clock = 0
        self.hands: dict[str, Hand | None] = dict.fromkeys(WORKERS)
        # job id -> deliveries by claims made since the operator's last requeue of its row (a
        # message already on the wire when the operator requeued is the duplicate accepted)
        self.fresh: Counter[str] = Counter()
        self.requeued: Counter[int] = Counter()  # row -> the operator's requeues
        self.delivered: set[str] = set()  # job ids the recipient got at least once
        # job ids under which the receiver holds a message other than ours as we send it now:
        # every message of ours under one is refused (what it delivered before stays delivered)
        self.taken: set[str] = set()
        # row -> the operator's requeues of it when a settle recorded that its key was taken
        # (P7: until the operator requeues it, it stays 'unknown' and no claim takes it)
        self.key_taken: dict[int, int] = {}
        self.opted_out_at: dict[str, int] = {}  # address -> clock when its opt-out committed
        self.cancelled = False

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    @initialize()
    def a_sending_campaign_and_its_copy(self) -> None:
        """The test's campaign, built once, and its copy as built, again for each example (a
        fresh copy's tables and statistics cost a second an example)."""
        if LeaseProtocol.campaign is None:
            LeaseProtocol.campaign = sending_campaign(count=ROWS)
            directions.fill(directions.DIRECTIONS["i"], LeaseProtocol.campaign.id)
        campaign = LeaseProtocol.campaign
        self.campaign_id, self.account_id = campaign.id, campaign.account_id
        columns = ", ".join(directions._columns())
        with connection.cursor() as cursor:
            cursor.execute("UPDATE growth_campaigns SET status = 'sending' WHERE id = %s",
                           [campaign.id])
            cursor.execute("DELETE FROM growth_suppressions WHERE account_id = %s",
                           [campaign.account_id])
            cursor.execute("TRUNCATE dir_leases, dir_sends")
            cursor.execute(f"INSERT INTO dir_sends ({columns}) SELECT {columns} FROM growth_sends "
                           "WHERE campaign_id = %s", [campaign.id])
            cursor.execute("UPDATE dir_cursors SET claimed_to = 0")
        rows = self._sql_raw("SELECT id, email_lower, job_id FROM dir_sends ORDER BY id")
        self.ids = [row[0] for row in rows]
        self.address = {row[0]: row[1] for row in rows}
        self.job = {row[0]: row[2] for row in rows}
        with connection.cursor() as cursor:
            cursor.execute("UPDATE dir_sends SET destination_id = CASE WHEN id = ANY(%s) "
                           "THEN %s ELSE %s END", [self.ids[::2], PACED, OTHER])

    # --- the actors ------------------------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), fate=st.sampled_from(FATES),
          share=st.sampled_from([None, 0, 1]))
    def worker_moves(self, worker: str, fate: str, share: int | None) -> None:
        """The worker's next move, in the order of the engine's loop: idle, it claims (with the
        paced destination's share of tokens, or nothing paced); then it checks its rows before
        the wire (a plain receiver's hand-over, or an idempotent one's read of the opt-outs),
        sends them one by one (the receiver answering ``fate``), and settles. A wire may raise
        after the check: the worker settles the rows answered, the rest without an outcome. Or it
        dies (its
        memory is lost, its lease stays until it expires), or stalls: its lease runs out and is
        recovered before its move. An idempotent receiver may hold another message under a key
        (KEY_TAKEN), and an idempotent worker's lease may run out by its own clock before the
        rest of its rows go out (UNSENT)."""
        hand = self.hands[worker]
        if fate == DIES:
            if hand is not None:
                note(f"{worker} dies holding lease {hand.lease_id}")
            self.hands[worker] = None
            return
        if fate == STALLS:
            self._expire(worker)
        if hand is None:
            self._claim(worker, share)
        elif fate == RAISES and hand.checked_at and hand.to_send:
            self._settle(worker, hand, answered_only=True)
        elif not hand.checked_at:
            self._check(worker, hand)
        elif hand.to_send and fate == UNSENT:  # the lease ran out by the worker's clock
            hand.outcomes.update(dict.fromkeys([row["id"] for row in hand.to_send], UNSENT))
            note(f"{worker}'s lease {hand.lease_id} runs out before the wire: "
                 f"{sorted(row['id'] for row in hand.to_send)} unsent")
            hand.to_send = []
        elif hand.to_send:
            self._send(worker, hand, SENT if fate == STALLS else fate)
        else:
            self._settle(worker, hand)

    @rule()
    def time_passes(self) -> None:
        """Every live lease runs out; recovery frees or ends each."""
        self._expire(None)

    @rule(index=st.integers(0, ROWS - 1))
    def recipient_opts_out(self, index: int) -> None:
        """A recipient opts out: one a worker holds if there is one (where it matters most)."""
        held = sorted({row["id"] for hand in self.hands.values() if hand for row in hand.rows})
        address = self.address[held[index % len(held)] if held else self.ids[index]]
        if address not in self.opted_out_at:
            Suppression.objects.suppress(account_id=self.account_id, email_lower=address,
                                         reason="unsubscribed")
            self.opted_out_at[address] = self.tick()
            note(f"{address} opts out")

    @rule()
    def operator_cancels(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            with connection.cursor() as cursor:
                cancelled = lease_statements.cancel(cursor, self.campaign_id)
            note(f"operator cancels: rows {cancelled}")

    @rule()
    def operator_requeues_the_unknown(self) -> None:
        unknown = [row[0] for row in self._sql_raw(
            "SELECT id FROM dir_sends WHERE status = 'unknown'")]
        if unknown and not self.cancelled:
            for row in self._sql("sends.retry_unknown", ids=unknown):
                self.requeued[row["id"]] += 1
                self.fresh[self.job[row["id"]]] = 0
            note(f"operator requeues {unknown}")

    # --- the promises, after every step ----------------------------------------------------------

    @invariant()
    def leases_are_disjoint_and_every_queued_row_is_reachable(self) -> None:  # P4
        if not hasattr(self, "ids"):
            return
        leases = self._sql_raw("SELECT send_ids, handed_over_at IS NOT NULL FROM dir_leases")
        held = Counter(row_id for ids, _ in leases for row_id in ids)
        assert all(n == 1 for n in held.values()), f"two leases hold a row: {held}"
        handed = {row_id for ids, on_a_wire in leases if on_a_wire for row_id in ids}
        rows = {row[0]: row[1:] for row in self._sql_raw(
            "SELECT id, status, next_attempt_at FROM dir_sends")}
        for row_id in held:  # or withheld by its lease's plain hand-over, an opt-out
            assert rows[row_id][0] == "queued" or (
                rows[row_id][0] == "suppressed" and row_id in handed and not self.idempotent), (
                f"row {row_id} in a lease is {rows[row_id][0]}")
        ((cursor,),) = self._sql_raw("SELECT claimed_to FROM dir_cursors")
        for row_id, (status, due) in rows.items():
            assert due is None or (status == "queued" and row_id not in held), (
                f"row {row_id} due again is {status}, or in a lease")
            assert status != "queued" or row_id in held or due or row_id > cursor, (
                f"row {row_id} is queued where no claim reaches it")

    @invariant()
    def one_delivery_per_job_between_requeues_and_none_sent_without_one(self) -> None:  # P1, P2
        assert all(n <= 1 for n in self.fresh.values()), f"delivered twice: {self.fresh}"
        if hasattr(self, "ids"):
            for row_id, status in self._sql_raw("SELECT id, status FROM dir_sends"):
                assert status != "sent" or self.job[row_id] in self.delivered, (
                    f"row {row_id} is sent and was never delivered")

    @invariant()
    def a_row_whose_key_was_taken_waits_for_an_operator(self) -> None:  # P7
        """A row settled on the receiver's answer that another message holds its key stays
        'unknown' until the operator requeues it (no claim takes it meanwhile: _claim)."""
        if hasattr(self, "ids"):
            for row_id, status in self._sql_raw("SELECT id, status FROM dir_sends"):
                assert not self._key_taken_undecided(row_id) or status == "unknown", (
                    f"P7: row {row_id}'s key is taken, the operator did not requeue it, "
                    f"and it is {status}")

    def _key_taken_undecided(self, row_id: int) -> bool:
        return self.key_taken.get(row_id) == self.requeued[row_id]

    def teardown(self) -> None:
        """Run the campaign to its end (every lease recovered, one worker that never dies), then
        every row must be final, and P1 still hold."""
        if hasattr(self, "ids"):
            self.hands = dict.fromkeys(WORKERS)
            self._expire(None)
            while self._claim("closer", None):
                hand = self.hands["closer"]
                self._check("closer", hand)
                while hand.to_send:
                    self._send("closer", hand, SENT)
                self._settle("closer", hand)
            statuses = dict(self._sql_raw("SELECT id, status FROM dir_sends"))
            assert set(statuses.values()) <= FINAL, f"not final at the end: {statuses}"
            with connection.cursor() as cursor:
                assert not lease_statements.queued(cursor)
            self.one_delivery_per_job_between_requeues_and_none_sent_without_one()
        super().teardown()

    # --- the steps -------------------------------------------------------------------------------

    def _claim(self, worker: str, share: int | None) -> bool:
        with connection.cursor() as cursor:
            rows = lease_statements.claim(
                cursor, campaign_id=self.campaign_id, worker_id=worker, batch_size=BATCH,
                shares=None if share is None else {PACED: share}, hand_over=self.idempotent,
                scan=ROWS)
        if not rows:
            return False
        hand = Hand(lease_id=rows[0]["lease_id"], rows=rows,
                    epoch={row["id"]: self.requeued[row["id"]] for row in rows})
        hand.outcomes = {row["id"]: "suppressed" for row in rows if row["status"] == "suppressed"}
        taken = [row["id"] for row in rows
                 if row["status"] == "queued" and self._key_taken_undecided(row["id"])]
        assert not taken, (f"P7: lease {hand.lease_id} holds rows {taken} to send, whose key the "
                           f"receiver said was taken, with no requeue by the operator since")
        self.hands[worker] = hand
        note(f"{worker} claims lease {hand.lease_id}: {sorted(r['id'] for r in rows)}")
        return True

    def _check(self, worker: str, hand: Hand) -> None:
        ids = [row["id"] for row in hand.rows if row["id"] not in hand.outcomes]
        if self.idempotent:  # as Send.objects.blocked: the rows are read if the opt-out clock
            # moved since the claim read it
            moved = self._sql("sends.opt_outs_moved", campaign_id=self.campaign_id,
                              seen=hand.rows[0]["opt_outs"])[0]["moved"]
            blocked = {row["id"] for row in self._sql("sends.blocked", ids=ids)} if moved else set()
        else:
            stamped = self._sql("leases.hand_over", lease_id=hand.lease_id, worker_id=worker)
            if not stamped:  # taken over, or ended: not ours, nothing of it is sent
                note(f"{worker} hand-over of lease {hand.lease_id}: not ours any more")
                self.hands[worker] = None
                return
            blocked = {row["id"] for row in stamped if row["blocked"]}
        hand.checked_at = self.tick()
        hand.outcomes.update(dict.fromkeys(blocked, "suppressed"))
        hand.to_send = [row for row in hand.rows if row["id"] not in hand.outcomes]

    def _send(self, worker: str, hand: Hand, fate: str) -> None:
        row = hand.to_send.pop(0)
        job, address = row["job_id"], self.address[row["id"]]
        if fate in (SENT, IN_DOUBT, KEY_TAKEN):
            opted_out = self.opted_out_at.get(address)
            assert opted_out is None or opted_out > hand.checked_at, (  # P3
                f"{address} opted out before the last check and got {job}")
        if fate == KEY_TAKEN or (fate in (SENT, IN_DOUBT) and job in self.taken):
            # refused: nothing of ours is delivered (the answer to an IN_DOUBT is lost)
            assert self.idempotent, "a receiver that keeps no keys holds nothing under one"
            self.taken.add(job)
            fate = KEY_TAKEN if fate != IN_DOUBT else fate
            note(f"{worker} sends row {row['id']}: the receiver holds another message under {job}")
        elif fate in (SENT, IN_DOUBT):
            absorbed = self.idempotent and job in self.delivered
            if not absorbed and hand.epoch[row["id"]] == self.requeued[row["id"]]:
                self.fresh[job] += 1
            self.delivered.add(job)
        hand.outcomes[row["id"]] = "in_doubt_retried" if fate == IN_DOUBT and self.idempotent else fate
        self.tick()

    def _settle(self, worker: str, hand: Hand, *, answered_only: bool = False) -> None:
        rows = [row for row in hand.rows if row["id"] in hand.outcomes] if answered_only else hand.rows
        with connection.cursor() as cursor:  # a retry is due at once
            settled = lease_statements.settle(cursor, rows, hand.outcomes,
                                              campaign_id=self.campaign_id, worker_id=worker,
                                              idempotent=self.idempotent,
                                              lease_id=hand.lease_id)
        note(f"{worker} settles lease {hand.lease_id} {hand.outcomes}: {settled}")
        self.hands[worker] = None
        for row_id, status in settled.items():  # the rows the settle wrote, still its lease's
            if hand.outcomes.get(row_id) == KEY_TAKEN:
                assert status == "unknown", (
                    f"P7: row {row_id}, answered that its key is taken, was settled {status}")
                self.key_taken[row_id] = self.requeued[row_id]
            elif hand.outcomes.get(row_id) == UNSENT:
                assert status in ("queued", "cancelled"), (
                    f"row {row_id}, never put on the wire, was settled {status}")

    def _expire(self, worker: str | None) -> None:
        with connection.cursor() as cursor:
            recovered = lease_statements.expire_and_recover(
                cursor, idempotent=self.idempotent, max_attempts=MAX_ATTEMPTS, worker_id=worker)
        note(f"leases of {worker or 'every worker'} run out: {recovered}")

    def _sql(self, name: str, **params) -> list[dict]:
        with connection.cursor() as cursor:
            return lease_statements.run(cursor, name, **params)

    def _sql_raw(self, sql: str, params=(), *, fetch: bool = True) -> list[tuple]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if fetch else []


class PlainReceiver(LeaseProtocol):
    idempotent = False


class IdempotentReceiver(LeaseProtocol):
    idempotent = True

    # the same move, with what only a receiver that de-duplicates (and its worker) may answer
    @rule(worker=st.sampled_from(WORKERS), fate=st.sampled_from(IDEMPOTENT_FATES),
          share=st.sampled_from([None, 0, 1]))
    def worker_moves(self, worker: str, fate: str, share: int | None) -> None:
        super().worker_moves(worker, fate, share)


RUN = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
               derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.django_db(transaction=True)  # every statement really commits
@pytest.mark.parametrize("machine", [PlainReceiver, IdempotentReceiver], ids=["plain", "idempotent"])
def test_the_lease_protocols_statements_keep_the_promises_in_any_order_of_events(machine,
                                                                                 drop_copies):
    LeaseProtocol.campaign = None  # the database was emptied since the last test
    with lease_mutated(MUTANT, lease_statements.statements()):
        run_state_machine_as_test(machine, settings=RUN)


@pytest.mark.parametrize("name", sorted(LEASE_MUTANTS))
def test_every_lease_mutant_still_finds_its_text_in_the_sql(name):
    with lease_mutated(name, lease_statements.statements()):
        pass
