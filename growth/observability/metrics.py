"""Prometheus metrics (prometheus-client).

The worker's own, on the opt-in port of ``run_sender --metrics-port``: counters and histograms in
this process's default registry, with labels of bounded cardinality only (an outcome, a
statement, a transport class: never a campaign, a recipient or a worker id). The web app's
``/metrics``: gauges of the sending campaigns' rows by status, computed on scrape by one
aggregate query.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

# --- the worker --------------------------------------------------------------------------------

MESSAGES = Counter("growth_messages", "Rows settled by the worker, by new status and transport.",
                   ["outcome", "transport"])
STATEMENT_SECONDS = Histogram(
    "growth_statement_seconds", "Latency of the engine's statements.", ["statement"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
TRANSPORT_SECONDS = Histogram(
    "growth_transport_message_seconds", "Time on the wire per message (a chunk's time shared out).",
    ["transport"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5))
RATE_LIMIT_WAITS = Counter("growth_rate_limit_waits", "Campaigns skipped for want of tokens.")
THROTTLED = Counter("growth_throttled", "Messages a receiver deferred with a 'slow down', by whom "
                    "it concerns (destination or transport).", ["scope"])
RATE_DECREASES = Counter("growth_rate_decreases", "Shared rates lowered after a throttle.", ["scope"])
LEASES_RECOVERED = Counter("growth_leases_recovered", "Rows whose lease expired, by what they became.",
                           ["to"])
CAMPAIGNS_CONTAINED = Counter("growth_campaigns_contained",
                              "Campaigns the worker paused because they cannot be sent as they are.")
CAMPAIGNS_REFUSED = Counter("growth_campaigns_refused",
                            "Campaigns the worker paused because the transport refused us (a login, "
                            "an API key, the sender).")
LAST_BEAT = Gauge("growth_worker_last_beat_timestamp_seconds", "When this worker last said it lives.")


def observe_each(histogram: Histogram, seconds: float, count: int) -> None:
    """Record ``count`` observations of ``seconds``, as ``count`` calls of ``observe`` would (a
    chunk's time shared out between its messages), taking the sum's and the bucket's locks once
    instead of ``count`` times each: 3 µs a message of a worker's CPU. prometheus-client has no
    call for it; this follows its ``Histogram.observe`` (the pinned version's; a test compares
    the two)."""
    histogram._raise_if_not_observable()
    histogram._sum.inc(seconds * count)
    for bucket, bound in zip(histogram._buckets, histogram._upper_bounds, strict=True):
        if seconds <= bound:
            bucket.inc(count)
            return


# --- the web app -------------------------------------------------------------------------------


class CampaignCollector:
    """Rows by status of the sending campaigns, and campaigns by status: one query per scrape."""

    def collect(self):
        from growth.models import Campaign

        snapshot = Campaign.objects.metrics_snapshot()
        campaigns = GaugeMetricFamily("growth_campaigns", "Campaigns by status.", labels=["status"])
        for status, count in sorted(snapshot.campaigns.items()):
            campaigns.add_metric([status], count)
        sends = GaugeMetricFamily("growth_sending_campaign_rows",
                                  "Send rows of the campaigns now sending, by status.",
                                  labels=["status"])
        for status, count in sorted(snapshot.sending_rows.items()):
            sends.add_metric([status], count)
        yield campaigns
        yield sends


def web_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CampaignCollector())
    return registry
