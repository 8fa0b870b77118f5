"""Destinations (mailbox providers, as pacing groups recipient domains) and the cache of what each
recipient domain resolved to. Both are the engine's (growth.audience.destinations) and span every
tenant's recipients: superusers only, read only, except forgetting cached domains (each is
resolved again when a build next meets it: growth.admin.forget_domains)."""

from __future__ import annotations

from collections import Counter
from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import Count
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from growth.admin.audience import SuperuserOnly
from growth.admin.forget_domains import ForgetDomainsMixin
from growth.admin.limit_history import rate_text
from growth.admin.limits import effective_rate
from growth.admin.scoping import IdSelection, ReadOnlyAdmin
from growth.models import Destination, MailDomain, RateLimit


@admin.register(Destination)
class DestinationAdmin(IdSelection, ReadOnlyAdmin, SuperuserOnly, admin.ModelAdmin):
    list_display = ["name", "cached_domains", "provider_limit", "tenant_limits", "created_at"]
    search_fields = ["name"]  # also the rate limit form's autocomplete
    show_full_result_count = False

    def get_changelist_instance(self, request):
        """The page's domain counts and buckets: two statements for the whole page."""
        changelist = super().get_changelist_instance(request)
        destinations = list(changelist.result_list)
        ids = [d.pk for d in destinations]
        counts = dict(MailDomain.objects.filter(destination_id__in=ids).order_by()
                      .values_list("destination_id").annotate(n=Count("*")))
        own, tenants = {}, Counter()
        for limit in RateLimit.objects.filter(destination_id__in=ids):
            if limit.account_id is None:
                own[limit.destination_id] = limit
            else:
                tenants[limit.destination_id] += 1
        for destination in destinations:
            destination.domain_count = counts.get(destination.pk, 0)
            destination.own_limit = own.get(destination.pk)
            destination.tenant_limit_count = tenants[destination.pk]
        changelist.result_list = destinations
        return changelist

    @admin.display(description="cached domains")
    def cached_domains(self, obj):
        count = getattr(obj, "domain_count", None)
        if count is None:
            count = obj.domains.count()
        url = f"{reverse('admin:growth_maildomain_changelist')}?destination__id__exact={obj.pk}"
        return format_html('<a href="{}">{}</a>', url, f"{count:,}")

    @admin.display(description="its limit")
    def provider_limit(self, obj):
        limit = getattr(obj, "own_limit", None)
        if limit is None:
            add = f"{reverse('admin:growth_ratelimit_add')}?{urlencode({'destination': obj.pk})}"
            return format_html('<a href="{}">add a limit for this provider</a>', add)
        throttled = " (throttled)" if limit.throttled_to is not None else ""
        return format_html('<a href="{}">{}{}</a>', reverse("admin:growth_ratelimit_change",
                                                             args=[limit.pk]),
                           rate_text(effective_rate(limit)), throttled)

    @admin.display(description="tenants' limits to it")
    def tenant_limits(self, obj):
        count = getattr(obj, "tenant_limit_count", 0)
        if not count:
            return "—"
        url = f"{reverse('admin:growth_ratelimit_changelist')}?destination__id__exact={obj.pk}"
        return format_html('<a href="{}">{}</a>', url, count)


@admin.register(MailDomain)
class MailDomainAdmin(ForgetDomainsMixin, IdSelection, ReadOnlyAdmin, SuperuserOnly,
                      admin.ModelAdmin):
    list_display = ["domain", "destination", "source", "mx", "resolved_at", "expires_at"]
    list_filter = ["source"]
    link_lookups = ("destination__id__exact",)  # from a destination's "cached domains"
    list_select_related = ["destination"]
    search_fields = ["domain"]
    show_full_result_count = False
    actions = ["forget"]

    def has_delete_permission(self, request, obj=None):
        # the list's "forget" only: a domain's own page stays read only
        return request.user.is_superuser and obj is None

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @admin.display(description="MX hosts")
    def mx(self, obj):
        hosts = obj.mx_hosts.split()
        if not hosts:
            return "—"
        return format_html_join(", ", "<code>{}</code>", ((host,) for host in hosts))
