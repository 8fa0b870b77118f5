"""Pacing as the admin shows it: a campaign's sending window now, its calendar for the monitor's
ETA (``growth.operations.eta``), and a tenant's warm-up schedule for the next days."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import replace

from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.functions import Least
from django.utils.html import format_html, format_html_join

from growth.admin.charts import clock
from growth.admin.durations import span
from growth.models import Account, RateLimit, Send
from growth.operations.eta import Eta, Pacing, Warmup
from growth.sending.pacing import (
    local_today,
    warmup_cap,
    window_closes_in,
    window_opens_in,
    zone,
)

SCHEDULE_DAYS = 8  # today and the next 7


def campaign_pacing(campaigns: QuerySet, *, now: dt.datetime) -> dict[int, Pacing]:
    """{campaign id: Pacing} of the campaigns in the queryset, in one statement; plus, for each
    tenant under a warm-up cap today with a campaign sending, one count of its sends today (no
    more rows than the cap: the count matters only up to it)."""
    tenant_rate = (RateLimit.objects.filter(account_id=OuterRef("account_id"), destination__isnull=True,
                                            per_day__isnull=True)
                   .values(rate=Least("throttled_to", "per_second"))[:1])
    rows = campaigns.order_by().values(
        "pk", "status", "window_starts", "window_ends", "account_id", "account__time_zone",
        "account__warmup_started_on", "account__warmup_daily_start", "account__warmup_daily_growth",
        "account__warmup_until", limit_rate=Subquery(tenant_rate))
    sent_today: dict[int, int] = {}  # by account: each counted once
    return {row["pk"]: Pacing(time_zone=row["account__time_zone"], window=_window(row),
                              warmup=_warmup(row, now=now, sent_today=sent_today),
                              limit_rate=row["limit_rate"])
            for row in rows}


def _window(row: dict) -> tuple[dt.time, dt.time] | None:
    if row["window_starts"] is None or row["window_ends"] is None:
        return None
    return row["window_starts"], row["window_ends"]


def _warmup(row: dict, *, now: dt.datetime, sent_today: dict[int, int]) -> Warmup | None:
    if row["account__warmup_started_on"] is None:
        return None
    warmup = Warmup(started_on=row["account__warmup_started_on"],
                    daily_start=row["account__warmup_daily_start"],
                    daily_growth=row["account__warmup_daily_growth"],
                    until=row["account__warmup_until"])
    time_zone, account_id = row["account__time_zone"], row["account_id"]
    cap = warmup.cap(local_today(time_zone=time_zone, now=now))
    if cap is None or row["status"] != "sending":  # what it sent matters only to what it sends
        return warmup
    if account_id not in sent_today:
        sent_today[account_id] = sends_today(account_id=account_id, time_zone=time_zone, now=now,
                                             at_most=cap)
    return replace(warmup, sent_today=sent_today[account_id])


def sends_today(*, account_id: int, time_zone: str, now: dt.datetime, at_most: int) -> int:
    """The tenant's messages sent since its local midnight, counted up to ``at_most``."""
    midnight = dt.datetime.combine(local_today(time_zone=time_zone, now=now), dt.time(),
                                   tzinfo=zone(time_zone))
    return (Send.objects.filter(campaign__account_id=account_id, status=Send.Status.SENT,
                                sent_at__gte=midnight).order_by()[:at_most].count())


def window_text(pacing: Pacing, *, now: dt.datetime) -> str:
    """ "sends 09:00–17:00 Europe/Madrid; window closed, opens in 3 h 00 min", or "any time"."""
    if pacing.window is None:
        return "any time (no sending window)"
    starts, ends = pacing.window
    hours = f"sends {starts:%H:%M}–{ends:%H:%M} {pacing.time_zone}"
    read = {"starts": starts, "ends": ends, "time_zone": pacing.time_zone, "now": now}
    closes_in = window_closes_in(**read)
    if closes_in is not None:
        return f"{hours}; window open, closes in {span(closes_in)}"
    return f"{hours}; window closed, opens in {span(window_opens_in(**read))}"


def eta_text(outlook: Eta | None, pacing: Pacing, *, now: dt.datetime) -> str:
    """The monitor's ETA in words, with why it is later than the rate alone says."""
    if outlook is None:
        return "—"
    notes = "; ".join(_pace_notes(outlook, pacing, now=now))
    if outlook.seconds is None:
        if outlook.waiting_for:
            return f"unknown until it sends again: {notes}"
        return "unknown: nothing sent in the last minute"
    if outlook.seconds == 0:
        return "any moment: nothing left to send"
    done = now + dt.timedelta(seconds=outlook.seconds)
    same_day = clock(done, "%Y-%m-%d") == clock(now, "%Y-%m-%d")
    text = f"about {span(outlook.seconds)} (around {clock(done, '%H:%M' if same_day else '%a %d %b %H:%M')})"
    return f"{text}: {notes}" if notes else text


def _pace_notes(outlook: Eta, pacing: Pacing, *, now: dt.datetime) -> list[str]:
    notes = []
    if outlook.waiting_for == "window":
        notes.append(f"window closed, opens in {span(outlook.waits)}")
    elif outlook.waiting_for == "warm-up":
        notes.append(f"today's warm-up quota is used up, sends again in {span(outlook.waits)}")
    if outlook.days > 1:
        causes = [*(["the window's hours"] if pacing.window else []),
                  *(["the warm-up's daily cap"] if _capped(pacing, now) else [])]
        notes.append(f"spread over {outlook.days} days" + (f" by {' and '.join(causes)}" if causes else ""))
    return notes


def _capped(pacing: Pacing, now: dt.datetime) -> bool:
    return (pacing.warmup is not None
            and pacing.warmup.cap(local_today(time_zone=pacing.time_zone, now=now)) is not None)


def warmup_schedule(account: Account, *, now: dt.datetime) -> list[tuple[dt.date, int | None]]:
    """(local day, cap or None for no cap) for today and the next days; [] without a warm-up."""
    if account.warmup_started_on is None:
        return []
    today = local_today(time_zone=account.time_zone, now=now)
    days = [today + dt.timedelta(days=n) for n in range(SCHEDULE_DAYS)]
    return [(day, warmup_cap(started_on=account.warmup_started_on,
                             daily_start=account.warmup_daily_start,
                             daily_growth=account.warmup_daily_growth,
                             until=account.warmup_until, today=day)) for day in days]


def warmup_schedule_html(account: Account, *, now: dt.datetime) -> str:
    """The account page's preview of its warm-up: each day's cap, and today's sends so far."""
    if account.pk is None or account.warmup_started_on is None:
        return "No warm-up: nothing caps the tenant's messages a day."
    try:
        schedule = warmup_schedule(account, now=now)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f"{account.time_zone!r} is not a time zone: no schedule to show."
    rows = []
    for n, (day, cap) in enumerate(schedule):
        note = ""
        if n == 0 and cap is not None:
            sent = sends_today(account_id=account.pk, time_zone=account.time_zone, now=now, at_most=cap)
            note = f"today: {sent:,} sent so far" + (" (cap reached)" if sent >= cap else "")
        elif n == 0:
            note = "today"
        rows.append((f"{day:%a %d %b}", "no cap (warm-up over)" if cap is None else f"{cap:,}", note))
    return format_html(
        '<table class="growth-warmup"><thead><tr><th>day ({})</th><th>at most</th><th></th></tr>'
        '</thead><tbody>{}</tbody></table>', account.time_zone,
        format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", rows))
