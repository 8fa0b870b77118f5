from django.contrib import admin

from growth.models import Account, Campaign, FeedbackEvent, Segment, Send, Subscriber, Suppression


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "from_email"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Segment)
class SegmentAdmin(admin.ModelAdmin):
    list_display = ["name", "account"]
    list_filter = ["account"]
    search_fields = ["name"]


@admin.register(Subscriber)
class SubscriberAdmin(admin.ModelAdmin):
    list_display = ["email", "account", "segment", "status", "created_at"]
    list_filter = ["status", "account"]
    search_fields = ["email_lower"]
    list_select_related = ["account", "segment"]


@admin.register(Suppression)
class SuppressionAdmin(admin.ModelAdmin):
    list_display = ["email_lower", "account", "reason", "campaign", "created_at"]
    list_filter = ["reason", "account"]
    search_fields = ["email_lower"]
    list_select_related = ["account", "campaign"]


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = ["name", "account", "status", "scheduled_for"]
    list_filter = ["status", "account"]
    search_fields = ["name"]
    readonly_fields = ["status", "recipients_built_at", "started_at", "finished_at"]


@admin.register(Send)
class SendAdmin(admin.ModelAdmin):
    list_display = ["job_id", "email", "status", "attempts", "sent_at"]
    list_filter = ["status"]
    search_fields = ["email_lower", "job_id"]
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(FeedbackEvent)
class FeedbackEventAdmin(admin.ModelAdmin):
    """What the ESPs reported, as received: read-only."""

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
