from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.db import connection, models

from growth.managers.queries import FromRow, Queries

QUERIES = Queries.beside(__file__)

SETTLED = ("sent", "failed")  # the verdicts settle_unknown writes


@dataclass(frozen=True, slots=True)
class InDoubt(FromRow):
    """A send row that is 'unknown'."""

    id: int
    subscriber_id: int
    email: str
    resent: bool  # a follow-up campaign took its recipient: never retried here


class VerdictManager(models.Manager):
    """Decisions about sends in doubt, each written with the status change it records (see
    verdicts.sql)."""

    def settle_unknown(self, evidence: Mapping[int, str], *, verdict: str, decided_by: str,
                       queued_again: bool = False) -> list[int]:
        """Move the given rows that are still 'unknown' to ``verdict`` ('sent' or 'failed'),
        recording for each the evidence given for it; return the ids moved. ``queued_again``:
        evidence that the message arrived also settles a row queued again while in doubt (an
        operator's retry, or a lost worker's row under its key), which would go out twice."""
        if verdict not in SETTLED:
            raise ValueError(f"a send in doubt is settled 'sent' or 'failed', not {verdict!r}")
        if not evidence:
            return []
        return QUERIES.column("settle_unknown", ids=list(evidence), evidence=list(evidence.values()),
                              verdict=verdict, decided_by=decided_by, queued_again=queued_again)

    def record(self, evidence: Mapping[int, str], *, verdict: str, decided_by: str) -> list[int]:
        """Record verdicts on these rows without changing them: for a status change made by
        another statement of the caller's transaction."""
        if not evidence:
            return []
        return QUERIES.column("record", ids=list(evidence), evidence=list(evidence.values()),
                              verdict=verdict, decided_by=decided_by)

    def of_send(self, send_id: int) -> list:
        """The send's verdicts, newest first."""
        return list(self.filter(send_id=send_id).order_by("-decided_at", "-id"))

    def unknown_in_campaign(self, *, campaign_id: int) -> list[InDoubt]:
        return [InDoubt.from_row(row)
                for row in QUERIES.rows("unknown_in_campaign", campaign_id=campaign_id)]

    def lock_retryable(self, *, campaign_id: int) -> tuple[str | None, list[int]]:
        """Lock the campaign, then its unknown rows that a retry may queue again (none taken by a
        follow-up); return the campaign's status (None: no such campaign) and the rows' ids.
        Only inside a transaction: the locks are what keep the rows as found until it commits."""
        if not connection.in_atomic_block:
            raise RuntimeError("lock_retryable outside a transaction would lock nothing")
        campaign = QUERIES.one("lock_campaign", campaign_id=campaign_id)
        if campaign is None:
            return None, []
        return campaign["status"], QUERIES.column("lock_retryable", campaign_id=campaign_id)
