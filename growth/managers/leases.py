"""The lease protocol's statements (leases.sql): a campaign's rows claimed in leases behind its
cursor, each row written once, by the settle that ends its lease.

A campaign built with SENDER_PROTOCOL=leases runs on these (it has a cursor); the others on the
row protocol (sends.sql). A receiver that de-duplicates takes a claim as one lease, handed over
by the claim; a plain receiver's wires take it in leases of a chunk each, each handed over in a
commit of its own (settle_and_hand_over_many) before its rows go out.
Checked by tests/test_leases.py, tests/test_worker_leases.py and, on copies of these tables,
tests/test_lease_protocol_stateful.py; measured by the bench (direction i, and the engine on
leases).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.db import models

from growth.managers.queries import FromRow, Queries
from growth.managers.sends import Claimed, settle_params
from growth.sending.transports.base import Outcome

QUERIES = Queries.beside(__file__)

SUPPRESSED = "suppressed"  # a settle's outcome for a row the claim or the hand-over found blocked
# a settle's outcome for a row the claim found in doubt past the receiver's memory of its key:
# 'unknown', not sent, its attempt not counted (as the row protocol's claim makes it)
FORGOTTEN = "forgotten"


@dataclass(frozen=True, slots=True)
class Lease:
    """One lease of a claim: its id and its rows, each 'sending' (to send) or 'suppressed' (an
    opt-out: the settle writes it so), with the attempt this claim makes. ``taken_over``: a free
    lease, taken over whole (a dead or stopped worker's: its others are likely free too).
    ``opt_outs``: the tenant's opt-out clock as the claim read it when it looked at the rows
    (None: not known), for the look before the wire (sends.sql, ``opt_outs_moved``)."""

    id: int
    rows: list[Claimed]
    taken_over: bool = False
    opt_outs: int | None = None


@dataclass(frozen=True, slots=True)
class Pacing:
    """The destinations paced now, each with the rows its tokens allow (``shares``), and how many
    rows past the cursor a claim walks while any is paced (``scan``)."""

    shares: Mapping[int, int]
    scan: int

    @property
    def params(self) -> dict[str, object]:
        return {"paced": list(self.shares), "share_ids": list(self.shares),
                "share_counts": [max(n, 0) for n in self.shares.values()], "scan": self.scan}


UNPACED = Pacing(shares={}, scan=0)


@dataclass(frozen=True, slots=True)
class LeaseHandOver:
    """A plain receiver's wire: the next lease to hand over (None: none, the wire is done), with
    the leases it answered since its last hand-over, each with its outcomes, to settle in the
    same commit. ``policy``: ``settle``'s keywords, worker_id included."""

    settle: Sequence[tuple[int, Sequence[Outcome]]]
    hand_over: int | None
    policy: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Recovery(FromRow):
    """What one recovery did: leases freed for a take-over (and their rows, queued still),
    leases ended, and their rows."""

    freed: int
    freed_rows: int
    lost: int
    unknown: int
    cancelled: int


@dataclass(frozen=True, slots=True)
class Released(FromRow):
    freed: int  # leases freed for a take-over
    cancelled: int  # rows cancelled with their campaign
    unknown: int  # rows of a cancelled campaign that may have gone out (handed over)


class LeaseManager(models.Manager):
    """Claim, hand over, settle, give back and recover leases (see leases.sql)."""

    def claim(self, *, worker_id: str, campaign_id: int, batch_size: int, lease: float,
              chunk_size: int | None = None, hand_over: bool = False,
              pacing: Pacing = UNPACED, forgets_after: float | None = None) -> list[Lease]:
        """Claim the campaign's next batch (committed before this returns): a free lease whole,
        or its rows due again and then those past its cursor, in leases of ``chunk_size`` rows
        (none: one lease), in id order; [] when nothing is due. ``hand_over``: the leases count
        as handed over at once (a receiver that de-duplicates). ``forgets_after``: the seconds
        the receiver remembers a key (0: plain; None: for ever); a row in doubt for longer comes
        back 'unknown', for the worker to settle so, unsent (sends.sql, _forgotten_before)."""
        # The cursor's lock first, in the same string and transaction: the claim's snapshot then
        # follows the wait (leases.sql, lock_cursor). Not waiting for the disk: a claim lost in a
        # database crash leaves its rows behind the old cursor, queued, with nothing sent.
        params = {"campaign_id": campaign_id, "worker_id": worker_id, "batch_size": batch_size,
                  "chunk_size": chunk_size or batch_size, "lease": lease,
                  "hand_over": hand_over, "forgets_after": forgets_after, **pacing.params}
        # Not prepared: a generic plan cannot know whether destinations are paced, nor how
        # many rows the walk past the cursor may take; with one, the engine on leases ran at
        # 0.87-1.14x the row protocol's rate with one worker, against 1.55-1.62x (bench).
        _, rows = QUERIES.together(("lock_cursor", {"campaign_id": campaign_id}),
                                   ("claim", params), wait_for_flush=False, prepare=False)
        leases: dict[int, list[Claimed]] = {}
        taken_over, opt_outs = False, None
        for row in sorted(rows, key=lambda r: r["id"]):
            lease_id, taken_over = row.pop("lease_id"), row.pop("taken_over")
            opt_outs = row.pop("opt_outs")
            leases.setdefault(lease_id, []).append(Claimed.from_row(row))
        return [Lease(lease_id, claimed, taken_over, opt_outs)
                for lease_id, claimed in leases.items()]

    def hand_over(self, lease_id: int, *, worker_id: str) -> dict[int, str]:
        """Stamp the lease handed over before its rows go on a wire; return {id: 'sending' (send
        it) | 'suppressed' (an opt-out: do not)}. Empty: the lease is no longer this claim's,
        and nothing of it may be sent. Its commit waits for the disk."""
        return _handed(QUERIES.rows("hand_over", lease_id=lease_id, worker_id=worker_id))

    def settle(self, lease_id: int, outcomes: Sequence[Outcome], *, campaign_id: int,
               worker_id: str, attempts: Mapping[int, int], idempotent: bool, retry_for: float,
               backoff_base: float, backoff_max: float,
               throttle_delay: float = 1.0) -> dict[int, str]:
        """End the lease and write each of its rows once; return {send id: new status} of the
        rows with an outcome.

        ``outcomes``: one for each row of the lease, those found blocked as ``SUPPRESSED``, those
        in doubt past the receiver's memory as ``FORGOTTEN``; a row without one is judged as
        recovery would judge it (``idempotent``: the receiver de-duplicates), never left behind.
        ``attempts``: each row's attempt as the claim returned it. A lease taken over is no
        longer this claim's: nothing is written, and the result is empty (but for rows that
        recovery made 'unknown' from this lease and that were in fact accepted: 'sent')."""
        params = settle_params(outcomes, campaign_id=campaign_id, worker_id=worker_id,
                               attempts=attempts, retry_for=retry_for, backoff_base=backoff_base,
                               backoff_max=backoff_max, throttle_delay=throttle_delay)
        # Not waiting for the disk: a settle lost in a database crash leaves its lease to
        # expire, and recovery judges it as after a worker's crash. Not prepared: with a generic
        # plan the engine on leases ran at 1.13-1.31x the row protocol's rate with one worker,
        # against 1.55-1.62x (bench, two repetitions each).
        rows = QUERIES.rows("settle", lease_id=lease_id, idempotent=idempotent,
                            wait_for_flush=False, **params)
        return {row["id"]: row["status"] for row in rows}

    def settle_and_hand_over_many(self, requests: Sequence[LeaseHandOver]
                                  ) -> list[tuple[dict[int, str], dict[int, str]]]:
        """Several plain wires' settles and hand-overs in one round trip and one commit, waiting
        for the disk (a lease is handed over only once that commit is on it); for each request,
        what its settles returned and what ``hand_over`` returned. Their leases are disjoint:
        each wire holds its own."""
        calls = []
        for request in requests:
            for lease_id, outcomes in request.settle:
                calls.append(("settle", {**settle_params(outcomes, **request.policy),
                                         "lease_id": lease_id, "idempotent": False}))
            if request.hand_over is not None:
                calls.append(("hand_over", {"lease_id": request.hand_over,
                                            "worker_id": request.policy["worker_id"]}))
        # not prepared, as settle (a generic plan was slower)
        results = iter(QUERIES.together(*calls, prepare=False))
        answers = []
        for request in requests:
            settled = {row["id"]: row["status"]
                       for _ in request.settle for row in next(results)}
            handed = _handed(next(results)) if request.hand_over is not None else {}
            answers.append((settled, handed))
        return answers

    def release(self, lease_id: int, *, campaign_id: int, worker_id: str,
                idempotent: bool, unsent: bool = False) -> Released:
        """Give back a lease this worker will not send: freed for a take-over, or, in a
        cancelled campaign, ended with its rows cancelled. A lease handed to a plain receiver
        stays to its expiry (its rows may have gone out); one handed to a receiver that
        de-duplicates is in doubt as after a crash, unless ``unsent``: none of it went out."""
        return Released.from_row(QUERIES.one("release", lease_id=lease_id,
                                             campaign_id=campaign_id, worker_id=worker_id,
                                             idempotent=idempotent, unsent=unsent))

    def recover(self, *, idempotent: bool, max_attempts: int, limit: int = 1_000) -> Recovery:
        """Free or end the leases whose worker died or stalled past their expiry."""
        return Recovery.from_row(QUERIES.one("recover", idempotent=idempotent,
                                             max_attempts=max_attempts, limit=limit))


def _handed(rows: Sequence[Mapping[str, object]]) -> dict[int, str]:
    """hand_over's rows as {send id: 'sending' (send it) | 'suppressed' (an opt-out: do not)}."""
    return {row["id"]: SUPPRESSED if row["blocked"] else "sending" for row in rows}
