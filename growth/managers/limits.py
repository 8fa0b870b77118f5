from __future__ import annotations

from dataclasses import dataclass

from django.db import models

from growth.managers.queries import Queries

QUERIES = Queries.beside(__file__)


@dataclass(frozen=True, slots=True)
class Grant:
    count: int  # messages that may go now
    wait: float  # seconds until a batch could be granted, when count is 0


class RateLimitManager(models.Manager):
    """Token buckets shared by all workers (see limits.sql)."""

    def take(self, bucket_ids: list[int], *, want: int) -> Grant:
        """Take up to ``want`` tokens from every bucket at once (no buckets: no limit)."""
        if not bucket_ids:
            return Grant(want, 0.0)
        taken = QUERIES.one("take", ids=bucket_ids, want=want)
        if taken is None:  # the buckets were deleted meanwhile
            return Grant(want, 0.0)
        return Grant(taken["granted"], taken["wait"] if not taken["granted"] else 0.0)

    def give_back(self, bucket_ids: list[int], *, count: int) -> None:
        if bucket_ids and count > 0:
            QUERIES.rows("give_back", ids=bucket_ids, count=count)

    def for_transport(self, transport: str, *, per_second: float, burst: float) -> int:
        """Create or re-configure the transport-wide bucket; return its id."""
        return QUERIES.one("transport_limit", transport=transport, per_second=per_second,
                           burst=burst)["id"]

    def current_rates(self, account_ids: list[int], *, seconds: int = 10) -> dict[int, float]:
        """Messages a second each account sent over the last ``seconds``."""
        rows = QUERIES.rows("current_rates", account_ids=list(account_ids), seconds=seconds)
        return {row["account_id"]: row["per_second"] for row in rows}
