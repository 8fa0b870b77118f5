"""The campaign admin's live monitor: the JSON the campaign list and the campaign page poll
(``monitor.js``), and the campaign page's sent-per-minute chart as inline SVG.

``monitor.json?ids=1,2`` answers for the listed campaigns the user may see (another tenant's ids
are simply absent); ``<id>/monitor.json`` for one campaign, with its chart (another tenant's is a
404). Each refresh is one aggregate statement over the sends, plus one for the chart.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_GET

from growth.managers.monitor import Minute, Snapshot
from growth.models import Campaign, Send

SEND_STATUSES = [status.value for status in Send.Status]
ACTIVE = {Campaign.Status.SENDING, Campaign.Status.APPROVED}  # the page polls fast while one is listed
MAX_IDS = 200  # a list page shows at most list_max_show_all campaigns
MAX_ID = 2**63 - 1  # ids are bigints: a larger one would be a database error, not "absent"
FAST_SECONDS, SLOW_SECONDS = 5, 30

# The chart's drawing box (viewBox units): a band at the top for the peak, one at the bottom for
# the times.
WIDTH, HEIGHT, TOP, BOTTOM = 600, 150, 16, 18
LABEL_WIDTH = 40  # a time's label, "12:34", at the chart's font size
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
        visible = list(self.get_queryset(request).filter(pk__in=ids).order_by()
                       .values_list("pk", flat=True)) if ids else []
        snapshots = Campaign.monitor.snapshot(visible) if visible else {}
        return _response([figures(snapshot) for snapshot in snapshots.values()])

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
    series = Campaign.monitor.series(campaign.pk)
    return {**figures(snapshot), "series": [{"minute": m.minute.isoformat(), "sent": m.sends}
                                            for m in series],
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


def figures(snapshot: Snapshot) -> dict:
    """What the monitor shows of a campaign: counts, rate, timing, ETA, each also as text."""
    counts = snapshot.counts
    total, sent = sum(counts.values()), counts.get("sent", 0)
    remaining = counts.get("queued", 0) + counts.get("sending", 0)
    per_second = snapshot.sent_last_minute / snapshot.rate_window
    duration = (None if snapshot.started_at is None
                else ((snapshot.finished_at or snapshot.as_of) - snapshot.started_at).total_seconds())
    eta = None
    if snapshot.status == Campaign.Status.SENDING and total:
        if remaining == 0:
            eta = 0.0
        elif per_second > 0:
            eta = remaining / per_second
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
        "eta_seconds": None if eta is None else round(eta),
        "display": {
            "rate": f"{per_second * 60:,.0f} / min ({per_second:,.1f} / s)",
            "started": _clock(snapshot.started_at, "%Y-%m-%d %H:%M:%S") or "not started",
            "duration": "—" if duration is None else span(duration),
            "eta": _eta_text(snapshot, eta),
        },
    }


def _eta_text(snapshot: Snapshot, eta: float | None) -> str:
    if eta is None:
        if snapshot.status == Campaign.Status.SENDING:
            return "unknown: nothing sent in the last minute"
        return "—"
    if eta == 0:
        return "any moment: nothing left to send"
    done_at = _clock(snapshot.as_of + timedelta(seconds=eta), "%H:%M")
    return f"about {span(eta)} (around {done_at})"


def span(seconds: float) -> str:
    """3725 -> "1 h 02 min"; 185 -> "3 min 05 s"; 42 -> "42 s"."""
    hours, rest = divmod(round(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def chart_svg(series: list[Minute]) -> str:
    """Sent per minute as bars: inline SVG that follows the page's colours (currentColor and the
    admin's variables, in admin.css), its figures in a <title> and an aria-label."""
    if not series:
        return format_html('<p class="growth-monitor__empty help">{}</p>',
                           "No sends yet: the chart starts when the campaign does.")
    peak = max(m.sends for m in series)
    first, last = _clock(series[0].minute, "%H:%M"), _clock(series[-1].minute, "%H:%M")
    label = (f"Sent per minute, {first} to {last}: {sum(m.sends for m in series):,} in all, "
             f"at most {peak:,} in a minute, {series[-1].sends:,} at {last}.")
    slot, plot = WIDTH / max(len(series), MIN_SLOTS), HEIGHT - TOP - BOTTOM
    rows = []
    for i, m in enumerate(series):
        height = plot * m.sends / peak if peak else 0
        rows.append((f"{i * slot + slot * 0.1:.1f}", f"{TOP + plot - height:.1f}", f"{slot * 0.8:.1f}",
                     f"{height:.1f}", _clock(m.minute, "%H:%M"), f"{m.sends:,}"))
    bars = format_html_join("", '<rect class="growth-monitor__bar" x="{}" y="{}" width="{}" '
                            'height="{}"><title>{}: {} sent</title></rect>', rows)
    return format_html(
        '<svg class="growth-monitor__svg" viewBox="0 0 {w} {h}" role="img" aria-label="{label}">'
        '<title>{label}</title>'
        '<line class="growth-monitor__axis" x1="0" y1="{base}" x2="{w}" y2="{base}"/>{bars}'
        '<text x="0" y="11">{peak} / min</text>'
        '<text x="0" y="{h_text}">{first}</text>'
        '{last}</svg>',
        w=WIDTH, h=HEIGHT, label=label, base=TOP + plot, bars=bars, peak=f"{peak:,}",
        h_text=HEIGHT - 4, first=first, last=_last_label(last, slot * len(series)))


def _last_label(text: str, end: float) -> str:
    if end < 2 * LABEL_WIDTH:  # it would run into the first minute's label
        return ""
    return format_html('<text x="{}" y="{}" text-anchor="end">{}</text>', f"{end:.1f}", HEIGHT - 4, text)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _clock(moment: datetime | None, fmt: str) -> str:
    return "" if moment is None else timezone.localtime(moment).strftime(fmt)
