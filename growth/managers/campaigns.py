from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, time

from django.db import OperationalError, models, transaction

from growth.managers.queries import FromRow, Queries
from growth.sending import pacing

QUERIES = Queries.beside(__file__)
LOCK_NOT_AVAILABLE = "55P03"  # SQLSTATE of FOR UPDATE NOWAIT on a row held elsewhere


@dataclass(frozen=True, slots=True)
class Outlook:
    busy: bool  # a campaign is sending or due to start
    next_in: float | None  # seconds until the next scheduled start, retry or lease expiry


@dataclass(frozen=True, slots=True)
class Cancelled:
    """What a cancel made of the campaign's queued rows."""

    dropped: int  # cancelled: they will never get it
    # 'unknown': handed over before their worker was lost, or retried by an operator while in
    # doubt, so they may have it
    in_doubt: int

    def __str__(self) -> str:
        doubt = f"; {self.in_doubt:,} in doubt, now unknown" if self.in_doubt else ""
        return f"{self.dropped:,} queued recipients dropped{doubt}"


@dataclass(frozen=True, slots=True)
class Sending(FromRow):
    campaign_id: int
    account_id: int
    from_email: str  # the sender it goes out as now (resuming takes its account's again)
    from_name: str
    bucket_ids: list[int]  # its tenant's buckets: its rate, its warm-up quota
    window_starts: time | None
    window_ends: time | None
    time_zone: str
    warmup_started_on: date | None
    warmup_daily_start: int
    warmup_daily_growth: float
    warmup_until: int
    now: datetime  # the database's
    leases: bool  # it runs on the lease protocol (growth.managers.leases)

    @property
    def sender(self) -> tuple[str, str]:
        return self.from_email, self.from_name

    def window_opens_in(self) -> float:
        """Seconds until the campaign's sending window opens (0: open, or none)."""
        return pacing.window_opens_in(starts=self.window_starts, ends=self.window_ends,
                                      time_zone=self.time_zone, now=self.now)

    def window_closes_in(self) -> float | None:
        """Seconds its open sending window has left (None: no window, or it is closed)."""
        return pacing.window_closes_in(starts=self.window_starts, ends=self.window_ends,
                                       time_zone=self.time_zone, now=self.now)

    def zone_name(self) -> str:
        """Its tenant's time zone as the database may be given it (UTC if it is no zone)."""
        return pacing.zone(self.time_zone).key

    def warmup_cap(self) -> int | None:
        """Today's warm-up quota of its tenant (None: none)."""
        return pacing.warmup_cap(
            started_on=self.warmup_started_on, daily_start=self.warmup_daily_start,
            daily_growth=self.warmup_daily_growth, until=self.warmup_until,
            today=pacing.local_today(time_zone=self.time_zone, now=self.now))


@dataclass(frozen=True, slots=True)
class AudienceLoss(FromRow):
    """A campaign still to be built whose audience holds segments about to be deleted."""

    campaign_id: int
    account_id: int
    name: str
    status: str
    follow_up: bool  # its segments are its original's: never edited
    segment_ids: list[int]  # those it names; none: it names no segment (every segment)
    keeps_others: bool  # it names a segment that stays

    @property
    def widens(self) -> bool:
        """Left with no segment, it would go to every segment of its account."""
        return bool(self.segment_ids) and not self.keeps_others


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    campaigns: dict[str, int]  # status -> campaigns
    sending_rows: dict[str, int]  # status -> send rows of the campaigns now sending


