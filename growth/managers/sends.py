from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from django.db import models, transaction

from growth.managers.queries import FromRow, Queries, array_literal
from growth.sending.transports.base import Outcome

QUERIES = Queries.beside(__file__)

ANALYZE_AFTER = 10_000  # rows built at once that make the table's statistics stale
RECOVER_LIMIT = 10_000  # rows per recovery statement, to keep its transaction short


# why a claim made a row in doubt 'unknown' instead of sending it (either protocol)
FORGOTTEN_KEY = ("in doubt since an earlier attempt, and the receiver no longer remembers its key:"
                 " not sent again, where it could arrive twice")
# a claim's parameters for a receiver that remembers every key (tools, tests, the bench)
NEVER_FORGOTTEN = {"forgets_after": None, "forgotten_error": FORGOTTEN_KEY}


class Claimed(NamedTuple):
    """A send row this worker now holds: 'sending' under a lease, or just marked 'suppressed'
    (an opt-out) or 'unknown' (in doubt past the receiver's memory of its key).
    A named tuple, not a frozen dataclass: a claim makes one a recipient, and a frozen
    dataclass's ``__init__`` (an ``object.__setattr__`` a field) took 2.0-2.5 µs of the worker's
    Python a row against 0.5 (timeit, 500 rows built by name)."""

    id: int
    campaign_id: int
    subscriber_id: int
    email: str
    job_id: str
    status: str
    attempts: int
    destination_id: int | None  # its mailbox provider, for pacing
    # the lease this claim gave it, which names the claim (none: suppressed, or the lease
    # protocol's, whose lease has an id)
    leased_until: datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, object]) -> Claimed:
        return cls(**row)


@dataclass(frozen=True, slots=True)
class PacedClaim:
    """A claim made while some destinations are paced, and how far its window read."""

    rows: list[Claimed]
    scanned: int  # queued rows the window read
    scanned_to: int  # the last one's id (0: none)


@dataclass(frozen=True, slots=True)
class HandOver:
    """A wire's next chunk to hand over, with the outcomes of its last one to settle in the same
    commit (none: its first chunk). ``policy``: ``settle``'s keywords, worker_id included."""

    outcomes: Sequence[Outcome]
    hand_over: Sequence[Claimed]  # as the claim returned them
    policy: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Recovered(FromRow):
    """A row whose lease expired, and what recovery made of it."""

    id: int
    campaign_id: int
    status: str  # 'queued' (sent again, same key) or 'unknown' (an operator decides)


@dataclass(frozen=True, slots=True)
class Requeued(FromRow):
    id: int
    campaign_id: int
    reopened: bool  # the campaign had finished and went back to sending


@dataclass(frozen=True, slots=True)
class AddressHistory(FromRow):
    campaign_id: int
    campaign_name: str
    status: str
    sent_at: datetime | None
    updated_at: datetime
    send_id: int
    job_id: str
    attempts: int
    last_error: str
    provider_message_id: str
    resent_in_id: int | None  # the follow-up that took this recipient


@dataclass(frozen=True, slots=True)
class ResendAudience(FromRow):
    """Who a follow-up of a campaign would take, counted without building it."""

    # status in the original -> rows a follow-up would take; 'in_doubt': unknown, or queued
    # again after a lost worker or an operator's retry (taken only if asked)
    takeable: dict[str, int]
    # not sent, but opted out or no longer confirmed, or at an address (its subscriber's now)
    # that the chain has mailed or is to mail: never taken
    blocked: int
    already_resent: int  # taken by an earlier follow-up
    in_flight: int  # on the wire in the original right now: not taken (may still be delivered)
    # the rows its build would create, one per address: the addresses the rows taken are at now
    # (without, and with, those in doubt), and those of subscribers no campaign of the chain has
    # mailed that are not among them
    addresses: int
    addresses_with_doubt: int
    new_subscribers: int
    new_subscribers_with_doubt: int

    def total(self, *, include_unknown: bool, include_new_subscribers: bool) -> int:
        """The rows the follow-up's build would create with these options."""
        if include_unknown:
            return self.addresses_with_doubt + (
                self.new_subscribers_with_doubt if include_new_subscribers else 0)
        return self.addresses + (self.new_subscribers if include_new_subscribers else 0)

    @property
    def sharing_an_address(self) -> int:
        """Rows taken (those in doubt left out) that add no message: another row taken is at
        their address now."""
        return sum(n for status, n in self.takeable.items() if status != "in_doubt") - self.addresses

    @property
    def added_by_doubt(self) -> int:
        """The rows ticking "in doubt" adds to the build."""
        return self.addresses_with_doubt - self.addresses


