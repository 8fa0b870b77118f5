"""An operator's decisions about 'unknown' rows: the message may or may not have gone out when
its worker died, and only a person (with the provider's logs, or the recipient) can tell."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction

from growth.models import Send, SendVerdict


@dataclass(frozen=True, slots=True)
class Review:
    changed: int
    skipped: dict[str, int]  # why a selected row was left alone -> how many
    reopened_campaigns: list[int]  # finished campaigns sent back to sending


def retry_unknown(*, send_ids: Sequence[int], decided_by: str = "an operator",
                  evidence: str = "") -> Review:
    """unknown -> queued with the same job id: the receiver may get it twice unless it
    de-duplicates on the key. Each row moved gets a 'retried' verdict in the same transaction."""
    with transaction.atomic():
        requeued = Send.objects.retry_unknown(send_ids)
        SendVerdict.objects.record({row.id: evidence or "queued again with the same key"
                                    for row in requeued},
                                   verdict=SendVerdict.Verdict.RETRIED, decided_by=decided_by)
    moved = {row.id for row in requeued}
    return Review(changed=len(moved), skipped=_skipped(send_ids, moved, campaign_cancelled=True),
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
    moved = set(SendVerdict.objects.settle_unknown(dict.fromkeys(send_ids, evidence),
                                                   verdict=verdict, decided_by=decided_by))
    return Review(changed=len(moved), skipped=_skipped(send_ids, moved), reopened_campaigns=[])


def _skipped(send_ids: Sequence[int], moved: set[int], *,
             campaign_cancelled: bool = False) -> dict[str, int]:
    left = [i for i in send_ids if i not in moved]
    if not left:
        return {}
    skipped: dict[str, int] = {}
    rows = Send.objects.filter(id__in=left).values_list("status", "campaign__status",
                                                          "resent_in__name")
    for status, campaign_status, follow_up in rows:
        if status == Send.Status.UNKNOWN and follow_up and campaign_cancelled:
            why = f"handed to the follow-up “{follow_up}”, which sends it instead"
        elif status == Send.Status.UNKNOWN and campaign_cancelled:
            why = f"its campaign is {campaign_status}"
        else:
            why = f"{status}, not unknown"
        skipped[why] = skipped.get(why, 0) + 1
    return skipped
