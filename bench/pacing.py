"""Pacing: what a throttling provider gets out of the engine, and what per-destination buckets
cost the claim.

``goodput``  real ``run_sender`` processes (the default Django SMTP backend, plain receiver, the
             production pacing settings) send a campaign whose recipients are half at gmail.com
             (Google, by the static table) and half at another domain, through
             ``growth.chaos.throttling.ThrottlingReceiver``: it accepts Google's mail at most at
             ``limit`` messages/s (a token bucket, burst ``RECEIVER_BURST``) and answers "421
             4.7.28 ... unusual rate" beyond, for the whole run; the other domain's mail it
             always accepts. There are more Gmail recipients than the limit lets through in the
             run, so the engine is never short of them; after ``seconds`` the workers are
             stopped. Google's bucket is made by the first throttle (nobody configured one: the
             engine must find the rate itself), or ``configured`` by an operator above the
             limit (the throttles must bring it down). Goodput = Gmail messages the receiver
             accepted a second over the steady part (the run's last two thirds: the first third
             is start-up and the first throttles) ÷ the limit; beside it, the whole run's, and
             the deferrals the engine drew per message accepted.

``explain``  EXPLAIN (ANALYZE, BUFFERS) of the claim of one campaign, ``claim_paced`` against
             the plain ``claim`` (both verbatim from ``growth/managers/sends.sql``), on campaigns
             of each size whose rows belong to 5 paced destinations, one of them out of tokens
             and holding the front 60 % of the queue (then the 4 others and unpaced rows, in
             turn). The paced claim asks each of the 4 for a fifth of the batch and the rest
             from unpaced rows, its window at the start of the queue (the worst place: the wall
             of rows it must pass over). The two statements run in turn, each rolled back,
             ``EXPLAIN_RUNS`` times after a warm-up; the median time is kept, with the buffers
             (shared hit + read, the whole statement's) and the rows its scans read. O(batch):
             the figures at the largest size are those at the smallest. The plans go to
             out/pacing-plans.txt.

Every destination bucket is deleted afterwards: left behind, it would pace the other families'
workers (any destination bucket sends every campaign's claim through ``claim_paced``).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from django.db import connection, transaction
from django.test import override_settings

from bench import data, engine
from growth.audience.destinations import classify_recipient_domains
from growth.chaos.throttling import Throttle, ThrottlingReceiver
from growth.managers.queries import split_settings
from growth.managers.sends import NEVER_FORGOTTEN, QUERIES
from growth.models import Campaign, Destination, RateLimit, Send

THROTTLED = "gmail.com"  # Google's, by the static table of consumer domains
OTHER = "bench.example"  # unresolved with DNS off: a destination of its own, never throttled
RECEIVER_BURST = 5.0  # messages the receiver takes at once after a quiet spell
STEADY_FROM = 1 / 3  # of the run: the steady part is what follows
SENDER_BATCH = 20  # run_sender's default
EXPLAIN_RUNS = 7  # after one to warm the cache
FRONT = 0.6  # share of the queue's front held by the exhausted destination
DESTINATIONS = ["google", "microsoft", "yahoo", "apple", "united-internet"]  # the first: exhausted
LEASE = 300.0  # seconds, the engine's default
CONFIGURED_BURST = 20.0  # SENDER_RATE_BURST's default

MIXED_SQL = """
INSERT INTO growth_subscribers (account_id, segment_id, email, email_lower, status)
SELECT %(account)s, %(segment)s, address, address, 'confirmed'
  FROM generate_series(1, %(size)s) g,
       LATERAL (SELECT 'p' || g || '@' || CASE WHEN g %% 2 = 0 THEN %(throttled)s
                                               ELSE %(other)s END) AS a(address)
"""

# The campaign's rows straight from the account's primary subscribers (as bench/build.py's plain
# INSERT), in id order: the front share to the exhausted destination, then the others in turn.
PACED_SENDS_SQL = """
INSERT INTO growth_sends (campaign_id, account_id, subscriber_id, email, email_lower,
                          destination_id)
SELECT %(campaign_id)s, s.account_id, s.id, s.email, s.email_lower,
       CASE WHEN s.n <= %(front)s THEN (%(destinations)s::int[])[1]
            ELSE (%(destinations)s::int[] || NULL::int)[2 + s.n %% 5] END
  FROM (SELECT s.*, row_number() OVER (ORDER BY s.id) AS n
          FROM growth_subscribers s
         WHERE s.account_id = %(account_id)s AND s.status = 'confirmed'
           AND s.email_lower LIKE 'r%%@bench.example' AND s.email = s.email_lower) s
 ORDER BY s.id
