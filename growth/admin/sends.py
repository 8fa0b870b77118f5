from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.template.defaultfilters import linebreaksbr, truncatechars
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import localize
from django.utils.html import format_html, format_html_join

from growth.admin.address_history import AddressHistoryMixin
from growth.admin.scoping import ReadOnlyAdmin, ScopedRelatedFilter, TenantScopedAdmin
from growth.audience.addresses import parse_address
from growth.job_ids import parse_job_id
from growth.models import Campaign, Send, SendVerdict
from growth.operations.unknown_sends import (
    Review,
    mark_delivered,
    mark_not_delivered,
    retry_unknown,
)
from growth.tenancy import may_edit, scoped


@admin.register(Send)
class SendAdmin(AddressHistoryMixin, ReadOnlyAdmin, TenantScopedAdmin):
    """Read only: rows move only through the engine, and an operator's decisions about rows left
    'unknown' by a crash (retry, delivered, not delivered), each recorded as a verdict."""

    list_display = ["job_id", "email", "campaign_link", "status", "attempts", "sent_at",
                    "updated_at", "error"]
    list_filter = ["status", ("campaign", ScopedRelatedFilter)]
    list_select_related = ["campaign"]
    search_fields = ["email_lower", "job_id"]  # see get_search_results: exact, index-backed
    search_help_text = "An exact address, or a job id (campaign:<campaign id>:<subscriber id>)."
    ordering = ["-id"]
    show_full_result_count = False  # one COUNT per page is enough on a table of millions
    show_facets = admin.ShowFacets.NEVER
    actions = ["retry_same_key", "mark_as_delivered", "mark_as_not_delivered"]
    change_list_template = "growth/admin/send_change_list.html"

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in self.opts.fields] + ["verdict_history",
                                                             "address_history_link"]

    def get_urls(self):
        return [*self.address_history_urls(), *super().get_urls()]

    def has_review_permission(self, request):
        """May decide about 'unknown' rows (the actions below)."""
        return request.user.has_perm("growth.change_send") and may_edit(request.user, None)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        job = parse_job_id(term)
        if job is not None:
            return queryset.filter(campaign_id=job.campaign_id,
                                   subscriber_id=job.subscriber_id), False
        try:
            email_lower = parse_address(term).email_lower
        except ValidationError:
            return queryset.none(), False
        # campaign by campaign: one probe of (campaign_id, email_lower) each, never a scan of
        # growth_sends (the campaigns are the ones this operator may see)
        campaigns = scoped(Campaign.objects.all(), request.user, account_field="account")
        return queryset.filter(campaign__in=campaigns.values("id"), email_lower=email_lower), False

    @admin.display(description="campaign", ordering="campaign_id")
    def campaign_link(self, obj):
        return format_html('<a href="{}">{}</a>',
                           reverse("admin:growth_campaign_change", args=[obj.campaign_id]),
                           obj.campaign)

    @admin.display(description="last error")
    def error(self, obj):
        return truncatechars(obj.last_error, 80)

    @admin.display(description="verdicts")
    def verdict_history(self, obj):
        """Who or what settled this send while it was in doubt, when, and on which evidence."""
        found = SendVerdict.objects.of_send(obj.pk)
        if not found:
            return "—"
        rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", (
            (localize(timezone.localtime(v.decided_at)), v.get_verdict_display(), v.decided_by,
             linebreaksbr(v.evidence)) for v in found))
        return format_html("<table><tr><th>decided at</th><th>verdict</th><th>by</th>"
                           "<th>evidence</th></tr>{}</table>", rows)

    @admin.action(description="Retry selected unknown sends (same key) → queued",
                  permissions=["review"])
    def retry_same_key(self, request, queryset):
        unknown, others = _split(queryset)
        review = retry_unknown(send_ids=unknown, decided_by=_operator(request))
        self._report(request, review, others, "queued again with the same key")
        if review.reopened_campaigns:
            self.message_user(request, f"{len(review.reopened_campaigns)} finished campaign(s) went "
                              "back to sending so that the worker sends these rows.", messages.INFO)

    @admin.action(description="Mark selected unknown sends as delivered → sent",
                  permissions=["review"])
    def mark_as_delivered(self, request, queryset):
        unknown, others = _split(queryset)
        self._report(request, mark_delivered(send_ids=unknown, decided_by=_operator(request)),
                     others, "marked as delivered")

    @admin.action(description="Mark selected unknown sends as not delivered → failed",
                  permissions=["review"])
    def mark_as_not_delivered(self, request, queryset):
        unknown, others = _split(queryset)
        self._report(request, mark_not_delivered(send_ids=unknown, decided_by=_operator(request)),
                     others, "marked as not delivered (a follow-up campaign can resend them)")

    def _report(self, request, review: Review, others: int, done: str) -> None:
        level = messages.SUCCESS if review.changed else messages.WARNING
        self.message_user(request, f"{review.changed} send{'s' if review.changed != 1 else ''} {done}.",
                          level)
        if others:
            self.message_user(request, f"{others} left alone: not unknown (only unknown sends can "
                              "be retried or marked).", messages.WARNING)
        for why, count in sorted(review.skipped.items()):
            self.message_user(request, f"{count} left alone: {why}.", messages.WARNING)


def _operator(request) -> str:
    return f"operator {request.user.get_username()}"


def _split(queryset) -> tuple[list[int], int]:
    """Return the ids of the selected unknown rows, and how many other rows were selected."""
    unknown = list(queryset.filter(status=Send.Status.UNKNOWN).values_list("id", flat=True))
    return unknown, queryset.count() - len(unknown)
