from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import models

from growth.managers.queries import FromRow, Queries

QUERIES = Queries.beside(__file__)


@dataclass(frozen=True, slots=True)
class Held(FromRow):
    worker_id: str
    rows_held: int
    lease_ends_at: datetime


@dataclass(frozen=True, slots=True)
class Holder(FromRow):
    worker_id: str
    rows_held: int
    lease_ends_at: datetime
    seen_at: datetime | None  # its last heartbeat (None: none on record)
    stopped_at: datetime | None


class HeartbeatManager(models.Manager):
    """Workers' heartbeats (see workers.sql)."""

    def beat(self, *, worker_id: str, hostname: str, pid: int, receiver: str,
             batch_size: int) -> None:
        QUERIES.rows("beat", worker_id=worker_id, hostname=hostname, pid=pid, receiver=receiver,
                     batch_size=batch_size)

    def stopped(self, *, worker_id: str) -> None:
        QUERIES.rows("stopped", worker_id=worker_id)

    def held(self) -> dict[str, Held]:
        """{worker id: the rows it holds under a lease} for every worker holding any."""
        return {row["worker_id"]: Held.from_row(row) for row in QUERIES.rows("held")}

    def holders_of(self, *, campaign_id: int) -> list[Holder]:
        """Who holds the campaign's rows on the wire, with their last heartbeat."""
        return [Holder.from_row(row)
                for row in QUERIES.rows("held_in_campaign", campaign_id=campaign_id)]
