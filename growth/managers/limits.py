from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import models

from growth.managers.queries import FromRow, Queries

QUERIES = Queries.beside(__file__)

RATE_CEILING = 100_000.0  # messages/s a bucket raised by good answers alone stops at
PROBE = 0.2  # share of its rate a bucket grows by per good period, past its last throttle
SET_FROM_SETTINGS = "set by a worker from the SENDER_RATE_LIMIT setting"


@dataclass(frozen=True, slots=True)
class Grant:
    count: int  # messages that may go now
    wait: float  # seconds until a batch could be granted, when count is 0
    missing: bool = False  # a bucket asked for is gone (nothing granted): look its id up again


@dataclass(frozen=True, slots=True)
class DestinationGrant:
    """What one paced destination (mailbox provider) may take in this claim."""

    granted: int  # rows of it the claim may take (tokens already taken)
    bucket_ids: list[int]  # its buckets, to give back what the claim did not use
    throttled: bool  # a receiver's deferrals hold it down
    wait: float  # seconds until it has a token again, when granted is 0
    capped: bool = False  # a cap on messages on the wire: the grant holds until the claim commits


@dataclass(frozen=True, slots=True)
class Configured(FromRow):
    """An operator's edit, saved."""

    version: int  # the bucket's configuration now: a form must name it to save again
    throttled_to: float | None  # the engine's rate, untouched: the effective rate is the lower


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    """How deferrals slow a bucket down and good answers speed it up (see limits.sql)."""

    decrease: float
    every: float  # seconds: at most one change of a bucket per period
    floor: float  # messages/s
    recovery: float  # share of the rate before the throttle given back per period
    burst: float  # of a bucket created by a throttle

    @classmethod
    def from_settings(cls) -> ThrottlePolicy:
        return cls(decrease=settings.SENDER_THROTTLE_DECREASE,
                   every=settings.SENDER_THROTTLE_EVERY, floor=settings.SENDER_THROTTLE_FLOOR,
                   recovery=settings.SENDER_THROTTLE_RECOVERY, burst=settings.SENDER_RATE_BURST)