class SendManager(models.Manager):
    """Build, claim, settle and recover growth_sends rows (see sends.sql)."""

    def unbuilt_campaigns(self) -> list[int]:
        return QUERIES.column("unbuilt_campaigns")

    def build_recipients(self, *, campaign_id: int, leases: bool = False) -> int | None:
        """Create the campaign's send rows and mark it built, in one transaction; ``leases``: it
        runs on the lease protocol (it gets its cursor), else on the row protocol.

        Return how many rows were created, or None when another worker holds the build or has
        already finished it.
        """
        with transaction.atomic():
            if not QUERIES.one("try_build_lock", campaign_id=campaign_id)["locked"]:
                return None
            unbuilt = QUERIES.one("still_unbuilt", campaign_id=campaign_id)
            if unbuilt is None:
                return None
            if unbuilt["resend_of_id"] is None:
                created = QUERIES.rowcount("build_recipients", campaign_id=campaign_id)
            else:
                created = self._build_follow_up(campaign_id, original_id=unbuilt["resend_of_id"],
                                                root_id=unbuilt["resend_root_id"])
            QUERIES.rows("mark_built", campaign_id=campaign_id, leases=leases)
        if created >= ANALYZE_AFTER:
            # Before autovacuum gets to it, the planner would judge the claim by the old,
            # empty statistics and read the whole campaign for every batch (seen: 1.2 s at 1M).
            QUERIES.rows("analyze")
        return created

    def _build_follow_up(self, campaign_id: int, *, original_id: int, root_id: int) -> int:
        """A follow-up's recipients: what the campaign it resends did not deliver, taken from it
        (at each subscriber's address now), and (if asked) subscribers no campaign of the chain
        has mailed. Inside the build's transaction."""
        QUERIES.rows("lock_resend_family", root_id=root_id)
        QUERIES.rows("lock_original_cursor", campaign_id=original_id)
        return (QUERIES.rowcount("take_from_original", campaign_id=campaign_id,
                                 original_id=original_id, root_id=root_id)
                + QUERIES.rowcount("build_new_subscribers", campaign_id=campaign_id,
                                   root_id=root_id))

    def claim(self, *, worker_id: str, batch_size: int, lease: float,
              campaign_id: int | None = None, hand_over: bool = False,
              after: int = 0, forgets_after: float | None = None) -> list[Claimed]:
        """Claim up to ``batch_size`` due rows, of one campaign or of any (committed before
        this returns). ``hand_over`` marks them handed over at once: for a receiver that
        de-duplicates, where a resend is harmless, this saves writing every row a third time.
        ``after``: of one campaign, only rows after this id (the caller's hand).
        ``forgets_after``: the seconds the receiver remembers a key (0: plain; None: for ever);
        a row in doubt for longer is made 'unknown', not sent (sends.sql, _forgotten_before)."""
        # One statement, so its own transaction in autocommit: no BEGIN/COMMIT round trips.
        # Its commit need not wait for the disk. If a database crash loses it, the rows are
        # queued again: with a plain receiver nothing was sent, since the hand-over (which does
        # wait, and whose flush carries this commit with it) finds them no longer ours; with an
        # idempotent one a resend under the same key is absorbed.
        params = {"worker_id": worker_id, "batch_size": batch_size, "lease": lease,
                  "hand_over": hand_over, "after": after, "forgets_after": forgets_after,
                  "forgotten_error": FORGOTTEN_KEY, "wait_for_flush": False}
        if campaign_id is None:
            rows = QUERIES.rows("claim_any", **params)
        else:
            rows = QUERIES.rows("claim", campaign_id=campaign_id, **params)
        return sorted((Claimed.from_row(row) for row in rows), key=lambda c: c.id)

    def claim_paced(self, *, worker_id: str, campaign_id: int, free: int, lease: float,
                    paced: Sequence[int], shares: Mapping[int, int], after: int, scan: int,
                    hand_over: bool = False, forgets_after: float | None = None) -> PacedClaim:
        """Claim rows of one campaign while the ``paced`` destinations are limited: up to
        ``shares[d]`` rows of each paced destination d, and up to ``free`` rows of the others
        found among the ``scan`` queued rows after id ``after`` (see claim_paced in sends.sql)."""
        shared = [(d, n) for d, n in shares.items() if n > 0]
        rows = QUERIES.rows("claim_paced", worker_id=worker_id, campaign_id=campaign_id,
                            free=max(free, 0), lease=lease, paced=list(paced),
                            share_ids=[d for d, _ in shared], share_counts=[n for _, n in shared],
                            after=after, scan=scan, hand_over=hand_over,
                            forgets_after=forgets_after, forgotten_error=FORGOTTEN_KEY,
                            wait_for_flush=False)
        window = rows[0] if rows else {"scanned": 0, "scanned_to": 0}
        claimed = [Claimed.from_row({k: v for k, v in row.items()
                                     if k not in ("scanned", "scanned_to")})
                   for row in rows if row["id"] is not None]
        return PacedClaim(sorted(claimed, key=lambda c: c.id), scanned=window["scanned"],
                          scanned_to=window["scanned_to"])

    def hand_over(self, claimed: Sequence[Claimed], *, worker_id: str) -> dict[int, str]:
        """Mark rows as going on the wire now, as the claim that returned them; return {id:
        'sending' (send it) | 'suppressed'}.

        Rows no longer held by that claim are absent: they must not be sent. Its commit waits for
        the disk: were it lost, a row that went out would look never handed over, and be sent
        again.
        """
        (rows,) = QUERIES.together(("hand_over", hand_over_params(claimed, worker_id=worker_id)))
        return {row["id"]: row["status"] for row in rows}

    def blocked(self, send_ids: Sequence[int], *, campaign_id: int | None = None,
                seen: int | None = None) -> list[int]:
        """Return which of these rows (of one campaign) an opt-out now blocks (a read: no row is
        written). ``seen``: the campaign's opt-out clock as the claim that looked at them read it
        (``Lease.opt_outs``): while it reads the same, none is, and no row is read."""
        if seen is not None and not QUERIES.one("opt_outs_moved", campaign_id=campaign_id,
                                                seen=seen)["moved"]:
            return []  # the claim's look stands
        return QUERIES.column("blocked", ids=array_literal(send_ids))

    def settle(self, outcomes: Sequence[Outcome], *, campaign_id: int, worker_id: str,
               attempts: Mapping[int, int], retry_for: float, backoff_base: float,
               backoff_max: float, throttle_delay: float = 1.0) -> dict[int, str]:
        """Record a batch of outcomes (rows of one campaign, as claimed) in one statement; return
        {send id: new status}.

        ``attempts``: each row's attempt as the claim returned it. Rows no longer held by this
        claim (``worker_id`` at that attempt) are left alone and absent from the result. A
        transient failure or a throttle is queued again while within ``retry_for`` seconds of
        the row's first attempt, 'failed' after.
        """
        if not outcomes:
            return {}
        # Not waiting for the disk: a settle lost in a database crash leaves its rows 'sending'
        # under a lease, and lease expiry treats them as after a worker's crash (queued again
        # for an idempotent receiver, 'unknown' for a plain one): never dropped, never resent.
        (rows,) = QUERIES.together(("settle", settle_params(
            outcomes, campaign_id=campaign_id, worker_id=worker_id, attempts=attempts,
            retry_for=retry_for, backoff_base=backoff_base, backoff_max=backoff_max,
            throttle_delay=throttle_delay)), wait_for_flush=False)
        return {row["id"]: row["status"] for row in rows}

    def settle_and_hand_over(self, outcomes: Sequence[Outcome], hand_over: Sequence[Claimed], *,
                             campaign_id: int, worker_id: str, attempts: Mapping[int, int],
                             retry_for: float, backoff_base: float, backoff_max: float,
                             throttle_delay: float = 1.0) -> tuple[dict[int, str], dict[int, str]]:
        """Settle one chunk's outcomes and hand over the next chunk in one round trip and one
        commit (which waits for the disk, as a hand-over's must); return what ``settle`` and
        ``hand_over`` would. Committed together, a kill leaves either chunk in doubt, never
        both: the wire that sent the first has not taken the second yet."""
        policy = {"campaign_id": campaign_id, "worker_id": worker_id, "attempts": attempts,
                  "retry_for": retry_for, "backoff_base": backoff_base,
                  "backoff_max": backoff_max, "throttle_delay": throttle_delay}
        return self.settle_and_hand_over_many([HandOver(outcomes, hand_over, policy)])[0]

    def settle_and_hand_over_many(self, requests: Sequence[HandOver]
                                  ) -> list[tuple[dict[int, str], dict[int, str]]]:
        """Several wires' ``settle_and_hand_over`` (a request without outcomes is a hand-over
        alone) in one round trip and one commit, waiting for the disk; what each would return,
        in order. Their rows are disjoint: each wire holds its own."""
        calls = []
        for request in requests:
            if request.outcomes:
                calls.append(("settle", settle_params(request.outcomes, **request.policy)))
            calls.append(("hand_over", hand_over_params(request.hand_over,
                                                        worker_id=request.policy["worker_id"])))
        results = iter(QUERIES.together(*calls))
        answers = []
        for request in requests:
            settled = next(results) if request.outcomes else []
            handed = next(results)
            answers.append(({row["id"]: row["status"] for row in settled},
                            {row["id"]: row["status"] for row in handed}))
        return answers

    def release(self, claimed: Sequence[Claimed], *, campaign_id: int, worker_id: str,
                idempotent: bool, unsent: bool = False) -> list[int]:
        """Queue again, attempt not counted, the campaign's rows that ``worker_id``'s claim
        returned and still holds, and that a resend cannot duplicate; return them. Rows handed
        over to a plain receiver stay to lease expiry: they may have been sent. ``unsent``: none
        of them went out (their batch never reached a wire), so none is in doubt for it."""
        return QUERIES.column("release", campaign_id=campaign_id, idempotent=idempotent,
                              unsent=unsent, **hand_over_params(claimed, worker_id=worker_id))

    def recover_expired(self, *, idempotent: bool, max_attempts: int) -> list[Recovered]:
        """Release rows whose lease expired; return what became of each."""
        with transaction.atomic():
            campaign_ids = QUERIES.column("lock_campaigns_of_expired")
            if not campaign_ids:
                return []
            rows = QUERIES.rows("recover_expired", campaign_ids=campaign_ids,
                                idempotent=idempotent, max_attempts=max_attempts,
                                limit=RECOVER_LIMIT)
        return [Recovered.from_row(row) for row in rows]

    def retry_unknown(self, send_ids: Sequence[int]) -> list[Requeued]:
        """Queue 'unknown' rows again with the same job id; return the rows moved. A finished
        campaign of theirs goes back to sending; rows of a cancelled campaign are left alone."""
        with transaction.atomic():
            QUERIES.rows("lock_campaigns_of_unknown", ids=list(send_ids))
            rows = QUERIES.rows("retry_unknown", ids=list(send_ids))
        return [Requeued.from_row(row) for row in rows]

    def resend_audience(self, *, campaign_id: int, root_id: int) -> ResendAudience:
        """Count what a follow-up of the campaign would take (see ``_build_follow_up``)."""
        row = QUERIES.one("resend_audience", original_id=campaign_id, root_id=root_id)
        takeable = dict(zip(row.pop("statuses"), row.pop("takeable_rows"), strict=True))
        return ResendAudience.from_row({**row, "takeable": takeable})

    def history_of_address(self, *, account_id: int, email_lower: str) -> list[AddressHistory]:
        """Return the tenant's campaigns that have a row for this address, newest first."""
        rows = QUERIES.rows("history_of_address", account_id=account_id, email_lower=email_lower)
        return [AddressHistory.from_row(row) for row in rows]


