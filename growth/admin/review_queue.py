"""The review queue: the sends that need a person — 'unknown' (decide whether it arrived) and
'failed' (look at why; a follow-up campaign can resend) — and the counts behind the badges on the
admin index and the campaign page.

Every count comes from the campaigns' tallies (growth/managers/tallies.sql), never from
growth_sends: a badge costs the same for a campaign of ten rows or of ten million.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.contrib import admin
from django.urls import reverse
from django.utils.functional import cached_property

from growth.models import Campaign, Send
from growth.tenancy import account_ids_for

REVIEW_STATUSES = (Send.Status.UNKNOWN, Send.Status.FAILED)
QUEUE_PARAMETER = "needs_review"


class NeedsReviewFilter(admin.SimpleListFilter):
    title = "needs a person"
    parameter_name = QUEUE_PARAMETER

    def lookups(self, request, model_admin):
        return [("yes", "unknown or failed")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(status__in=REVIEW_STATUSES)
        return queryset


def queue_url(*, campaign_id: int | None = None, status: str | None = None) -> str:
    """The sends list filtered to the queue (``status``: one of its statuses only)."""
    query = {"status__exact": status} if status else {QUEUE_PARAMETER: "yes"}
    if campaign_id is not None:
        query = {"campaign__id__exact": campaign_id, **query}
    return f"{reverse('admin:growth_send_changelist')}?{urlencode(query)}"


@dataclass(frozen=True, slots=True)
class ReviewCounts:
    unknown: int
    failed: int
    campaign_id: int | None = None  # None: every campaign the operator may see

    @property
    def total(self) -> int:
        return self.unknown + self.failed

    @property
    def url(self) -> str:
        return queue_url(campaign_id=self.campaign_id)

    @property
    def unknown_url(self) -> str:
        return queue_url(campaign_id=self.campaign_id, status=Send.Status.UNKNOWN)

    @property
    def failed_url(self) -> str:
        return queue_url(campaign_id=self.campaign_id, status=Send.Status.FAILED)


def campaign_review_counts(campaign_id: int, counts: dict[str, int] | None = None) -> ReviewCounts:
    """The campaign's unknown and failed rows (for its page's badge); ``counts``: its rows per
    status when the caller has them already (the monitor's snapshot)."""
    if counts is None:
        counts = Campaign.objects.progress([campaign_id]).get(campaign_id, {})
    return ReviewCounts(unknown=counts.get(Send.Status.UNKNOWN, 0),
                        failed=counts.get(Send.Status.FAILED, 0), campaign_id=campaign_id)


def sends_needing_review(user) -> ReviewCounts | None:
    """The unknown and failed rows of every campaign of the user's accounts (a superuser's:
    all); None when the user may not see sends."""
    may_see = user.has_perm("growth.view_send") or user.has_perm("growth.change_send")
    if not (user.is_active and user.is_staff and may_see):
        return None
    totals = Campaign.objects.needing_review(account_ids_for(user))
    return ReviewCounts(unknown=totals["unknown"], failed=totals["failed"])


class ReviewQueueBadge:
    """For templates: the counts, computed only when a template reads them."""

    def __init__(self, user) -> None:
        self._user = user

    @cached_property
    def counts(self) -> ReviewCounts | None:
        return None if self._user is None else sends_needing_review(self._user)


def review_queue(request) -> dict[str, ReviewQueueBadge]:
    """Context processor: ``review_queue.counts`` for the admin index's badge. Other pages never
    read it, and so never count."""
    return {"review_queue": ReviewQueueBadge(getattr(request, "user", None))}
