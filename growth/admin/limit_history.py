"""A bucket's effective rate over time, from its RateLimitChange rows: a step chart of the last
hours and its latest changes with their reasons. Three small statements, each bounded, on the
(rate_limit, changed_at) index. And its configuration in words, and the settings a worker
applied to it (in the history of its rate, not in its History): what a refused edit is told."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils.html import format_html, format_html_join

from growth.admin.charts import BASE, PLOT, WIDTH, clock, frame
from growth.models import RateLimit, RateLimitChange

HOURS = 6  # the chart's span
MAX_CHARTED = 500  # changes drawn at most: with more in the span, the chart starts later
TABLE_ROWS = 50


def rate_text(rate: float | None) -> str:
    return "no rate" if rate is None else f"{rate:g}/s"


def configuration_text(limit: RateLimit) -> str:
    """ "5/s, burst 20, at most 4 on the wire": what an operator configures of a bucket."""
    cap = ("no cap on the wire" if limit.max_in_flight is None
           else f"at most {limit.max_in_flight:,} on the wire")
    return f"{rate_text(limit.per_second)}, burst {limit.burst:g}, {cap}"


def set_from_settings(limit: RateLimit) -> RateLimitChange | None:
    """The change that made the bucket's configuration what it is now when no user saved it (a
    worker re-applied the SENDER_RATE_LIMIT setting): it is not in its History."""
    return limit.changes.filter(version=limit.version).first()


def history(limit: RateLimit, *, now: datetime) -> dict:
    """What the bucket's page shows of its past: ``chart`` (SVG), ``changes`` (newest first)."""
    since = now - timedelta(hours=HOURS)
    newest_first = limit.changes.order_by("-changed_at", "-id")
    charted = list(newest_first.filter(changed_at__gte=since)[:MAX_CHARTED])[::-1]
    start = since if len(charted) < MAX_CHARTED else charted[0].changed_at
    before = newest_first.filter(changed_at__lt=start).first()
    return {"hours": HOURS, "chart": step_chart_svg(charted, before=before, start=start, end=now),
            "changes": list(newest_first[:TABLE_ROWS])}


def step_chart_svg(changes: list[RateLimitChange], *, before: RateLimitChange | None,
                   start: datetime, end: datetime) -> str:
    """The effective rate from ``start`` to ``end`` as steps: the level ``before`` left it at,
    then one step (and a marker with its reason) per change, oldest first."""
    if not changes and (before is None or before.per_second is None):
        return format_html('<p class="help">{}</p>', f"No change of its rate in the last {HOURS} hours.")
    levels = [(start, None if before is None else before.per_second),
              *((change.changed_at, change.per_second) for change in changes)]
    peak = max((rate for _, rate in levels if rate is not None), default=0) or 1.0
    seconds = max((end - start).total_seconds(), 1.0)

    def x(moment: datetime) -> float:
        return min(WIDTH, max(0.0, WIDTH * (moment - start).total_seconds() / seconds))

    def y(rate: float | None) -> float:
        return BASE - PLOT * (rate or 0) / peak

    path, drawing = [], False
    for i, (moment, rate) in enumerate(levels):
        until = levels[i + 1][0] if i + 1 < len(levels) else end
        if rate is None:  # no rate: a gap in the line
            drawing = False
            continue
        path.append(f"V {y(rate):.1f} H {x(until):.1f}" if drawing
                    else f"M {x(moment):.1f} {y(rate):.1f} H {x(until):.1f}")
        drawing = True
    markers = format_html_join("", '<circle class="growth-history__change" cx="{}" cy="{}" r="3">'
                               '<title>{}: {} — {}</title></circle>',
                               ((f"{x(c.changed_at):.1f}", f"{y(c.per_second):.1f}",
                                 clock(c.changed_at, "%H:%M:%S"), rate_text(c.per_second), c.reason)
                                for c in changes))
    line = format_html('<path class="growth-history__line" d="{}"/>', " ".join(path)) if path else ""
    first, last = clock(start, "%H:%M"), clock(end, "%H:%M")
    label = (f"Effective rate, {first} to {last}: {len(changes)} change{'s' if len(changes) != 1 else ''}"
             f", the last to {rate_text(levels[-1][1])}.")
    return frame(label=label, marks=format_html("{}{}", line, markers), peak=f"{peak:g} / s",
                 first=first, last=last, last_x=WIDTH)
