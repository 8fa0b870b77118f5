"""How much a worker may claim now, and of which mailbox providers; and what a receiver's
"slow down" does to that. The worker asks, claims through it, and tells it the outcomes.

Every limit is a token bucket in PostgreSQL (``growth.managers.limits``), shared by all workers:
the tenant's rate and its warm-up quota for the day, the transport's rate, and per destination
(a mailbox provider: Google, Microsoft, a company's own MX) a rate and a cap on messages on the
wire, global or per tenant. A campaign outside its sending window gets nothing until it opens.
Tokens are taken before the claim, so a worker that has none holds no lease it cannot use, and
what the claim did not use is given back.

A throttling answer lowers the rate of the bucket it concerns (multiplicative decrease: the
recipient's provider, or the transport for a limit on our whole account), creating it if the
provider was not paced yet; good answers raise it back (additive increase). The throttled rows
are queued again by the settle without an attempt counted.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from growth.managers.campaigns import Sending
from growth.managers.leases import UNPACED, Lease, Pacing
from growth.managers.limits import DestinationGrant, Grant, ThrottlePolicy
from growth.managers.sends import Claimed
from growth.models import RateLimit, Send, SendLease
from growth.observability import metrics
from growth.sending.transports import Outcome

logger = logging.getLogger(__name__)

SCAN_BATCHES = 4  # a paced claim reads at most this many batches' worth of queued rows
LOOK_AGAIN = 5.0  # seconds between looks for a bucket a throttle may have created


@dataclass
class Claim:
    rows: list[Claimed] = field(default_factory=list)
    granted: int = 0  # rows the buckets allowed (0: none, see wait)
    wait: float = 0.0  # seconds until something could be granted, when nothing was
    leases: list[Lease] = field(default_factory=list)  # the lease protocol's: the rows' leases

    @property
    def full(self) -> bool:
        """More is likely waiting now: as many rows as were granted, or a free lease taken over
        (a worker killed or stopped leaves many, a plain receiver's a chunk each: each claim takes
        one, and waiting a poll between them took a second per chunk)."""
        return len(self.rows) == self.granted or any(lease.taken_over for lease in self.leases)


class Pacer:
    def __init__(self, *, batch_size: int, policy: ThrottlePolicy | None = None,
                 forgets_after: float | None = None) -> None:
        self.batch_size = batch_size
        # the seconds the receiver remembers a key (receiver_forgets_keys_after): a claim makes
        # a row in doubt for longer 'unknown'
        self.forgets_after = forgets_after
        self.policy = policy or ThrottlePolicy.from_settings()
        self.transport = settings.SENDER_TRANSPORT  # the key of the transport-wide bucket
        self._transport_bucket_id: int | None = None
        self._transport_looked_at = -LOOK_AGAIN
        self._hands: dict[int, int] = {}  # campaign -> id after which its next claim starts
        # account -> (today's quota, its bucket), as this worker last set them
        self._warmups: dict[int, tuple[int | None, int | None]] = {}
        self._throttling_known_at = -LOOK_AGAIN
        self._throttling = False  # some bucket is held down: good answers should raise it

    # --- before the network: what may be claimed ---------------------------------------------

    def claim(self, campaign: Sending, *, worker_id: str, lease: float,
              hand_over: bool) -> Claim:
        """Claim what the campaign's limits allow now (committed before this returns)."""
        opens_in = campaign.window_opens_in()
        if opens_in > 0:
            return Claim(wait=opens_in)
        buckets, grant = self._take(campaign)
        if not grant.count:
            return Claim(wait=grant.wait)
        with transaction.atomic():
            paced = RateLimit.objects.take_destinations(account_id=campaign.account_id,
                                                        want=grant.count)
            # A cap on messages on the wire counted the rows in flight: its buckets stay locked
            # until this claim's rows are among them, or two workers would both see the room.
            held = any(allowed.capped for allowed in paced.values())
            if held:
                claim, going = self._claim_paced_by(paced, campaign, grant.count,
                                                    worker_id=worker_id, lease=lease,
                                                    hand_over=hand_over)
        if not held:
            claim, going = self._claim_paced_by(paced, campaign, grant.count, worker_id=worker_id,
                                                lease=lease, hand_over=hand_over)
        # after the commit: holding the destinations' buckets, this worker waits for no other
        # bucket (a take locks each kind in its own transaction)
        RateLimit.objects.give_back(buckets, count=grant.count - going)
        return claim

    def _take(self, campaign: Sending) -> tuple[list[int], Grant]:
        """Tokens for a batch from every bucket over the campaign; a bucket this worker knew
        that is gone (deleted, or a warm-up begun again under a new id) is looked up again."""
        for _ in range(2):
            extra = [self._warmup_bucket(campaign), self._transport_bucket()]
            buckets = sorted({*campaign.bucket_ids, *filter(None, extra)})
            grant = RateLimit.objects.take(buckets, want=self.batch_size,
                                           time_zone=campaign.zone_name())
            if not grant.missing:
                break
            self._warmups.pop(campaign.account_id, None)
            self._transport_bucket_id = None
        return buckets, grant

    def _claim_paced_by(self, paced: dict[int, DestinationGrant], campaign: Sending, count: int,
                        *, worker_id: str, lease: float, hand_over: bool) -> tuple[Claim, int]:
        """Claim the ``count`` rows granted, within the destinations' grants, and give back the
        destinations' tokens not used; return the claim and how many of its rows go out."""
        self._throttling = self._throttling or any(d.throttled for d in paced.values())
        leases = []
        if campaign.leases:
            leases = self._claim_leases(campaign, count, paced, worker_id=worker_id,
                                        lease=lease, hand_over=hand_over)
            rows = [row for leased in leases for row in leased.rows]
        elif paced:
            rows = self._claim_paced(campaign, count, paced, worker_id=worker_id,
                                     lease=lease, hand_over=hand_over)
        else:
            rows = self._claim_after_hand(campaign, count, worker_id=worker_id, lease=lease,
                                          hand_over=hand_over)
        going = [row for row in rows if row.status == Send.Status.SENDING]
        # each paced destination's tokens not used, its share trimmed off included: once
        by_destination = Counter(row.destination_id for row in going)
        for destination_id, allowed in paced.items():
            RateLimit.objects.give_back(allowed.bucket_ids,
                                        count=allowed.granted - by_destination[destination_id])
        waits = [d.wait for d in paced.values() if not d.granted and d.wait > 0]
        claim = Claim(rows, count, wait=0.0 if rows or not waits else min(waits), leases=leases)
        return claim, len(going)

    def _claim_leases(self, campaign: Sending, count: int, paced: dict[int, DestinationGrant], *,
                      worker_id: str, lease: float, hand_over: bool) -> list[Lease]:
        """The lease protocol's claim: the campaign's cursor is the hand, and a paced
        destination's rows past it are set aside, due behind it, for its share to take. A
        receiver that de-duplicates takes the batch as one lease; a plain one, in chunks."""
        shares, left = self._shares(count, paced)
        return SendLease.objects.claim(
            worker_id=worker_id, campaign_id=campaign.campaign_id, batch_size=left, lease=lease,
            chunk_size=None if hand_over else settings.SENDER_HANDOFF_CHUNK, hand_over=hand_over,
            forgets_after=self.forgets_after,
            pacing=Pacing(shares, scan=SCAN_BATCHES * self.batch_size) if paced else UNPACED)

    @staticmethod
    def _shares(count: int, paced: dict[int, DestinationGrant]) -> tuple[dict[int, int], int]:
        """Each paced destination's share of ``count`` (the emptiest first), and what is left
        for the others."""
        shares, left = {}, count
        for destination_id, allowed in sorted(paced.items(), key=lambda item: item[1].granted):
            shares[destination_id] = min(allowed.granted, left)
            left -= shares[destination_id]
        return shares, left


    def _claim_after_hand(self, campaign: Sending, count: int, *, worker_id: str, lease: float,
                          hand_over: bool) -> list[Claimed]:
        """The campaign's due rows after this worker's last batch, then, if those fall short,
        from the front (rows queued again behind the hand, a new lap): a claim that always
        started at the front walked, until a VACUUM, past an index entry for every row sent
        since the last one (at 10,000,000 rows, half sent: 8.5x the first batch's time)."""
        hand = self._hands.get(campaign.campaign_id, 0)
        rows = Send.objects.claim(worker_id=worker_id, batch_size=count, lease=lease,
                                  campaign_id=campaign.campaign_id, hand_over=hand_over, after=hand,
                                  forgets_after=self.forgets_after)
        last = rows
        if len(rows) < count and hand:
            last = Send.objects.claim(worker_id=worker_id, batch_size=count - len(rows),
                                      lease=lease, campaign_id=campaign.campaign_id,
                                      hand_over=hand_over, forgets_after=self.forgets_after)
            rows = sorted(rows + last, key=lambda row: row.id)
        self._hands[campaign.campaign_id] = max((row.id for row in last), default=0)
        return rows

    def _claim_paced(self, campaign: Sending, count: int, paced: dict[int, DestinationGrant], *,
                     worker_id: str, lease: float, hand_over: bool) -> list[Claimed]:
        shares, left = self._shares(count, paced)
        scan = SCAN_BATCHES * self.batch_size
        claimed = Send.objects.claim_paced(
            worker_id=worker_id, campaign_id=campaign.campaign_id, free=left, lease=lease,
            paced=list(paced), shares=shares, after=self._hands.get(campaign.campaign_id, 0),
            scan=scan, hand_over=hand_over, forgets_after=self.forgets_after)
        # a full window may have left free rows after it: the next claim looks there
        self._hands[campaign.campaign_id] = claimed.scanned_to if claimed.scanned >= scan else 0
        return claimed.rows

    def _transport_bucket(self) -> int | None:
        if self._transport_bucket_id is None and settings.SENDER_RATE_LIMIT:
            self._transport_bucket_id = RateLimit.objects.for_transport(
                self.transport, per_second=settings.SENDER_RATE_LIMIT,
                burst=settings.SENDER_RATE_BURST)
        elif self._transport_bucket_id is None:
            now = time.monotonic()
            if now - self._transport_looked_at >= LOOK_AGAIN:  # created by a throttle?
                self._transport_looked_at = now
                self._transport_bucket_id = RateLimit.objects.transport_bucket(self.transport)
        return self._transport_bucket_id

    def _warmup_bucket(self, campaign: Sending) -> int | None:
        """The tenant's warm-up quota, kept at today's size (written when the size changes)."""
        cap = campaign.warmup_cap()
        known = self._warmups.get(campaign.account_id)
        if known is None or known[0] != cap:
            known = self._warmups[campaign.account_id] = (
                cap, RateLimit.objects.warmup(account_id=campaign.account_id, per_day=cap))
        return known[1]

    # --- after the network: what the answers teach ------------------------------------------

    def observe(self, destination_of: Mapping[int, int | None], outcomes: Sequence[Outcome], *,
                sent_since: float) -> None:
        """Adapt the rates to answers from a batch whose rows go to ``destination_of[send id]``.
        ``sent_since``: seconds since its claim."""
        throttles = [o for o in outcomes if o.kind == Outcome.THROTTLED]
        for outcome in throttles:
            metrics.THROTTLED.labels(outcome.throttle_scope).inc()
        for scope, destination_id, outcome in _one_per_bucket(throttles, destination_of):
            self._slow_down(scope, destination_id, outcome, sent_since=sent_since)
        delivered = {destination_of.get(o.send_id) for o in outcomes if o.kind == Outcome.SENT}
        if delivered and self._throttling_now():
            raised = RateLimit.objects.recover(
                destination_ids=[d for d in delivered if d is not None],
                transport=self.transport, policy=self.policy)
            if raised:
                logger.debug("rates raised after good answers: buckets %s", raised)

    def _slow_down(self, scope: str, destination_id: int | None, outcome: Outcome, *,
                   sent_since: float) -> None:
        if scope == Outcome.DESTINATION and destination_id is None:
            return  # an unclassified domain: its rows wait out their delay, nothing is paced
        if scope == Outcome.DESTINATION:
            rate = RateLimit.objects.throttled(
                destination_id=destination_id, reason=f"throttled: {outcome.error}",
                accepted=RateLimit.objects.destination_rate(destination_id),
                sent_since=sent_since, policy=self.policy)
        else:
            rate = RateLimit.objects.throttled(
                transport=self.transport, reason=f"throttled: {outcome.error}",
                accepted=RateLimit.objects.current_total_rate(), sent_since=sent_since, policy=self.policy)
            self._transport_looked_at = -LOOK_AGAIN
        if rate is not None:
            self._throttling = True
            metrics.RATE_DECREASES.labels(scope).inc()
            logger.warning("receiver throttling (%s): %s rate lowered to %.2f/s", outcome.error,
                           f"destination {destination_id}" if scope == Outcome.DESTINATION
                           else "transport", rate)

    def _throttling_now(self) -> bool:
        now = time.monotonic()
        if now - self._throttling_known_at >= LOOK_AGAIN:
            self._throttling_known_at = now
            self._throttling = RateLimit.objects.any_throttled()
        return self._throttling


def _one_per_bucket(throttles: Sequence[Outcome], destination_of: Mapping[int, int | None]):
    """One throttle per bucket it concerns (the first): a batch's many deferrals from one
    provider are one signal, not many."""
    seen = set()
    for outcome in throttles:
        key = (outcome.throttle_scope,
               destination_of.get(outcome.send_id)
               if outcome.throttle_scope == Outcome.DESTINATION else None)
        if key not in seen:
            seen.add(key)
            yield key[0], key[1], outcome
