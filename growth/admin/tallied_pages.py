"""The sends list's row count from the campaign's tallies: at ten million rows a COUNT(*) of the
filtered list takes seconds, while the question the paginator asks ("how many rows of this
campaign, in this status?") is what the tallies already answer.

Only for the filters the tallies know (a campaign, its status, the review queue) and no search;
any other list is counted by Django as usual.
"""

from __future__ import annotations

from django.core.paginator import Paginator
from django.utils.functional import cached_property

from growth.admin.review_queue import QUEUE_PARAMETER, REVIEW_STATUSES
from growth.models import Campaign, Send
from growth.tenancy import scoped

CAMPAIGN, STATUS = "campaign__id__exact", "status__exact"
NOT_FILTERS = {"p", "o", "_to_field", "_popup"}  # page, ordering, popups: do not narrow the list


class TalliedPaginator(Paginator):
    def __init__(self, *args, count: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._tallied = count

    @cached_property
    def count(self) -> int:
        return self._tallied


def tallied_count(request) -> int | None:
    """The number of rows the sends list of ``request`` shows, from the tallies; None when its
    filters are not ones the tallies answer (Django counts it then)."""
    params = {key: value for key, value in request.GET.items() if key not in NOT_FILTERS}
    if not params.keys() <= {CAMPAIGN, STATUS, QUEUE_PARAMETER} or params.get("q"):
        return None
    try:
        campaign_id = int(params[CAMPAIGN])
    except (KeyError, ValueError):
        return None
    if not scoped(Campaign.objects.filter(pk=campaign_id), request.user).exists():
        return None  # not the operator's: the list is empty, and Django says so
    statuses = set(Send.Status.values)
    if params.get(QUEUE_PARAMETER) == "yes":
        statuses &= set(REVIEW_STATUSES)
    elif QUEUE_PARAMETER in params:
        return None
    if STATUS in params:
        statuses &= {params[STATUS]}
    counts = Campaign.objects.progress([campaign_id]).get(campaign_id, {})
    return sum(counts.get(status, 0) for status in statuses)
