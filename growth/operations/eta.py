"""When a sending campaign will be done, given its pace and its calendar: the hours of its sending
window and its tenant's warm-up quota per day, both in the tenant's time zone.

Rough but honest: the rate is taken as steady (the last minute's, or, while the campaign waits
and so sends nothing, its tenant's configured limit), a window's open hours of each day are
filled at that rate, and a day's quota beyond the warm-up cap moves to the next days. The cap is
the tenant's, shared by all its campaigns: for one of several sending at once this is optimistic.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass

from growth.sending import pacing as pacing_rules
from growth.sending.pacing import local_today, warmup_cap

MAX_DAYS = 366  # beyond a year the answer is "unknown", not a date


@dataclass(frozen=True, slots=True)
class Warmup:
    """A tenant's warm-up schedule (see growth.sending.pacing.warmup_cap), and what it has sent
    today toward today's cap."""

    started_on: dt.date
    daily_start: int
    daily_growth: float
    until: int
    sent_today: int = 0

    def cap(self, day: dt.date) -> int | None:
        return warmup_cap(started_on=self.started_on, daily_start=self.daily_start,
                          daily_growth=self.daily_growth, until=self.until, today=day)


@dataclass(frozen=True, slots=True)
class Pacing:
    """A campaign's calendar: its window (local start and end, None: any time), its tenant's
    zone and warm-up, and the rate its tenant's limit allows (to expect after a wait)."""

    time_zone: str = "UTC"
    window: tuple[dt.time, dt.time] | None = None
    warmup: Warmup | None = None
    limit_rate: float | None = None


@dataclass(frozen=True, slots=True)
class Eta:
    seconds: float | None  # until the last message is out; None: no rate to go by, or over a year
    waits: float  # seconds before it may send again; 0: it may now
    waiting_for: str  # why it waits: "window", "warm-up", or ""
    days: int  # the local calendar days it sends on, today included; 0 when unknown


def eta(*, remaining: int, per_second: float, now: dt.datetime, pacing: Pacing) -> Eta:
    """How long ``remaining`` messages take at ``per_second`` from ``now`` (aware), sending only
    in the window's open hours and at most each day's warm-up cap."""
    now = now.astimezone(dt.UTC)
    zone = pacing_rules.zone(pacing.time_zone)
    today = local_today(time_zone=pacing.time_zone, now=now)
    waits, waiting_for = _wait(pacing, today, now, zone)
    rate = per_second if per_second > 0 or not waits else (pacing.limit_rate or 0.0)
    if remaining <= 0:
        return Eta(0.0, waits, waiting_for, 1)
    if rate <= 0:
        return Eta(None, waits, waiting_for, 0)
    left = float(remaining)
    for offset in range(MAX_DAYS):
        day = today + dt.timedelta(days=offset)
        quota = _quota(pacing.warmup, day, today)
        for opens, closes in _open_hours(pacing.window, day, zone):
            opens = max(opens, now)
            if closes <= opens or quota <= 0:
                continue
            batch = min(left, quota, rate * (closes - opens).total_seconds())
            if batch >= left:
                done = opens + dt.timedelta(seconds=left / rate)
                return Eta((done - now).total_seconds(), waits, waiting_for, offset + 1)
            left -= batch
            quota -= batch
    return Eta(None, waits, waiting_for, 0)


def _wait(pacing: Pacing, today: dt.date, now: dt.datetime, zone) -> tuple[float, str]:
    """Seconds until the campaign may send, and why it may not now."""
    tomorrow = next(_open_hours(pacing.window, today + dt.timedelta(days=1), zone))[0]
    if _quota(pacing.warmup, today, today) <= 0:
        return (tomorrow - now).total_seconds(), "warm-up"
    for opens, closes in _open_hours(pacing.window, today, zone):
        if opens <= now < closes:
            return 0.0, ""
        if now < opens:
            return (opens - now).total_seconds(), "window"
    return (tomorrow - now).total_seconds(), "window"


def _quota(warmup: Warmup | None, day: dt.date, today: dt.date) -> float:
    cap = None if warmup is None else warmup.cap(day)
    if cap is None:
        return float("inf")
    return max(0, cap - warmup.sent_today) if day == today else cap


def _open_hours(window: tuple[dt.time, dt.time] | None, day: dt.date,
                zone) -> Iterator[tuple[dt.datetime, dt.datetime]]:
    """The open intervals of ``day`` (local) in order, as UTC instants: a window that spans
    midnight (22:00-06:00) is open at both ends of the day."""
    def at(time: dt.time, date: dt.date = day) -> dt.datetime:
        # to UTC at once: datetimes sharing a zone subtract as wall clocks, wrong across DST
        return dt.datetime.combine(date, time, tzinfo=zone).astimezone(dt.UTC)

    midnight, next_midnight = at(dt.time()), at(dt.time(), day + dt.timedelta(days=1))
    if window is None:
        yield midnight, next_midnight
        return
    starts, ends = window
    if starts < ends:
        yield at(starts), at(ends)
        return
    if ends > dt.time():  # 22:00-00:00 has no morning part
        yield midnight, at(ends)
    yield at(starts), next_midnight