def hand_over_params(claimed: Sequence[Claimed], *, worker_id: str) -> dict[str, object]:
    """A claim's rows as hand_over and release name them: by the worker, and the leases the
    claim gave them (one a claim statement)."""
    leases = {row.leased_until for row in claimed if row.leased_until is not None}
    return {"ids": array_literal(row.id for row in claimed),
            "leases": array_literal(sorted(lease.isoformat() for lease in leases)),
            "worker_id": worker_id}


def settle_params(outcomes: Sequence[Outcome], *, campaign_id: int, worker_id: str,
                   attempts: Mapping[int, int], retry_for: float, backoff_base: float,
                   backoff_max: float, throttle_delay: float) -> dict[str, object]:
    return {"ids": array_literal(o.send_id for o in outcomes),
            "attempts": array_literal(attempts[o.send_id] for o in outcomes),
            "outcomes": array_literal(o.kind for o in outcomes),
            "provider_ids": array_literal(o.provider_message_id for o in outcomes),
            "errors": array_literal(o.error for o in outcomes),
            "retry_afters": array_literal(o.retry_after for o in outcomes),
            "campaign_id": campaign_id, "worker_id": worker_id, "retry_for": retry_for,
            "throttle_delay": throttle_delay, "backoff_base": backoff_base,
            "backoff_max": backoff_max}