"""


# -- goodput under a throttling receiver ----------------------------------------------------------

def _mixed_audience(size: int) -> data.Audience:
    """A new account of ``size`` confirmed subscribers, every other one at the throttled domain."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM growth_accounts")
        slug = f"bench-pacing-{cursor.fetchone()[0]}"
        cursor.execute(data.ACCOUNT_SQL, {"name": slug, "slug": slug})
        (account, segment), _ = sorted(cursor.fetchall(), key=lambda row: row[1])
        cursor.execute(MIXED_SQL, {"account": account, "segment": segment, "size": size,
                                   "throttled": THROTTLED, "other": OTHER})
    return data.Audience(account, size, 0.0)


def _built_and_paused(audience: data.Audience) -> int:
    """The engine's way in: its domains classified (DNS off: the static table), built, paused."""
    data.fresh_sends()
    campaign_id = data.approved_campaign(audience)
    assert Campaign.objects.start_due() == [campaign_id], "another campaign was due"
    with override_settings(DESTINATIONS_DNS="off"):
        classify_recipient_domains(campaign_id=campaign_id)
    assert Send.objects.build_recipients(campaign_id=campaign_id) == audience.size
    assert Campaign.objects.pause(campaign_id=campaign_id)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE growth_sends")
    return campaign_id


def goodput(*, limit: float, seconds: float, workers: int, out: Path,
            configured: float | None = None) -> dict:
    """Run the engine against a receiver that throttles Gmail at ``limit`` messages/s; Google's
    bucket is made by the first throttle, or ``configured`` at that rate by an operator."""
    _forget_buckets()
    audience = _mixed_audience(int(limit * seconds * 4))  # half of them Gmail: twice the limit
    campaign_id = _built_and_paused(audience)
    if configured is not None:
        RateLimit.objects.create(destination=Destination.objects.get(name="google"),
                                 per_second=configured, burst=CONFIGURED_BURST)
    throttle = Throttle({THROTTLED}, per_minute=limit * 60, burst=RECEIVER_BURST)
    with ThrottlingReceiver(throttle) as receiver:
        env = engine.sender_env(EMAIL_URL=receiver.url, DESTINATIONS_DNS="off", DKIM_DOMAIN="")
        senders = engine.start_senders(workers, env=env, log_dir=out / "logs",
                                       args=["--batch-size", str(SENDER_BATCH), "--tick", "0.05"],
                                       name=f"pacing-{configured or 'cold'}")
        try:
            engine.wait_started(senders)
            data.resume(campaign_id)
            started = time.time()
            time.sleep(seconds)
        finally:
            engine.stop(senders)
        accepted = [a.at - started for a in receiver.accepted([THROTTLED])]
        others = [a.at - started for a in receiver.accepted([OTHER])]
        deferred = len(receiver.throttled([THROTTLED]))
        duplicates = len(receiver.duplicates())
    assert duplicates == 0, f"{duplicates} messages accepted twice"
    steady_from = seconds * STEADY_FROM
    steady = [t for t in accepted if steady_from <= t < seconds]
    changes = _rate_changes(started)
    result = {
        "limit": limit, "configured": configured, "seconds": seconds, "workers": workers,
        "batch": SENDER_BATCH,
        "accepted": len(accepted), "deferred": deferred, "duplicates": duplicates,
        "other_accepted": len(others), "other_done_at": max(others, default=None),
        "goodput": len(steady) / (seconds - steady_from) / limit,
        "goodput_whole": len([t for t in accepted if t < seconds]) / seconds / limit,
        "deferred_per_accepted": deferred / max(len(accepted), 1),
        "per_second": _per_second(accepted, seconds),
        "rates": changes,
    }
    _forget_buckets()
    (out / f"pacing-goodput-{configured or 'cold'}.json").write_text(json.dumps(result, indent=1))
    return result


def _per_second(times: list[float], seconds: float) -> list[int]:
    counts = [0] * int(seconds + 0.999)
    for t in times:
        if 0 <= t < len(counts):
            counts[int(t)] += 1
    return counts


def _rate_changes(started: float) -> list[tuple[float, float | None, str]]:
    """(seconds since the start, rate after, reason) of every change of a destination's rate."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM c.changed_at), c.per_second, c.reason "
                       "FROM growth_rate_limit_changes c "
                       "JOIN growth_rate_limits r ON r.id = c.rate_limit_id "
                       "WHERE r.destination_id IS NOT NULL ORDER BY c.id")
        return [(float(at) - started, rate, reason[:60]) for at, rate, reason in cursor.fetchall()]


def _forget_buckets() -> None:
    """No destination bucket may outlive this family: the others' workers would be paced."""
    RateLimit.objects.filter(destination__isnull=False).delete()


# -- the claim's cost -----------------------------------------------------------------------------

