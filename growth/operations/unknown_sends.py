"""An operator's decisions about 'unknown' rows: the message may or may not have gone out when
its worker died, and only a person (with the provider's logs, or the recipient) can tell."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, QuerySet

from growth.models import Campaign, Send, SendVerdict

# A retry queues rows only where a worker will send them (see sends.sql, retry_unknown).
RETRYABLE_CAMPAIGNS = (Campaign.Status.SENDING, Campaign.Status.PAUSED, Campaign.Status.SENT)


@dataclass(frozen=True, slots=True)
class Review:
    moved: tuple[int, ...]  # the ids of the rows the decision moved
    skipped: dict[str, int]  # why a selected row was left alone -> how many
    reopened_campaigns: list[int]  # finished campaigns sent back to sending

    @property
    def changed(self) -> int:
        return len(self.moved)


@dataclass(frozen=True, slots=True)
class Plan:
    """What a decision would do to the selected rows, as of now (for a confirmation page)."""

    moving: list[int]  # the ids it would move
    left_alone: dict[str, int]  # why a selected row would be left alone -> how many


def plan(queryset: QuerySet, *, retry: bool) -> Plan:
    """Which of the rows of ``queryset`` a retry (``retry``) or a mark would move, by the
    statements' own conditions; the others counted by the reason they would be left alone."""
    moving: list[int] = []
    left_alone: dict[str, int] = {}
    unknown = (queryset.filter(status=Send.Status.UNKNOWN).order_by("id")
               .values_list("id", "campaign__status", "resent_in__name"))
    for send_id, campaign_status, follow_up in unknown:
        why = _why_left_alone(Send.Status.UNKNOWN, campaign_status, follow_up, retry=retry)
        if why is None:
            moving.append(send_id)
        else:
            left_alone[why] = left_alone.get(why, 0) + 1
    others = (queryset.exclude(status=Send.Status.UNKNOWN).order_by().values("status")
              .annotate(rows=Count("id")).values_list("status", "rows"))
    for status, rows in sorted(others):
        why = _why_left_alone(status, None, None, retry=retry)
        left_alone[why] = left_alone.get(why, 0) + rows
    return Plan(moving=moving, left_alone=left_alone)


def retry_unknown(*, send_ids: Sequence[int], decided_by: str = "an operator",
                  evidence: str = "") -> Review:
    """unknown -> queued with the same job id: the receiver may get it twice unless it
    de-duplicates on the key. Each row moved gets a 'retried' verdict in the same transaction."""
    with transaction.atomic():
        requeued = Send.objects.retry_unknown(send_ids)
        SendVerdict.objects.record({row.id: evidence or "queued again with the same key"
                                    for row in requeued},
                                   verdict=SendVerdict.Verdict.RETRIED, decided_by=decided_by)
    moved = sorted(row.id for row in requeued)
    return Review(moved=tuple(moved), skipped=_skipped(send_ids, set(moved), retry=True),
                  reopened_campaigns=sorted({r.campaign_id for r in requeued if r.reopened}))


def mark_delivered(*, send_ids: Sequence[int], decided_by: str = "an operator",
                   evidence: str = "") -> Review:
    """unknown -> sent: the message is known to have arrived."""
    return _settle(send_ids, SendVerdict.Verdict.SENT, decided_by,
                   evidence or "marked delivered by an operator")


def mark_not_delivered(*, send_ids: Sequence[int], decided_by: str = "an operator",
                       evidence: str = "") -> Review:
    """unknown -> failed: the message is known not to have arrived (a follow-up may resend it)."""
    return _settle(send_ids, SendVerdict.Verdict.FAILED, decided_by,
                   evidence or "marked not delivered by an operator")


def _settle(send_ids: Sequence[int], verdict: str, decided_by: str, evidence: str) -> Review:
    moved = sorted(SendVerdict.objects.settle_unknown(dict.fromkeys(send_ids, evidence),
                                                      verdict=verdict, decided_by=decided_by))
    return Review(moved=tuple(moved), skipped=_skipped(send_ids, set(moved), retry=False),
                  reopened_campaigns=[])


def _skipped(send_ids: Sequence[int], moved: set[int], *, retry: bool) -> dict[str, int]:
    left = [i for i in send_ids if i not in moved]
    if not left:
        return {}
    skipped: dict[str, int] = {}
    rows = Send.objects.filter(id__in=left).values_list("status", "campaign__status",
                                                          "resent_in__name")
    for status, campaign_status, follow_up in rows:
        why = _why_left_alone(status, campaign_status, follow_up, retry=retry) or "still unknown: try again"
        skipped[why] = skipped.get(why, 0) + 1
    return skipped


def _why_left_alone(status: str, campaign_status: str | None, follow_up: str | None, *,
                    retry: bool) -> str | None:
    """Why a decision leaves a row alone; None if it moves it."""
    if status != Send.Status.UNKNOWN:
        return f"{status}, not unknown"
    if retry and follow_up:
        return f"handed to the follow-up “{follow_up}”, which sends it instead"
    if retry and campaign_status not in RETRYABLE_CAMPAIGNS:
        return f"its campaign is {campaign_status}"
    return None
