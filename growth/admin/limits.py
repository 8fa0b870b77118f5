"""Rate limits: each bucket's scope, its configured rate beside the effective one (a receiver's
deferrals may have throttled it), its caps, and the rate its tenant sends at now; on its page, the
history of its rate.

A tenant's members see its buckets, read only; the platform's operators (superusers) configure
them: a limit guards the sending reputation every tenant shares. A warm-up quota is the engine's,
set from the account's schedule: shown, never edited here. An edit saves onto the version of the
limit its form was loaded from, or is refused with what the limit is now: two operators' saves
never write over one another (the workers' writes, tokens and throttling, are no new version)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db import IntegrityError, transaction
from django.http import HttpResponseRedirect
from django.utils import timezone
from django.utils.html import format_html

from growth.admin.charts import clock
from growth.admin.limit_form import SCOPES, LimitRefused, RateLimitForm, changed_since, refusal
from growth.admin.limit_history import history, rate_text
from growth.admin.races import lost_to_another_save
from growth.admin.scoping import TenantScopedAdmin
from growth.admin.versioned import SEEN_VERSION, VersionChanged, VersionedAdmin
from growth.admin.widgets import TolerantAutocomplete
from growth.models import RateLimit, RateLimitChange

RECENT = 10  # seconds over which "now" is measured


def scope_of(limit: RateLimit) -> str:
    if limit.transport:
        return "transport"
    if limit.account_id and limit.destination_id:
        return "tenant→provider"
    if limit.destination_id:
        return "provider"
    return "warm-up" if limit.per_day is not None else "tenant"


def effective_rate(limit: RateLimit) -> float | None:
    """As the engine reads it (limits.sql): the lower of the throttled and configured rates."""
    rates = [r for r in (limit.throttled_to, limit.per_second) if r is not None]
    return min(rates) if rates else None


class ScopeFilter(admin.SimpleListFilter):
    title = "scope"
    parameter_name = "scope"
    FILTERS = {
        "tenant": {"account__isnull": False, "destination__isnull": True, "per_day__isnull": True},
        "warm-up": {"per_day__isnull": False},
        "provider": {"account__isnull": True, "destination__isnull": False},
        "tenant→provider": {"account__isnull": False, "destination__isnull": False},
        "transport": {"account__isnull": True, "destination__isnull": True},
    }

    def lookups(self, request, model_admin):
        return [(scope, scope) for scope in self.FILTERS]

    def queryset(self, request, queryset):
        return queryset.filter(**self.FILTERS[self.value()]) if self.value() in self.FILTERS else queryset


@admin.register(RateLimit)
class RateLimitAdmin(VersionedAdmin, TolerantAutocomplete, TenantScopedAdmin):
    form = RateLimitForm
    list_display = ["applies_to", "configured", "burst", "effective_now", "max_in_flight",
                    "warmup_quota", "current_rate"]
    list_filter = [ScopeFilter]
    link_lookups = ("destination__id__exact",)  # from a destination's "tenants' limits to it"
    list_select_related = ["account", "destination"]
    autocomplete_fields = ["account", "destination"]
    change_form_template = "growth/admin/ratelimit_change_form.html"

    class Media:
        css = {"all": ["growth/admin.css"]}

    def get_fieldsets(self, request, obj=None):
        fieldsets = [
            ("Applies to", {"fields": ["account", "destination", "transport"],
                            "description": f"One of: {SCOPES}. A provider is a mailbox "
                                           "provider (see Destinations)."}),
            ("Limits", {"fields": ["per_second", "burst", "max_in_flight"]}),
        ]
        if obj is not None:
            fieldsets.append(("Now", {"fields": ["effective_now", "warmup_quota", "adjusted_at"]}))
        return self.with_seen_fields(request, obj, fieldsets)

    def get_readonly_fields(self, request, obj=None):
        return ["effective_now", "warmup_quota", "adjusted_at"]

    # A limit is the platform's decision, whichever tenant it concerns.
    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser and (obj is None or obj.per_day is None)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser

    # --- the list ------------------------------------------------------------------------------

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
    def applies_to(self, obj):
        scope = scope_of(obj)
        if scope == "transport":
            return f"transport {obj.transport}"
        if scope == "tenant→provider":
            return f"{obj.account} → {obj.destination}"
        return f"{scope} {obj.destination or obj.account}"

    @admin.display(description="configured", ordering="per_second")
    def configured(self, obj):
        return "—" if obj.per_second is None else rate_text(obj.per_second)

    @admin.display(description="effective now")
    def effective_now(self, obj):
        if obj.throttled_to is None:
            return "—" if obj.per_second is None else rate_text(obj.per_second)
        at = f" at {clock(obj.throttled_at, '%H:%M')}" if obj.throttled_at else ""
        return format_html('<b>{}</b> <span class="growth-throttled">throttled{}</span>',
                           rate_text(obj.throttled_to), at)

    @admin.display(description="warm-up quota")
    def warmup_quota(self, obj):
        return "—" if obj.per_day is None else f"{obj.per_day:,} a day"

    @admin.display(description=f"sending now (last {RECENT} s)")
    def current_rate(self, obj):
        rate = getattr(obj, "recent_rate", None)
        return "—" if rate is None else f"{rate:.1f}/s"

    # --- the page: its history; saving records a configured rate --------------------------------

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.pk is not None:
            context["history"] = history(obj, now=timezone.now())
            context["set_by_the_engine"] = obj.per_day is not None
        return super().render_change_form(request, context, add, change, form_url, obj)

    def save_model(self, request, obj, form, change):
        try:
            with transaction.atomic():
                if change:
                    self._configure(obj, version=form.cleaned_data[SEEN_VERSION])
                else:
                    obj.save()
        except IntegrityError as exc:
            if lost_to_another_save(exc):
                raise  # its form, validated again, says so on its field (growth.admin.races)
            raise LimitRefused(refusal(exc)) from exc
        if "per_second" in form.changed_data:
            # the form's initial value: the row this request read, unchanged since (the save
            # was a compare-and-set on its version)
            was = form.initial.get("per_second")
            RateLimitChange.objects.create(
                rate_limit=obj, per_second=effective_rate(obj),
                reason=f"configured by {request.user.get_username()}: {rate_text(obj.per_second)}"
                       + ("" if not change else f" (was {rate_text(was)})"))

    @staticmethod
    def _configure(obj: RateLimit, *, version: int) -> None:
        """Save the form's fields onto the version the form was loaded from (only those fields:
        tokens and throttling are the workers' to write, and their writes are no new version)."""
        configured = RateLimit.objects.configure(
            obj.pk, version=version, account_id=obj.account_id, destination_id=obj.destination_id,
            transport=obj.transport, per_second=obj.per_second, burst=obj.burst,
            max_in_flight=obj.max_in_flight)
        if configured is None:  # another edit was saved after this form's validation
            raise VersionChanged
        obj.version, obj.throttled_to = configured.version, configured.throttled_to

    def changed_since(self, form) -> str:
        return changed_since(form.instance)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except LimitRefused as exc:  # the transaction was rolled back
            self.message_user(request, f"Nothing was saved: {exc}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())
