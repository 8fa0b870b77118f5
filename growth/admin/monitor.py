"""The campaign admin's live monitor: the JSON the campaign list and the campaign page poll
(``monitor.js``), and the campaign page's sent-per-minute chart as inline SVG.

``monitor.json?ids=1,2`` answers for the listed campaigns the user may see (another tenant's ids
are simply absent); ``<id>/monitor.json`` for one campaign, with its chart (another tenant's is a
404). Each refresh is one aggregate statement over the sends, plus one for the chart, and one
for the campaigns' calendars (window, warm-up: growth.admin.pacing) that the ETA allows for.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_GET

from growth.admin.charts import PLOT, TOP, WIDTH, clock, frame
from growth.admin.durations import span
from growth.admin.pacing import campaign_pacing, eta_text, window_text
from growth.managers.monitor import Minute, Snapshot
from growth.models import Campaign, Send
from growth.operations.eta import Pacing, eta

SEND_STATUSES = [status.value for status in Send.Status]
ACTIVE = {Campaign.Status.SENDING, Campaign.Status.APPROVED}  # the page polls fast while one is listed
MAX_IDS = 200  # a list page shows at most list_max_show_all campaigns
MAX_ID = 2**63 - 1  # ids are bigints: a larger one would be a database error, not "absent"
FAST_SECONDS, SLOW_SECONDS = 5, 30

MIN_SLOTS = 15  # a campaign's first minutes are drawn as narrow bars from the left, not one wide one


class MonitorMixin:
    """For CampaignAdmin: the monitor's endpoints, and its figures on the change page."""

    def get_monitor_urls(self):
        def view(method):
            return self.admin_site.admin_view(require_GET(method))

        return [
            path("monitor.json", view(self.monitor_view), name="growth_campaign_monitor"),
            path("<path:object_id>/monitor.json", view(self.campaign_monitor_view),
                 name="growth_campaign_monitor_one"),
        ]

    def monitor_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            ids = parse_ids(request.GET.get("ids", ""))
        except ValueError as exc:
            return JsonResponse({"error": str(exc)}, status=400)
        pacings = campaign_pacing(self.get_queryset(request).filter(pk__in=ids),
                                  now=timezone.now()) if ids else {}
        snapshots = Campaign.monitor.snapshot(list(pacings)) if pacings else {}
        return _response([figures(snapshot, pacings[snapshot.campaign_id])
                          for snapshot in snapshots.values()])

    def campaign_monitor_view(self, request, object_id):
        if not self.has_view_permission(request):
            raise PermissionDenied
        campaign = self.get_object(request, unquote(object_id))  # another tenant's: 404
        if not self.has_view_permission(request, campaign):
            raise PermissionDenied
        return _response([live(campaign)])

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.pk is not None:
            context["monitor"] = live(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)


def live(campaign: Campaign) -> dict:
    """The campaign page's figures and chart. The snapshot's counts become the campaign's
    ``send_counts``, which the progress field then shows without an aggregate of its own."""
    snapshot = Campaign.monitor.snapshot([campaign.pk])[campaign.pk]
    campaign.send_counts = snapshot.counts
    pacing = campaign_pacing(Campaign.objects.filter(pk=campaign.pk), now=timezone.now())[campaign.pk]
    series = Campaign.monitor.series(campaign.pk)
    return {**figures(snapshot, pacing),
            "series": [{"minute": m.minute.isoformat(), "sent": m.sends} for m in series],
            "chart": chart_svg(series)}


def parse_ids(raw: str) -> list[int]:
    """``"1,2,3"`` -> [1, 2, 3]; ValueError for anything that is not a list of ids."""
    tokens = [token.strip() for token in raw.split(",") if token.strip()]
    if len(tokens) > MAX_IDS:
        raise ValueError(f"At most {MAX_IDS} ids at a time.")
    if not all(token.isascii() and token.isdigit() and 0 < int(token) <= MAX_ID for token in tokens):
        raise ValueError("ids: campaign ids separated by commas, e.g. ids=1,2,3.")
    return sorted({int(token) for token in tokens})


