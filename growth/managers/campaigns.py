from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, models, transaction

from growth.managers.queries import fetchall, load_beside

QUERIES = load_beside(__file__)


@dataclass(frozen=True, slots=True)
class Outlook:
    busy: bool  # a campaign is sending or due to start
    next_in: float | None  # seconds until the next scheduled start, retry or lease expiry


@dataclass(frozen=True, slots=True)
class Sending:
    campaign_id: int
    account_id: int
    rate_limit_id: int | None


class CampaignManager(models.Manager):
    """Compare-and-set transitions of growth_campaigns (see campaigns.sql)."""

    def approve(self, *, campaign_id: int, version: datetime) -> bool:
        """Move draft -> approved if the campaign is still the validated ``version``."""
        return bool(_rows("approve", campaign_id=campaign_id, version=version))

    def start_due(self) -> list[int]:
        """Move every due approved campaign to sending; return the ids this call moved."""
        return [row[0] for row in _rows("start_due")]

    def pause(self, *, campaign_id: int) -> bool:
        return bool(_rows("pause", campaign_id=campaign_id))

    def resume(self, *, campaign_id: int) -> bool:
        return bool(_rows("resume", campaign_id=campaign_id))

    def cancel(self, *, campaign_id: int) -> int | None:
        """Cancel; return how many queued rows were dropped, or None if not cancellable."""
        with transaction.atomic():
            _rows("lock_campaign", campaign_id=campaign_id)
            rows = _rows("cancel", campaign_id=campaign_id)
        return rows[0][1] if rows else None

    def finish(self) -> list[int]:
        """Move every sending campaign with nothing left to do to sent; return their ids."""
        with transaction.atomic():
            locked = [row[0] for row in _rows("lock_finishable")]
            if not locked:
                return []
            return [row[0] for row in _rows("finish", campaign_ids=locked)]

    def update_draft(self, *, campaign_id: int, version: datetime, name: str, subject: str,
                     body_text: str, body_html: str, scheduled_for: datetime | None) -> datetime | None:
        """Save a draft's content if it is still the draft ``version``; return the new version,
        or None when it was approved or edited meanwhile."""
        rows = _rows("update_draft", campaign_id=campaign_id, version=version, name=name,
                     subject=subject, body_text=body_text, body_html=body_html,
                     scheduled_for=scheduled_for)
        return rows[0][0] if rows else None

    def rename(self, *, campaign_id: int, version: datetime, name: str) -> datetime | None:
        """Rename if the campaign is still ``version``; return the new version or None."""
        rows = _rows("rename", campaign_id=campaign_id, version=version, name=name)
        return rows[0][0] if rows else None

    def sending(self) -> list[Sending]:
        """Campaigns whose recipients can be claimed now, oldest first."""
        return [Sending(*row) for row in _rows("sending")]

    def status_of(self, *, campaign_id: int) -> str | None:
        rows = _rows("status", campaign_id=campaign_id)
        return rows[0][0] if rows else None

    def outlook(self) -> Outlook:
        busy, next_in = _rows("outlook")[0]
        return Outlook(busy=busy, next_in=next_in)

    def audience(self, *, campaign_id: int) -> dict[str, int]:
        """Return counts describing the campaign's segments: subscriber_rows, addresses, ..."""
        with connection.cursor() as cursor:
            cursor.execute(QUERIES["audience"], {"campaign_id": campaign_id})
            names = [column.name for column in cursor.description]
            return dict(zip(names, cursor.fetchone(), strict=True))

    def progress(self, campaign_ids: list[int]) -> dict[int, dict[str, int]]:
        """Return {campaign_id: {send status: rows}} in one aggregate query."""
        counts: dict[int, dict[str, int]] = defaultdict(dict)
        for campaign_id, status, n in _rows("progress", campaign_ids=list(campaign_ids)):
            counts[campaign_id][status] = n
        return dict(counts)


def _rows(query: str, /, **params) -> list[tuple]:
    return fetchall(QUERIES[query], params)