class RateLimitManager(models.Manager):
    """Token buckets shared by all workers (see limits.sql)."""

    def take(self, bucket_ids: list[int], *, want: int, time_zone: str = "UTC") -> Grant:
        """Take up to ``want`` tokens from every bucket at once (no buckets: no limit). A day's
        quota turns at midnight in ``time_zone`` (its tenant's). A bucket deleted meanwhile (an
        operator's, a warm-up ended and begun again under a new id) grants nothing: a limit
        that went unseen would let everything through."""
        if not bucket_ids:
            return Grant(want, 0.0)
        taken = QUERIES.one("take", ids=bucket_ids, want=want, time_zone=time_zone)
        if taken is None or taken["found"] < len(set(bucket_ids)):
            return Grant(0, 0.0, missing=True)
        return Grant(taken["granted"], taken["wait"] if not taken["granted"] else 0.0)

    def give_back(self, bucket_ids: list[int], *, count: int) -> None:
        if bucket_ids and count > 0:
            QUERIES.rows("give_back", ids=bucket_ids, count=count)

    def take_destinations(self, *, account_id: int, want: int) -> dict[int, DestinationGrant]:
        """For each paced destination of this tenant's mail: how many rows of it may go now
        (at most ``want``), those tokens taken. Destinations absent are not paced. Its buckets
        stay locked until the caller's transaction ends: a destination capped in messages on
        the wire is claimed from in that transaction, or two workers would both see its room."""
        _, rows = QUERIES.together(("lock_destinations", {"account_id": account_id}),
                                   ("take_destinations", {"account_id": account_id, "want": want,
                                                          "time_zone": "UTC"}))  # no day quota
        return {row["destination_id"]: DestinationGrant(row["granted"], row["bucket_ids"],
                                                        row["throttled"], row["wait"],
                                                        row["capped"])
                for row in rows}

    def throttled(self, *, reason: str, accepted: float, sent_since: float,
                  policy: ThrottlePolicy, destination_id: int | None = None,
                  transport: str = "") -> float | None:
        """A receiver said "slow down" to mail for ``destination_id`` (or, without one, to
        everything through ``transport``): lower that bucket's rate below what the receiver
        was taking (``accepted``: messages/s it accepted lately, 0 if none), creating the bucket
        if it had none. Return the new rate, or None when the bucket was lowered less than a
        round trip ago (``sent_since``: seconds since the throttled batch took its tokens) and
        this answer is old news."""
        params = {"reason": reason[:500], "accepted": max(accepted, 0.0),
                  "sent_since": max(sent_since, 0.0), "decrease": policy.decrease,
                  "every": policy.every, "floor": policy.floor, "burst": policy.burst}
        if destination_id is not None:
            row = QUERIES.one("throttle_destination", destination_id=destination_id, **params)
        else:
            row = QUERIES.one("throttle_transport", transport=transport, **params)
        return None if row is None else row["per_second"]

    def recover(self, *, destination_ids: Sequence[int], transport: str,
                policy: ThrottlePolicy) -> list[int]:
        """Good answers: raise the throttled buckets of these destinations and of the
        transport (once per period); return the ids of those raised."""
        which = {"destination_ids": list(destination_ids), "transport": transport}
        _, raised = QUERIES.together(("lock_recovering", which),
                                     ("recover", which | {"recovery": policy.recovery,
                                                          "probe": PROBE, "every": policy.every,
                                                          "ceiling": RATE_CEILING}))
        return [row["rate_limit_id"] for row in raised]

    def destination_rate(self, destination_id: int, *, seconds: int = 5) -> float:
        """Messages a second all workers delivered to the destination lately."""
        return QUERIES.one("destination_rate", destination_id=destination_id,
                           seconds=seconds)["per_second"]

    def current_total_rate(self, *, seconds: int = 5) -> float:
        """Messages a second all workers delivered lately, to everyone."""
        return QUERIES.one("total_rate", seconds=seconds)["per_second"]

    def any_throttled(self) -> bool:
        return QUERIES.one("throttled_buckets")["throttled"]

    def for_transport(self, transport: str, *, per_second: float, burst: float,
                      reason: str = SET_FROM_SETTINGS) -> int:
        """Create or re-configure the transport-wide bucket; return its id. A configuration it
        changes is recorded in the bucket's history, as ``reason`` with the values set (no user
        made it: the admin's History, LogEntry, records a user's edits only)."""
        which = {"transport": transport}
        _, (row,) = QUERIES.together(("lock_transport_limit", which),
                                     ("transport_limit", which | {"per_second": per_second,
                                                                  "burst": burst,
                                                                  "reason": reason}))
        return row["id"]

    def configure(self, limit_id: int, *, version: int, account_id: int | None,
                  destination_id: int | None, transport: str, per_second: float | None,
                  burst: float, max_in_flight: int | None) -> Configured | None:
        """Save an operator's edit of the bucket if its configuration is still ``version`` (the
        one the form was loaded from); None when another edit was saved since (or the bucket is
        gone, or is a warm-up quota): nothing was written."""
        row = QUERIES.one("configure", id=limit_id, version=version, account_id=account_id,
                          destination_id=destination_id, transport=transport,
                          per_second=per_second, burst=burst, max_in_flight=max_in_flight)
        return None if row is None else Configured.from_row(row)

    def transport_bucket(self, transport: str) -> int | None:
        row = QUERIES.one("transport_bucket", transport=transport)
        return None if row is None else row["id"]

    def warmup(self, *, account_id: int, per_day: int | None) -> int | None:
        """Set the tenant's warm-up quota for today (None: it has none); return its bucket."""
        if per_day is None:
            QUERIES.rows("end_warmup", account_id=account_id)
            return None
        return QUERIES.one("warmup_quota", account_id=account_id, per_day=per_day)["id"]

    def current_rates(self, account_ids: list[int], *, seconds: int = 10) -> dict[int, float]:
        """Messages a second each account sent over the last ``seconds``."""
        rows = QUERIES.rows("current_rates", account_ids=list(account_ids), seconds=seconds)
        return {row["account_id"]: row["per_second"] for row in rows}
