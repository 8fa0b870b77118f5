"""Pacing rules that are about the calendar, not the wire: a campaign's sending window and a
tenant's warm-up schedule, both read in the tenant's time zone.

The limits themselves are token buckets in PostgreSQL (``growth.managers.limits``): the window is a
budget of nothing outside its hours, the warm-up a calendar-day quota whose size comes from here.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import zoneinfo

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=256)
def zone(name: str) -> zoneinfo.ZoneInfo:
    """The tenant's time zone; UTC (and a warning) for a name that is none, which the account's
    form refuses but a row written otherwise may hold: a tenant's typo must not stop a worker."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        logger.warning("unknown time zone %r: UTC used instead", name)
        return zoneinfo.ZoneInfo("UTC")


def window_opens_in(*, starts: dt.time | None, ends: dt.time | None, time_zone: str,
                    now: dt.datetime) -> float:
    """Seconds until the window [starts, ends) next opens; 0 while it is open or when there is
    none. A window whose end is before its start spans midnight (22:00-06:00)."""
    if starts is None or ends is None or starts == ends:
        return 0.0
    local = now.astimezone(zone(time_zone))
    clock = local.time().replace(tzinfo=None)
    spans_midnight = ends < starts
    if (clock >= starts or clock < ends) if spans_midnight else (starts <= clock < ends):
        return 0.0
    opening = dt.datetime.combine(local.date(), starts, tzinfo=local.tzinfo)
    if opening <= local:
        opening = dt.datetime.combine(local.date() + dt.timedelta(days=1), starts,
                                      tzinfo=local.tzinfo)
    # wall-clock arithmetic in the zone, then back to real seconds (a DST change is an hour off
    # at worst, and only on that night)
    return max(0.0, (opening.astimezone(dt.UTC) - now.astimezone(dt.UTC)).total_seconds())


def window_closes_in(*, starts: dt.time | None, ends: dt.time | None, time_zone: str,
                     now: dt.datetime) -> float | None:
    """Seconds the open window has left (None: no window, or it is closed)."""
    if starts is None or ends is None or starts == ends:
        return None
    if window_opens_in(starts=starts, ends=ends, time_zone=time_zone, now=now):
        return None
    local = now.astimezone(zone(time_zone))
    closing = dt.datetime.combine(local.date(), ends, tzinfo=local.tzinfo)
    if closing <= local:
        closing += dt.timedelta(days=1)
    return (closing.astimezone(dt.UTC) - now.astimezone(dt.UTC)).total_seconds()


def warmup_cap(*, started_on: dt.date | None, daily_start: int, daily_growth: float,
               until: int, today: dt.date) -> int | None:
    """Messages the tenant may send on ``today`` under its warm-up schedule; None: no cap (no
    warm-up, or it is over). Before day 0 the schedule's first day applies."""
    if started_on is None:
        return None
    day = max(0, (today - started_on).days)
    try:
        cap = daily_start * daily_growth ** day
    except OverflowError:  # past any until (a float's range ends near 1.8e308)
        return None
    return None if cap >= until else int(cap)


def local_today(*, time_zone: str, now: dt.datetime) -> dt.date:
    return now.astimezone(zone(time_zone)).date()
