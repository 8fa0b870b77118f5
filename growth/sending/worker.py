"""The sender: one loop that any number of replicas, on any number of hosts, run at once.

Each cycle: start due campaigns -> build their recipient lists (their domains grouped by mailbox
provider first) -> recover expired leases -> claim a batch, within what the limits allow now
(``growth.sending.pacer``) -> deliver it -> settle the outcomes, and let the receiver's answers
adapt the rates -> finish campaigns with nothing left. The claim is
committed before the network call and the settle after it, so a crash anywhere leaves rows that
lease expiry recovers. The worker holds no SQL: each step is one call to a manager. After a
settle, an address our relay refused for good (5.1.x, 5.2.1) is suppressed for its tenant, as
an ESP's hard bounce would have it; a relay or ESP that refused us, not the recipients (our
login, key or sender), pauses the campaign with its refusal, nothing counted against its rows.
What the operator at the terminal reads (progress, pauses, idleness, a summary per finished
campaign) is ``growth.sending.console``'s.

Exactly-once is at-least-once plus an idempotent receiver, and the receiver decides how the
worker trades speed for doubt (``receiver_deduplicates`` says which it is):

- idempotent (it de-duplicates on our Idempotency-Key): a resend is harmless. Rows are handed
  over with the claim, a batch is shared out between the worker's connections at once, settles
  run on a thread of their own (``growth.sending.settler``), and a row whose lease expired is
  retried, same key.
- plain: a resend would be a duplicate. Each small chunk is handed over in a commit of its own
  just before it goes on a wire (``growth.sending.wires``: C connections, one chunk each) and
  settled in the same commit as that wire's next hand-over, so a kill leaves in doubt only the
  chunks that were on the wires; such a row becomes 'unknown' for an operator, never silently
  resent or dropped. The hand-overs of several wires waiting at once share one commit
  (``growth.sending.hand_overs``).

Within ``run()`` the loop claims the next batch while the wires finish the last one (at most
two batches in hand: a pause lets both finish, and so does a stop where the receiver
de-duplicates; a plain receiver's stop waits only for the chunks on the wires, and gives the
rest back).

Each campaign runs on the protocol it was built with (SENDER_PROTOCOL): the row protocol above,
or the lease protocol (``growth.managers.leases``: a lease per batch behind the campaign's
cursor, each row written once, by the settle that ends the lease). On leases a plain receiver's
chunks are leases of their own, each handed over, sent and settled as a row chunk is.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import random
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import wait
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from django.conf import settings
from django.db import connection

from growth.audience.destinations import classify_recipient_domains
from growth.deliverability.sender_domains import check_outgoing_sender
from growth.feedback.bounces import smtp_hard_bounce
from growth.job_ids import job_id
from growth.managers.campaigns import Sending
from growth.managers.leases import SUPPRESSED, Lease, LeaseHandOver
from growth.managers.queries import DATABASE_AWAY, discard_connection
from growth.managers.sends import Claimed, HandOver
from growth.models import Campaign, Send, SendLease, SendTally, Suppression, WorkerHeartbeat
from growth.observability import metrics
from growth.reputation.guard import GuardSchedule
from growth.sending.batches import GIVEN_BACK, Batch, Delivering, Tally
from growth.sending.console import Console
from growth.sending.hand_overs import HandOvers
from growth.sending.heartbeat import Heartbeat
from growth.sending.pacer import Pacer
from growth.sending.rendering import CampaignContent, CampaignRenderer
from growth.sending.settler import InlineSettler, Settler
from growth.sending.transports import (
    BaseTransport,
    Delivery,
    Outcome,
    get_transport,
    receiver_deduplicates,
)
from growth.sending.transports.base import receiver_forgets_keys_after
from growth.sending.transports.errors import TransportBroke, describe, refusal_reason, untried
from growth.sending.unsubscribe import LinkMaker
from growth.sending.wires import Wires

logger = logging.getLogger(__name__)

BUSY_POLL = 1.0  # seconds between looks while other workers hold the remaining rows
MIN_WAIT = 0.05  # seconds: never spin
DB_RETRY_FIRST = 0.5  # seconds before the first reconnection attempt; doubles each time
DB_RETRY_MAX = 30.0  # seconds
STOP_GRACE = 5.0  # seconds a stopping worker still waits for an absent database (its last settles)
HOUSEKEEPING_EVERY = 1.0  # seconds, while full batches keep coming
HEARTBEAT_EVERY = 5.0  # seconds between "alive" rows; the admin calls a worker dead after 3 missed
RENDERERS_KEPT = 32  # campaigns whose compiled templates a worker keeps
# seconds a kept renderer is used before it is built anew: its sender checked again (another
# account may have verified its domain since: sender_domains.check_outgoing_sender) and its DKIM
# key looked up again (a tenant's key verified, or no longer, since: dkim.signer_for)
RENDERER_FRESH_FOR = 60.0
SAMPLE_RECIPIENT = "sample.recipient@example.com"  # a renderer's trial run, never sent
UNSENT_PAST_THE_LEASE = "not sent: the claim's lease ran out before its turn on the wire"
UNSENT_PAST_THE_WINDOW = "not sent: the campaign's sending window closed before its turn"

T = TypeVar("T")
P = TypeVar("P")  # a piece of a batch a wire takes: a chunk of rows, or a lease
R = TypeVar("R")  # a wire's request to hand over (and settle)


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Worker:
    def __init__(self, *, worker_id: str | None = None, batch_size: int = 20,
                 tick: float = 60.0, lease: float | None = None,
                 transport: BaseTransport | None = None, until_idle: bool = False,
                 once: bool = False, max_attempts: int | None = None,
                 heartbeat_file: Path | None = None, connections: int | None = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.worker_id = worker_id or default_worker_id()
        self.batch_size = batch_size
        self.tick = tick  # seconds to sleep when there is nothing to do
        self.lease = settings.SENDER_LEASE if lease is None else lease  # seconds
        self.transport = transport or get_transport()
        self.idempotent = receiver_deduplicates(self.transport, lease=self.lease)
        # the protocol of the campaigns it builds (docs/one-write-per-recipient.md); it serves
        # each campaign on the protocol that campaign was built with
        self.builds_leases = settings.SENDER_PROTOCOL == "leases"
        self.connections = ((connections or settings.SENDER_CONNECTIONS)
                            if self.transport.waits_on_a_wire else 1)
        self._wires = Wires(self.transport, self.connections)
        # plain, on several wires: their hand-overs committed together (one wire: on its own)
        self._hand_overs = (HandOvers(Send.objects.settle_and_hand_over_many)
                            if self.connections > 1 else None)
        self._lease_hand_overs = (HandOvers(SendLease.objects.settle_and_hand_over_many)
                                  if self.connections > 1 else None)
        # plain: small chunks, each handed over just before its wire takes it (idempotent: the
        # batch is shared out between the connections, see _deliver_at_once)
        self.chunk_size = settings.SENDER_HANDOFF_CHUNK
        self.until_idle = until_idle
        self.once = once
        self.max_attempts = max_attempts or settings.SENDER_MAX_ATTEMPTS
        self._stop = threading.Event()
        self._stop_at: float | None = None  # when stop() was first asked (time.monotonic())
        self._renderers: dict[int, CampaignRenderer] = {}
        self._renderers_built: dict[int, float] = {}  # campaign id: when (time.monotonic())
        self._links: LinkMaker | None = None
        self._last_campaign_id: int | None = None
        self._pacer = Pacer(batch_size=batch_size, forgets_after=receiver_forgets_keys_after(
            self.transport, deduplicates=self.idempotent))
        self._rate_wait: float | None = None  # seconds until a rate limit grants a batch
        self._was_full = False
        self._housekept_at = 0.0
        self._settler: Settler | InlineSettler = InlineSettler()  # a lone cycle() settles as it goes
        self._in_flight: deque[Delivering] = deque()  # batches on the wires, oldest first
        self._pipelined = False  # run(): claim the next batch while the wires finish this one
        self._heartbeat_file = heartbeat_file
        self._beat_at = -HEARTBEAT_EVERY
        self._beat_lock = threading.Lock()
        # beats while the loop waits or sends; stale once the loop has not come round in a tick
        # (idle) or a lease (a batch that long has lost its rows anyway)
        self._heartbeat = Heartbeat(self._beat, every=HEARTBEAT_EVERY,
                                    stale_after=max(self.tick, self.lease) + HEARTBEAT_EVERY)
        self._console = Console(worker_id=self.worker_id)
        self._guard = GuardSchedule()  # pauses a tenant whose bounces or complaints cross the line

    def stop(self) -> None:
        """Ask the loop to exit after the batch in hand (plain: after the chunks on the wires);
        safe from a signal handler."""
        if self._stop_at is None:
            self._stop_at = time.monotonic()
        self._stop.set()

    def run(self) -> None:
        self._console.started(transport=self.transport, batch_size=self.batch_size,
                              lease=self.lease, idempotent=self.idempotent,
                              connections=self.connections)
        self._settler = Settler() if self.idempotent else InlineSettler()
        self._pipelined = True
        self._heartbeat.start()
        try:
            self._loop()  # the transport connects on first use: a mail server down now is transient
        finally:
            self._heartbeat.came_round()  # the last batch landing below is a turn of its own
            self._pipelined = False
            # each step on its own: one that fails (whatever stopped the loop may stop it too)
            # must not keep the others from settling, closing and saying goodbye
            for step in (self._land_last, self._close_settler, self._fold_last, self._wires.close,
                         self._close_hand_overs, self._heartbeat.stop, self._say_stopped,
                         connection.close):
                try:
                    step()
                except Exception:
                    logger.exception("worker %s: stopping, %s failed", self.worker_id,
                                     getattr(step, "__name__", step))
            logger.info("worker %s stopped", self.worker_id)

    def _land_last(self) -> None:
        self._retrying_db(lambda: self._land(block=True), deadline=time.monotonic() + self.lease)

    def _close_settler(self) -> None:
        self._settler.close()  # what went out is settled before we go
        self._settler = InlineSettler()

    def _fold_last(self) -> None:
        self._retrying_db(SendTally.objects.fold, deadline=time.monotonic() + DB_RETRY_FIRST,
                          lost="the deltas wait for another worker's fold")

    def _close_hand_overs(self) -> None:
        for hand_overs in (self._hand_overs, self._lease_hand_overs):
            if hand_overs is not None:
                hand_overs.close()

    def _say_stopped(self) -> None:
        self._retrying_db(lambda: WorkerHeartbeat.objects.stopped(worker_id=self.worker_id),
                          deadline=time.monotonic() + DB_RETRY_FIRST,
                          lost="the heartbeat is left to go stale")

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._heartbeat.came_round()
            self._retrying_db(self._beat)
            more_waiting = self._retrying_db(self.cycle, default=False)
            self._retrying_db(self._console.progress)
            if self.once or self._stop.is_set():
                return
            if more_waiting:
                continue
            outlook = self._retrying_db(Campaign.objects.outlook)
            if outlook is None:
                return
            stopping = self.until_idle and not outlook.busy
            wait = self._idle_wait(outlook.busy, outlook.next_in)
            self._console.outlook(busy=outlook.busy, wait=wait, stopping=stopping)
            if stopping:
                return
            self._heartbeat.came_round()
            self._stop.wait(wait)

    def cycle(self) -> bool:
        """Run one pass of the engine; return True when more rows are likely waiting now.

        Within run(), the batch claimed here may still be on the wires when this returns (the
        next cycle claims while they finish it); alone, a cycle returns with its batch settled.
        """
        self._make_room()
        if self._housekeeping_due():
            self._start_due()
            self._build()
            self._recover()
            self._guard.run_if_due()
            SendTally.objects.fold()  # the counts the admin reads stay a few rows a campaign
        batch = self._claim()
        if batch is not None:
            try:
                self._in_flight.append(self._deliver(batch))
            except DATABASE_AWAY:
                raise  # the database, not the campaign: _retrying_db waits for it
            except Exception as exc:  # this campaign cannot be sent as it is: it alone stops
                self._contain(batch, exc, unsent=True)  # nothing of it reached a wire
                self._report(batch)
        if not self._pipelined:
            self._land(block=True)
        self._was_full = batch is not None and batch.full
        if not self._was_full:  # while full batches come, no campaign can be finished yet
            self._finish()
        return self._was_full

    # --- the pipeline, in the order cycle() runs it ------------------------------------------

    def _start_due(self) -> None:
        for campaign_id in Campaign.objects.start_due():
            logger.info("campaign %s started", campaign_id)

    def _build(self) -> None:
        for campaign_id in Send.objects.unbuilt_campaigns():
            classify_recipient_domains(campaign_id=campaign_id)  # for pacing per provider
            created = Send.objects.build_recipients(campaign_id=campaign_id,
                                                    leases=self.builds_leases)
            if created is not None:
                logger.info("campaign %s: %d recipients built", campaign_id, created)

    def _recover(self) -> None:
        with metrics.STATEMENT_SECONDS.labels("recover").time():
            recovered = Send.objects.recover_expired(idempotent=self.idempotent,
                                                     max_attempts=self.max_attempts)
            # the lease protocol's (docs/one-write-per-recipient.md): a probe of an empty index
            # until campaigns run on it
            leases = SendLease.objects.recover(idempotent=self.idempotent,
                                               max_attempts=self.max_attempts)
        counts = Counter(row.status for row in recovered)
        counts.update({"queued": leases.freed_rows, "unknown": leases.unknown,
                       "cancelled": leases.cancelled})
        counts = +counts  # the statuses some row went to
        if counts:
            for status, n in counts.items():
                metrics.LEASES_RECOVERED.labels(to=status).inc(n)
            logger.warning("recovered %d rows with expired leases: %s", sum(counts.values()),
                           dict(counts), extra={"worker_id": self.worker_id})

    def _claim(self) -> Batch | None:
        """Claim a batch from the next sending campaign in turn, within what its limits allow
        now (``growth.sending.pacer``: rates, warm-up, sending window, per destination).

        Serving campaigns in turn, not oldest row first, keeps one tenant's big campaign from
        starving another's.
        """
        self._rate_wait = None
        looked = time.monotonic()  # no later than the database's now that `sending` carries
        sending = Campaign.objects.sending()
        self._console.sending([campaign.campaign_id for campaign in sending])
        for campaign in self._in_turn(sending):
            asked = time.monotonic()
            try:
                with metrics.STATEMENT_SECONDS.labels("claim").time():
                    claim = self._pacer.claim(campaign, worker_id=self.worker_id,
                                              lease=self.lease, hand_over=self.idempotent)
            except DATABASE_AWAY:
                raise  # the database, not the campaign: _retrying_db waits for it
            except Exception as exc:  # its tenant's pacing cannot be read: it alone stops
                self._contain(Batch(campaign.campaign_id, [], full=False,
                                    tally=Tally(campaign.campaign_id, 0, 0), lease_ends=asked),
                              exc)
                continue
            if not claim.rows:
                if claim.wait > 0:
                    metrics.RATE_LIMIT_WAITS.inc()
                    self._rate_wait = min(self._rate_wait or claim.wait, claim.wait)
                continue
            going = sum(1 for row in claim.rows if row.status == Send.Status.SENDING)
            forgotten = sum(1 for row in claim.rows if row.status == Send.Status.UNKNOWN)
            if forgotten:
                logger.warning("campaign %s: %d rows in doubt since an earlier attempt made "
                               "unknown, not sent again: the receiver no longer remembers their "
                               "keys", campaign.campaign_id, forgotten,
                               extra={"campaign_id": campaign.campaign_id,
                                      "worker_id": self.worker_id})
            self._last_campaign_id = campaign.campaign_id
            self._drop_stale_renderer(campaign)
            closes_in = campaign.window_closes_in()
            return Batch(campaign.campaign_id, claim.rows, full=claim.full,
                         tally=Tally(campaign.campaign_id, claimed=len(claim.rows), to_send=going,
                                     forgotten=forgotten),
                         leases=claim.leases, lease_ends=asked + self.lease,
                         window_ends=math.inf if closes_in is None else looked + closes_in)
        return None

    def _deliver(self, batch: Batch) -> Delivering:
        """Put the batch on the worker's connections (``growth.sending.wires``); ``_land``
        settles what they answered."""
        if not batch.to_send and (self.idempotent or not batch.leases):
            return Delivering.nothing(batch)  # a lease's is settled when it lands
        renderer = self._renderer(batch.campaign_id)  # what fails here fails the whole campaign
        if self.idempotent:
            return self._deliver_at_once(batch, renderer)
        if batch.leases:
            return self._deliver_lease_by_lease(batch, renderer)
        return self._deliver_chunk_by_chunk(batch, renderer)

    def _deliver_at_once(self, batch: Batch, renderer: CampaignRenderer) -> Delivering:
        """Idempotent receiver: one look at the opt-outs for the whole batch, the batch shared
        out between the connections (each renders and sends its share), one settle when every
        wire has answered (a resend is absorbed: nothing is gained by settling a part sooner, and
        each settle is a round trip). Only the claim overlaps the batch before: the look at
        the opt-outs waits for its wires, so that it is taken just before these sends."""
        self._land(block=True)
        handed = self._retrying_db(lambda: self._hand_over([row.id for row in batch.to_send],
                                                           batch=batch),
                                   deadline=time.monotonic() + self.lease)
        if handed is None:
            return Delivering.nothing(batch)  # no database for a whole lease: retried on expiry
        batch.tally.add({i: status for i, status in handed.items() if status != Send.Status.SENDING})
        going = [row for row in batch.to_send if handed.get(row.id) == Send.Status.SENDING]
        size = -(-len(going) // self._wires.count) or 1
        delivering = Delivering(batch, [
            self._wires.run(lambda transport, rows=going[start:start + size]:
                            self._render_and_send(transport, batch, renderer, rows))
            for start in range(0, len(going), size)])
        delivering.dealt.set()
        return delivering

    def _deliver_chunk_by_chunk(self, batch: Batch, renderer: CampaignRenderer) -> Delivering:
        """Plain receiver: the batch cut into small chunks that every wire takes from, one at a
        time: it renders one, hands it over in the commit that settles its last one, and sends
        it (``_chunk_on_a_wire``), so at most one chunk per connection is handed over and
        unsettled at any time."""
        rows = batch.to_send
        return self._on_the_wires(
            batch, [rows[start:start + self.chunk_size]
                    for start in range(0, len(rows), self.chunk_size)],
            lambda transport, chunk, answered: self._chunk_on_a_wire(
                transport, batch, renderer, chunk, answered),
            lambda answered: self._settle(batch, answered))

    def _on_the_wires(self, batch: Batch, pieces: Sequence[P],
                      on_a_wire: Callable[[BaseTransport, P, list], list],
                      settle_last: Callable[[list], None]) -> Delivering:
        """Plain receiver: every wire takes the next piece (a chunk of rows, or a lease) until
        none is left: ``on_a_wire`` hands it over, settling what that wire answered before, sends
        it and returns what it answered; ``settle_last`` settles a wire's last answers. The wires
        take their pieces themselves: were this thread to deal out each one, it would wait for
        the GIL behind C busy wires every time."""
        waiting: queue.SimpleQueue[P] = queue.SimpleQueue()
        for piece in pieces:
            waiting.put(piece)
        broken = threading.Event()  # a transport raised: no wire takes another piece
        delivering = Delivering(batch, [])

        def take_pieces(transport: BaseTransport) -> None:
            answered: list = []  # settled with the next hand-over
            try:
                while not (broken.is_set() or batch.refused.is_set() or self._stop.is_set()
                           or not batch.window_open()):
                    try:
                        piece = waiting.get_nowait()
                    except queue.Empty:
                        break
                    answered = on_a_wire(transport, piece, answered)
            except BaseException:
                broken.set()  # what is on the other wires still settles; the rest stays
                raise
            finally:
                # refused: the settle pauses the campaign before the loop may claim more of it
                if not batch.refused.is_set():
                    delivering.dealt.set()
                try:
                    settle_last(answered)
                finally:
                    delivering.dealt.set()

        delivering.wires = [self._wires.run(take_pieces)
                            for _ in range(min(self._wires.count, waiting.qsize()))]
        if not delivering.wires:
            delivering.dealt.set()
        return delivering

    def _chunk_on_a_wire(self, transport: BaseTransport, batch: Batch,
                         renderer: CampaignRenderer, rows: Sequence[Claimed],
                         answered: list[Outcome]) -> list[Outcome]:
        """On a wire's thread and database connection: render the chunk, hand it over (committed
        before the transport sees it, with the settle of what this wire ``answered`` last), send
        it; return its outcomes, which the next hand-over (or the wire's last settle) records."""
        deliveries, unrenderable = self._render(renderer, rows)
        answered = [*answered, *unrenderable]
        if not deliveries:
            return answered
        rendered = {d.send_id for d in deliveries}
        going = [row for row in rows if row.id in rendered]
        handed = self._retrying_db(lambda: self._hand_over_chunk(batch, answered, going),
                                   deadline=time.monotonic() + self.lease)
        if handed is None:
            # no database for a whole lease: this chunk is unsent (queued again on expiry), the
            # last one's rows are in doubt as after a crash ('unknown' on expiry)
            return []
        batch.tally.add({i: status for i, status in handed.items() if status != Send.Status.SENDING})
        return self._send(transport, batch, [d for d in deliveries
                                             if handed.get(d.send_id) == Send.Status.SENDING])

    def _deliver_lease_by_lease(self, batch: Batch, renderer: CampaignRenderer) -> Delivering:
        """Plain receiver, on the lease protocol: the claim cut the batch into leases of a chunk
        each, and every wire takes them one at a time, as ``_deliver_chunk_by_chunk`` takes row
        chunks: it renders one, hands it over in the commit that settles the leases it answered
        since, and sends it (``_lease_on_a_wire``); at most one lease per connection is handed
        over and unsettled at any time."""
        def settle_last(answered: list[tuple[Lease, list[Outcome]]]) -> None:
            if answered:
                self._settle(batch, [o for _, outcomes in answered for o in outcomes],
                             leases=[lease for lease, _ in answered])

        return self._on_the_wires(
            batch, batch.leases,
            lambda transport, lease, answered: self._lease_on_a_wire(
                transport, batch, renderer, lease, answered),
            settle_last)

    def _lease_on_a_wire(self, transport: BaseTransport, batch: Batch,
                         renderer: CampaignRenderer, lease: Lease,
                         answered: list[tuple[Lease, list[Outcome]]]
                         ) -> list[tuple[Lease, list[Outcome]]]:
        """On a wire's thread and database connection: render the lease's rows, hand it over
        (committed before the transport sees it, with the settles of the leases this wire
        ``answered``), send it; return what is left to settle: this lease with its outcomes."""
        rows = [row for row in lease.rows if row.status == Send.Status.SENDING]
        deliveries, unrenderable = self._render(renderer, rows)
        if not deliveries:  # nothing of it goes out: settled with what the wire does next
            return [*answered, (lease, unrenderable)]
        handed = self._retrying_db(lambda: self._hand_over_lease(batch, answered, lease),
                                   deadline=time.monotonic() + self.lease)
        if not handed:
            # the lease is no longer ours, or there was no database for a whole lease (then
            # this one, never handed over, is freed on expiry, and those answered since are in
            # doubt, as after a crash): nothing of it is sent, and it is not ours to settle
            return []
        # the rows an opt-out now blocks (those the claim found are withheld already)
        withheld = {d.send_id for d in deliveries if handed.get(d.send_id) != Send.Status.SENDING}
        batch.withheld.update(withheld)
        batch.tally.add(dict.fromkeys(withheld, SUPPRESSED))
        return [(lease, unrenderable + self._send(transport, batch, [
            d for d in deliveries if d.send_id not in withheld]))]

    def _render_and_send(self, transport: BaseTransport, batch: Batch,
                         renderer: CampaignRenderer, rows: Sequence[Claimed]) -> list[Outcome]:
        """On a wire's thread (idempotent receiver): render a share of the batch and send it a
        chunk at a time; its outcomes.

        A chunk goes out only while the claim's lease holds. The claim let a row in doubt go
        again because the receiver remembers its key for as long as that lease: sent after it
        (the worker stalled: its process paused, a slow database, a wire slow with the last
        batch), the message could arrive twice. Such rows are settled unsent: queued again at
        once, no attempt counted, not in doubt for this attempt (an earlier one's doubt stays,
        and the next claim judges it again); unless they were recovered or taken over meanwhile,
        then they are their new holder's. What stays unguarded is one chunk, already on the wire
        when the lease runs out. The campaign's sending window closing stops the share the same
        way, as it stops a plain receiver's wires."""
        outcomes: list[Outcome] = []
        for start in range(0, len(rows), self.chunk_size):
            unsent = (UNSENT_PAST_THE_LEASE if not batch.within_lease()
                      else UNSENT_PAST_THE_WINDOW if not batch.window_open() else None)
            if unsent:  # known unsent: due again, not in doubt for it
                return outcomes + [Outcome(row.id, Outcome.UNSENT, error=unsent)
                                   for row in rows[start:]]
            deliveries, unrenderable = self._render(renderer, rows[start:start + self.chunk_size])
            answered = unrenderable + self._send(transport, batch, deliveries)
            outcomes += answered
            if batch.broken is not None:  # a defect (here or on another wire): nothing more
                return outcomes + [untried(row.id, batch.broken)
                                   for row in rows[start + self.chunk_size:]]
            refused = next((o for o in answered if o.kind == Outcome.REFUSED), None)
            if refused is not None:  # us, not the recipients: the rest would be refused as well
                return outcomes + [replace(refused, send_id=row.id)
                                   for row in rows[start + self.chunk_size:]]
        return outcomes

    def _make_room(self) -> None:
        """Before a claim: settle what the wires finished, and claim only once every piece of
        the last batch is on a wire, with at most one batch before it still finishing there; so
        a stop or a pause lets at most the batch on the wires and the next go out."""
        self._land(block=False)
        while len(self._in_flight) > 1:
            self._land_oldest()
        if self._in_flight:
            self._in_flight[-1].dealt.wait()

    def _land(self, *, block: bool) -> None:
        """Settle the batches the wires have finished, oldest first (``block``: all of them,
        waiting for the wires)."""
        while self._in_flight and (block or self._in_flight[0].done()):
            self._land_oldest()

    def _land_oldest(self) -> None:
        """Wait for the oldest batch on the wires, settle it (idempotent: its one settle), and
        pause its campaign if its transport raised, once nothing of the worker's is on the
        wires any more; give back what no wire took once the transport refused us or the worker
        is stopping."""
        delivering = self._in_flight[0]
        wait(delivering.wires)
        self._in_flight.popleft()
        batch = delivering.batch
        answered = [wire.result() for wire in delivering.wires if not wire.exception()]
        if self.idempotent:  # plain: each chunk was settled on its wire
            # a lease is settled even without an answer: the settle judges its rows (and ends it)
            self._settle(batch, [outcome for share in answered for outcome in share],
                         always=bool(batch.leases))
        failed = next((wire.exception() for wire in delivering.wires if wire.exception()),
                      batch.broken)
        if isinstance(failed, DATABASE_AWAY):
            # the database, not the campaign: unsettled rows keep their lease
            logger.warning("campaign %s: a wire lost the database (%s)", batch.campaign_id,
                           failed, extra={"campaign_id": batch.campaign_id,
                                          "worker_id": self.worker_id})
        elif failed is not None:
            wait([wire for later in self._in_flight for wire in later.wires])
            self._contain(batch, failed)
        elif ((batch.refused.is_set() or self._stop.is_set() or not batch.window_open())
              and not self.idempotent):
            # its settle paused the campaign, the worker is stopping, or the campaign's sending
            # window closed: the pieces no wire took go back (an idempotent receiver's batch
            # went on the wires whole)
            self._give_back(batch)
        self._report(batch)

    def _report(self, batch: Batch) -> None:
        self._settler.submit(lambda: batch.tally.report(self.worker_id, self.transport.label))

    def _settle(self, batch: Batch, outcomes: Sequence[Outcome], *, always: bool = False,
                leases: Sequence[Lease] | None = None) -> None:
        """Settle outcomes of the batch (on the lease protocol: ``leases``, or all of the
        batch's; a lease is settled even without outcomes)."""
        if outcomes or always or leases:
            self._settler.submit(lambda: self._settled(batch, outcomes, leases))

    def _settled(self, batch: Batch, outcomes: Sequence[Outcome],
                 leases: Sequence[Lease] | None = None) -> None:
        self._after_settle(batch, outcomes, self._record(batch, outcomes, leases))

    def _after_settle(self, batch: Batch, outcomes: Sequence[Outcome],
                      settled: dict[int, str]) -> None:
        """Count what was settled, suppress hard bounces, pause the campaign if the transport
        refused us, adapt the rates to the answers."""
        batch.tally.add(settled)
        self._suppress_hard_bounces(batch, outcomes, settled)
        self._pause_if_refused(batch, outcomes)
        try:
            self._pacer.observe(batch.destinations, outcomes,
                                sent_since=time.monotonic() - batch.tally.started)
        except DATABASE_AWAY as exc:  # only this adaptation of the rates is lost
            discard_connection()
            logger.warning("campaign %s: rates not adapted to its answers (%s)", batch.campaign_id,
                           exc, extra={"campaign_id": batch.campaign_id, "worker_id": self.worker_id})

    def _broken(self, batch: Batch, exc: BaseException) -> None:
        """On a wire's thread: the transport raised a defect (errors.DEFECTS). The campaign is
        paused now, so that the loop claims no more of it; on landing, ``_contain`` says why and
        gives back what no wire took."""
        batch.broken = exc
        try:
            Campaign.objects.pause(campaign_id=batch.campaign_id, reason=describe(exc))
        except DATABASE_AWAY:  # _contain pauses it on landing
            discard_connection()

    def _pause_if_refused(self, batch: Batch, outcomes: Sequence[Outcome]) -> None:
        """The relay or ESP refused us, not the recipients (``Outcome.REFUSED``): pause the
        campaign with the refusal. Its rows are queued again, no attempt counted; the batches
        already on the wires finish as they would after an operator's pause. (A broken
        transport's untried messages are refused too: its defect is the reason, not this.)"""
        refusal = next((o.error for o in outcomes if o.kind == Outcome.REFUSED), None)
        if refusal is None or batch.broken is not None:
            return
        try:
            paused = Campaign.objects.pause(campaign_id=batch.campaign_id,
                                            reason=refusal_reason(refusal))
        except DATABASE_AWAY as exc:  # its next refusal pauses it
            discard_connection()
            logger.warning("campaign %s: not paused after a refusal (%s)", batch.campaign_id, exc,
                           extra={"campaign_id": batch.campaign_id, "worker_id": self.worker_id})
            return
        if paused:
            metrics.CAMPAIGNS_REFUSED.inc()
            logger.error("campaign %s paused: the transport refused us (%s)", batch.campaign_id,
                         refusal, extra={"campaign_id": batch.campaign_id,
                                         "worker_id": self.worker_id})

    def _contain(self, batch: Batch, exc: Exception, *, unsent: bool = False) -> None:
        """Pause the batch's campaign with the reason, and give back its rows that never went
        out, their attempt not counted (``unsent``: none of the batch did). Whatever a tenant
        typed (a sender, a template) then stops its own campaign, never the worker nor anyone
        else's campaign."""
        reason = describe(exc)  # one line, bounded, no NUL (a template may raise one)
        metrics.CAMPAIGNS_CONTAINED.inc()
        logger.error("campaign %s paused: it cannot be sent as it is (%s)", batch.campaign_id,
                     reason, exc_info=exc,
                     extra={"campaign_id": batch.campaign_id, "worker_id": self.worker_id})
        self._renderers.pop(batch.campaign_id, None)
        self._settler.drain()  # outcomes already in hand are recorded first
        Campaign.objects.pause(campaign_id=batch.campaign_id, reason=reason)
        self._give_back(batch, unsent=unsent)

    def _give_back(self, batch: Batch, *, unsent: bool = False) -> None:
        """Give back the batch's rows that are still ours and that a resend cannot duplicate,
        their attempt not counted (``unsent``: none of the batch went out, so none is in doubt
        for this attempt)."""
        to_send = {row.id for row in batch.to_send}
        for lease in batch.leases:  # those still ours: a settled one has ended
            released = SendLease.objects.release(lease.id, campaign_id=batch.campaign_id,
                                                 worker_id=self.worker_id,
                                                 idempotent=self.idempotent, unsent=unsent)
            if released.freed:
                batch.tally.add_rows(GIVEN_BACK, sum(1 for row in lease.rows if row.id in to_send))
            batch.tally.add_rows(Send.Status.CANCELLED, released.cancelled)
            batch.tally.add_rows(Send.Status.UNKNOWN, released.unknown)
        if not batch.leases:
            released = Send.objects.release(batch.rows, campaign_id=batch.campaign_id,
                                            worker_id=self.worker_id, idempotent=self.idempotent,
                                            unsent=unsent)
            batch.tally.add_rows(GIVEN_BACK, len(released))

    def _finish(self) -> None:
        self._land(block=True)
        self._settler.drain()  # finish judges by settled rows
        self._console.finished(Campaign.objects.finish())

    # --- the steps' parts --------------------------------------------------------------------

    def _beat(self) -> None:
        """Say this worker is alive: a row in the database (the admin's workers page), the
        metrics' gauge and, when asked, a file's mtime (for a container's probe)."""
        with self._beat_lock:  # from the loop and from the heartbeat's thread
            now = time.monotonic()
            if now - self._beat_at < HEARTBEAT_EVERY:
                return
            WorkerHeartbeat.objects.beat(worker_id=self.worker_id, hostname=socket.gethostname(),
                                         pid=os.getpid(), batch_size=self.batch_size,
                                         receiver="idempotent" if self.idempotent else "plain")
            self._beat_at = now
            metrics.LAST_BEAT.set_to_current_time()
            if self._heartbeat_file is not None:
                self._heartbeat_file.touch()

    def _housekeeping_due(self) -> bool:
        """Starting, building and recovering are about campaigns and leases, not batches: while
        full batches keep coming, once every HOUSEKEEPING_EVERY seconds is enough."""
        now = time.monotonic()
        if self._was_full and now - self._housekept_at < HOUSEKEEPING_EVERY:
            return False
        self._housekept_at = now
        return True

    def _in_turn(self, campaigns: list[Sending]) -> list[Sending]:
        """The campaigns in order, starting after the one served last (a new worker starts at
        a random place, so that replicas spread out)."""
        if not campaigns:
            return []
        if self._last_campaign_id is None:
            start = random.randrange(len(campaigns))
        else:
            start = next((i for i, c in enumerate(campaigns)
                          if c.campaign_id > self._last_campaign_id), 0)
        return campaigns[start:] + campaigns[:start]

    @staticmethod
    def _render(renderer: CampaignRenderer,
                rows: Sequence[Claimed]) -> tuple[list[Delivery], list[Outcome]]:
        deliveries: list[Delivery] = []
        unrenderable: list[Outcome] = []
        for row in rows:
            try:
                message = renderer.render(job_id=row.job_id, email=row.email,
                                          subscriber_id=row.subscriber_id)
            except Exception as exc:  # a template or header problem: this row can never be sent
                unrenderable.append(Outcome(row.id, Outcome.PERMANENT,
                                            error=f"cannot render: {describe(exc)}"))
                continue
            deliveries.append(Delivery(row.id, row.job_id, message))
        return deliveries, unrenderable

    def _renderer(self, campaign_id: int) -> CampaignRenderer:
        """The campaign's renderer, built and tried once on a sample recipient: what fails
        here fails for every recipient, and is the campaign's problem, not a row's. Built anew
        after a start or a resume changed its sender, and at least every RENDERER_FRESH_FOR
        seconds, so that sender is checked: one on another account's verified domain (verified
        before the start, or since) fails here (``sender_domains.check_outgoing_sender``)."""
        renderer = self._renderers.get(campaign_id)
        if (renderer is not None and time.monotonic()
                - self._renderers_built.get(campaign_id, -math.inf) >= RENDERER_FRESH_FOR):
            renderer = None  # built anew below: a sender checked once is not checked for good
        if renderer is None:
            if len(self._renderers) >= RENDERERS_KEPT:
                self._renderers.clear()
                self._renderers_built.clear()
            campaign = Campaign.objects.select_related("account").get(id=campaign_id)
            content = CampaignContent.of(campaign)
            check_outgoing_sender(account_id=content.account_id, address=content.from_email)
            self._links = self._links or LinkMaker()
            renderer = CampaignRenderer(content, links=self._links)
            renderer.render(job_id=job_id(campaign_id, 0), email=SAMPLE_RECIPIENT, subscriber_id=0)
            self._renderers[campaign_id] = renderer
            self._renderers_built[campaign_id] = time.monotonic()
        return renderer

    def _drop_stale_renderer(self, campaign: Sending) -> None:
        """A campaign resumed since its renderer was built may go out as another sender now."""
        renderer = self._renderers.get(campaign.campaign_id)
        if renderer is not None and renderer.content.sender != campaign.sender:
            del self._renderers[campaign.campaign_id]

    def _send(self, transport: BaseTransport, batch: Batch,
              deliveries: Sequence[Delivery]) -> list[Outcome]:
        """On a wire's thread: one chunk of the batch through one connection."""
        if not deliveries:
            return []
        started = time.perf_counter()
        try:
            outcomes = transport.send_bulk(deliveries)
        except TransportBroke as broke:
            self._broken(batch, broke.cause)
            outcomes = broke.outcomes
        if any(o.kind == Outcome.REFUSED for o in outcomes):
            batch.refused.set()
        each = (time.perf_counter() - started) / len(deliveries)
        metrics.observe_each(metrics.TRANSPORT_SECONDS.labels(transport.label), each,
                             len(deliveries))
        if self.idempotent:  # a message that may have arrived goes again under its key
            outcomes = [replace(o, kind=Outcome.IN_DOUBT_RETRIED) if o.kind == Outcome.IN_DOUBT
                        else o for o in outcomes]
        return outcomes

    def _hand_over(self, ids: Sequence[int], *, batch: Batch) -> dict[int, str]:
        """Idempotent receiver, before a batch goes out: return {send id: 'sending' (send it) |
        'suppressed'} for the rows still ours (a plain receiver's chunks: ``_hand_over_chunk``).
        Handed over by the claim already, the rows only need a look at the opt-outs, and that
        look is a read (none, on leases, while the tenant's opt-outs have not moved since the
        claim's look); the rare blocked row goes through the hand-over to be suppressed (in a
        lease, its settle writes it so)."""
        if batch.leases:
            blocked = Send.objects.blocked(ids, campaign_id=batch.campaign_id,
                                           seen=batch.leases[0].opt_outs)
            batch.withheld.update(blocked)
            return {i: Send.Status.SUPPRESSED if i in blocked else Send.Status.SENDING for i in ids}
        blocked = set(Send.objects.blocked(ids))
        handed = (Send.objects.hand_over([row for row in batch.rows if row.id in blocked],
                                         worker_id=self.worker_id) if blocked else {})
        # A blocked row is never sent by us: suppressed if still ours, else (recovered, taken
        # over) left to its new holder, whose own check will see the opt-out.
        return {i: handed.get(i, Send.Status.SENDING) for i in ids
                if i in handed or i not in blocked}

    def _record(self, batch: Batch, outcomes: Sequence[Outcome],
                leases: Sequence[Lease] | None = None) -> dict[int, str]:
        """Settle outcomes in the database; retried through an outage for as long as the lease
        lasts (past it, the rows are recovered as after a crash)."""
        def settle() -> dict[int, str]:
            with metrics.STATEMENT_SECONDS.labels("settle").time():
                if batch.leases:
                    return self._settle_leases(batch, outcomes, leases or batch.leases)
                return Send.objects.settle(outcomes, **self._settle_policy(batch))

        return self._retrying_db(settle, deadline=time.monotonic() + self.lease) or {}

    def _settle_leases(self, batch: Batch, outcomes: Sequence[Outcome],
                       leases: Sequence[Lease]) -> dict[int, str]:
        """End each of these leases of the batch; return what the answered rows became (the
        withheld ones were counted when they were found)."""
        settled: dict[int, str] = {}
        for lease in leases:
            settled.update(SendLease.objects.settle(lease.id, batch.lease_outcomes(lease, outcomes),
                                                    idempotent=self.idempotent,
                                                    **self._settle_policy(batch)))
        named = batch.named_at_claim
        return {i: status for i, status in settled.items() if i not in named}

    def _hand_over_lease(self, batch: Batch, answered: Sequence[tuple[Lease, list[Outcome]]],
                         lease: Lease) -> dict[int, str]:
        """Plain receiver, on leases: hand over a wire's next lease, settling the leases it
        answered since in the same commit, which the other wires' waiting hand-overs share;
        return the hand-over's {send id: 'sending' | 'suppressed'} (empty: no longer ours)."""
        request = LeaseHandOver([(done.id, batch.lease_outcomes(done, outcomes))
                                 for done, outcomes in answered], lease.id,
                                self._settle_policy(batch))
        settled, handed = self._commit_hand_over(
            request, SendLease.objects.settle_and_hand_over_many, self._lease_hand_overs,
            settles=bool(answered))
        if answered:
            named = batch.named_at_claim
            self._after_settle(batch, [o for _, outcomes in answered for o in outcomes],
                               {i: s for i, s in settled.items() if i not in named})
        return handed

    def _hand_over_chunk(self, batch: Batch, answered: Sequence[Outcome],
                         rows: Sequence[Claimed]) -> dict[int, str]:
        """Plain receiver: hand over a wire's next chunk, settling its last one (``answered``)
        in the same commit, which the other wires' waiting hand-overs share
        (``growth.sending.hand_overs``); return the hand-over's {send id: 'sending' |
        'suppressed'}."""
        request = HandOver(answered, rows, self._settle_policy(batch))
        settled, handed = self._commit_hand_over(
            request, Send.objects.settle_and_hand_over_many, self._hand_overs,
            settles=bool(answered))
        if answered:
            self._after_settle(batch, answered, settled)
        return handed

    @staticmethod
    def _commit_hand_over(request: R, commit_many: Callable[[list[R]], list[T]],
                          hand_overs: HandOvers | None, *, settles: bool) -> T:
        """A wire's request, committed with the other wires' waiting ones (``hand_overs``),
        or alone (one wire)."""
        with metrics.STATEMENT_SECONDS.labels(
                "settle_and_hand_over" if settles else "hand_over").time():
            if hand_overs is None:
                (answer,) = commit_many([request])
                return answer
            return hand_overs.submit(request)

    def _settle_policy(self, batch: Batch) -> dict:
        return {"campaign_id": batch.campaign_id, "worker_id": self.worker_id,
                "attempts": batch.attempts, "retry_for": settings.SENDER_RETRY_FOR,
                "backoff_base": settings.SENDER_BACKOFF_BASE,
                "backoff_max": settings.SENDER_BACKOFF_MAX,
                "throttle_delay": settings.SENDER_THROTTLE_EVERY}

    def _suppress_hard_bounces(self, batch: Batch, outcomes: Sequence[Outcome],
                               settled: dict[int, str]) -> None:
        """Suppress, for its tenant, each address our relay refused for good (5.1.x, 5.2.1), as
        an ESP's hard bounce does. After the settle and in a statement of its own: the settle
        never waits for it, and a failure here loses only the suppression (the next campaign's
        bounce makes it)."""
        bounced = [o.send_id for o in outcomes
                   if settled.get(o.send_id) == Send.Status.FAILED and smtp_hard_bounce(o.error)]
        if not bounced:
            return
        try:
            suppressed = Suppression.objects.suppress_bounced(bounced)
        except Exception as exc:
            if isinstance(exc, DATABASE_AWAY):
                discard_connection()
            logger.warning("campaign %s: %d hard-bounced addresses not suppressed (%s)",
                           batch.campaign_id, len(bounced), exc, exc_info=exc,
                           extra={"campaign_id": batch.campaign_id, "worker_id": self.worker_id})
            return
        if suppressed:
            logger.info("campaign %s: %d hard-bounced addresses suppressed for the tenant",
                        batch.campaign_id, len(suppressed),
                        extra={"campaign_id": batch.campaign_id, "worker_id": self.worker_id})

    def _idle_wait(self, busy: bool, next_in: float | None) -> float:
        wait = self.tick if next_in is None else min(self.tick, next_in)
        if self._rate_wait is not None:
            wait = min(wait, self._rate_wait)
        if busy:
            wait = min(wait, BUSY_POLL)
        return max(wait, MIN_WAIT)

    def _retrying_db(self, call: Callable[[], T], *, deadline: float | None = None,
                     default: T | None = None,
                     lost: str = "the lease will return these rows") -> T | None:
        """Run ``call``; on a lost database connection reconnect with backoff and run it again.

        Gives up (returning ``default``) only at ``deadline`` or when asked to stop while the
        database is away (a call with a deadline, a settle, still tries for STOP_GRACE seconds
        after the stop, sleeping its backoff: the stop's event no longer waits); nothing is lost
        then either, since unsettled rows keep their lease.
        """
        delay = DB_RETRY_FIRST
        while True:
            try:
                return call()
            except DATABASE_AWAY as exc:
                logger.warning("database unavailable (%s); retrying in %.1fs", exc, delay)
                discard_connection()
                stopping = self._stop.is_set()
                if stopping and deadline is None:
                    return default
                if stopping:
                    deadline = min(deadline, (self._stop_at or time.monotonic()) + STOP_GRACE)
                if deadline is not None and time.monotonic() + delay > deadline:
                    logger.error("giving up: %s", lost)
                    return default
                if stopping:
                    time.sleep(delay)
                elif self._stop.wait(delay) and deadline is None:
                    return default
                delay = min(delay * 2, DB_RETRY_MAX)