def explain(*, sizes: list[int], batch: int, out: Path, say) -> dict:
    """{size: {"claim": figures, "claim_paced": figures}} (see the module's docstring)."""
    destinations = [Destination.objects.get_or_create(name=name)[0].id for name in DESTINATIONS]
    results, plans = {}, []
    try:
        for size in sizes:
            started = time.perf_counter()
            campaign_id = _paced_campaign(data.audience(size), destinations)
            say(f"pacing: {size:,}-row paced campaign ready in {time.perf_counter() - started:.0f} s")
            share = batch // 5
            statements = {
                "claim": (QUERIES["claim"], {"worker_id": "explain", "batch_size": batch,
                                             "lease": LEASE, "campaign_id": campaign_id,
                                             "hand_over": False, **NEVER_FORGOTTEN, "after": 0}),
                "claim_paced": (QUERIES["claim_paced"], {
                    "worker_id": "explain", "campaign_id": campaign_id, "free": batch - 4 * share,
                    "lease": LEASE, "paced": destinations, "share_ids": destinations[1:],
                    "share_counts": [share] * 4, "after": 0, "scan": 4 * batch,
                    "hand_over": False, **NEVER_FORGOTTEN}),
            }
            times: dict[str, list[float]] = {name: [] for name in statements}
            for _ in range(EXPLAIN_RUNS + 1):  # the first run warms the cache: not counted
                for name, (sql, params) in statements.items():
                    explained = _explained(sql, params)
                    times[name].append(explained["Execution Time"])
            results[size] = {}
            for name, (sql, params) in statements.items():
                root = _explained(sql, params)["Plan"]
                figures = results[size][name] = {
                    "ms": statistics.median(times[name][1:]),
                    "buffers": root.get("Shared Hit Blocks", 0) + root.get("Shared Read Blocks", 0),
                    "rows_read": _rows_read(root), "sends_read": _rows_read(root, "growth_sends"),
                    "claimed": _claimed(root)}
                plans.append(f"=== {name}, {size:,} rows, batch {batch}: {figures['ms']:.2f} ms "
                             f"(median of {EXPLAIN_RUNS})\n{_explained(sql, params, text=True)}\n")
                say(f"pacing: {name} at {size:,}: {figures['ms']:.2f} ms, "
                    f"{figures['buffers']:,} buffers, {figures['rows_read']:,} rows read "
                    f"({figures['sends_read']:,} of growth_sends), {figures['claimed']} claimed")
    finally:
        data.fresh_sends()
        _forget_buckets()
    (out / "pacing-plans.txt").write_text("\n".join(plans))
    return results


def _paced_campaign(audience: data.Audience, destinations: list[int]) -> int:
    """A sending campaign of the audience's size laid out as the module's docstring says, with
    the exhausted destination's bucket empty and the others' full."""
    data.fresh_sends()
    campaign_id = data.approved_campaign(audience)
    assert Campaign.objects.start_due() == [campaign_id], "another campaign was due"
    with connection.cursor() as cursor:
        cursor.execute(PACED_SENDS_SQL, {"campaign_id": campaign_id, "account_id": audience.account_id,
                                         "front": int(audience.size * FRONT),
                                         "destinations": destinations})
        assert cursor.rowcount == audience.size, f"{cursor.rowcount} rows of {audience.size}"
        cursor.execute("UPDATE growth_campaigns SET recipients_built_at = now() WHERE id = %s",
                       [campaign_id])
        cursor.execute("VACUUM ANALYZE growth_sends")
    _forget_buckets()
    exhausted, *others = destinations
    RateLimit.objects.create(destination_id=exhausted, per_second=0.01, burst=1, tokens=0)
    for destination_id in others:
        RateLimit.objects.create(destination_id=destination_id, per_second=1000, burst=1000,
                                 tokens=1000)
    return campaign_id


def _explained(sql: str, params: dict, *, text: bool = False):
    """EXPLAIN (ANALYZE, BUFFERS) of the statement, rolled back: its JSON document (the plan and
    its times), or with ``text`` the plan as text. A statement's leading SET LOCALs (sends.sql's
    settle has one) run first, in the same transaction."""
    settings, statement = split_settings(sql)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(settings + f"EXPLAIN (ANALYZE, BUFFERS{'' if text else ', FORMAT JSON'}) "
                       + statement, params)
        while cursor.nextset():  # past the SET LOCALs' results, to the plan
            pass
        rows = cursor.fetchall()
        transaction.set_rollback(True)
    if text:
        return "\n".join(row[0] for row in rows)
    (document,), = rows
    return (document if isinstance(document, list) else json.loads(document))[0]


SCANS = {"Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan", "Tid Scan"}


def _rows_read(node: dict, relation: str | None = None) -> int:
    """Rows the plan's scans (of ``relation`` only, if given) read, returned or filtered out,
    over all their loops."""
    own = 0
    if node["Node Type"] in SCANS and relation in (None, node.get("Relation Name")):
        loops = node.get("Actual Loops", 1)
        own = round((node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
                     + node.get("Rows Removed by Index Recheck", 0)) * loops)
    return own + sum(_rows_read(child, relation) for child in node.get("Plans", []))


def _claimed(node: dict) -> int:
    """Rows the statement's UPDATE wrote (its ModifyTable node's)."""
    if node["Node Type"] == "ModifyTable":
        return round(node.get("Actual Rows", 0) * node.get("Actual Loops", 1))
    return sum(_claimed(child) for child in node.get("Plans", []))