class CampaignManager(models.Manager):
    """Compare-and-set transitions of growth_campaigns (see campaigns.sql)."""

    def approve(self, *, campaign_id: int, version: datetime, send_now: bool = False) -> bool:
        """Move draft -> approved if the campaign is still the validated ``version``;
        ``send_now``: due at once, whatever its schedule said."""
        return bool(QUERIES.rows("approve", campaign_id=campaign_id, version=version,
                                 send_now=send_now))

    def bring_forward(self, *, campaign_id: int) -> bool:
        """Make an approved campaign scheduled later due now."""
        return bool(QUERIES.rows("bring_forward", campaign_id=campaign_id))

    def start_due(self) -> list[int]:
        """Move every due approved campaign to sending; return the ids this call moved."""
        return QUERIES.column("start_due")

    def pause(self, *, campaign_id: int, reason: str = "") -> bool:
        """Move sending -> paused; ``reason``: why the engine could not send it (empty when an
        operator pauses)."""
        return bool(QUERIES.rows("pause", campaign_id=campaign_id, reason=reason))

    def resume(self, *, campaign_id: int) -> bool:
        return bool(QUERIES.rows("resume", campaign_id=campaign_id))

    def cancel(self, *, campaign_id: int, expected: str | None = None) -> Cancelled | None:
        """Cancel (``expected``: only from that status); return what became of its queued rows,
        or None if not cancellable."""
        with transaction.atomic():
            QUERIES.rows("lock_campaign", campaign_id=campaign_id)
            QUERIES.rows("lock_cursor", campaign_id=campaign_id)
            cancelled = QUERIES.one("cancel", campaign_id=campaign_id, expected=expected)
        return Cancelled(cancelled["dropped"], cancelled["in_doubt"]) if cancelled else None

    def queued_in_doubt(self, *, campaign_id: int) -> int:
        """The campaign's queued rows whose message may have arrived, which a cancel would make
        'unknown' (see cancel in campaigns.sql)."""
        return QUERIES.one("queued_in_doubt", campaign_id=campaign_id)["rows"]

    def finish(self) -> list[int]:
        """Move every sending campaign with nothing left to do to sent; return their ids."""
        with transaction.atomic():
            locked = QUERIES.column("lock_finishable")
            if not locked:
                return []
            return QUERIES.column("finish", campaign_ids=locked)

    def update_draft(self, *, campaign_id: int, version: datetime, name: str, subject: str,
                     body_text: str, body_html: str, scheduled_for: datetime | None,
                     window_starts: time | None = None,
                     window_ends: time | None = None) -> datetime | None:
        """Save a draft's content (and its sending window) if it is still the draft ``version``;
        return the new version, or None when it was approved or edited meanwhile."""
        saved = QUERIES.one("update_draft", campaign_id=campaign_id, version=version, name=name,
                            subject=subject, body_text=body_text, body_html=body_html,
                            scheduled_for=scheduled_for, window_starts=window_starts,
                            window_ends=window_ends)
        return saved["updated_at"] if saved else None

    def rename(self, *, campaign_id: int, version: datetime, name: str) -> datetime | None:
        """Rename if the campaign is still ``version``; return the new version or None."""
        renamed = QUERIES.one("rename", campaign_id=campaign_id, version=version, name=name)
        return renamed["updated_at"] if renamed else None

    def sending(self) -> list[Sending]:
        """Campaigns whose recipients can be claimed now, oldest first."""
        return [Sending.from_row(row) for row in QUERIES.rows("sending")]

    def status_of(self, *, campaign_id: int) -> str | None:
        found = QUERIES.one("status", campaign_id=campaign_id)
        return found["status"] if found else None

    def outlook(self) -> Outlook:
        return Outlook(**QUERIES.one("outlook"))

    def audience(self, *, campaign_id: int) -> dict[str, int]:
        """Return counts describing the campaign's segments: subscriber_rows, addresses, ..."""
        return QUERIES.one("audience", campaign_id=campaign_id)

    def audiences_of_segments(self, segment_ids: list[int], *,
                              lock: bool = False) -> list[AudienceLoss]:
        """The campaigns still to be built (not cancelled) whose audience holds these segments.
        ``lock``: in the transaction that deletes them, hold those campaigns first, as their
        build does, so that the answer stands until the deletion commits."""
        if lock:
            if not transaction.get_connection().in_atomic_block:
                raise RuntimeError("the lock would end with the statement: run it in a transaction")
            while True:
                try:
                    # a savepoint: undone, it releases the row locks taken in it
                    with transaction.atomic():
                        QUERIES.rows("lock_audiences_of_segments", segment_ids=list(segment_ids))
                        # then the segments, so that no campaign comes to name one of them before
                        # the deletion commits (the link's deferred foreign key waits for this
                        # lock, then fails), and again the campaigns: one that came to name one
                        # before this lock is held now. Without waiting: its holder (an edit
                        # adding a segment) may wait at its commit for the segments held here,
                        # a deadlock; let go of them and wait for it in step 1 instead.
                        QUERIES.rows("lock_segments", segment_ids=list(segment_ids))
                        QUERIES.rows("lock_audiences_of_segments_nowait",
                                     segment_ids=list(segment_ids))
                    break
                except OperationalError as exc:
                    if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                        raise
        return [AudienceLoss.from_row(row)
                for row in QUERIES.rows("audiences_of_segments", segment_ids=list(segment_ids))]

    def progress(self, campaign_ids: list[int]) -> dict[int, dict[str, int]]:
        """Return {campaign_id: {send status: rows}} in one aggregate query."""
        counts: dict[int, dict[str, int]] = defaultdict(dict)
        for row in QUERIES.rows("progress", campaign_ids=list(campaign_ids)):
            counts[row["campaign_id"]][row["status"]] = row["sends"]
        return dict(counts)

    def needing_review(self, account_ids: list[int] | None) -> dict[str, int]:
        """{'unknown': rows, 'failed': rows} over the campaigns of ``account_ids`` (None: all)."""
        return QUERIES.one("needing_review",
                           account_ids=None if account_ids is None else list(account_ids))

    def metrics_snapshot(self) -> MetricsSnapshot:
        counted: dict[str, dict[str, int]] = {"campaigns": {}, "sending_rows": {}}
        for row in QUERIES.rows("metrics", campaign_ids=None):
            counted[row["counted"]][row["status"]] = row["n"]
        return MetricsSnapshot(**counted)