def _response(campaigns: list[dict]) -> JsonResponse:
    active = any(c["active"] for c in campaigns)
    return JsonResponse({
        "as_of": campaigns[0]["as_of"] if campaigns else timezone.now().isoformat(),
        "active": active, "poll_seconds": FAST_SECONDS if active else SLOW_SECONDS,
        "campaigns": {str(c["id"]): c for c in campaigns},
    })


def figures(snapshot: Snapshot, pacing: Pacing) -> dict:
    """What the monitor shows of a campaign: counts, rate, timing, ETA (in its calendar,
    ``pacing``), each also as text."""
    counts = snapshot.counts
    total, sent = sum(counts.values()), counts.get("sent", 0)
    remaining = counts.get("queued", 0) + counts.get("sending", 0)
    per_second = snapshot.sent_last_minute / snapshot.rate_window
    duration = (None if snapshot.started_at is None
                else ((snapshot.finished_at or snapshot.as_of) - snapshot.started_at).total_seconds())
    outlook = None
    if snapshot.status == Campaign.Status.SENDING and total:
        outlook = eta(remaining=remaining, per_second=per_second, now=snapshot.as_of, pacing=pacing)
    eta_seconds = None if outlook is None else outlook.seconds
    status = Campaign.Status(snapshot.status)
    return {
        "id": snapshot.campaign_id, "status": status.value, "status_display": status.label,
        "active": status in ACTIVE, "as_of": snapshot.as_of.isoformat(),
        "counts": [[s, counts.get(s, 0)] for s in SEND_STATUSES],
        "total": total, "sent": sent, "remaining": remaining,
        "percent": round(100 * sent / total, 1) if total else 0,
        "sent_last_minute": snapshot.sent_last_minute,
        "per_second": round(per_second, 2), "per_minute": round(per_second * 60, 1),
        "started_at": _iso(snapshot.started_at), "finished_at": _iso(snapshot.finished_at),
        "duration_seconds": None if duration is None else round(duration),
        "eta_seconds": None if eta_seconds is None else round(eta_seconds),
        "waits_seconds": None if outlook is None else round(outlook.waits),
        "waiting_for": "" if outlook is None else outlook.waiting_for,
        "display": {
            "rate": f"{per_second * 60:,.0f} / min ({per_second:,.1f} / s)",
            "started": clock(snapshot.started_at, "%Y-%m-%d %H:%M:%S") or "not started",
            "duration": "—" if duration is None else span(duration),
            "eta": eta_text(outlook, pacing, now=snapshot.as_of),
            "window": window_text(pacing, now=snapshot.as_of),
        },
    }


def chart_svg(series: list[Minute]) -> str:
    """Sent per minute as bars (growth.admin.charts)."""
    if not series:
        return format_html('<p class="growth-monitor__empty help">{}</p>',
                           "No sends yet: the chart starts when the campaign does.")
    peak = max(m.sends for m in series)
    first, last = clock(series[0].minute, "%H:%M"), clock(series[-1].minute, "%H:%M")
    label = (f"Sent per minute, {first} to {last}: {sum(m.sends for m in series):,} in all, "
             f"at most {peak:,} in a minute, {series[-1].sends:,} at {last}.")
    slot = WIDTH / max(len(series), MIN_SLOTS)
    rows = []
    for i, m in enumerate(series):
        height = PLOT * m.sends / peak if peak else 0
        rows.append((f"{i * slot + slot * 0.1:.1f}", f"{TOP + PLOT - height:.1f}", f"{slot * 0.8:.1f}",
                     f"{height:.1f}", clock(m.minute, "%H:%M"), f"{m.sends:,}"))
    bars = format_html_join("", '<rect class="growth-monitor__bar" x="{}" y="{}" width="{}" '
                            'height="{}"><title>{}: {} sent</title></rect>', rows)
    return frame(label=label, marks=bars, peak=f"{peak:,} / min", first=first, last=last,
                 last_x=slot * len(series))


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
