from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db import models, transaction

from growth.managers.queries import FromRow, Queries

QUERIES = Queries.beside(__file__)

FOLD_LIMIT = 10_000  # deltas per fold: a few milliseconds, and a worker folds every second


@dataclass(frozen=True, slots=True)
class Difference(FromRow):
    campaign_id: int
    status: str
    sent_minute: datetime | None
    bounce_reported: bool
    complaint_reported: bool
    tallied: int

    @property
    def reported(self) -> str:
        kinds = [kind for kind, on in (("bounce", self.bounce_reported),
                                       ("complaint", self.complaint_reported)) if on]
        return f", {' and '.join(kinds)} reported" if kinds else ""
    counted: int


class SendTallyManager(models.Manager):
    """The tallies of growth_sends (see tallies.sql); their reads are the view
    growth_send_counts, which campaigns.sql and monitor.sql select from."""

    def fold(self, *, limit: int = FOLD_LIMIT) -> int:
        """Fold up to ``limit`` deltas into the tallies; return how many were folded."""
        return QUERIES.one("fold", limit=limit)["deltas"]

    def recount(self, campaign_ids: list[int]) -> dict[int, dict[str, int]]:
        """{campaign_id: {status: rows}} counted over growth_sends, not the tallies."""
        counts: dict[int, dict[str, int]] = defaultdict(dict)
        for row in QUERIES.rows("recount", campaign_ids=list(campaign_ids)):
            counts[row["campaign_id"]][row["status"]] = row["sends"]
        return dict(counts)

    def differences(self, campaign_ids: list[int] | None = None) -> list[Difference]:
        """Where the tallies and the rows disagree (None: every campaign); [] when they agree.
        Reads every row of the campaigns: an operator's check."""
        ids = None if campaign_ids is None else list(campaign_ids)
        return [Difference.from_row(row) for row in QUERIES.rows("differences", campaign_ids=ids)]

    def repair(self, campaign_ids: list[int]) -> None:
        """Recount the campaigns' tallies from their rows, with every writer of growth_sends
        held off until it commits."""
        with transaction.atomic():
            QUERIES.rows("hold_writers")
            QUERIES.rows("forget", campaign_ids=list(campaign_ids))
            QUERIES.rows("retally", campaign_ids=list(campaign_ids))
