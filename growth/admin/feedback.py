"""What the ESPs reported (bounces, complaints, opt-outs), as received: read-only, tenant-scoped."""

from __future__ import annotations

from django.contrib import admin

from growth.admin.scoping import TenantScopedAdmin
from growth.models import FeedbackEvent


@admin.register(FeedbackEvent)
class FeedbackEventAdmin(TenantScopedAdmin):
    list_display = ["received_at", "esp", "event_type", "email_lower", "account", "campaign",
                    "suppressed"]
    list_filter = ["esp", "event_type", "suppressed"]
    search_fields = ["email_lower"]
    list_select_related = ["account", "campaign"]
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
