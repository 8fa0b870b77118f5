from __future__ import annotations

from dataclasses import dataclass

from django.db import models

from growth.managers.queries import fetchall, load_beside

QUERIES = load_beside(__file__)


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
        rows = fetchall(QUERIES["take"], {"ids": bucket_ids, "want": want})
        if not rows:  # the buckets were deleted meanwhile
            return Grant(want, 0.0)
        granted, wait = rows[0]
        return Grant(granted, wait if not granted else 0.0)

    def give_back(self, bucket_ids: list[int], *, count: int) -> None:
        if bucket_ids and count > 0:
            fetchall(QUERIES["give_back"], {"ids": bucket_ids, "count": count})

    def for_transport(self, transport: str, *, per_second: float, burst: float) -> int:
        """Create or re-configure the transport-wide bucket; return its id."""
        return fetchall(QUERIES["transport_limit"], {
            "transport": transport, "per_second": per_second, "burst": burst})[0][0]

    def current_rates(self, account_ids: list[int], *, seconds: int = 10) -> dict[int, float]:
        """Messages a second each account sent over the last ``seconds``."""
        return dict(fetchall(QUERIES["current_rates"],
                             {"account_ids": list(account_ids), "seconds": seconds}))
