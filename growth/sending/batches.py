"""A batch in the worker's hands: the rows one claim gave it, what became of them (its tally,
logged and counted once it has landed), and its pieces on the connections."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from growth.managers.leases import FORGOTTEN, SUPPRESSED, Lease
from growth.managers.sends import FORGOTTEN_KEY, Claimed
from growth.models import Send
from growth.observability import metrics
from growth.sending.transports import Outcome

logger = logging.getLogger("growth.sending.worker")  # the worker's batch lines, as before

GIVEN_BACK = "given back"  # queued again, attempt not counted: the worker stopped, or was refused


@dataclass
class Tally:
    """What became of one batch, for its log line. Added to from the loop (rows suppressed at the
    hand-over) and from the settler (outcomes), hence the lock."""

    campaign_id: int
    claimed: int
    to_send: int
    forgotten: int = 0  # made 'unknown' by the claim: in doubt past the receiver's memory
    started: float = field(default_factory=time.monotonic)
    counts: Counter = field(default_factory=Counter)  # new status -> rows
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, settled: dict[int, str]) -> None:
        with self._lock:
            self.counts.update(settled.values())

    def add_rows(self, outcome: str, rows: int) -> None:
        with self._lock:
            self.counts[outcome] += rows

    def report(self, worker_id: str, transport: str) -> None:
        """Log the batch's line (debug: the console's progress lines are what an operator
        reads) and count its rows in the worker's metrics."""
        counts = {"sent": self.counts["sent"], "retry": self.counts["queued"],
                  "failed": self.counts["failed"],
                  "suppressed": (self.counts["suppressed"] + self.claimed - self.to_send
                                 - self.forgotten),
                  "cancelled": self.counts["cancelled"],
                  "unknown": self.counts["unknown"] + self.forgotten,
                  GIVEN_BACK: self.counts[GIVEN_BACK],
                  "left to lease expiry": self.to_send - sum(self.counts.values())}
        elapsed = max(time.monotonic() - self.started, 1e-6)
        logger.debug(
            "campaign %s: claimed %d, sent %d, retry %d, failed %d, suppressed %d, unknown %d, "
            "given back %d, left to lease expiry %d (%.0f/s)",
            self.campaign_id, self.claimed, counts["sent"], counts["retry"], counts["failed"],
            counts["suppressed"], counts["unknown"], counts[GIVEN_BACK],
            counts["left to lease expiry"],
            self.claimed / elapsed,
            extra={"campaign_id": self.campaign_id, "worker_id": worker_id,
                   "claimed": self.claimed, **{k.replace(" ", "_"): n for k, n in counts.items()}},
        )
        for outcome, n in counts.items():
            if n:
                metrics.MESSAGES.labels(outcome=outcome, transport=transport).inc(n)


@dataclass
class Batch:
    """Rows of one campaign claimed by this worker in one statement."""

    campaign_id: int
    rows: list[Claimed]
    full: bool  # as many rows as were asked for: more is likely waiting
    tally: Tally
    leases: list[Lease] = field(default_factory=list)  # the lease protocol's (none: the row one)
    # when the claim's lease runs out, on the worker's monotonic clock: from just before the
    # claim was asked, so never later than the database's end of it
    lease_ends: float = field(kw_only=True)
    # when its campaign's sending window closes, on the same clock (inf: no window)
    window_ends: float = field(kw_only=True, default=math.inf)
    # each row's attempt as claimed: with the worker id, what makes a row still ours
    attempts: dict[int, int] = field(init=False)
    destinations: dict[int, int | None] = field(init=False)  # each row's mailbox provider
    # rows not to be sent (an opt-out found by the claim or the hand-over), which a lease's settle
    # names as such
    withheld: set[int] = field(init=False)
    # rows in doubt past the receiver's memory of their key, which the claim made (or, on
    # leases, their settle makes) 'unknown': never sent again
    forgotten: set[int] = field(init=False)
    # the transport refused us (Outcome.REFUSED): no wire takes another piece of the batch
    refused: threading.Event = field(init=False, default_factory=threading.Event)
    # what a transport raised that no receiver answers (errors.DEFECTS): contained on landing
    broken: BaseException | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.attempts = {row.id: row.attempts for row in self.rows}
        self.destinations = {row.id: row.destination_id for row in self.rows}
        self.withheld = {row.id for row in self.rows if row.status == Send.Status.SUPPRESSED}
        self.forgotten = {row.id for row in self.rows if row.status == Send.Status.UNKNOWN}

    @property
    def named_at_claim(self) -> set[int]:
        """Rows counted when they were found, not when their lease is settled."""
        return self.withheld | self.forgotten

    def within_lease(self) -> bool:
        return time.monotonic() < self.lease_ends

    def window_open(self) -> bool:
        return time.monotonic() < self.window_ends

    @property
    def to_send(self) -> list[Claimed]:
        """The rows under our lease (the others were suppressed by the claim)."""
        return [row for row in self.rows if row.status == Send.Status.SENDING]

    def lease_outcomes(self, lease: Lease, outcomes: Sequence[Outcome]) -> list[Outcome]:
        """The outcomes of the lease's rows, its withheld rows named suppressed and its forgotten
        ones forgotten: what its settle writes (a row of it without one is judged as recovery
        would)."""
        ids = {row.id for row in lease.rows}
        return [o for o in outcomes if o.send_id in ids] + [
            Outcome(i, SUPPRESSED) for i in sorted(ids & self.withheld)] + [
            Outcome(i, FORGOTTEN, error=FORGOTTEN_KEY) for i in sorted(ids & self.forgotten)]


@dataclass
class Delivering:
    """A batch on the wires: what each connection is doing with its part."""

    batch: Batch
    wires: list[Future]
    # every piece of it is on a wire or answered (set when nothing of it waits for a wire)
    dealt: threading.Event = field(default_factory=threading.Event)

    def done(self) -> bool:
        return all(wire.done() for wire in self.wires)


    @classmethod
    def nothing(cls, batch: Batch) -> Delivering:
        """A batch with nothing for a wire: dealt and done at once."""
        delivering = cls(batch, [])
        delivering.dealt.set()
        return delivering
