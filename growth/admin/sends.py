from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.template.defaultfilters import linebreaksbr, truncatechars
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import localize
from django.utils.html import format_html, format_html_join
from django.utils.timesince import timeuntil

from growth.admin.address_history import AddressHistoryMixin
from growth.admin.review import ReviewMixin
from growth.admin.review_queue import NeedsReviewFilter
from growth.admin.scoping import ReadOnlyAdmin, ScopedRelatedFilter, TenantScopedAdmin
from growth.admin.send_errors import read_error
from growth.admin.tallied_pages import TalliedPaginator, tallied_count
from growth.audience.addresses import parse_address
from growth.job_ids import message_id, parse_job_id, parse_message_id
from growth.models import Campaign, Send, SendVerdict
from growth.tenancy import scoped

# The index shows how many sends need a person (the counts: growth.admin.review_queue).
admin.site.index_template = "growth/admin/review_index.html"

# A send's page: each field as read by a person, after the field as stored.
SHOWN_AFTER = {"job_id": ["relay_message_id"], "last_error": ["error_read"],
               "next_attempt_at": ["next_attempt"]}


@admin.register(Send)
class SendAdmin(ReviewMixin, AddressHistoryMixin, ReadOnlyAdmin, TenantScopedAdmin):
    """Read only: rows move only through the engine, and an operator's decisions about rows left
    'unknown' by a crash (retry, delivered, not delivered), each recorded as a verdict."""

    list_display = ["job_id", "email", "campaign_link", "status", "attempts", "next_attempt",
                    "sent_at", "updated_at", "error"]
    list_filter = [NeedsReviewFilter, "status", ("campaign", ScopedRelatedFilter)]
    list_select_related = ["campaign"]
    search_fields = ["email_lower", "job_id"]  # see get_search_results: exact, index-backed
    search_help_text = ("An exact address, a job id (campaign:<campaign id>:<subscriber id>) or a "
                        "Message-ID (<campaign.<campaign id>.<subscriber id>@…>).")
    ordering = ["-id"]
    # one count per page is enough on a table of millions; a campaign's list counts its tallies
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = ["retry_same_key", "mark_as_delivered", "mark_as_not_delivered"]
    change_list_template = "growth/admin/send_change_list.html"
    change_form_template = "growth/admin/send_change_form.html"

    def get_readonly_fields(self, request, obj=None):
        fields = []
        for field in self.opts.fields:
            fields += [field.name, *SHOWN_AFTER.get(field.name, [])]
        return [*fields, "verdict_history", "address_history_link"]

    def get_urls(self):
        return [*self.address_history_urls(), *self.review_urls(), *super().get_urls()]

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        count = tallied_count(request)
        if count is None:
            return super().get_paginator(request, queryset, per_page, orphans, allow_empty_first_page)
        return TalliedPaginator(queryset, per_page, orphans, allow_empty_first_page, count=count)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        job = parse_job_id(term) or parse_message_id(term)
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

    @admin.display(description="Message-ID")
    def relay_message_id(self, obj):
        """What a relay's log names the message by (search the log for it)."""
        return message_id(obj.job_id)

    @admin.display(description="last error")
    def error(self, obj):
        if not obj.last_error:
            return ""
        read = read_error(obj.last_error)
        return format_html('<span class="growth-send-error" title="{}">{}</span>', obj.last_error,
                           _code_and_text(read, limit=100))

    @admin.display(description="last error, read")
    def error_read(self, obj):
        if not obj.last_error:
            return "—"
        read = read_error(obj.last_error)
        notes = format_html_join("", "<br><span class=\"help\">{}, after it</span>",
                                 ((note,) for note in read.notes))
        return format_html("{}{}", _code_and_text(read), notes)

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_attempt(self, obj):
        """When a queued row waiting to retry (after a transient failure) is due again."""
        if obj.status != Send.Status.QUEUED or obj.next_attempt_at is None:
            return "—"
        when = obj.next_attempt_at
        due = "due now" if when <= timezone.now() else f"in {timeuntil(when)}"
        if obj.first_attempt_at is None:
            return format_html('<time datetime="{}">{}</time> ({}; attempt {})', when.isoformat(),
                               localize(timezone.localtime(when)), due, obj.attempts + 1)
        horizon = obj.first_attempt_at + timedelta(seconds=settings.SENDER_RETRY_FOR)
        return format_html('<time datetime="{}">{}</time> ({}; attempt {}, retried until {})',
                           when.isoformat(), localize(timezone.localtime(when)), due,
                           obj.attempts + 1, localize(timezone.localtime(horizon)))

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


def _code_and_text(read, *, limit: int | None = None):
    text = truncatechars(read.text, limit) if limit else read.text
    if not read.full_code:
        return text
    return format_html("<code>{}</code> {}", read.full_code, text)
