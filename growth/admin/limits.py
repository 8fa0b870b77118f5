"""Rate limits: the configured rate of each bucket beside the rate its tenant sends at now."""

from __future__ import annotations

from django.contrib import admin

from growth.admin.audience import SuperuserOnly
from growth.admin.widgets import TolerantAutocomplete
from growth.models import RateLimit

RECENT = 10  # seconds over which "now" is measured


@admin.register(RateLimit)
class RateLimitAdmin(SuperuserOnly, TolerantAutocomplete, admin.ModelAdmin):
    list_display = ["scope", "per_second", "burst", "current_rate"]
    list_select_related = ["account"]
    fields = ["account", "transport", "per_second", "burst"]
    autocomplete_fields = ["account"]

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        limits = list(changelist.result_list)
        rates = RateLimit.objects.current_rates([x.account_id for x in limits if x.account_id],
                                                seconds=RECENT)
        for limit in limits:
            limit.recent_rate = rates.get(limit.account_id, 0.0) if limit.account_id else None
        changelist.result_list = limits
        return changelist

    @admin.display(description="applies to")
    def scope(self, obj):
        return obj.account or f"transport {obj.transport}"

    @admin.display(description=f"sending now (last {RECENT} s)")
    def current_rate(self, obj):
        rate = getattr(obj, "recent_rate", None)
        return "—" if rate is None else f"{rate:.1f}/s"
