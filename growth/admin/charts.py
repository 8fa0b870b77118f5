"""Inline SVG charts of the admin pages: one drawing box, its axis and labels, following the page's
colours (currentColor and the admin's variables, in admin.css), its figures in a <title> and an
aria-label. ``growth.admin.monitor`` draws bars in it, ``growth.admin.limit_history`` steps."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from django.utils.html import format_html

# The drawing box (viewBox units): a band at the top for the peak, one at the bottom for the times.
WIDTH, HEIGHT, TOP, BOTTOM = 600, 150, 16, 18
PLOT = HEIGHT - TOP - BOTTOM
BASE = TOP + PLOT  # the y of a zero
LABEL_WIDTH = 40  # a time's label, "12:34", at the charts' font size


def frame(*, label: str, marks: str, peak: str, first: str, last: str, last_x: float) -> str:
    """The chart: ``marks`` (SVG elements, already escaped) over the axis, ``peak`` top left,
    the ``first`` time bottom left and the ``last`` one ending at ``last_x``."""
    return format_html(
        '<svg class="growth-monitor__svg" viewBox="0 0 {w} {h}" role="img" aria-label="{label}">'
        '<title>{label}</title>'
        '<line class="growth-monitor__axis" x1="0" y1="{base}" x2="{w}" y2="{base}"/>{marks}'
        '<text x="0" y="11">{peak}</text>'
        '<text x="0" y="{h_text}">{first}</text>'
        '{last}</svg>',
        w=WIDTH, h=HEIGHT, label=label, base=BASE, marks=marks, peak=peak, h_text=HEIGHT - 4,
        first=first, last=_last_label(last, last_x))


def _last_label(text: str, end: float) -> str:
    if end < 2 * LABEL_WIDTH:  # it would run into the first label
        return ""
    return format_html('<text x="{}" y="{}" text-anchor="end">{}</text>', f"{end:.1f}", HEIGHT - 4, text)


def clock(moment: datetime | None, fmt: str) -> str:
    """``moment`` in the server's zone, as ``fmt``; "" for None."""
    return "" if moment is None else timezone.localtime(moment).strftime(fmt)
