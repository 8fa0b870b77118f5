from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import models

from growth.managers.queries import FromRow, Queries

QUERIES = Queries.beside(__file__)


@dataclass(frozen=True, slots=True)
class Snapshot(FromRow):
    """A campaign as the monitor shows it, read at ``as_of`` (the database's clock)."""

    campaign_id: int
    status: str
    started_at: datetime | None
    finished_at: datetime | None
    as_of: datetime
    counts: dict[str, int]  # send status -> rows (statuses with no row are absent)
    sent_last_minute: int
    rate_window: float  # seconds the last minute covers: under 60 in the campaign's first minute


@dataclass(frozen=True, slots=True)
class Minute(FromRow):
    minute: datetime
    sends: int


class CampaignMonitorManager(models.Manager):
    """Reads for the operators' live monitor (see monitor.sql)."""

    def snapshot(self, campaign_ids: list[int]) -> dict[int, Snapshot]:
        """{campaign_id: Snapshot} of the given campaigns (absent ids are left out), in one
        aggregate statement."""
        snapshots = {}
        for row in QUERIES.rows("snapshot", campaign_ids=list(campaign_ids)):
            counts = dict(zip(row.pop("statuses"), row.pop("sends"), strict=True))
            snapshots[row["campaign_id"]] = Snapshot.from_row({**row, "counts": counts})
        return snapshots

    def series(self, campaign_id: int) -> list[Minute]:
        """Sent per minute over the campaign's last hour of sending, empty minutes as 0; [] for
        a campaign not started."""
        return [Minute.from_row(row) for row in QUERIES.rows("series", campaign_id=campaign_id)]
