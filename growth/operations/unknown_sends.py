"""An operator's decisions about 'unknown' rows: the message may or may not have gone out when
its worker died, and only a person (with the provider's logs, or the recipient) can tell."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from growth.models import Send


@dataclass(frozen=True, slots=True)
class Review:
    changed: int
    skipped: dict[str, int]  # why a selected row was left alone -> how many
    reopened_campaigns: list[int]  # finished campaigns sent back to sending


def retry_unknown(*, send_ids: Sequence[int]) -> Review:
    """unknown -> queued with the same job id: the receiver may get it twice unless it
    de-duplicates on the key."""
    requeued = Send.objects.retry_unknown(send_ids)
    moved = {row.id for row in requeued}
    return Review(changed=len(moved), skipped=_skipped(send_ids, moved, campaign_cancelled=True),
                  reopened_campaigns=sorted({r.campaign_id for r in requeued if r.reopened}))


def mark_delivered(*, send_ids: Sequence[int]) -> Review:
    """unknown -> sent: the message is known to have arrived."""
    moved = set(Send.objects.mark_delivered(send_ids))
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
