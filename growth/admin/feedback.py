"""What the ESPs reported (bounces, complaints, opt-outs), as received: read-only, tenant-scoped."""

from __future__ import annotations

from django.contrib import admin

from growth.admin.scoping import ReadOnlyAdmin, TenantScopedAdmin
from growth.models import FeedbackEvent


@admin.register(FeedbackEvent)
class FeedbackEventAdmin(ReadOnlyAdmin, TenantScopedAdmin):
    list_display = ["received_at", "esp", "event_type", "email_lower", "account", "campaign",
                    "suppressed"]
    list_filter = ["esp", "event_type", "suppressed"]
    search_fields = ["email_lower"]
    list_select_related = ["account", "campaign"]
    show_full_result_count = False

