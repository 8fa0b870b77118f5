"""Workers you can see: which run_sender processes are alive (their heartbeat), and which rows a
dead one still holds until its leases end."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from growth.admin.scoping import IdSelection, ReadOnlyAdmin
from growth.models import WorkerHeartbeat
from growth.sending.worker import HEARTBEAT_EVERY

LATE = timedelta(seconds=3 * HEARTBEAT_EVERY)  # three missed beats: taken for dead


def is_alive(seen_at, stopped_at, now=None) -> bool:
    return seen_at is not None and stopped_at is None and (now or timezone.now()) - seen_at < LATE


@admin.register(WorkerHeartbeat)
class WorkerAdmin(IdSelection, ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ["worker_id", "state", "hostname", "pid", "receiver", "batch_size",
                    "started_at", "seen_at", "rows_held"]
    list_filter = ["receiver"]
    search_fields = ["worker_id", "hostname"]

    def has_module_permission(self, request):
        return request.user.is_superuser  # the fleet is the platform's, not a tenant's

    def has_view_permission(self, request, obj=None):
        return request.user.is_superuser

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        held = WorkerHeartbeat.objects.held()
        now = timezone.now()
        for worker in changelist.result_list:
            worker.held = held.get(worker.worker_id)
            worker.alive = is_alive(worker.seen_at, worker.stopped_at, now)
        return changelist

    @admin.display(description="state")
    def state(self, obj):
        if getattr(obj, "alive", False):
            return mark_safe('<span class="growth-worker growth-worker--alive">alive</span>')
        if obj.stopped_at is not None:
            return mark_safe('<span class="growth-worker">stopped</span>')
        return format_html('<span class="growth-worker growth-worker--dead">no heartbeat since '
                           '{}</span>', timezone.localtime(obj.seen_at).strftime("%H:%M:%S"))

    @admin.display(description="rows held under a lease")
    def rows_held(self, obj):
        held = getattr(obj, "held", None)
        if held is None:
            return "—"
        ends = timezone.localtime(held.lease_ends_at).strftime("%H:%M:%S")
        if getattr(obj, "alive", False):
            return f"{held.rows_held} (leases to {ends})"
        return format_html('<b>{}</b>, held by a dead worker until their leases end at {}: then '
                           'recovered (queued again, or unknown with a plain receiver)',
                           held.rows_held, ends)
