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
